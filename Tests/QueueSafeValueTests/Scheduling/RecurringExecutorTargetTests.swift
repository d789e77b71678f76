import Dispatch
import Foundation
import XCTest

@testable import QueueSafeValue

/// `RecurringExecutor` running its operations in a `CommandQueue` or inside a `QueueSafeValue`'s
/// critical section: runs take their turn at their priority and cancellation reaches them.
final class RecurringExecutorTargetTests: XCTestCase {

    // MARK: CommandQueue

    func test_commandQueueTarget_runsInItsTurnAtItsPriority_neverAlongsideOtherOperations() async throws {
        let queue = CommandQueue()
        let gate = SchedulingTestGate()
        let probe = SectionProbe()
        let order = Locked<[String]>([])
        let recorder = SchedulingTestRecorder()
        @Sendable func record(_ name: String) async {
            probe.enter()
            order.withLock { $0.append(name) }
            await Task.yield()
            probe.leave()
        }
        let blocker = queue.enqueue {
            await gate.wait()
            await record("blocker")
        }
        let low = queue.enqueue(priority: .low) { await record("low") }
        let executor = RecurringExecutor(
            runningOn: .commandQueue(queue, priority: .high),
            eventHandler: recorder.handler
        ) { await record("executor") }
        executor.runNow()
        let started = await recorder.wait(for: .started(run: 1, trigger: .runNow(request: 1)))
        XCTAssertTrue(started)
        let medium = queue.enqueue(priority: .medium) { await record("medium") }

        gate.open()
        _ = try await (blocker.value, low.value, medium.value)
        let finished = await recorder.wait(for: .finished(run: 1))
        XCTAssertTrue(finished)
        XCTAssertEqual(order.value, ["blocker", "executor", "medium", "low"])
        XCTAssertEqual(probe.maximumInside, 1)
        await executor.stopAndWait()
    }

    func test_commandQueueTarget_runNowCancelsARunStillWaitingForItsTurn_soItNeverStarts() async throws {
        let queue = CommandQueue()
        let gate = SchedulingTestGate()
        let recorder = SchedulingTestRecorder()
        let calls = Locked(0)
        let blocker = queue.enqueue { await gate.wait() }
        let executor = RecurringExecutor(runningOn: .commandQueue(queue), eventHandler: recorder.handler) {
            calls.withLock { $0 += 1 }
        }
        executor.runNow()
        let queued = await recorder.wait(for: .started(run: 1, trigger: .runNow(request: 1)))
        XCTAssertTrue(queued)
        executor.runNow()
        let cancelled = await recorder.wait(for: .cancelled(run: 1))
        XCTAssertTrue(cancelled, "the waiting run leaves the queue although the queue is still busy")
        XCTAssertEqual(calls.value, 0)

        gate.open()
        try await blocker.value
        let finished = await recorder.wait(for: .finished(run: 2))
        XCTAssertTrue(finished)
        XCTAssertEqual(calls.value, 1)
        await executor.stopAndWait()
    }

    func test_commandQueueTarget_cancellationReachesARunningOperation() async {
        let queue = CommandQueue()
        let recorder = SchedulingTestRecorder()
        let sawCancellation = Locked<Bool?>(nil)
        let executor = RecurringExecutor(runningOn: .commandQueue(queue), eventHandler: recorder.handler) {
            sawCancellation.withLock { $0 = false }
            let cancelled = await schedulingWaitForCancellation()
            sawCancellation.withLock { $0 = cancelled }
        }
        executor.runNow()
        let started = await schedulingWait { sawCancellation.value != nil }
        XCTAssertTrue(started)
        await executor.stopAndWait()
        XCTAssertEqual(sawCancellation.value, true)
        XCTAssertEqual(Array(recorder.snapshot.suffix(2)), [.finished(run: 1), .stopped])
    }

    // MARK: QueueSafeValue

    func test_queueSafeValueTarget_holdsTheValueAcrossItsAwaits_soNoUpdateIsLost() async throws {
        let value = QueueSafeValue(value: 0)
        let recorder = SchedulingTestRecorder()
        let executor = RecurringExecutor(updating: value, priority: .high, eventHandler: recorder.handler) { count in
            let before = count
            await Task.yield()
            try await Task.sleep(nanoseconds: 100_000)
            count = before + 1_000
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<100 {
                if index % 20 == 0 { executor.runNow() }
                group.addTask {
                    try await value.async.priority(.low).set { count in
                        let before = count
                        await Task.yield()
                        count = before + 1
                    }
                }
            }
            try await group.waitForAll()
        }
        // The last request's run is not preempted by anything: let it finish.
        let lastRunEnded = await recorder.wait { events in
            guard
                let run = events.lazy.compactMap({ event -> UInt64? in
                    if case .started(let run, .runNow(request: 5)) = event { return run }
                    return nil
                }).first
            else { return false }
            return events.contains(.finished(run: run))
        }
        XCTAssertTrue(lastRunEnded)
        await executor.stopAndWait()
        let finishedRuns = recorder.snapshot.filter { if case .finished = $0 { return true } else { return false } }
        let total = try await value.async.highestPriority.get()
        XCTAssertGreaterThanOrEqual(finishedRuns.count, 1)
        XCTAssertEqual(total, 100 + 1_000 * finishedRuns.count)
    }

    func test_queueSafeValueTarget_throwingOperation_keepsItsChanges_andReportsFailed() async throws {
        let value = QueueSafeValue(value: [String]())
        let recorder = SchedulingTestRecorder()
        let executor = RecurringExecutor(updating: value, eventHandler: recorder.handler) { log in
            log.append("partial")
            throw SchedulingTestError(id: 1)
        }
        executor.runNow()
        let failed = await recorder.wait(
            for: .failed(run: 1, error: RecurringExecutorFailure(SchedulingTestError(id: 1))))
        XCTAssertTrue(failed)
        let log = try await value.async.highestPriority.get()
        XCTAssertEqual(log, ["partial"])
        await executor.stopAndWait()
    }

    func test_queueSafeValueTarget_runNowCancelsARunWaitingForTheValue_soItNeverStarts() async throws {
        let value = QueueSafeValue(value: 0)
        let recorder = SchedulingTestRecorder()
        let gate = SchedulingTestGate()
        let holder = Task {
            try await value.async.highestPriority.set { _ in await gate.wait() }
        }
        let held = await schedulingWait { gate.waiterCount == 1 }
        XCTAssertTrue(held)
        let executor = RecurringExecutor(updating: value, eventHandler: recorder.handler) { $0 += 1 }
        executor.runNow()
        let queued = await recorder.wait(for: .started(run: 1, trigger: .runNow(request: 1)))
        XCTAssertTrue(queued)
        executor.runNow()
        let cancelled = await recorder.wait(for: .cancelled(run: 1))
        XCTAssertTrue(cancelled)

        gate.open()
        _ = try await holder.value
        let finished = await recorder.wait(for: .finished(run: 2))
        XCTAssertTrue(finished)
        let count = try await value.async.highestPriority.get()
        XCTAssertEqual(count, 1, "only the second run touched the value")
        await executor.stopAndWait()
    }
}
