import Dispatch
import Foundation
import XCTest

@testable import QueueSafeValue

/// Reentrancy of awaiting commands on a value: a command that would wait for the critical section
/// its own task (or a parent task) holds fails with `.reentrantAccess` at once instead of hanging.
final class ValueReentrancyTests: XCTestCase {

    func test_awaitingCommand_insideAnAwaitingClosureOnTheSameValue_throwsReentrantAccess() async throws {
        let value = QueueSafeValue(value: 1)
        let errors = try await concurrencyWithTimeout {
            try await value.async.highestPriority.map { _ -> [QueueSafeValueError?] in
                [
                    await concurrencyError { try await value.async.highestPriority.get() },
                    await concurrencyError { try await value.async.lowestPriority.set(newValue: 5) },
                    await concurrencyError { try await value.async.priority(.medium).set { $0 = 6 } },
                    await concurrencyError { try await value.async.highestPriority.map { $0 } },
                ]
            }
        }
        XCTAssertEqual(errors, [.reentrantAccess, .reentrantAccess, .reentrantAccess, .reentrantAccess])
        XCTAssertEqual(value.storage.engine.pendingCount, 0)
        let final = try await value.async.highestPriority.get()
        XCTAssertEqual(final, 1, "a reentrant command changed the value")
    }

    func test_awaitingCommand_insideASetClosure_afterASuspension_throwsReentrantAccess() async throws {
        let container = QueueSafeValue(value: 1)
        let recorded = ConcurrencyRecorder<QueueSafeValueError?>()
        let result = try await concurrencyWithTimeout {
            try await container.async.highestPriority.set { value in
                await Task.yield()
                try? await Task.sleep(nanoseconds: 1_000_000)
                recorded.append(await concurrencyError { try await container.async.lowestPriority.get() })
                value += 1
            }
        }
        XCTAssertEqual(result, 2)
        XCTAssertEqual(recorded.events, [.reentrantAccess])
    }

    func test_awaitingCommand_fromAChildTaskInsideTheClosure_throwsReentrantAccess() async throws {
        let value = QueueSafeValue(value: 1)
        let errors = try await concurrencyWithTimeout {
            try await value.async.highestPriority.map { _ -> [QueueSafeValueError?] in
                async let fromAsyncLet = concurrencyError { try await value.async.highestPriority.get() }
                let fromGroup = await withTaskGroup(of: QueueSafeValueError?.self) { group in
                    group.addTask { await concurrencyError { try await value.async.lowestPriority.set(newValue: 3) } }
                    return await group.next()!
                }
                return [await fromAsyncLet, fromGroup]
            }
        }
        XCTAssertEqual(errors, [.reentrantAccess, .reentrantAccess])
        let final = try await value.async.highestPriority.get()
        XCTAssertEqual(final, 1)
    }

    func test_awaitingCommand_fromAGrandchildTask_throwsReentrantAccess() async throws {
        let value = QueueSafeValue(value: 1)
        let error = try await concurrencyWithTimeout {
            try await value.async.highestPriority.map { _ -> QueueSafeValueError? in
                await withTaskGroup(of: QueueSafeValueError?.self) { group in
                    group.addTask {
                        async let nested = concurrencyError { try await value.async.highestPriority.get() }
                        return await nested
                    }
                    return await group.next()!
                }
            }
        }
        XCTAssertEqual(error, .reentrantAccess)
    }

    func test_blockingWaitCommand_insideAnAwaitingClosureOnTheSameValue_failsWithReentrantAccess() async throws {
        let value = QueueSafeValue(value: 1)
        let ran = ConcurrencyCounter()
        let results = try await concurrencyWithTimeout {
            try await value.async.highestPriority.map { _ -> [QueueSafeValueError?] in
                await Task.yield()
                let get = value.wait.highestPriority.get()
                let set = value.wait.lowestPriority.set { _ in ran.increment() }
                let timed = value.wait(timeout: .seconds(20)).highestPriority.get()
                return [get.failure, set.failure, timed.failure]
            }
        }
        XCTAssertEqual(results, [.reentrantAccess, .reentrantAccess, .reentrantAccess])
        XCTAssertEqual(ran.value, 0)
    }

