import Dispatch
import Foundation
import XCTest

@testable import QueueSafeValue

/// `RecurringExecutor`: interval runs, `runNow()` hand-off and collapsing, policy changes, failing
/// and uncooperative operations, events on both channels, stop and release.
final class RecurringExecutorTests: XCTestCase {

    // MARK: Policy

    func test_policy_rejectsIntervalsThatAreNotPositiveAndFinite() {
        for seconds in [0, -1, -0.0, .nan, .infinity, -.infinity, 1e-12, 1e30] {
            XCTAssertThrowsError(try RecurringPolicy.interval(seconds: seconds), "\(seconds)") { error in
                guard case .invalidArgument = error as? QueueSafeValueError else {
                    return XCTFail("expected invalidArgument for \(seconds), got \(error)")
                }
            }
        }
        let intervals: [DispatchTimeInterval] = [
            .never, .seconds(0), .milliseconds(-5), .nanoseconds(0), .seconds(.max),
        ]
        for interval in intervals {
            XCTAssertThrowsError(try RecurringPolicy.interval(interval), "\(interval)") { error in
                guard case .invalidArgument = error as? QueueSafeValueError else {
                    return XCTFail("expected invalidArgument for \(interval), got \(error)")
                }
            }
        }
    }

    func test_policy_keepsValidIntervalsInNanoseconds() throws {
        XCTAssertEqual(try RecurringPolicy.interval(seconds: 1.5).intervalNanoseconds, 1_500_000_000)
        XCTAssertEqual(try RecurringPolicy.interval(seconds: 0.005).intervalSeconds, 0.005)
        XCTAssertEqual(try RecurringPolicy.interval(.milliseconds(250)), try RecurringPolicy.interval(seconds: 0.25))
        XCTAssertEqual(try RecurringPolicy.interval(.microseconds(3)).intervalNanoseconds, 3_000)
        XCTAssertEqual(try RecurringPolicy.interval(.nanoseconds(1)).intervalNanoseconds, 1)
        XCTAssertNil(RecurringPolicy.onDemand.intervalNanoseconds)
    }

    // MARK: Interval runs

    func test_intervalPolicy_runsOnceEachTimeTheIntervalElapses() async throws {
        let sleeper = SchedulingTestSleeper()
        let recorder = SchedulingTestRecorder()
        let runs = Locked(0)
        let executor = RecurringExecutor(
            policy: try .interval(seconds: 5),
            sleeper: sleeper,
            eventHandler: recorder.handler
        ) { runs.withLock { $0 += 1 } }

        for index in 0..<3 {
            let sleep = await sleeper.waitForSleep(index)
            XCTAssertEqual(sleep?.nanoseconds, 5_000_000_000)
            sleeper.fire(index)
            let finished = await recorder.wait(for: .finished(run: UInt64(index + 1)))
            XCTAssertTrue(finished)
        }
        await sleeper.waitForSleep(3)
        XCTAssertEqual(runs.value, 3)
        await executor.stopAndWait()

        let cycle: (UInt64) -> [RecurringExecutorEvent] = { run in
            [.waiting(nextRunIn: 5), .intervalElapsed, .started(run: run, trigger: .interval), .finished(run: run)]
        }
        XCTAssertEqual(recorder.snapshot, cycle(1) + cycle(2) + cycle(3) + [.waiting(nextRunIn: 5), .stopped])
    }

    func test_intervalPolicy_withTheDefaultClockAndAFewMilliseconds_runsRepeatedlyOneAtATime() async throws {
        let probe = SectionProbe()
        let recorder = SchedulingTestRecorder()
        let executor = RecurringExecutor(policy: try .interval(seconds: 0.002), eventHandler: recorder.handler) {
            probe.enter()
            await Task.yield()
            probe.leave()
        }
        let ranThreeTimes = await recorder.wait(for: .finished(run: 3))
        XCTAssertTrue(ranThreeTimes)
        await executor.stopAndWait()
        XCTAssertEqual(probe.maximumInside, 1)
        XCTAssertEqual(probe.insideCount, 0)
    }

