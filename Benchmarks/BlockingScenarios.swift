import QueueSafeValue

// MARK: - Blocking scenarios

/// `value.wait...`: the calling thread blocks for its turn and runs the closure itself.
enum BlockingScenarios {
    static var all: [Scenario] {
        [getUncontended, setUncontended, withLockUncontended, setContended(threads: 2), setContended(threads: 4)]
    }

    /// The priorities the contended scenarios cycle through, each thread from its own offset.
    static let mixedPriorities: [CommandPriority] = [.highest, .lowest, .high, .low, .medium]

    static var getUncontended: Scenario {
        Scenario(
            name: "wait.get uncontended",
            summary: "value.wait.highestPriority.get(), one thread"
        ) { operations in
            let value = QueueSafeValue(value: 1)
            var sum = 0
            let elapsed = Clock.time {
                for _ in 0..<operations {
                    sum &+= try! value.wait.highestPriority.get().get()
                }
            }
            check(sum == operations, "wait.get summed \(sum) of \(operations)")
            return Sample(measured: Double(elapsed))
        }
    }

    static var setUncontended: Scenario {
        Scenario(
            name: "wait.set uncontended",
            summary: "value.wait.highestPriority.set { $0 += 1 }, one thread"
        ) { operations in
            let value = QueueSafeValue(value: 0)
            let elapsed = Clock.time {
                for _ in 0..<operations {
                    value.wait.highestPriority.set { $0 += 1 }
                }
            }
            let final = try! value.wait.highestPriority.get().get()
            check(final == operations, "wait.set uncontended counted \(final) of \(operations)")
            return Sample(measured: Double(elapsed))
        }
    }

    /// The `Mutex`-shaped command: `try value.wait.withLock { … }` returns the closure's result and
    /// throws instead of returning a `Result`.
    static var withLockUncontended: Scenario {
        Scenario(
            name: "wait.withLock uncontended",
            summary: "try value.wait.highestPriority.withLock { $0 += 1; return $0 }, one thread"
        ) { operations in
            let value = QueueSafeValue(value: 0)
            var last = 0
            let elapsed = Clock.time {
                for _ in 0..<operations {
                    last = try! value.wait.highestPriority.withLock { number in
                        number += 1
                        return number
                    }
                }
            }
            check(last == operations, "wait.withLock uncontended counted \(last) of \(operations)")
            return Sample(measured: Double(elapsed))
        }
    }

    static func setContended(threads: Int) -> Scenario {
        Scenario(
            name: "wait.set contended \(threads) threads",
            summary: "value.wait.priority(p).set { $0 += 1 } from \(threads) threads at once, mixed priorities",
            timeWindowed: true
        ) { window in
            let value = QueueSafeValue(value: 0)
            let priorities = mixedPriorities
            let (elapsed, operations) = Concurrency.runThreads(threads, for: UInt64(window)) { index, deadline in
                var slot = index % priorities.count
                return Concurrency.repeatUntil(deadline) {
                    value.wait.priority(priorities[slot]).set { $0 += 1 }
                    slot = slot == priorities.count - 1 ? 0 : slot + 1
                }
            }
            let final = try! value.wait.highestPriority.get().get()
            check(final == operations, "wait.set contended \(threads) threads counted \(final) of \(operations)")
            return Sample(measured: Double(elapsed), operations: operations)
        }
    }
}
