import Dispatch
import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

/// `RecurringExecutor`: interval runs, `runNow()` hand-off and collapsing, policy changes, failing
/// and uncooperative operations, events on both channels, stop and release.
@Suite(.runsAlongsideOthers) struct RecurringExecutorTests {

    // MARK: Policy

    @Test(arguments: [0, -1, -0.0, .nan, .infinity, -.infinity, 1e-12, 1e30] as [Double])
    func policy_rejectsIntervalSecondsThatAreNotPositiveAndFinite(seconds: Double) {
        let error = #expect(throws: QueueSafeValueError.self) { try RecurringPolicy.interval(seconds: seconds) }
        guard case .invalidArgument? = error else {
            Issue.record("expected invalidArgument for \(seconds), got \(String(describing: error))")
            return
        }
    }

    @Test(
        arguments: [.never, .seconds(0), .milliseconds(-5), .nanoseconds(0), .seconds(.max)] as [DispatchTimeInterval])
    func policy_rejectsIntervalsThatAreNotPositiveAndFinite(interval: DispatchTimeInterval) {
        let error = #expect(throws: QueueSafeValueError.self) { try RecurringPolicy.interval(interval) }
        guard case .invalidArgument? = error else {
            Issue.record("expected invalidArgument for \(interval), got \(String(describing: error))")
            return
        }
    }

    @Test func policy_keepsValidIntervalsInNanoseconds() throws {
        #expect((try RecurringPolicy.interval(seconds: 1.5).intervalNanoseconds) == 1_500_000_000)
        #expect((try RecurringPolicy.interval(seconds: 0.005).intervalSeconds) == 0.005)
        #expect((try RecurringPolicy.interval(.milliseconds(250))) == (try RecurringPolicy.interval(seconds: 0.25)))
        #expect((try RecurringPolicy.interval(.microseconds(3)).intervalNanoseconds) == 3_000)
        #expect((try RecurringPolicy.interval(.nanoseconds(1)).intervalNanoseconds) == 1)
        #expect(RecurringPolicy.onDemand.intervalNanoseconds == nil)
    }

    // MARK: Interval runs

    @Test func intervalPolicy_runsOnceEachTimeTheIntervalElapses() async throws {
        let sleeper = ManualSleeper()
        let recorder = Recorder<RecurringExecutorEvent>()
        let runs = Locked(0)
        let executor = RecurringExecutor(
            policy: try .interval(seconds: 5),
            sleeper: sleeper,
            eventHandler: recorder.handler
        ) { runs.withLock { $0 += 1 } }

        for index in 0..<3 {
            let sleep = try await sleeper.waitForSleep(index)
            #expect(sleep.nanoseconds == 5_000_000_000)
            sleeper.fire(index)
            try await recorder.wait(for: .finished(run: UInt64(index + 1)))
        }
        try await sleeper.waitForSleep(3)
        #expect(runs.value == 3)
        await executor.stopAndWait()

        let cycle: (UInt64) -> [RecurringExecutorEvent.Kind] = { run in
            [.waiting(nextRunIn: 5), .intervalElapsed, .started(run: run, trigger: .interval), .finished(run: run)]
        }
        #expect(recorder.kinds == (cycle(1) + cycle(2) + cycle(3) + [.waiting(nextRunIn: 5), .stopped]))
    }

    @Test func intervalPolicy_withTheDefaultClockAndAFewMilliseconds_runsRepeatedlyOneAtATime() async throws {
        let probe = SectionProbe()
        let recorder = Recorder<RecurringExecutorEvent>()
        let executor = RecurringExecutor(policy: try .interval(seconds: 0.002), eventHandler: recorder.handler) {
            probe.enter()
            await Task.yield()
            probe.leave()
        }
        try await recorder.wait(for: .finished(run: 3))
        await executor.stopAndWait()
        #expect(probe.maximumInside == 1)
        #expect(probe.insideCount == 0)
    }

    // MARK: runNow