    // MARK: runNow

    func test_runNow_whileIdle_runsOnceWithTheRequestAsTrigger() async {
        let recorder = SchedulingTestRecorder()
        let executor = RecurringExecutor(eventHandler: recorder.handler) {}
        let idle = await recorder.wait(for: .waiting(nextRunIn: nil))
        XCTAssertTrue(idle)
        executor.runNow()
        let finished = await recorder.wait(for: .waiting(nextRunIn: nil), count: 2)
        XCTAssertTrue(finished)
        XCTAssertEqual(
            recorder.snapshot,
            [
                .waiting(nextRunIn: nil), .requested(request: 1), .started(run: 1, trigger: .runNow(request: 1)),
                .finished(run: 1), .waiting(nextRunIn: nil),
            ])
        await executor.stopAndWait()
    }

    func test_runNow_cancelsTheRunningOperation_waitsForIt_thenRuns() async {
        let recorder = SchedulingTestRecorder()
        let probe = SectionProbe()
        let sawCancellation = Locked<[Bool]>([])
        let executor = RecurringExecutor(eventHandler: recorder.handler) {
            probe.enter()
            defer { probe.leave() }
            if probe.entryCount == 1 {
                let cancelled = await schedulingWaitForCancellation()
                sawCancellation.withLock { $0.append(cancelled) }
                try Task.checkCancellation()
            }
        }
        executor.runNow()
        let firstStarted = await schedulingWait { probe.insideCount == 1 }
        XCTAssertTrue(firstStarted)

        executor.runNow()
        let secondFinished = await recorder.wait(for: .finished(run: 2))
        XCTAssertTrue(secondFinished)
        XCTAssertEqual(sawCancellation.value, [true])
        XCTAssertEqual(probe.maximumInside, 1)
        XCTAssertEqual(
            Array(recorder.snapshot.drop { $0 != .requested(request: 2) }.prefix(4)),
            [
                .requested(request: 2), .cancelled(run: 1), .started(run: 2, trigger: .runNow(request: 2)),
                .finished(run: 2),
            ])
        await executor.stopAndWait()
    }

    func test_runNow_preemptsAnIntervalRun_andTheIntervalRestartsFromZeroAfterward() async throws {
        let sleeper = SchedulingTestSleeper()
        let recorder = SchedulingTestRecorder()
        let calls = Locked(0)
        let executor = RecurringExecutor(
            policy: try .interval(seconds: 10),
            sleeper: sleeper,
            eventHandler: recorder.handler
        ) {
            if calls.withLock({
                $0 += 1
                return $0
            }) == 1 {
                _ = await schedulingWaitForCancellation()
                throw CancellationError()
            }
        }
        await sleeper.waitForSleep(0)
        sleeper.fire(0)
        let intervalRunStarted = await schedulingWait { calls.value == 1 }
        XCTAssertTrue(intervalRunStarted)

        executor.runNow()
        let nextSleep = await sleeper.waitForSleep(1)
        XCTAssertEqual(nextSleep?.nanoseconds, 10_000_000_000, "a full interval after the on-demand run")
        XCTAssertEqual(sleeper.sleeps.count, 2)
        await executor.stopAndWait()
        XCTAssertEqual(
            recorder.snapshot,
            [
                .waiting(nextRunIn: 10), .intervalElapsed, .started(run: 1, trigger: .interval),
                .requested(request: 1), .cancelled(run: 1), .started(run: 2, trigger: .runNow(request: 1)),
                .finished(run: 2), .waiting(nextRunIn: 10), .stopped,
            ])
    }

    func test_runNow_whileWaitingForTheInterval_endsTheWaitAndRunsAtOnce() async throws {
        let sleeper = SchedulingTestSleeper()
        let recorder = SchedulingTestRecorder()
        let executor = RecurringExecutor(
            policy: try .interval(seconds: 60),
            sleeper: sleeper,
            eventHandler: recorder.handler
        ) {}
        await sleeper.waitForSleep(0)
        executor.runNow()
        await sleeper.waitForSleep(1)
        XCTAssertTrue(sleeper.sleeps[0].isCancelled)
        await executor.stopAndWait()
        XCTAssertEqual(recorder.starts, [.runNow(request: 1)])
    }

