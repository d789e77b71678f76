import Dispatch
import QueueSafeValue

// MARK: - Async scenarios

/// `try await value.async...` from tasks, and `CommandQueue.enqueue` from synchronous code.
enum AsyncScenarios {
    static var all: [Scenario] {
        [awaitSetUncontended, awaitSetContended(tasks: 8), commandQueueEnqueue, commandQueuePerform]
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

    static func awaitSetContended(tasks: Int) -> Scenario {
        Scenario(
            name: "await set contended \(tasks) tasks",
            summary: "try await value.async.highestPriority.set { $0 += 1 } from \(tasks) concurrent tasks",
            timeWindowed: true
        ) { window in
            let value = QueueSafeValue(value: 0)
            let (elapsed, operations) = Concurrency.blockingAwait {
                let start = Clock.now()
                let deadline = start + UInt64(window)
                let operations = await withTaskGroup(of: Int.self) { group in
                    for _ in 0..<tasks {
                        group.addTask {
                            var performed = 0
                            repeat {
                                for _ in 0..<64 {
                                    try! await value.async.highestPriority.set { $0 += 1 }
                                }
                                performed += 64
                            } while Clock.now() < deadline
                            return performed
                        }
                    }
                    return await group.reduce(0, +)
                }
                return (Clock.now() - start, operations)
            }
            let final = try! value.wait.highestPriority.get().get()
            check(final == operations, "await set contended \(tasks) tasks counted \(final) of \(operations)")
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