    func test_commandsOnADifferentValue_insideTheClosure_runNormally() async throws {
        let value = QueueSafeValue(value: 1)
        let other = QueueSafeValue(value: 10)
        let result = try await concurrencyWithTimeout {
            try await value.async.highestPriority.set { value in
                let awaited = (try? await other.async.highestPriority.set { $0 += 1 }) ?? -1
                let blocked = (try? other.wait.highestPriority.set { $0 += 1 }.get()) ?? -1
                value = awaited + blocked
            }
        }
        XCTAssertEqual(result, 11 + 12)
    }

    /// The chain of sections is walked: inside value A's closure, inside value B's closure, a
    /// command on A is still reentrant (and one on B too).
    func test_nestedSectionsOnTwoValues_aCommandOnEitherOuterValueIsReentrant() async throws {
        let first = QueueSafeValue(value: 1)
        let second = QueueSafeValue(value: 2)
        let errors = try await concurrencyWithTimeout {
            try await first.async.highestPriority.map { _ -> [QueueSafeValueError?] in
                (try? await second.async.highestPriority.map { _ -> [QueueSafeValueError?] in
                    [
                        await concurrencyError { try await first.async.highestPriority.get() },
                        await concurrencyError { try await second.async.highestPriority.get() },
                    ]
                }) ?? []
            }
        }
        XCTAssertEqual(errors, [.reentrantAccess, .reentrantAccess])
    }

    /// A task started (unstructured) inside the closure inherits its task locals; when it issues its
    /// command after the section ended it is not reentrant, whether the value is idle or held by
    /// another command then.
    func test_unstructuredTaskStartedInsideTheClosure_issuingAfterTheSectionEnded_runsNormally() async throws {
        let value = QueueSafeValue(value: 0)
        let engine = value.storage.engine
        let idleGate = ConcurrencyGate()
        let busyGate = ConcurrencyGate()
        let tasks = try await concurrencyWithTimeout {
            try await value.async.highestPriority.map { _ -> [Task<Int, any Error>] in
                [
                    Task {
                        await idleGate.wait()
                        return try await value.async.highestPriority.set { $0 += 1 }
                    },
                    Task {
                        await busyGate.wait()
                        return try await value.async.highestPriority.set { $0 += 10 }
                    },
                ]
            }
        }
        // After the section: the value is idle.
        idleGate.open()
        let first = try await concurrencyWithTimeout { try await tasks[0].value }
        XCTAssertEqual(first, 1)

        // Another command holds the value when the second task's command arrives.
        let holderGate = ConcurrencyGate()
        let entered = ConcurrencyCounter()
        let holder = Task {
            try await value.async.highestPriority.set { value in
                entered.increment()
                await holderGate.wait()
                value += 100
            }
        }
        try await concurrencyWaitUntil("the holder holds the value") { entered.value == 1 }
        busyGate.open()
        try await concurrencyWaitUntil("the task's command is queued") { engine.pendingCount == 1 }
        holderGate.open()
        _ = try await holder.value
        let second = try await concurrencyWithTimeout { try await tasks[1].value }
        XCTAssertEqual(second, 111)
    }

    /// A detached task started inside the closure does not inherit the section: its command simply
    /// waits for the closure to end.
    func test_detachedTaskStartedInsideTheClosure_waitsForTheSection() async throws {
        let value = QueueSafeValue(value: 0)
        let engine = value.storage.engine
        let detached = try await concurrencyWithTimeout {
            try await value.async.highestPriority.map { _ -> Task<Int, any Error> in
                let task = Task.detached { try await value.async.highestPriority.set { $0 += 1 } }
                try? await concurrencyWaitUntil("the detached command is queued") { engine.pendingCount == 1 }
                return task
            }
        }
        let result = try await concurrencyWithTimeout { try await detached.value }
        XCTAssertEqual(result, 1)
    }
}

extension Result {
    fileprivate var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
