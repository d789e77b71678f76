import Dispatch
import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

/// Cancellation of awaiting commands: before the command is issued, while it waits in the queue,
/// and after its closure has started.
@Suite(.runsAlongsideOthers) struct CancellationTests {

    /// Holds `value` with an awaiting command whose closure waits on `gate`; returns once the holder
    /// is inside its closure.
    private func hold(
        _ value: QueueSafeValue<Int>,
        until gate: Gate,
        setting newValue: Int? = nil
    ) async throws -> Task<Int, any Error> {
        let entered = Locked(0)
        let holder = Task {
            try await value.async.highestPriority.set { value in
                entered.increment()
                await gate.wait()
                if let newValue { value = newValue }
            }
        }
        try await waitUntil("the holder entered its closure") { entered.value == 1 }
        return holder
    }

    // MARK: Cancelled while queued

    @Test func taskCancelledWhileQueued_leavesTheQueueAtOnce_throwsCancelled_andItsClosureNeverRuns() async throws {
        let value = QueueSafeValue(value: 0)
        let engine = value.engine
        let gate = Gate()
        let holder = try await hold(value, until: gate, setting: 1)
        let ran = Locked(0)

        let waiting = Task {
            try await value.async.highestPriority.set { value in
                ran.increment()
                value = 100
            }
        }
        try await waitUntil("the command is queued") { engine.pendingCount == 1 }

        waiting.cancel()
        // The holder still holds the value: the cancelled command must not wait for it.
        let result = try await withHangTimeout { await waiting.result }
        #expect(gate.waiterCount == 1, "the holder should still hold the value")
        #expect(engine.pendingCount == 0, "the cancelled command is still counted as pending")
        #expect(throws: QueueSafeValueError.cancelled) { try result.get() }

        gate.open()
        let held = try await holder.value
        #expect(held == 1)
        let final = try await value.async.highestPriority.get()
        #expect(final == 1, "the cancelled command changed the value")
        #expect(ran.value == 0, "the cancelled command's closure ran")
    }

    @Test func cancellingOneQueuedCommand_leavesTheOthersInTheirOrder() async throws {
        let value = QueueSafeValue(value: 0)
        let engine = value.engine
        let gate = Gate()
        let holder = try await hold(value, until: gate)
        let log = Recorder<String>()

        var tasks: [String: Task<Int, any Error>] = [:]
        for (index, name) in ["a", "b", "c", "d"].enumerated() {
            tasks[name] = Task {
                try await value.async.priority(.medium).set { value in
                    log.append(name)
                    value += 1
                }
            }
            try await waitUntil("\(name) is queued") { engine.pendingCount == index + 1 }
        }
        tasks["b"]!.cancel()
        try await waitUntil("b left the queue") { engine.pendingCount == 3 }

        gate.open()
        _ = try await holder.value
        for name in ["a", "c", "d"] {
            let task = tasks[name]!
            _ = try await withHangTimeout { try await task.value }
        }
        let bResult = await tasks["b"]!.result
        #expect(throws: QueueSafeValueError.cancelled) { try bResult.get() }
        #expect(log.snapshot == ["a", "c", "d"])
        let final = try await value.async.highestPriority.get()
        #expect(final == 3)
    }

    @Test func cancellingTheParentTask_cancelsAChildTasksQueuedCommand() async throws {
        let value = QueueSafeValue(value: 0)
        let engine = value.engine
        let gate = Gate()
        let holder = try await hold(value, until: gate)
        let ran = Locked(0)

        let parent = Task { () -> QueueSafeValueError? in
            await withTaskGroup(of: QueueSafeValueError?.self) { group in
                group.addTask {
                    await thrownError {
                        try await value.async.lowestPriority.set { _ in ran.increment() }
                    }
                }
                return await group.next()!
            }
        }
        try await waitUntil("the child's command is queued") { engine.pendingCount == 1 }
        parent.cancel()
        let error = try await withHangTimeout { await parent.value }
        #expect(error == .cancelled)
        #expect(engine.pendingCount == 0)
        gate.open()
        _ = try await holder.value
        #expect(ran.value == 0)
    }

    // MARK: Cancelled before the command is issued

    @Test func taskAlreadyCancelled_onAnIdleValue_throwsCancelled_andNeverRuns() async throws {
        let value = QueueSafeValue(value: 5)
        let gate = Gate()
        let ran = Locked(0)
        let task = Task { () -> [QueueSafeValueError?] in
            await gate.wait()
            return [
                await thrownError { try await value.async.highestPriority.get() },
                await thrownError { try await value.async.highestPriority.set(newValue: 9) },
                await thrownError {
                    try await value.async.highestPriority.set { value in
                        ran.increment()
                        value = 9
                    }
                },
                await thrownError {
                    try await value.async.highestPriority.map { value -> Int in
                        ran.increment()
                        return value
                    }
                },
            ]
        }
        task.cancel()
        gate.open()
        let errors = try await withHangTimeout { await task.value }
        #expect(errors == [.cancelled, .cancelled, .cancelled, .cancelled])
        #expect(ran.value == 0)
        let final = try await value.async.highestPriority.get()
        #expect(final == 5)
        #expect(value.engine.pendingCount == 0)
    }