    @Test func runNow_whileIdle_runsOnceWithTheRequestAsTrigger() async throws {
        let recorder = Recorder<RecurringExecutorEvent>()
        let executor = RecurringExecutor(eventHandler: recorder.handler) {}
        try await recorder.wait(for: .waiting(nextRunIn: nil))
        executor.runNow()
        try await recorder.wait(for: .waiting(nextRunIn: nil), count: 2)
        #expect(
            recorder.kinds == [
                .waiting(nextRunIn: nil), .requested(request: 1), .started(run: 1, trigger: .runNow(request: 1)),
                .finished(run: 1), .waiting(nextRunIn: nil),
            ])
        await executor.stopAndWait()
    }

    @Test func runNow_cancelsTheRunningOperation_waitsForIt_thenRuns() async throws {
        let recorder = Recorder<RecurringExecutorEvent>()
        let probe = SectionProbe()
        let sawCancellation = Locked<[Bool]>([])
        let executor = RecurringExecutor(eventHandler: recorder.handler) {
            probe.enter()
            defer { probe.leave() }
            if probe.entryCount == 1 {
                let cancelled = (try? await waitUntil("cancellation") { Task.isCancelled }) != nil
                sawCancellation.withLock { $0.append(cancelled) }
                try Task.checkCancellation()
            }
        }
        executor.runNow()
        try await waitUntil { probe.insideCount == 1 }

        executor.runNow()
        try await recorder.wait(for: .finished(run: 2))
        #expect(sawCancellation.value == [true])
        #expect(probe.maximumInside == 1)
        #expect(
            Array(recorder.kinds.drop { $0 != .requested(request: 2) }.prefix(4)) == [
                .requested(request: 2), .cancelled(run: 1), .started(run: 2, trigger: .runNow(request: 2)),
                .finished(run: 2),
            ])
        await executor.stopAndWait()
    }

    @Test func runNow_preemptsAnIntervalRun_andTheIntervalRestartsFromZeroAfterward() async throws {
        let sleeper = ManualSleeper()
        let recorder = Recorder<RecurringExecutorEvent>()
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
                try? await waitUntil("cancellation") { Task.isCancelled }
                throw CancellationError()
            }
        }
        try await sleeper.waitForSleep(0)
        sleeper.fire(0)
        try await waitUntil { calls.value == 1 }

        executor.runNow()
        let nextSleep = try await sleeper.waitForSleep(1)
        #expect(nextSleep.nanoseconds == 10_000_000_000, "a full interval after the on-demand run")
        #expect(sleeper.sleeps.count == 2)
        await executor.stopAndWait()
        #expect(
            recorder.kinds == [
                .waiting(nextRunIn: 10), .intervalElapsed, .started(run: 1, trigger: .interval), .requested(request: 1),
                .cancelled(run: 1), .started(run: 2, trigger: .runNow(request: 1)), .finished(run: 2),
                .waiting(nextRunIn: 10), .stopped,
            ])
    }

    @Test func runNow_whileWaitingForTheInterval_endsTheWaitAndRunsAtOnce() async throws {
        let sleeper = ManualSleeper()
        let recorder = Recorder<RecurringExecutorEvent>()
        let executor = RecurringExecutor(
            policy: try .interval(seconds: 60),
            sleeper: sleeper,
            eventHandler: recorder.handler
        ) {}
        try await sleeper.waitForSleep(0)
        executor.runNow()
        try await sleeper.waitForSleep(1)
        #expect(sleeper.sleeps[0].isCancelled)
        await executor.stopAndWait()
        #expect(recorder.starts == [.runNow(request: 1)])
    }

    @Test func concurrentRunNowCalls_duringTheHandOff_collapseIntoOneRun_andTheLatestWins() async throws {
        let recorder = Recorder<RecurringExecutorEvent>()
        let gate = Gate()
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
        try await waitUntil { gate.waiterCount == 1 }

        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<10 { group.addTask { executor.runNow() } }
        }
        try await recorder.wait(for: .requested(request: 11))
        #expect(calls.value == 1, "nothing runs while the first run ignores its cancellation")

        gate.open()
        try await recorder.wait(for: .finished(run: 2))
        try await recorder.wait { $0.last == .waiting(nextRunIn: nil) }
        #expect(calls.value == 2)
        #expect(recorder.starts == [.runNow(request: 1), .runNow(request: 11)])
        #expect(
            Array(recorder.kinds.suffix(4)) == [
                .finished(run: 1), .started(run: 2, trigger: .runNow(request: 11)), .finished(run: 2),
                .waiting(nextRunIn: nil),
            ])
        await executor.stopAndWait()
    }

    // MARK: Policy changes

    @Test func setPolicy_whileWaiting_restartsTheWaitWithTheNewInterval_withoutARun() async throws {
        // A clock that lets an abandoned sleep return normally: the executor must ignore it.
        let sleeper = ManualSleeper(honorsCancellation: false)
        let recorder = Recorder<RecurringExecutorEvent>()
        let runs = Locked(0)
        let executor = RecurringExecutor(
            policy: try .interval(seconds: 10),
            sleeper: sleeper,
            eventHandler: recorder.handler
        ) { runs.withLock { $0 += 1 } }
        try await sleeper.waitForSleep(0)

        executor.setPolicy(try .interval(seconds: 20))
        let second = try await sleeper.waitForSleep(1)
        #expect(second.nanoseconds == 20_000_000_000)
        #expect(sleeper.sleeps[0].isCancelled)
        #expect(executor.policy == (try .interval(seconds: 20)))

        sleeper.fire(0)  // the abandoned wait "elapses" anyway
        sleeper.fire(1)
        try await recorder.wait(for: .finished(run: 1))
        try await sleeper.waitForSleep(2)
        #expect(runs.value == 1)
        await executor.stopAndWait()
        #expect(
            recorder.kinds == [
                .waiting(nextRunIn: 10),
                .policyChanged(from: try .interval(seconds: 10), to: try .interval(seconds: 20)),
                .waiting(nextRunIn: 20),
                .intervalElapsed, .started(run: 1, trigger: .interval), .finished(run: 1), .waiting(nextRunIn: 20),
                .stopped,
            ])
        // The stop cancelled sleep 2, which this clock ignores: end it, or its task stays suspended
        // (a leak at exit).
        sleeper.fireAll()
        let everySleepEnded = sleeper.sleeps.allSatisfy { $0.hasEnded }
        #expect(everySleepEnded)
    }

    @Test func setPolicy_toOnDemand_whileWaiting_endsTheIntervalRuns() async throws {
        let sleeper = ManualSleeper()
        let recorder = Recorder<RecurringExecutorEvent>()
        let executor = RecurringExecutor(
            policy: try .interval(seconds: 10),
            sleeper: sleeper,
            eventHandler: recorder.handler
        ) {}
        try await sleeper.waitForSleep(0)
        executor.setPolicy(.onDemand)
        try await recorder.wait(for: .waiting(nextRunIn: nil))
        #expect(sleeper.sleeps[0].isCancelled)
        #expect(sleeper.sleeps.count == 1)
        #expect(
            recorder.kinds == [
                .waiting(nextRunIn: 10), .policyChanged(from: try .interval(seconds: 10), to: .onDemand),
                .waiting(nextRunIn: nil),
            ])
        await executor.stopAndWait()
    }

    @Test func setPolicy_whileRunning_leavesTheRunAlone_andAppliesToTheNextWait() async throws {
        let recorder = Recorder<RecurringExecutorEvent>()
        let sleeper = ManualSleeper()
        let gate = Gate()
        let cancelled = Locked(false)
        let executor = RecurringExecutor(sleeper: sleeper, eventHandler: recorder.handler) {
            await gate.wait()
            cancelled.withLock { $0 = Task.isCancelled }
        }
        executor.runNow()
        try await waitUntil { gate.waiterCount == 1 }
        executor.setPolicy(try .interval(seconds: 7))
        gate.open()
        let nextSleep = try await sleeper.waitForSleep(0)
        #expect(nextSleep.nanoseconds == 7_000_000_000)
        #expect(!cancelled.value)
        await executor.stopAndWait()
        #expect(
            Array(recorder.kinds.suffix(5)) == [
                .started(run: 1, trigger: .runNow(request: 1)),
                .policyChanged(from: .onDemand, to: try .interval(seconds: 7)),
                .finished(run: 1), .waiting(nextRunIn: 7), .stopped,
            ])
    }

    @Test func setPolicy_toTheSamePolicy_changesNothing() async throws {
        let sleeper = ManualSleeper()
        let recorder = Recorder<RecurringExecutorEvent>()
        let executor = RecurringExecutor(
            policy: try .interval(seconds: 10),
            sleeper: sleeper,
            eventHandler: recorder.handler
        ) {}
        try await sleeper.waitForSleep(0)
        executor.setPolicy(try .interval(seconds: 10))
        await executor.stopAndWait()
        #expect(sleeper.sleeps.count == 1)
        #expect(recorder.kinds == [.waiting(nextRunIn: 10), .stopped])
    }

    // MARK: Failing and uncooperative operations

    @Test func throwingOperation_reportsFailed_andTheExecutorKeepsRunning() async throws {
        let recorder = Recorder<RecurringExecutorEvent>()
        let calls = Locked(0)
        let executor = RecurringExecutor(eventHandler: recorder.handler) {
            let call = calls.withLock {
                $0 += 1
                return $0
            }
            if call == 1 { throw TestError.thrown(id: 7) }
        }
        executor.runNow()
        try await recorder.wait(
            for: .failed(run: 1, error: RecurringExecutorFailure(TestError.thrown(id: 7))))
        executor.runNow()
        try await recorder.wait(for: .finished(run: 2))
        #expect(RecurringExecutorFailure(TestError.thrown(id: 7)) != RecurringExecutorFailure(TestError.thrown(id: 8)))
        struct PlainError: Error { let code: Int }
        #expect(RecurringExecutorFailure(PlainError(code: 1)) == RecurringExecutorFailure(PlainError(code: 1)))
        #expect(RecurringExecutorFailure(PlainError(code: 1)) != RecurringExecutorFailure(PlainError(code: 2)))
        #expect(RecurringExecutorFailure(PlainError(code: 1)) != RecurringExecutorFailure(CancellationError()))
        await executor.stopAndWait()
    }

    @Test func operationIgnoringCancellation_delaysStop_untilItReturns() async throws {
        let recorder = Recorder<RecurringExecutorEvent>()
        let gate = Gate()
        let executor = RecurringExecutor(eventHandler: recorder.handler) { await gate.wait() }
        executor.runNow()
        try await waitUntil { gate.waiterCount == 1 }

        let stopped = Locked(false)
        let stopping = Task {
            await executor.stopAndWait()
            stopped.withLock { $0 = true }
        }
        executor.runNow()  // ignored once stopping
        try? await Task.sleep(nanoseconds: 20_000_000)
        #expect(!stopped.value, "stop waits for the operation that ignores cancellation")
        #expect(!recorder.kinds.contains(.stopped))

        gate.open()
        await stopping.value
        #expect(Array(recorder.kinds.suffix(2)) == [.finished(run: 1), .stopped])
        #expect(recorder.starts.count == 1)
    }

    // MARK: Events

    @Test func events_reachTheHandlerAndEveryStream_inTheSameOrder() async throws {
        let recorder = Recorder<RecurringExecutorEvent>()
        let sleeper = ManualSleeper()
        let calls = Locked(0)
        let executor = RecurringExecutor(sleeper: sleeper, eventHandler: recorder.handler) {
            if calls.withLock({
                $0 += 1
                return $0
            }) == 2 {
                throw TestError.thrown(id: 2)
            }
        }
        try await recorder.wait(for: .waiting(nextRunIn: nil))
        let first = executor.events()
        let second = executor.events(bufferingPolicy: .bufferingOldest(1_000))

        executor.runNow()
        try await recorder.wait(for: .finished(run: 1))
        executor.runNow()
        try await recorder.wait(
            for: .failed(run: 2, error: RecurringExecutorFailure(TestError.thrown(id: 2))))
        executor.setPolicy(try .interval(seconds: 3))
        executor.runNow()
        executor.runNow()
        try await recorder.wait(for: .requested(request: 4))
        try await recorder.wait { $0.last == .waiting(nextRunIn: 3) }
        sleeper.fire(try await sleeper.waitForActiveSleep())
        try await recorder.wait { $0.last == .waiting(nextRunIn: 3) && $0.contains(.intervalElapsed) }
        executor.stop()

        let (firstEvents, firstFinished) = await first.collected()
        let (secondEvents, secondFinished) = await second.collected()
        #expect(firstFinished)
        #expect(secondFinished)
        let handlerEvents = Array(recorder.snapshot.dropFirst())  // the first `waiting` came before the streams
        #expect(firstEvents == handlerEvents)
        #expect(secondEvents == handlerEvents)
        #expect(handlerEvents.last?.kind == .stopped)
        #expect(handlerEvents.contains { $0.kind == .intervalElapsed })
        assertWellFormed(handlerEvents.map(\.kind))
    }

    @Test func events_bufferingNewest_keepsOnlyTheLatestEventsForASlowConsumer() async throws {
        let executor = RecurringExecutor {}
        let stream = executor.events(bufferingPolicy: .bufferingNewest(1))
        executor.runNow()
        executor.runNow()
        await executor.stopAndWait()
        let (events, finished) = await stream.collected()
        #expect(finished)
        #expect(events.map(\.kind) == [.stopped])
    }

    @Test func events_afterStop_returnAFinishedStream() async throws {
        let executor = RecurringExecutor {}
        await executor.stopAndWait()
        let (events, finished) = await executor.events().collected()
        #expect(finished)
        #expect(events == [])
    }

    @Test func eventHandler_mayCallBackIntoTheExecutor() async throws {
        let recorder = Recorder<RecurringExecutorEvent>()
        let box = Locked<RecurringExecutor?>(nil)
        let executor = RecurringExecutor(
            eventHandler: { event in
                recorder.handler(event)
                if event.kind == .finished(run: 1) { box.value?.runNow() }
            }, operation: {})
        box.withLock { $0 = executor }
        executor.runNow()
        try await recorder.wait(for: .finished(run: 2))
        box.withLock { $0 = nil }
        await executor.stopAndWait()
    }

    // MARK: Stop and release

    @Test func stop_endsTheLoop_cancelsTheRun_finishesStreams_andNothingRunsAfterward() async throws {
        let recorder = Recorder<RecurringExecutorEvent>()
        let probe = SectionProbe()
        let executor = RecurringExecutor(policy: try .interval(seconds: 0.001), eventHandler: recorder.handler) {
            probe.enter()
            defer { probe.leave() }
            try await Task.sleep(nanoseconds: 2_000_000)
        }
        let stream = executor.events()
        try await recorder.wait(for: .started(run: 3, trigger: .interval))
        await executor.stopAndWait()

        #expect(probe.insideCount == 0)
        let entries = probe.entryCount
        let (events, finished) = await stream.collected()
        #expect(finished)
        #expect(events.last?.kind == .stopped)
        executor.runNow()
        executor.setPolicy(try .interval(seconds: 0.001))
        try await Task.sleep(nanoseconds: 10_000_000)
        #expect(probe.entryCount == entries, "nothing runs after stop")
        #expect(recorder.kinds.last == .stopped)
        assertWellFormed(recorder.kinds)
    }

    @Test func release_stopsTheExecutor_finishesItsStreams_andReleasesItsOperation() async throws {
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
        try await waitUntil { probe.entryCount >= 2 }

        executor = nil
        #expect(weakExecutor == nil)
        let (events, finished) = await stream.collected()
        #expect(finished, "releasing the executor finishes its streams")
        #expect(events.last?.kind == .stopped)
        #expect(probe.insideCount == 0)
        try await waitUntil("the loop, its tasks and the operation are released") { weakCanary == nil }
        let entries = probe.entryCount
        try await Task.sleep(nanoseconds: 10_000_000)
        #expect(probe.entryCount == entries)
    }

    @Test func release_whileWaitingOnDemand_endsTheLoop() async throws {
        final class Canary: Sendable {}
        var canary: Canary? = Canary()
        weak let weakCanary = canary
        var executor: RecurringExecutor? = RecurringExecutor { [canary] in _ = canary }
        canary = nil
        let stream = executor!.events()
        executor = nil
        let (events, finished) = await stream.collected()
        #expect(finished)
        #expect(events.last?.kind == .stopped)
        try await waitUntil { weakCanary == nil }
    }

    // MARK: Helpers

    /// Every started run ends exactly once, after it started and before the next one starts.
    private func assertWellFormed(
        _ events: [RecurringExecutorEvent.Kind],
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        var running: UInt64?
        for event in events {
            switch event {
            case .started(let run, _):
                #expect(running == nil, "run \(run) started while \(running!) ran")
                running = run
            case .finished(let run), .cancelled(let run), .failed(let run, _):
                #expect(running == run, "run \(run) ended without running")
                running = nil
            case .waiting, .stopped:
                #expect(running == nil, "\(event) while run \(running!) ran")
            default:
                break
            }
        }
    }
}
