import Dispatch
import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

/// `RecurringExecutor` running its operations in a `CommandQueue` or inside a `QueueSafeValue`'s
/// critical section: runs take their turn at their priority and cancellation reaches them.
@Suite(.runsAlongsideOthers) struct RecurringExecutorTargetTests {

    // MARK: CommandQueue

    @Test func commandQueueTarget_runsInItsTurnAtItsPriority_neverAlongsideOtherOperations() async throws {
        let queue = CommandQueue()
        let gate = Gate()
        let probe = SectionProbe()
        let order = Locked<[String]>([])
        let recorder = Recorder<RecurringExecutorEvent>()
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
        try await recorder.wait(for: .started(run: 1, trigger: .runNow(request: 1)))
        let medium = queue.enqueue(priority: .medium) { await record("medium") }

        gate.open()
        _ = try await (blocker.value, low.value, medium.value)
        try await recorder.wait(for: .finished(run: 1))
        #expect(order.value == ["blocker", "executor", "medium", "low"])
        #expect(probe.maximumInside == 1)
        await executor.stopAndWait()
    }

    @Test func commandQueueTarget_runNowCancelsARunStillWaitingForItsTurn_soItNeverStarts() async throws {
        let queue = CommandQueue()
        let gate = Gate()
        let recorder = Recorder<RecurringExecutorEvent>()
        let calls = Locked(0)
        let blocker = queue.enqueue { await gate.wait() }
        let executor = RecurringExecutor(runningOn: .commandQueue(queue), eventHandler: recorder.handler) {
            calls.withLock { $0 += 1 }
        }
        executor.runNow()
        try await recorder.wait(for: .started(run: 1, trigger: .runNow(request: 1)))
        executor.runNow()
        try await recorder.wait(for: .cancelled(run: 1))
        #expect(calls.value == 0)

        gate.open()
        try await blocker.value
        try await recorder.wait(for: .finished(run: 2))
        #expect(calls.value == 1)
        await executor.stopAndWait()
    }

    @Test func commandQueueTarget_cancellationReachesARunningOperation() async throws {
        let queue = CommandQueue()
        let recorder = Recorder<RecurringExecutorEvent>()
        let sawCancellation = Locked<Bool?>(nil)
        let executor = RecurringExecutor(runningOn: .commandQueue(queue), eventHandler: recorder.handler) {
            sawCancellation.withLock { $0 = false }
            let cancelled = (try? await waitUntil("cancellation") { Task.isCancelled }) != nil
            sawCancellation.withLock { $0 = cancelled }
        }
        executor.runNow()
        try await waitUntil { sawCancellation.value != nil }
        await executor.stopAndWait()
        #expect(sawCancellation.value == true)
        #expect(Array(recorder.kinds.suffix(2)) == [.finished(run: 1), .stopped])
    }

    // MARK: QueueSafeValue

    @Test func queueSafeValueTarget_holdsTheValueAcrossItsAwaits_soNoUpdateIsLost() async throws {
        let value = QueueSafeValue(value: 0)
        let recorder = Recorder<RecurringExecutorEvent>()
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
        try await recorder.wait { events in
            guard
                let run = events.lazy.compactMap({ event -> UInt64? in
                    if case .started(let run, .runNow(request: 5)) = event { return run }
                    return nil
                }).first
            else { return false }
            return events.contains(.finished(run: run))
        }
        await executor.stopAndWait()
        let finishedRuns = recorder.kinds.filter { if case .finished = $0 { return true } else { return false } }
        let total = try await value.async.highestPriority.get()
        #expect(finishedRuns.count >= 1)
        #expect(total == (100 + 1_000 * finishedRuns.count))
    }

    @Test func queueSafeValueTarget_throwingOperation_keepsItsChanges_andReportsFailed() async throws {
        let value = QueueSafeValue(value: [String]())
        let recorder = Recorder<RecurringExecutorEvent>()
        let executor = RecurringExecutor(updating: value, eventHandler: recorder.handler) { log in
            log.append("partial")
            throw TestError.thrown(id: 1)
        }
        executor.runNow()
        try await recorder.wait(
            for: .failed(run: 1, error: RecurringExecutorFailure(TestError.thrown(id: 1))))
        let log = try await value.async.highestPriority.get()
        #expect(log == ["partial"])
        await executor.stopAndWait()
    }

    @Test func queueSafeValueTarget_runNowCancelsARunWaitingForTheValue_soItNeverStarts() async throws {
        let value = QueueSafeValue(value: 0)
        let recorder = Recorder<RecurringExecutorEvent>()
        let gate = Gate()
        let holder = Task {
            try await value.async.highestPriority.set { _ in await gate.wait() }
        }
        try await waitUntil { gate.waiterCount == 1 }
        let executor = RecurringExecutor(updating: value, eventHandler: recorder.handler) { $0 += 1 }
        executor.runNow()
        try await recorder.wait(for: .started(run: 1, trigger: .runNow(request: 1)))
        executor.runNow()
        try await recorder.wait(for: .cancelled(run: 1))

        gate.open()
        _ = try await holder.value
        try await recorder.wait(for: .finished(run: 2))
        let count = try await value.async.highestPriority.get()
        #expect(count == 1, "only the second run touched the value")
        await executor.stopAndWait()
    }
}
