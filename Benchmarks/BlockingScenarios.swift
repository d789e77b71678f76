import QueueSafeValue

// MARK: - Blocking scenarios

/// `value.wait...`: the calling thread blocks for its turn and runs the closure itself.
enum BlockingScenarios {
    static var all: [Scenario] {
        [
            getUncontended, setUncontended, withLockUncontended, transactionUncontended, withLockCopyOnWrite,
            transactionCopyOnWrite, setContended(threads: 2), setContended(threads: 4),
        ]
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

    /// The all-or-nothing form on a small value: the draft is a copy of an `Int`.
    static var transactionUncontended: Scenario {
        Scenario(
            name: "wait.transaction uncontended",
            summary: "try value.wait.highestPriority.transaction { $0 += 1; return $0 }, one thread"
        ) { operations in
            let value = QueueSafeValue(value: 0)
            var last = 0
            let elapsed = Clock.time {
                for _ in 0..<operations {
                    last = try! value.wait.highestPriority.transaction { number in
                        number += 1
                        return number
                    }
                }
            }
            check(last == operations, "wait.transaction uncontended counted \(last) of \(operations)")
            return Sample(measured: Double(elapsed))
        }
    }

    /// How many elements the copy-on-write rows' array holds.
    static let copyOnWriteCount = 1_000

    /// `withLock` changing one element of a copy-on-write array in place.
    static var withLockCopyOnWrite: Scenario {
        Scenario(
            name: "wait.withLock CoW array",
            summary: "try value.wait.withLock { $0[i] += 1 } on a [Int] of \(copyOnWriteCount), one thread"
        ) { operations in
            let value = QueueSafeValue(value: [Int](repeating: 0, count: copyOnWriteCount))
            let elapsed = Clock.time {
                for index in 0..<operations {
                    try! value.wait.highestPriority.withLock { $0[index % copyOnWriteCount] += 1 }
                }
            }
            let sum = try! value.wait.read { $0.reduce(0, +) }
            check(sum == operations, "wait.withLock CoW array counted \(sum) of \(operations)")
            return Sample(measured: Double(elapsed))
        }
    }

    /// `transaction` changing one element of the same array: the draft shares the storage until the
    /// change, which copies the whole array once per command.
    static var transactionCopyOnWrite: Scenario {
        Scenario(
            name: "wait.transaction CoW array",
            summary: "try value.wait.transaction { $0[i] += 1 } on a [Int] of \(copyOnWriteCount), one thread"
        ) { operations in
            let value = QueueSafeValue(value: [Int](repeating: 0, count: copyOnWriteCount))
            let elapsed = Clock.time {
                for index in 0..<operations {
                    try! value.wait.highestPriority.transaction { $0[index % copyOnWriteCount] += 1 }
                }
            }
            let sum = try! value.wait.read { $0.reduce(0, +) }
            check(sum == operations, "wait.transaction CoW array counted \(sum) of \(operations)")
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