    func test_concurrentRunNowCalls_duringTheHandOff_collapseIntoOneRun_andTheLatestWins() async {
        let recorder = SchedulingTestRecorder()
        let gate = SchedulingTestGate()
        let calls = Locked(0)
        let executor = RecurringExecutor(eventHandler: recorder.handler) {
            // The first run ignores cancellation until the test opens the gate.
            if calls.withLock({
                $0 += 1
                return $0
            }) == 1 {
                await gate.wait()
            }
        }
        executor.runNow()
        let firstRunning = await schedulingWait { gate.waiterCount == 1 }
        XCTAssertTrue(firstRunning)

        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<10 { group.addTask { executor.runNow() } }
        }
        let allRequested = await recorder.wait(for: .requested(request: 11))
        XCTAssertTrue(allRequested)
        XCTAssertEqual(calls.value, 1, "nothing runs while the first run ignores its cancellation")

        gate.open()
        let secondFinished = await recorder.wait(for: .finished(run: 2))
        XCTAssertTrue(secondFinished)
        let idle = await recorder.wait { $0.last == .waiting(nextRunIn: nil) }
        XCTAssertTrue(idle)
        XCTAssertEqual(calls.value, 2)
        XCTAssertEqual(recorder.starts, [.runNow(request: 1), .runNow(request: 11)])
        XCTAssertEqual(
            Array(recorder.snapshot.suffix(4)),
            [
                .finished(run: 1), .started(run: 2, trigger: .runNow(request: 11)), .finished(run: 2),
                .waiting(nextRunIn: nil),
            ])
        await executor.stopAndWait()
    }

    // MARK: Policy changes

    func test_setPolicy_whileWaiting_restartsTheWaitWithTheNewInterval_withoutARun() async throws {
        // A clock that lets an abandoned sleep return normally: the executor must ignore it.
        let sleeper = SchedulingTestSleeper(honorsCancellation: false)
        let recorder = SchedulingTestRecorder()
        let runs = Locked(0)
        let executor = RecurringExecutor(
            policy: try .interval(seconds: 10),
            sleeper: sleeper,
            eventHandler: recorder.handler
        ) { runs.withLock { $0 += 1 } }
        await sleeper.waitForSleep(0)

        executor.setPolicy(try .interval(seconds: 20))
        let second = await sleeper.waitForSleep(1)
        XCTAssertEqual(second?.nanoseconds, 20_000_000_000)
        XCTAssertTrue(sleeper.sleeps[0].isCancelled)
        XCTAssertEqual(executor.policy, try .interval(seconds: 20))

        sleeper.fire(0)  // the abandoned wait "elapses" anyway
        sleeper.fire(1)
        let ran = await recorder.wait(for: .finished(run: 1))
        XCTAssertTrue(ran)
        await sleeper.waitForSleep(2)
        XCTAssertEqual(runs.value, 1)
        await executor.stopAndWait()
        XCTAssertEqual(
            recorder.snapshot,
            [
                .waiting(nextRunIn: 10), .policyChanged(try .interval(seconds: 20)), .waiting(nextRunIn: 20),
                .intervalElapsed, .started(run: 1, trigger: .interval), .finished(run: 1), .waiting(nextRunIn: 20),
                .stopped,
            ])
    }

    func test_setPolicy_toOnDemand_whileWaiting_endsTheIntervalRuns() async throws {
        let sleeper = SchedulingTestSleeper()
        let recorder = SchedulingTestRecorder()
        let executor = RecurringExecutor(
            policy: try .interval(seconds: 10),
            sleeper: sleeper,
            eventHandler: recorder.handler
        ) {}
        await sleeper.waitForSleep(0)
        executor.setPolicy(.onDemand)
        let idle = await recorder.wait(for: .waiting(nextRunIn: nil))
        XCTAssertTrue(idle)
        XCTAssertTrue(sleeper.sleeps[0].isCancelled)
        XCTAssertEqual(sleeper.sleeps.count, 1)
        XCTAssertEqual(
            recorder.snapshot, [.waiting(nextRunIn: 10), .policyChanged(.onDemand), .waiting(nextRunIn: nil)])
        await executor.stopAndWait()
    }

    func test_setPolicy_whileRunning_leavesTheRunAlone_andAppliesToTheNextWait() async throws {
        let recorder = SchedulingTestRecorder()
        let sleeper = SchedulingTestSleeper()
        let gate = SchedulingTestGate()
        let cancelled = Locked(false)
        let executor = RecurringExecutor(sleeper: sleeper, eventHandler: recorder.handler) {
            await gate.wait()
            cancelled.withLock { $0 = Task.isCancelled }
        }
        executor.runNow()
        let running = await schedulingWait { gate.waiterCount == 1 }
        XCTAssertTrue(running)
        executor.setPolicy(try .interval(seconds: 7))
        gate.open()
        let nextSleep = await sleeper.waitForSleep(0)
        XCTAssertEqual(nextSleep?.nanoseconds, 7_000_000_000)
        XCTAssertFalse(cancelled.value)
        await executor.stopAndWait()
        XCTAssertEqual(
            Array(recorder.snapshot.suffix(5)),
            [
                .started(run: 1, trigger: .runNow(request: 1)), .policyChanged(try .interval(seconds: 7)),
                .finished(run: 1), .waiting(nextRunIn: 7), .stopped,
            ])
    }

    func test_setPolicy_toTheSamePolicy_changesNothing() async throws {
        let sleeper = SchedulingTestSleeper()
        let recorder = SchedulingTestRecorder()
        let executor = RecurringExecutor(
            policy: try .interval(seconds: 10),
            sleeper: sleeper,
            eventHandler: recorder.handler
        ) {}
        await sleeper.waitForSleep(0)
        executor.setPolicy(try .interval(seconds: 10))
        await executor.stopAndWait()
        XCTAssertEqual(sleeper.sleeps.count, 1)
        XCTAssertEqual(recorder.snapshot, [.waiting(nextRunIn: 10), .stopped])
    }

    // MARK: Failing and uncooperative operations

    func test_throwingOperation_reportsFailed_andTheExecutorKeepsRunning() async {
        let recorder = SchedulingTestRecorder()
        let calls = Locked(0)
        let executor = RecurringExecutor(eventHandler: recorder.handler) {
            let call = calls.withLock {
                $0 += 1
                return $0
            }
            if call == 1 { throw SchedulingTestError(id: 7) }
        }
        executor.runNow()
        let failed = await recorder.wait(
            for: .failed(run: 1, error: RecurringExecutorFailure(SchedulingTestError(id: 7))))
        XCTAssertTrue(failed)
        executor.runNow()
        let finished = await recorder.wait(for: .finished(run: 2))
        XCTAssertTrue(finished)
        XCTAssertNotEqual(
            RecurringExecutorFailure(SchedulingTestError(id: 7)), RecurringExecutorFailure(SchedulingTestError(id: 8)))
        struct PlainError: Error { let code: Int }
        XCTAssertEqual(RecurringExecutorFailure(PlainError(code: 1)), RecurringExecutorFailure(PlainError(code: 1)))
        XCTAssertNotEqual(RecurringExecutorFailure(PlainError(code: 1)), RecurringExecutorFailure(PlainError(code: 2)))
        XCTAssertNotEqual(RecurringExecutorFailure(PlainError(code: 1)), RecurringExecutorFailure(CancellationError()))
        await executor.stopAndWait()
    }

    func test_operationIgnoringCancellation_delaysStop_untilItReturns() async {
        let recorder = SchedulingTestRecorder()
        let gate = SchedulingTestGate()
        let executor = RecurringExecutor(eventHandler: recorder.handler) { await gate.wait() }
        executor.runNow()
        let running = await schedulingWait { gate.waiterCount == 1 }
        XCTAssertTrue(running)

        let stopped = Locked(false)
        let stopping = Task {
            await executor.stopAndWait()
            stopped.withLock { $0 = true }
        }
        executor.runNow()  // ignored once stopping
        try? await Task.sleep(nanoseconds: 20_000_000)
        XCTAssertFalse(stopped.value, "stop waits for the operation that ignores cancellation")
        XCTAssertFalse(recorder.snapshot.contains(.stopped))

        gate.open()
        await stopping.value
        XCTAssertEqual(Array(recorder.snapshot.suffix(2)), [.finished(run: 1), .stopped])
        XCTAssertEqual(recorder.starts.count, 1)
    }

    // MARK: Events

    func test_events_reachTheHandlerAndEveryStream_inTheSameOrder() async throws {
        let recorder = SchedulingTestRecorder()
        let sleeper = SchedulingTestSleeper()
        let calls = Locked(0)
        let executor = RecurringExecutor(sleeper: sleeper, eventHandler: recorder.handler) {
            if calls.withLock({
                $0 += 1
                return $0
            }) == 2 {
                throw SchedulingTestError(id: 2)
            }
        }
        let idle = await recorder.wait(for: .waiting(nextRunIn: nil))
        XCTAssertTrue(idle)
        let first = executor.events()
        let second = executor.events(bufferingPolicy: .bufferingOldest(1_000))

        executor.runNow()
        let finished = await recorder.wait(for: .finished(run: 1))
        XCTAssertTrue(finished)
        executor.runNow()
        let failed = await recorder.wait(
            for: .failed(run: 2, error: RecurringExecutorFailure(SchedulingTestError(id: 2))))
        XCTAssertTrue(failed)
        executor.setPolicy(try .interval(seconds: 3))
        executor.runNow()
        executor.runNow()
        let requested = await recorder.wait(for: .requested(request: 4))
        XCTAssertTrue(requested)
        let waiting = await recorder.wait { $0.last == .waiting(nextRunIn: 3) }
        XCTAssertTrue(waiting)
        let sleep = await sleeper.waitForActiveSleep()
        XCTAssertNotNil(sleep)
        sleeper.fire(sleep ?? 0)
        let elapsed = await recorder.wait { $0.last == .waiting(nextRunIn: 3) && $0.contains(.intervalElapsed) }
        XCTAssertTrue(elapsed)
        executor.stop()

        let (firstEvents, firstFinished) = await schedulingCollect(first)
        let (secondEvents, secondFinished) = await schedulingCollect(second)
        XCTAssertTrue(firstFinished)
        XCTAssertTrue(secondFinished)
        let handlerEvents = Array(recorder.snapshot.dropFirst())  // the first `waiting` came before the streams
        XCTAssertEqual(firstEvents, handlerEvents)
        XCTAssertEqual(secondEvents, handlerEvents)
        XCTAssertEqual(handlerEvents.last, .stopped)
        XCTAssertTrue(handlerEvents.contains(.intervalElapsed))
        assertWellFormed(handlerEvents)
    }

    func test_events_bufferingNewest_keepsOnlyTheLatestEventsForASlowConsumer() async {
        let executor = RecurringExecutor {}
        let stream = executor.events(bufferingPolicy: .bufferingNewest(1))
        executor.runNow()
        executor.runNow()
        await executor.stopAndWait()
        let (events, finished) = await schedulingCollect(stream)
        XCTAssertTrue(finished)
        XCTAssertEqual(events, [.stopped])
    }

    func test_events_afterStop_returnAFinishedStream() async {
        let executor = RecurringExecutor {}
        await executor.stopAndWait()
        let (events, finished) = await schedulingCollect(executor.events())
        XCTAssertTrue(finished)
        XCTAssertEqual(events, [])
    }

    func test_eventHandler_mayCallBackIntoTheExecutor() async {
        let recorder = SchedulingTestRecorder()
        let box = Locked<RecurringExecutor?>(nil)
        let executor = RecurringExecutor(
            eventHandler: { event in
                recorder.handler(event)
                if event == .finished(run: 1) { box.value?.runNow() }
            }, operation: {})
        box.withLock { $0 = executor }
        executor.runNow()
        let second = await recorder.wait(for: .finished(run: 2))
        XCTAssertTrue(second)
        box.withLock { $0 = nil }
        await executor.stopAndWait()
    }

    // MARK: Stop and release

    func test_stop_endsTheLoop_cancelsTheRun_finishesStreams_andNothingRunsAfterward() async throws {
        let recorder = SchedulingTestRecorder()
        let probe = SectionProbe()
        let executor = RecurringExecutor(policy: try .interval(seconds: 0.001), eventHandler: recorder.handler) {
            probe.enter()
            defer { probe.leave() }
            try await Task.sleep(nanoseconds: 2_000_000)
        }
        let stream = executor.events()
        let ran = await recorder.wait(for: .started(run: 3, trigger: .interval))
        XCTAssertTrue(ran)
        await executor.stopAndWait()

        XCTAssertEqual(probe.insideCount, 0)
        let entries = probe.entryCount
        let (events, finished) = await schedulingCollect(stream)
        XCTAssertTrue(finished)
        XCTAssertEqual(events.last, .stopped)
        executor.runNow()
        executor.setPolicy(try .interval(seconds: 0.001))
        try await Task.sleep(nanoseconds: 10_000_000)
        XCTAssertEqual(probe.entryCount, entries, "nothing runs after stop")
        XCTAssertEqual(recorder.snapshot.last, .stopped)
        assertWellFormed(recorder.snapshot)
    }

    func test_release_stopsTheExecutor_finishesItsStreams_andReleasesItsOperation() async throws {
        final class Canary: Sendable {}
        let probe = SectionProbe()
        var canary: Canary? = Canary()
        weak let weakCanary = canary
        var executor: RecurringExecutor? = RecurringExecutor(policy: try .interval(seconds: 0.001)) {
            [canary] in
            _ = canary
            probe.enter()
            defer { probe.leave() }
            try await Task.sleep(nanoseconds: 1_000_000)
        }
        canary = nil
        weak let weakExecutor = executor
        let stream = executor!.events()
        let ran = await schedulingWait { probe.entryCount >= 2 }
        XCTAssertTrue(ran)

        executor = nil
        XCTAssertNil(weakExecutor)
        let (events, finished) = await schedulingCollect(stream)
        XCTAssertTrue(finished, "releasing the executor finishes its streams")
        XCTAssertEqual(events.last, .stopped)
        XCTAssertEqual(probe.insideCount, 0)
        let released = await schedulingWait { weakCanary == nil }
        XCTAssertTrue(released, "the loop, its tasks and the operation are released")
        let entries = probe.entryCount
        try await Task.sleep(nanoseconds: 10_000_000)
        XCTAssertEqual(probe.entryCount, entries)
    }

    func test_release_whileWaitingOnDemand_endsTheLoop() async {
        final class Canary: Sendable {}
        var canary: Canary? = Canary()
        weak let weakCanary = canary
        var executor: RecurringExecutor? = RecurringExecutor { [canary] in _ = canary }
        canary = nil
        let stream = executor!.events()
        executor = nil
        let (events, finished) = await schedulingCollect(stream)
        XCTAssertTrue(finished)
        XCTAssertEqual(events.last, .stopped)
        let released = await schedulingWait { weakCanary == nil }
        XCTAssertTrue(released)
    }

    // MARK: Helpers

    /// Every started run ends exactly once, after it started and before the next one starts.
    private func assertWellFormed(
        _ events: [RecurringExecutorEvent],
        file: StaticString = #filePath,
        line: UInt = #line
    ) {
        var running: UInt64?
        for event in events {
            switch event {
            case .started(let run, _):
                XCTAssertNil(running, "run \(run) started while \(running!) ran", file: file, line: line)
                running = run
            case .finished(let run), .cancelled(let run), .failed(let run, _):
                XCTAssertEqual(running, run, "run \(run) ended without running", file: file, line: line)
                running = nil
            case .waiting, .stopped:
                XCTAssertNil(running, "\(event) while run \(running!) ran", file: file, line: line)
            default:
                break
            }
        }
    }
}
