import Dispatch
import QueueSafeValue

// MARK: - Async scenarios

/// `try await value.async...` from tasks, and `CommandQueue.enqueue` from synchronous code.
enum AsyncScenarios {
    static var all: [Scenario] {
        [
            awaitSetUncontended, awaitGetUncontended, awaitReadUncontended, awaitSetContended(tasks: 8),
            awaitWithLockContended(tasks: 8), AsyncMutexFloorScenario.contended(tasks: 8),
            AsyncMutexFloorScenario.contendedWithHandlers(tasks: 8), commandQueueEnqueue,
            commandQueuePerform,
        ]
    }

    static var awaitSetUncontended: Scenario {
        Scenario(
            name: "await set uncontended",
            summary: "try await value.async.highestPriority.set { $0 += 1 } from one task"
        ) { operations in
            let value = QueueSafeValue(value: 0)
            let elapsed = Concurrency.blockingAwait {
                let start = Clock.now()
                for _ in 0..<operations {
                    try! await value.async.highestPriority.set { $0 += 1 }
                }
                return Clock.now() - start
            }
            let final = try! value.wait.highestPriority.get().get()
            check(final == operations, "await set uncontended counted \(final) of \(operations)")
            return Sample(measured: Double(elapsed))
        }
    }

    /// The exclusive read an awaiting shared read is compared with.
    static var awaitGetUncontended: Scenario {
        Scenario(name: "await get uncontended", summary: "try await value.async.highestPriority.get() from one task") {
            operations in
            let value = QueueSafeValue(value: 1)
            let (elapsed, sum) = Concurrency.blockingAwait {
                var sum = 0
                let start = Clock.now()
                for _ in 0..<operations { sum &+= try! await value.async.highestPriority.get() }
                return (Clock.now() - start, sum)
            }
            check(sum == operations, "await get uncontended summed \(sum) of \(operations)")
            return Sample(measured: Double(elapsed))
        }
    }

    /// Written out as the two rows above are: a command called through a closure would add an async
    /// call to every read and not to the rows it is compared with.
    static var awaitReadUncontended: Scenario {
        Scenario(
            name: "await read uncontended", summary: "try await value.async.highestPriority.read { $0 } from one task"
        ) { operations in
            let value = QueueSafeValue(value: 1)
            let (elapsed, sum) = Concurrency.blockingAwait {
                var sum = 0
                let start = Clock.now()
                for _ in 0..<operations { sum &+= try! await value.async.highestPriority.read { $0 } }
                return (Clock.now() - start, sum)
            }
            check(sum == operations, "await read uncontended summed \(sum) of \(operations)")
            return Sample(measured: Double(elapsed))
        }
    }

    /// The `Mutex`-shaped awaiting command from 8 tasks: what the async mutex floor does, through
    /// the library.
    static func awaitWithLockContended(tasks: Int) -> Scenario {
        contended(
            tasks: tasks, name: "await withLock contended \(tasks) tasks",
            summary: "try await value.async.highestPriority.withLock { $0 += 1 } from \(tasks) concurrent tasks"
        ) { value in
            try! await value.async.highestPriority.withLock { $0 += 1 }
        }
    }

    static func awaitSetContended(tasks: Int) -> Scenario {
        contended(
            tasks: tasks, name: "await set contended \(tasks) tasks",
            summary: "try await value.async.highestPriority.set { $0 += 1 } from \(tasks) concurrent tasks"
        ) { value in
            try! await value.async.highestPriority.set { $0 += 1 }
        }
    }

    /// `tasks` concurrent tasks each running `increment` on one value until the window ends.
    private static func contended(
        tasks: Int, name: String, summary: String,
        _ increment: @escaping @Sendable (QueueSafeValue<Int>) async -> Void
    ) -> Scenario {
        Scenario(name: name, summary: summary, timeWindowed: true) { window in
            let value = QueueSafeValue(value: 0)
            let (elapsed, operations) = Concurrency.runTasks(tasks, for: UInt64(window)) { await increment(value) }
            let final = try! value.wait.highestPriority.get().get()
            check(final == operations, "\(name) counted \(final) of \(operations)")
            return Sample(measured: Double(elapsed), operations: operations)
        }
    }

    static var commandQueueEnqueue: Scenario {
        Scenario(
            name: "CommandQueue.enqueue",
            summary: "queue.enqueue { ... } from synchronous code; timed until all operations completed"
        ) { operations in
            let queue = CommandQueue()
            let completed = Counter()
            let allDone = DispatchSemaphore(value: 0)
            let elapsed = Clock.time {
                for _ in 0..<operations {
                    queue.enqueue {
                        // Operations run one at a time, in order.
                        completed.value += 1
                        if completed.value == operations { allDone.signal() }
                    }
                }
                allDone.wait()
            }
            return Sample(measured: Double(elapsed))
        }
    }

    static var commandQueuePerform: Scenario {
        Scenario(
            name: "CommandQueue.perform",
            summary: "try await queue.perform { ... } one after another from a task"
        ) { operations in
            let queue = CommandQueue()
            let elapsed = Concurrency.blockingAwait {
                var sum = 0
                let start = Clock.now()
                for index in 0..<operations {
                    sum &+= try! await queue.perform { index }
                }
                let elapsed = Clock.now() - start
                check(sum == operations * (operations - 1) / 2, "CommandQueue.perform summed \(sum)")
                return elapsed
            }
            return Sample(measured: Double(elapsed))
        }
    }
}
