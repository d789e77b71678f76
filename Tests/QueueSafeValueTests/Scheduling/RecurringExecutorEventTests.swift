import Dispatch
import Testing

@_spi(Testing) @testable import QueueSafeValue

/// A clock whose first sleep throws `error` once the test opens `gate` (a sleeper that fails while
/// the executor waits on it, without being cancelled).
private struct FailingSleeper: RecurringSleeper {
    let gate: Gate
    let error: any Error & Sendable

    func sleep(nanoseconds: UInt64) async throws {
        await gate.wait()
        throw error
    }
}

/// The executor's events: timestamps, the previous policy, and the event of a failing sleeper.
@Suite(.runsAlongsideOthers) struct RecurringExecutorEventTests {

    @Test func events_carryTimestampsThatNeverDecrease_readAtTheTransition() async throws {
        let recorder = Recorder<RecurringExecutorEvent>()
        let before = DispatchTime.now()
        let executor = RecurringExecutor(eventHandler: recorder.handler) {}
        try await recorder.wait(for: .waiting(nextRunIn: nil))
        let stream = executor.events()
        _ = try await withHangTimeout { try await executor.runNowAndWait() }
        executor.setPolicy(try .interval(seconds: 60))
        _ = try await withHangTimeout { try await executor.runNowAndWait() }
        await executor.stopAndWait()
        let after = DispatchTime.now()

        let events = recorder.snapshot
        #expect(events.count >= 10)
        for (earlier, later) in zip(events, events.dropFirst()) {
            #expect(earlier.timestamp <= later.timestamp, "\(earlier) before \(later)")
        }
        #expect(events.allSatisfy { $0.timestamp >= before && $0.timestamp <= after })
        let (streamed, finished) = await stream.collected()
        #expect(finished)
        #expect(streamed == Array(events.dropFirst()), "the stream gets the very same events, timestamps included")
        #expect(
            RecurringExecutorEvent(.stopped, at: DispatchTime(uptimeNanoseconds: 42)).description == "stopped @ 42 ns")
    }

    @Test func policyChanged_carriesThePreviousAndTheNewPolicy() async throws {
        let recorder = Recorder<RecurringExecutorEvent>()
        let sleeper = ManualSleeper()
        let executor = RecurringExecutor(
            policy: try .interval(seconds: 10), sleeper: sleeper, eventHandler: recorder.handler
        ) {}
        try await sleeper.waitForSleep(0)
        executor.setPolicy(.onDemand)
        executor.setPolicy(try .interval(seconds: 2))
        await executor.stopAndWait()
        let changes = recorder.kinds.filter { if case .policyChanged = $0 { true } else { false } }
        #expect(
            changes == [
                .policyChanged(from: try .interval(seconds: 10), to: .onDemand),
                .policyChanged(from: .onDemand, to: try .interval(seconds: 2)),
            ])
        #expect(changes.first?.description == "policyChanged(from: interval(10.0 s), to: onDemand)")
    }

    @Test(arguments: [TestError.thrown(id: 3), CancellationError()] as [any Error & Sendable])
    func sleeperThatThrowsWhileWaitedOn_emitsSleeperFailed_andStopsTheExecutor(error: any Error & Sendable) async throws
    {
        let recorder = Recorder<RecurringExecutorEvent>()
        let gate = Gate()
        let runs = Locked(0)
        let executor = RecurringExecutor(
            policy: try .interval(seconds: 5),
            sleeper: FailingSleeper(gate: gate, error: error),
            eventHandler: recorder.handler
        ) { runs.increment() }
        try await waitUntil { gate.waiterCount == 1 }
        let stream = executor.events()  // after `waiting`: the sleep began after it was emitted

        gate.open()
        let (events, finished) = await stream.collected()
        #expect(finished, "the executor stopped and its streams finished")
        #expect(events.map(\.kind) == [.sleeperFailed(RecurringExecutorFailure(error)), .stopped])
        #expect(recorder.kinds == [.waiting(nextRunIn: 5), .sleeperFailed(RecurringExecutorFailure(error)), .stopped])
        #expect(try await withHangTimeout { try await executor.runNowAndWait() } == .stopped)
        executor.runNow()
        await executor.stopAndWait()
        #expect(runs.value == 0)
        #expect(recorder.kinds.last == .stopped)
    }
}
