import Dispatch
import Foundation
import XCTest

@testable import QueueSafeValue

/// Cancellation of awaiting commands: before the command is issued, while it waits in the queue,
/// and after its closure has started.
final class CancellationTests: XCTestCase {

    /// Holds `value` with an awaiting command whose closure waits on `gate`; returns once the holder
    /// is inside its closure.
    private func hold(
        _ value: QueueSafeValue<Int>,
        until gate: ConcurrencyGate,
        setting newValue: Int? = nil
    ) async throws -> Task<Int, any Error> {
        let entered = ConcurrencyCounter()
        let holder = Task {
            try await value.async.highestPriority.set { value in
                entered.increment()
                await gate.wait()
                if let newValue { value = newValue }
            }
        }
        try await concurrencyWaitUntil("the holder entered its closure") { entered.value == 1 }
        return holder
    }

    // MARK: Cancelled while queued

    func test_taskCancelledWhileQueued_leavesTheQueueAtOnce_throwsCancelled_andItsClosureNeverRuns() async throws {
        let value = QueueSafeValue(value: 0)
        let engine = value.storage.engine
        let gate = ConcurrencyGate()
        let holder = try await hold(value, until: gate, setting: 1)
        let ran = ConcurrencyCounter()

        let waiting = Task {
            try await value.async.highestPriority.set { value in
                ran.increment()
                value = 100
            }
        }
        try await concurrencyWaitUntil("the command is queued") { engine.pendingCount == 1 }

        waiting.cancel()
        // The holder still holds the value: the cancelled command must not wait for it.
        let result = try await concurrencyWithTimeout { await waiting.result }
        XCTAssertEqual(gate.waiterCount, 1, "the holder should still hold the value")
        XCTAssertEqual(engine.pendingCount, 0, "the cancelled command is still counted as pending")
        XCTAssertThrowsError(try result.get()) { error in
            XCTAssertEqual(error as? QueueSafeValueError, .cancelled)
        }

        gate.open()
        let held = try await holder.value
        XCTAssertEqual(held, 1)
        let final = try await value.async.highestPriority.get()
        XCTAssertEqual(final, 1, "the cancelled command changed the value")
        XCTAssertEqual(ran.value, 0, "the cancelled command's closure ran")
    }

    func test_cancellingOneQueuedCommand_leavesTheOthersInTheirOrder() async throws {
        let value = QueueSafeValue(value: 0)
        let engine = value.storage.engine
        let gate = ConcurrencyGate()
        let holder = try await hold(value, until: gate)
        let log = ConcurrencyRecorder<String>()

        var tasks: [String: Task<Int, any Error>] = [:]
        for (index, name) in ["a", "b", "c", "d"].enumerated() {
            tasks[name] = Task {
                try await value.async.priority(.medium).set { value in
                    log.append(name)
                    value += 1
                }
            }
            try await concurrencyWaitUntil("\(name) is queued") { engine.pendingCount == index + 1 }
        }
        tasks["b"]!.cancel()
        try await concurrencyWaitUntil("b left the queue") { engine.pendingCount == 3 }

        gate.open()
        _ = try await holder.value
        for name in ["a", "c", "d"] {
            let task = tasks[name]!
            _ = try await concurrencyWithTimeout { try await task.value }
        }
        let bResult = await tasks["b"]!.result
        XCTAssertThrowsError(try bResult.get()) { XCTAssertEqual($0 as? QueueSafeValueError, .cancelled) }
        XCTAssertEqual(log.events, ["a", "c", "d"])
        let final = try await value.async.highestPriority.get()
        XCTAssertEqual(final, 3)
    }

    func test_cancellingTheParentTask_cancelsAChildTasksQueuedCommand() async throws {
        let value = QueueSafeValue(value: 0)
        let engine = value.storage.engine
        let gate = ConcurrencyGate()
        let holder = try await hold(value, until: gate)
        let ran = ConcurrencyCounter()

        let parent = Task { () -> QueueSafeValueError? in
            await withTaskGroup(of: QueueSafeValueError?.self) { group in
                group.addTask {
                    await concurrencyError {
                        try await value.async.lowestPriority.set { _ in ran.increment() }
                    }
                }
                return await group.next()!
            }
        }
        try await concurrencyWaitUntil("the child's command is queued") { engine.pendingCount == 1 }
        parent.cancel()
        let error = try await concurrencyWithTimeout { await parent.value }
        XCTAssertEqual(error, .cancelled)
        XCTAssertEqual(engine.pendingCount, 0)
        gate.open()
        _ = try await holder.value
        XCTAssertEqual(ran.value, 0)
    }

    // MARK: Cancelled before the command is issued

