import Dispatch
import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

/// Reentrancy of awaiting commands on a value: a command that would wait for the critical section
/// its own task (or a parent task) holds fails with `.reentrantAccess` at once instead of hanging.
@Suite(.runsAlongsideOthers) struct ValueReentrancyTests {

    @Test func awaitingCommand_insideAnAwaitingClosureOnTheSameValue_throwsReentrantAccess() async throws {
        let value = QueueSafeValue(value: 1)
        let errors = try await withHangTimeout {
            try await value.async.highestPriority.map { _ -> [QueueSafeValueError?] in
                [
                    await thrownError { try await value.async.highestPriority.get() },
                    await thrownError { try await value.async.lowestPriority.set(newValue: 5) },
                    await thrownError { try await value.async.priority(.medium).set { $0 = 6 } },
                    await thrownError { try await value.async.highestPriority.map { $0 } },
                ]
            }
        }
        #expect(errors == [.reentrantAccess, .reentrantAccess, .reentrantAccess, .reentrantAccess])
        #expect(value.engine.pendingCount == 0)
        let final = try await value.async.highestPriority.get()
        #expect(final == 1, "a reentrant command changed the value")
    }

    @Test func awaitingCommand_insideASetClosure_afterASuspension_throwsReentrantAccess() async throws {
        let container = QueueSafeValue(value: 1)
        let recorded = Recorder<QueueSafeValueError?>()
        let result = try await withHangTimeout {
            try await container.async.highestPriority.set { value in
                await Task.yield()
                try? await Task.sleep(nanoseconds: 1_000_000)
                recorded.append(await thrownError { try await container.async.lowestPriority.get() })
                value += 1
            }
        }
        #expect(result == 2)
        #expect(recorded.snapshot == [.reentrantAccess])
    }

    @Test func awaitingCommand_fromAChildTaskInsideTheClosure_throwsReentrantAccess() async throws {
        let value = QueueSafeValue(value: 1)
        let errors = try await withHangTimeout {
            try await value.async.highestPriority.map { _ -> [QueueSafeValueError?] in
                async let fromAsyncLet = thrownError { try await value.async.highestPriority.get() }
                let fromGroup = await withTaskGroup(of: QueueSafeValueError?.self) { group in
                    group.addTask { await thrownError { try await value.async.lowestPriority.set(newValue: 3) } }
                    return await group.next()!
                }
                return [await fromAsyncLet, fromGroup]
            }
        }
        #expect(errors == [.reentrantAccess, .reentrantAccess])
        let final = try await value.async.highestPriority.get()
        #expect(final == 1)
    }

    @Test func awaitingCommand_fromAGrandchildTask_throwsReentrantAccess() async throws {
        let value = QueueSafeValue(value: 1)
        let error = try await withHangTimeout {
            try await value.async.highestPriority.map { _ -> QueueSafeValueError? in
                await withTaskGroup(of: QueueSafeValueError?.self) { group in
                    group.addTask {
                        async let nested = thrownError { try await value.async.highestPriority.get() }
                        return await nested
                    }
                    return await group.next()!
                }
            }
        }
        #expect(error == .reentrantAccess)
    }

    @Test func blockingWaitCommand_insideAnAwaitingClosureOnTheSameValue_failsWithReentrantAccess() async throws {
        let value = QueueSafeValue(value: 1)
        let ran = Locked(0)
        let results = try await withHangTimeout {
            try await value.async.highestPriority.map { _ -> [QueueSafeValueError?] in
                await Task.yield()
                let get = value.wait.highestPriority.get()
                let set = value.wait.lowestPriority.set { _ in ran.increment() }
                let timed = value.wait(timeout: .seconds(20)).highestPriority.get()
                return [get.failure, set.failure, timed.failure]
            }
        }
        #expect(results == [.reentrantAccess, .reentrantAccess, .reentrantAccess])
        #expect(ran.value == 0)
    }

    @Test func commandsOnADifferentValue_insideTheClosure_runNormally() async throws {
        let value = QueueSafeValue(value: 1)
        let other = QueueSafeValue(value: 10)
        let result = try await withHangTimeout {
            try await value.async.highestPriority.set { value in
                let awaited = (try? await other.async.highestPriority.set { $0 += 1 }) ?? -1
                let blocked = (try? other.wait.highestPriority.set { $0 += 1 }.get()) ?? -1
                value = awaited + blocked
            }
        }
        #expect(result == (11 + 12))
    }

    /// The chain of sections is walked: inside value A's closure, inside value B's closure, a
    /// command on A is still reentrant (and one on B too).
    @Test func nestedSectionsOnTwoValues_aCommandOnEitherOuterValueIsReentrant() async throws {
        let first = QueueSafeValue(value: 1)
        let second = QueueSafeValue(value: 2)
        let errors = try await withHangTimeout {
            try await first.async.highestPriority.map { _ -> [QueueSafeValueError?] in
                (try? await second.async.highestPriority.map { _ -> [QueueSafeValueError?] in
                    [
                        await thrownError { try await first.async.highestPriority.get() },
                        await thrownError { try await second.async.highestPriority.get() },
                    ]
                }) ?? []
            }
        }
        #expect(errors == [.reentrantAccess, .reentrantAccess])
    }

    /// A task started (unstructured) inside the closure inherits its task locals; when it issues its
    /// command after the section ended it is not reentrant, whether the value is idle or held by
    /// another command then.
    @Test func unstructuredTaskStartedInsideTheClosure_issuingAfterTheSectionEnded_runsNormally() async throws {
        let value = QueueSafeValue(value: 0)
        let engine = value.engine
        let idleGate = Gate()
        let busyGate = Gate()
        let tasks = try await withHangTimeout {
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
        let first = try await withHangTimeout { try await tasks[0].value }
        #expect(first == 1)

        // Another command holds the value when the second task's command arrives.
        let holderGate = Gate()
        let entered = Locked(0)
        let holder = Task {
            try await value.async.highestPriority.set { value in
                entered.increment()
                await holderGate.wait()
                value += 100
            }
        }
        try await waitUntil("the holder holds the value") { entered.value == 1 }
        busyGate.open()
        try await waitUntil("the task's command is queued") { engine.pendingCount == 1 }
        holderGate.open()
        _ = try await holder.value
        let second = try await withHangTimeout { try await tasks[1].value }
        #expect(second == 111)
    }

    /// A detached task started inside the closure does not inherit the section: its command simply
    /// waits for the closure to end.
    @Test func detachedTaskStartedInsideTheClosure_waitsForTheSection() async throws {
        let value = QueueSafeValue(value: 0)
        let engine = value.engine
        let detached = try await withHangTimeout {
            try await value.async.highestPriority.map { _ -> Task<Int, any Error> in
                let task = Task.detached { try await value.async.highestPriority.set { $0 += 1 } }
                try? await waitUntil("the detached command is queued") { engine.pendingCount == 1 }
                return task
            }
        }
        let result = try await withHangTimeout { try await detached.value }
        #expect(result == 1)
    }
}
