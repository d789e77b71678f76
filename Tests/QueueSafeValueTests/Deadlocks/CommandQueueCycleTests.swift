import Dispatch
import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

/// Cycles that pass through a `CommandQueue`: an operation holds the queue, and `perform` awaits the
/// operation's task. The task that awaits waits for whatever its operation waits for, so a cycle
/// through the two is refused with `.deadlock` instead of hanging both tasks.
@Suite(.runsAlongsideOthers) struct CommandQueueCycleTests {
    /// The shape: an operation of `queue` waits for `value`, which a task holds while it
    /// performs an operation on `queue`. Each side holds its own before it asks for the other's.
    @Test(arguments: [false, true])
    func operationAndValue_eachWaitingForTheOther_oneIsRefused(operationAsksFirst: Bool) async throws {
        for round in 0..<TestEnvironment.iterations(20, sanitized: 5) {
            let queue = CommandQueue(label: "db")
            let value = QueueSafeValue(value: 0, label: "cache")
            let (operationResult, setResult) = try await withHangTimeout("round \(round)") {
                let operationRuns = Gate()
                let valueHeld = Gate()
                // A: an operation of the queue that asks for the value once the other task holds it.
                let a = Task.detached { () -> Result<Int, QueueSafeValueError> in
                    do {
                        return .success(
                            try await queue.perform {
                                operationRuns.open()
                                await valueHeld.wait()
                                if !operationAsksFirst { try? await Task.sleep(nanoseconds: 10_000_000) }
                                return try await value.async.highestPriority.get()
                            })
                    } catch let error as QueueSafeValueError {
                        return .failure(error)
                    } catch {
                        return .failure(.invalidArgument("\(error)"))
                    }
                }
                // B: holds the value, then performs an operation on the queue.
                let b = Task.detached { () -> Result<Int, QueueSafeValueError> in
                    await operationRuns.wait()
                    var inner: Result<Int, QueueSafeValueError>?
                    _ = try? await value.async.highestPriority.set { stored in
                        valueHeld.open()
                        if operationAsksFirst { try? await Task.sleep(nanoseconds: 10_000_000) }
                        do {
                            inner = .success(try await queue.perform { 1 })
                            stored += 1
                        } catch let error as QueueSafeValueError {
                            inner = .failure(error)
                        } catch {
                            inner = .failure(.invalidArgument("\(error)"))
                        }
                    }
                    return inner ?? .failure(.cancelled)
                }
                return (await a.value, await b.value)
            }
            let refused = [operationResult, setResult].filter {
                if case .failure(.deadlock) = $0 { true } else { false }
            }
            #expect(refused.count == 1, "round \(round): \(operationResult), \(setResult)")
            // The refused side never ran: the other side completed.
            #expect(
                operationResult.isSuccess || setResult.isSuccess,
                "round \(round): \(operationResult), \(setResult)")
        }
    }

    /// Only the operation's own task lends its waits to the tasks that await it: a task created
    /// inside the operation inherits the record but is awaited by nobody, so its waits do not make
    /// the awaiting tasks look blocked (a false alarm here would refuse `x`'s perform).
    @Test func taskCreatedInsideAnAwaitedOperation_doesNotLendItsWaits() async throws {
        let outer = CommandQueue(label: "outer")
        let inner = CommandQueue(label: "inner")
        let value = QueueSafeValue(value: 0, label: "v")
        let results = try await withHangTimeout { () -> [String] in
            let valueHeld = Gate()
            // B: an operation of `outer` that performs one on `inner`, whose body starts an
            // unstructured task that waits for `value`, and ends without awaiting it.
            let b = Task.detached { () -> String in
                do {
                    try await outer.perform {
                        try await inner.perform {
                            await valueHeld.wait()
                            let task = Task { try await value.async.highestPriority.set { $0 += 1 } }
                            try await waitUntil { value.diagnostics.waitingCount == 1 }
                            // Let x register behind `outer` while this operation still runs.
                            try await waitUntil { outer.diagnostics.waitingCount == 1 }
                            try? await Task.sleep(nanoseconds: 20_000_000)
                            _ = task
                        }
                    }
                    return "b ok"
                } catch { return "b \(error)" }
            }
            // X: holds `value`, and performs on `outer` once the task above waits for `value`.
            let x = Task.detached { () -> String in
                var outcome = "x never ran"
                _ = try? await value.async.highestPriority.set { _ in
                    valueHeld.open()
                    try? await waitUntil { value.diagnostics.waitingCount == 1 }
                    do {
                        try await outer.perform {}
                        outcome = "x ok"
                    } catch { outcome = "x \(error)" }
                }
                return outcome
            }
            return [await b.value, await x.value]
        }
        #expect(results == ["b ok", "x ok"])
        #expect(value.wait.lowestPriority.get().valueOrZero == 1)
    }
}