    /// `perform` keeps `value.async`'s promise, every time: a task cancelled before the call never
    /// runs the operation. (The operation's task is a new one; before the fix it sometimes checked
    /// its own cancellation before the caller's cancellation handler reached it, and ran.)
    @Test(arguments: [CommandQueue.Ordering.oneAtATime, .startsInOrder], [CommandQueue.Policy.standard, .discardable])
    func performFromAnAlreadyCancelledTask_neverRunsTheOperation(
        ordering: CommandQueue.Ordering,
        policy: CommandQueue.Policy
    ) async throws {
        let queue = CommandQueue(label: "cancelled callers", ordering: ordering)
        let ran = Locked(0)
        for _ in 0..<1_000 {
            let outcome = try await withHangTimeout {
                await Task { () -> Result<Bool, any Error> in
                    withUnsafeCurrentTask { $0?.cancel() }
                    do {
                        return .success(
                            try await queue.perform(policy: policy) {
                                ran.increment()
                                return true
                            })
                    } catch {
                        return .failure(error)
                    }
                }.value
            }
            guard case .failure(QueueSafeValueError.cancelled) = outcome else {
                Issue.record("a cancelled caller's perform gave \(outcome)")
                break
            }
        }
        #expect(ran.value == 0, "the operation ran \(ran.value) times for cancelled callers")
    }

    /// A cancelled caller's `perform` never reaches the queue: it takes no place (so it neither
    /// runs nor discards a pending discardable operation, as a later enqueue would).
    @Test func performFromAnAlreadyCancelledTask_leavesTheQueueUntouched() async throws {
        let queue = CommandQueue(label: "untouched")
        let gate = Gate()
        let blocker = try await holdQueue(queue, until: gate)
        let ran = Recorder<String>()
        let pending = queue.enqueue(policy: .discardable) { ran.append("pending") }
        let outcome = try await withHangTimeout {
            await Task { () -> QueueSafeValueError? in
                withUnsafeCurrentTask { $0?.cancel() }
                return await thrownError { try await queue.perform { ran.append("cancelled caller") } }
            }.value
        }
        #expect(outcome == .cancelled)
        #expect(queue.engine.pendingCount == 1, "the cancelled perform changed the queue")
        gate.open()
        try await withHangTimeout {
            _ = try await blocker.value
            try await pending.value
        }
        #expect(ran.snapshot == ["pending"])
    }

    @Test func taskAlreadyCancelled_onABusyValue_throwsCancelled_withoutJoiningTheQueue() async throws {
        let value = QueueSafeValue(value: 0)
        let engine = value.engine
        let gate = Gate()
        let holder = try await hold(value, until: gate)
        let ran = Locked(0)
        let start = Gate()
        let task = Task { () -> QueueSafeValueError? in
            await start.wait()
            return await thrownError {
                try await value.async.highestPriority.set { _ in ran.increment() }
            }
        }
        task.cancel()
        start.open()
        let error = try await withHangTimeout { await task.value }
        #expect(error == .cancelled)
        #expect(engine.pendingCount == 0)
        gate.open()
        _ = try await holder.value
        #expect(ran.value == 0)
    }

    // MARK: Cancelled after the closure started

    @Test func cancellationAfterTheClosureStarted_closureSeesIsCancelled_andRunsToCompletion() async throws {
        let value = QueueSafeValue(value: 0)
        let inside = Locked(0)
        let gate = Gate()
        let sawCancellation = Locked(0)
        let task = Task {
            try await value.async.highestPriority.set { value in
                inside.increment()
                await gate.wait()
                if Task.isCancelled { sawCancellation.increment() }
                await Task.yield()
                value = 99
            }
        }
        try await waitUntil("the closure started") { inside.value == 1 }
        task.cancel()
        gate.open()
        let returned = try await withHangTimeout { try await task.value }
        #expect(returned == 99, "the command did not complete after its closure started")
        #expect(sawCancellation.value == 1, "the closure did not see Task.isCancelled")
        let final = try await value.async.highestPriority.get()
        #expect(final == 99)
    }

    // MARK: Stress

    /// Many commands, some cancelled at arbitrary moments: every command either ran (and counted)
    /// or threw `.cancelled` without running; nothing hangs and the queue ends empty.
    @Test func randomCancellations_everyCommandRunsOrThrowsCancelled_andTheQueueDrains() async throws {
        let value = QueueSafeValue(value: 0)
        let taskCount = 300
        let ran = Locked(0)
        let probe = SectionProbe()
        var tasks: [Task<Int, any Error>] = []
        for index in 0..<taskCount {
            tasks.append(
                Task {
                    try await value.async.priority(CommandPriority(rawValue: UInt8(index % 5 * 60))).set { value in
                        probe.enter()
                        ran.increment()
                        if index.isMultiple(of: 3) { await Task.yield() }
                        value += 1
                        probe.leave()
                    }
                })
            if index.isMultiple(of: 7) { await Task.yield() }
            if index % 4 == 1 { tasks[index / 2].cancel() }
        }
        var succeeded = 0
        var cancelled = 0
        for task in tasks {
            let result = try await withHangTimeout { await task.result }
            switch result {
            case .success: succeeded += 1
            case .failure(let error):
                #expect((error as? QueueSafeValueError) == .cancelled)
                cancelled += 1
            }
        }
        print("random cancellations: \(succeeded) ran, \(cancelled) cancelled")
        #expect((succeeded + cancelled) == taskCount)
        #expect(ran.value == succeeded, "a cancelled command's closure ran, or a completed one did not")
        #expect(probe.maximumInside == 1)
        #expect(value.engine.pendingCount == 0)
        let final = try await withHangTimeout { try await value.async.highestPriority.get() }
        #expect(final == succeeded)
    }
}
