import QueueSafeValue

// MARK: - Blocking scenarios

/// `value.wait...`: the calling thread blocks for its turn and runs the closure itself.
enum BlockingScenarios {
    static var all: [Scenario] {
        [
            getUncontended, setUncontended, withLockUncontended, transactionUncontended, withLockCopyOnWrite,
            transactionCopyOnWrite, setContended(threads: 2), setContended(threads: 4),
            setContendedOnePriority(threads: 2), setContendedOnePriority(threads: 4),
            setContendedOnePriority(threads: 8), setContendedOnePriority(threads: 2, fairness: .eventual),
            setContendedOnePriority(threads: 4, fairness: .eventual),
            setContendedOnePriority(threads: 8, fairness: .eventual),
            setContendedOnePriority(threads: 8, fairness: boundedSixteen), setContendedPriorityEach(threads: 8),
            setContendedPriorityEach(threads: 8, fairness: .eventual),
            setContendedPriorityEach(threads: 8, fairness: boundedSixteen), waitTail(fairness: .strictPriority),
            waitTail(fairness: .eventual),
        ]
    }

    /// The bounded mode the rows run: a command waits behind at most 16 later arrivals.
    static let boundedSixteen = try! CommandFairness.bounded(maxOvertakes: 16)

    /// What a row's name says after its shape for `fairness`: nothing for strict priority (the
    /// default), ` eventual` for the default eventual mode, ` bounded 16` for `.bounded(maxOvertakes: 16)`.
    static func modeSuffix(_ fairness: CommandFairness) -> String {
        if let overtakes = fairness.maxOvertakes { return " bounded \(overtakes)" }
        if fairness.starvationBound != nil { return " eventual" }
        return ""
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

    /// - Parameters:
    ///   - variant: said after the name and summary (`monitor on`), when the row runs with
    ///     something on: `setUp` turns it on for the value and returns what turns it off.
    static func setContended(
        threads: Int, variant: String? = nil,
        setUp: @escaping @Sendable (QueueSafeValue<Int>) -> @Sendable () -> Void = { _ in {} }
    ) -> Scenario {
        Scenario(
            name: "wait.set contended \(threads) threads" + (variant.map { ", \($0)" } ?? ""),
            summary: "value.wait.priority(p).set { $0 += 1 } from \(threads) threads at once, mixed priorities"
                + (variant.map { ", \($0)" } ?? ""),
            timeWindowed: true
        ) { window in
            let value = QueueSafeValue(value: 0)
            let tearDown = setUp(value)
            defer { tearDown() }
            let priorities = mixedPriorities
            let (elapsed, operations, performed) = Concurrency.runThreads(threads, for: UInt64(window)) {
                index, timed in
                var slot = index % priorities.count
                return timed.repeatInWindow {
                    value.wait.priority(priorities[slot]).set { $0 += 1 }
                    slot = slot == priorities.count - 1 ? 0 : slot + 1
                }
            }
            let final = try! value.wait.highestPriority.get().get()
            check(final == performed, "wait.set contended \(threads) threads counted \(final) of \(performed)")
            return Sample(measured: Double(elapsed), operations: operations)
        }
    }

    /// Every thread at one priority (`value.wait.highestPriority.set`, the original library's
    /// spelling): the order within a priority is all there is, so this is where a fairness mode
    /// shows.
    static func setContendedOnePriority(threads: Int, fairness: CommandFairness = .strictPriority) -> Scenario {
        let mode = modeSuffix(fairness)
        return Scenario(
            name: "wait.set contended \(threads) threads one priority\(mode)",
            summary: "value.wait.highestPriority.set { $0 += 1 } from \(threads) threads at once, "
                + "fairness \(fairness)",
            timeWindowed: true
        ) { window in
            let value = QueueSafeValue(value: 0, fairness: fairness)
            let (elapsed, operations, performed) = Concurrency.runThreads(threads, for: UInt64(window)) { _, timed in
                timed.repeatInWindow { value.wait.highestPriority.set { $0 += 1 } }
            }
            let final = try! value.wait.highestPriority.get().get()
            check(final == performed, "wait.set contended \(threads) threads one priority counted \(final)")
            return Sample(measured: Double(elapsed), operations: operations)
        }
    }

    /// Every thread at a priority of its own, the same for all its commands (thread `i` at
    /// ``priorityEach``[i], cycling if there are more threads than levels): the mode decides how
    /// the priorities meet. Strict priority hands every release to the waiting thread of highest
    /// priority, the bounded mode too until a waiting command was passed over 16 times; the
    /// eventual mode lets an arriving thread take a free value only when its priority is above
    /// every waiting one's, since no two threads share a priority here. Under strict priority and
    /// the eventual mode the lowest threads may not get through while the others run (they may
    /// wait without bound): the window opens once every thread has issued its first command, and
    /// the figure is the time per command of the value, whoever got it.
    static func setContendedPriorityEach(threads: Int, fairness: CommandFairness = .strictPriority) -> Scenario {
        let priorities = priorityEach
        return Scenario(
            name: "wait.set contended \(threads) threads one priority each\(modeSuffix(fairness))",
            summary: "value.wait.priority(p).set { $0 += 1 } from \(threads) threads at once, thread i at "
                + "its own priority (levels \(priorities.prefix(threads).map { "\($0.rawValue)" }.joined(separator: ", "))), "
                + "fairness \(fairness)",
            timeWindowed: true
        ) { window in
            let value = QueueSafeValue(value: 0, fairness: fairness)
            let (elapsed, operations, performed) = Concurrency.runThreads(threads, for: UInt64(window)) {
                index, timed in
                let priority = priorities[index % priorities.count]
                return timed.repeatInWindow(arrivingAtCall: true) { value.wait.priority(priority).set { $0 += 1 } }
            }
            let final = try! value.wait.highestPriority.get().get()
            check(final == performed, "wait.set contended \(threads) threads one priority each counted \(final)")
            return Sample(measured: Double(elapsed), operations: operations)
        }
    }

    /// The levels of the one-priority-each rows: eight, spread evenly over the whole range (`0`,
    /// `36`, `72`, …, `255`; any `UInt8` is a priority, so eight threads need not share one).
    static let priorityEach: [CommandPriority] = (0..<8).map { CommandPriority(rawValue: UInt8($0 * 255 / 7)) }

    /// The tail of the wait on the 4-thread one-priority row: the 99th percentile, over every
    /// command of the window, of the time from the call to the start of the closure. Its figure is
    /// that percentile in nanoseconds (not a cost per command).
    static func waitTail(fairness: CommandFairness) -> Scenario {
        let mode = modeSuffix(fairness)
        return Scenario(
            name: "wait.set contended 4 threads one priority\(mode) p99 wait",
            summary: "the 99th percentile of the wait from the call to the closure's start, in ns, "
                + "value.wait.highestPriority.set from 4 threads, fairness \(fairness)",
            timeWindowed: true
        ) { window in
            let value = QueueSafeValue(value: 0, fairness: fairness)
            let logs = (0..<4).map { _ in WaitLog() }
            let (_, _, performed) = Concurrency.runThreads(4, for: UInt64(window)) { index, timed in
                let log = logs[index]
                return timed.repeatInWindow {
                    let called = Clock.now()
                    value.wait.highestPriority.set { count in
                        log.waits.append(Clock.now() - called)
                        count += 1
                    }
                }
            }
            let final = try! value.wait.highestPriority.get().get()
            check(final == performed, "the p99 row counted \(final) of \(performed)")
            let waits = logs.flatMap(\.waits).sorted()
            return Sample(measured: Double(waits[waits.count * 99 / 100]), operations: 1)
        }
    }
}

/// One thread's waits (written only by its thread, read after the threads joined).
final class WaitLog: @unchecked Sendable {  // @unchecked Sendable: one writer, read after it finished
    var waits: [UInt64] = []

    init() {
        waits.reserveCapacity(1 << 16)
    }
}
