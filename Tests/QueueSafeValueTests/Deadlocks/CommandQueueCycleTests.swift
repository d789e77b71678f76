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

    /// An operation awaits the result of another operation of its own one-at-a-time queue, which
    /// can begin only once the awaiting one ends: refused with `.deadlock` at once, naming both,
    /// instead of hanging the queue.
    @Test func awaitingAQueuedOperationBehindItself_isRefusedAtOnce() async throws {
        let queue = CommandQueue(label: "uploads")
        let later = Mailbox<QueuedOperation<Int>>()
        // The first operation may begin as soon as it is submitted: it waits until the second is.
        let submitted = Gate()
        let first = queue.submit { () -> String in
            await submitted.wait()
            guard let operation = later.value else { return "no operation to await" }
            do {
                _ = try await operation.value
                return "the await returned"
            } catch QueueSafeValueError.deadlock(let report) {
                return "deadlock: \(report)"
            } catch {
                return "\(error)"
            }
        }
        later.value = queue.submit { 42 }
        submitted.open()
        let outcome = try await withHangTimeout { try await first.value }
        #expect(outcome.hasPrefix("deadlock: "), "\(outcome)")
        #expect(
            outcome.contains("CommandQueueCycleTests.swift"),
            "the report does not name the awaited operation: \(outcome)")
        #expect(try await later.value?.value == 42, "the awaited operation did not run after the refused wait")
    }

    /// An operation that awaits its own result is refused too.
    @Test func anOperationAwaitingItself_isRefusedAtOnce() async throws {
        let queue = try CommandQueue(label: "wide", width: 2)
        let me = Mailbox<QueuedOperation<String>>()
        let gate = Gate()
        let operation = queue.submit { () -> String in
            await gate.wait()
            guard let own = me.value else { return "no handle" }
            do {
                _ = try await own.value
                return "the await returned"
            } catch QueueSafeValueError.deadlock {
                return "deadlock"
            } catch {
                return "\(error)"
            }
        }
        me.value = operation
        gate.open()
        #expect(try await withHangTimeout { try await operation.value } == "deadlock")
        me.value = nil
    }

    /// On a queue of width 2 a slot may free up, so awaiting another operation is allowed.
    @Test func awaitingAnotherOperationOfAWiderQueue_waitsForIt() async throws {
        let queue = try CommandQueue(label: "wide", width: 2)
        let later = Mailbox<QueuedOperation<Int>>()
        let gate = Gate()
        let first = queue.submit { () -> Int in
            await gate.wait()
            return try await later.value?.value ?? -1
        }
        later.value = queue.submit { 7 }
        gate.open()
        #expect(try await withHangTimeout { try await first.value } == 7)
    }
}