    func test_taskAlreadyCancelled_onAnIdleValue_throwsCancelled_andNeverRuns() async throws {
        let value = QueueSafeValue(value: 5)
        let gate = ConcurrencyGate()
        let ran = ConcurrencyCounter()
        let task = Task { () -> [QueueSafeValueError?] in
            await gate.wait()
            return [
                await concurrencyError { try await value.async.highestPriority.get() },
                await concurrencyError { try await value.async.highestPriority.set(newValue: 9) },
                await concurrencyError {
                    try await value.async.highestPriority.set { value in
                        ran.increment()
                        value = 9
                    }
                },
                await concurrencyError {
                    try await value.async.highestPriority.map { value -> Int in
                        ran.increment()
                        return value
                    }
                },
            ]
        }
        task.cancel()
        gate.open()
        let errors = try await concurrencyWithTimeout { await task.value }
        XCTAssertEqual(errors, [.cancelled, .cancelled, .cancelled, .cancelled])
        XCTAssertEqual(ran.value, 0)
        let final = try await value.async.highestPriority.get()
        XCTAssertEqual(final, 5)
        XCTAssertEqual(value.storage.engine.pendingCount, 0)
    }

    func test_taskAlreadyCancelled_onABusyValue_throwsCancelled_withoutJoiningTheQueue() async throws {
        let value = QueueSafeValue(value: 0)
        let engine = value.storage.engine
        let gate = ConcurrencyGate()
        let holder = try await hold(value, until: gate)
        let ran = ConcurrencyCounter()
        let start = ConcurrencyGate()
        let task = Task { () -> QueueSafeValueError? in
            await start.wait()
            return await concurrencyError {
                try await value.async.highestPriority.set { _ in ran.increment() }
            }
        }
        task.cancel()
        start.open()
        let error = try await concurrencyWithTimeout { await task.value }
        XCTAssertEqual(error, .cancelled)
        XCTAssertEqual(engine.pendingCount, 0)
        gate.open()
        _ = try await holder.value
        XCTAssertEqual(ran.value, 0)
    }

    // MARK: Cancelled after the closure started

    func test_cancellationAfterTheClosureStarted_closureSeesIsCancelled_andRunsToCompletion() async throws {
        let value = QueueSafeValue(value: 0)
        let inside = ConcurrencyCounter()
        let gate = ConcurrencyGate()
        let sawCancellation = ConcurrencyCounter()
        let task = Task {
            try await value.async.highestPriority.set { value in
                inside.increment()
                await gate.wait()
                if Task.isCancelled { sawCancellation.increment() }
                await Task.yield()
                value = 99
            }
        }
        try await concurrencyWaitUntil("the closure started") { inside.value == 1 }
        task.cancel()
        gate.open()
        let returned = try await concurrencyWithTimeout { try await task.value }
        XCTAssertEqual(returned, 99, "the command did not complete after its closure started")
        XCTAssertEqual(sawCancellation.value, 1, "the closure did not see Task.isCancelled")
        let final = try await value.async.highestPriority.get()
        XCTAssertEqual(final, 99)
    }

    // MARK: Stress

    /// Many commands, some cancelled at arbitrary moments: every command either ran (and counted)
    /// or threw `.cancelled` without running; nothing hangs and the queue ends empty.
    func test_randomCancellations_everyCommandRunsOrThrowsCancelled_andTheQueueDrains() async throws {
        let value = QueueSafeValue(value: 0)
        let taskCount = 300
        let ran = ConcurrencyCounter()
        let recorder = ConcurrencyRecorder<Int>()
        var tasks: [Task<Int, any Error>] = []
        for index in 0..<taskCount {
            tasks.append(
                Task {
                    try await value.async.priority(CommandPriority(rawValue: UInt8(index % 5 * 60))).set { value in
                        recorder.enter()
                        ran.increment()
                        if index.isMultiple(of: 3) { await Task.yield() }
                        value += 1
                        recorder.leave()
                    }
                })
            if index.isMultiple(of: 7) { await Task.yield() }
            if index % 4 == 1 { tasks[index / 2].cancel() }
        }
        var succeeded = 0
        var cancelled = 0
        for task in tasks {
            let result = try await concurrencyWithTimeout { await task.result }
            switch result {
            case .success: succeeded += 1
            case .failure(let error):
                XCTAssertEqual(error as? QueueSafeValueError, .cancelled)
                cancelled += 1
            }
        }
        print("random cancellations: \(succeeded) ran, \(cancelled) cancelled")
        XCTAssertEqual(succeeded + cancelled, taskCount)
        XCTAssertEqual(ran.value, succeeded, "a cancelled command's closure ran, or a completed one did not")
        XCTAssertEqual(recorder.maxInside, 1)
        XCTAssertEqual(value.storage.engine.pendingCount, 0)
        let final = try await concurrencyWithTimeout { try await value.async.highestPriority.get() }
        XCTAssertEqual(final, succeeded)
    }
}
