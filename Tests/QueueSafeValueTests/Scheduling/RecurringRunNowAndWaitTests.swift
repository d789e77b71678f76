import Testing

@_spi(Testing) @testable import QueueSafeValue

/// `RecurringExecutor.runNowAndWait()`: which run serves the request, how it ended, and what the
/// caller's cancellation, a stop and reentrancy do.
@Suite(.runsAlongsideOthers) struct RecurringRunNowAndWaitTests {

    @Test func whileIdle_returnsTheOutcomeOfItsRun_afterTheEventWasDelivered() async throws {
        let recorder = Recorder<RecurringExecutorEvent>()
        let executor = RecurringExecutor(eventHandler: recorder.handler) {}
        let outcome = try await withHangTimeout { try await executor.runNowAndWait() }
        let seenByTheHandler = recorder.kinds
        #expect(outcome == .finished(run: 1))
        #expect(outcome.run == 1)
        #expect(
            seenByTheHandler.filter { $0 != .waiting(nextRunIn: nil) } == [
                .requested(request: 1), .started(run: 1, trigger: .runNow(request: 1)), .finished(run: 1),
            ], "the handler saw the run's end before the caller got its outcome")
        #expect(try await withHangTimeout { try await executor.runNowAndWait() } == .finished(run: 2))
        await executor.stopAndWait()
    }

    @Test func failingRun_returnsFailedWithItsError() async throws {
        let executor = RecurringExecutor { throw TestError.thrown(id: 5) }
        let outcome = try await withHangTimeout { try await executor.runNowAndWait() }
        #expect(outcome == .failed(run: 1, error: RecurringExecutorFailure(TestError.thrown(id: 5))))
        await executor.stopAndWait()
    }

    @Test func requestsMadeWhileARunIgnoresCancellation_collapseIntoOneRun_andAllGetItsOutcome() async throws {
        let recorder = Recorder<RecurringExecutorEvent>()
        let gate = Gate()
        let calls = Locked(0)
        let executor = RecurringExecutor(eventHandler: recorder.handler) {
            if calls.increment() == 1 { await gate.wait() }  // ignores its cancellation
        }
        executor.runNow()
        try await waitUntil { gate.waiterCount == 1 }

        let callers = Task {
            try await withThrowingTaskGroup(of: RecurringRunOutcome.self) { group in
                for _ in 0..<5 { group.addTask { try await executor.runNowAndWait() } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
        }
        try await recorder.wait(for: .requested(request: 6))
        gate.open()
        let outcomes = try await withHangTimeout { try await callers.value }
        #expect(outcomes == Array(repeating: .finished(run: 2), count: 5))
        #expect(calls.value == 2)
        #expect(recorder.starts == [.runNow(request: 1), .runNow(request: 6)])
        await executor.stopAndWait()
    }

    @Test func aRunPreemptedByALaterRequest_handsItsCallerOnToTheRunThatPreemptedIt() async throws {
        let recorder = Recorder<RecurringExecutorEvent>()
        let calls = Locked(0)
        let executor = RecurringExecutor(eventHandler: recorder.handler) {
            if calls.increment() == 1 {
                try? await waitUntil("cancellation") { Task.isCancelled }
                throw CancellationError()
            }
        }
        let caller = Task { try await executor.runNowAndWait() }
        try await waitUntil { calls.value == 1 }
        executor.runNow()
        #expect(try await withHangTimeout { try await caller.value } == .finished(run: 2))
        #expect(recorder.kinds.contains(.cancelled(run: 1)))
        await executor.stopAndWait()
    }

    @Test func cancellingTheCaller_throwsCancelledAtOnce_andTheRunGoesOnUndisturbed() async throws {
        let recorder = Recorder<RecurringExecutorEvent>()
        let gate = Gate()
        let runSawCancellation = Locked<Bool?>(nil)
        let executor = RecurringExecutor(eventHandler: recorder.handler) {
            await gate.wait()
            runSawCancellation.set(Task.isCancelled)
        }
        let caller = Task { try await executor.runNowAndWait() }
        try await waitUntil { gate.waiterCount == 1 }

        caller.cancel()
        defer { gate.open() }  // even if the wait below runs out
        let error = try await withHangTimeout { await thrownError { try await caller.value } }
        #expect(error == .cancelled)
        #expect(gate.waiterCount == 1, "the caller left while its run was still running")

        gate.open()
        try await recorder.wait(for: .finished(run: 1))
        #expect(runSawCancellation.value == false)
        await executor.stopAndWait()
    }

    @Test func aCallerCancelledBeforeTheCall_stillMakesTheRequest_thenThrows() async throws {
        let recorder = Recorder<RecurringExecutorEvent>()
        let executor = RecurringExecutor(eventHandler: recorder.handler) {}
        let caller = Task {
            try? await waitUntil("cancellation") { Task.isCancelled }
            return try await executor.runNowAndWait()
        }
        caller.cancel()
        let error = try await withHangTimeout { await thrownError { try await caller.value } }
        #expect(error == .cancelled)
        try await recorder.wait(for: .finished(run: 1))
        await executor.stopAndWait()
    }

    @Test func stop_givesAWaitingCallerStopped_andTheRunningRunsCallerItsOutcome() async throws {
        let gate = Gate()
        let calls = Locked(0)
        let recorder = Recorder<RecurringExecutorEvent>()
        let executor = RecurringExecutor(eventHandler: recorder.handler) {
            if calls.increment() == 1 { await gate.wait() }  // ignores its cancellation
        }
        let first = Task { try await executor.runNowAndWait() }
        try await waitUntil { gate.waiterCount == 1 }
        let second = Task { try await executor.runNowAndWait() }
        try await recorder.wait(for: .requested(request: 2))

        executor.stop()
        defer { gate.open() }  // even if the wait below runs out
        #expect(try await withHangTimeout { try await second.value } == .stopped, "its run never started")
        gate.open()
        #expect(
            try await withHangTimeout { try await first.value } == .finished(run: 1),
            "it returned normally despite the stop")
        await executor.stopAndWait()
        #expect(try await withHangTimeout { try await executor.runNowAndWait() } == .stopped)
        #expect(calls.value == 1)
    }

    @Test func fromInsideItsOwnOperation_throwsReentrantAccess_withoutARequest() async throws {
        let recorder = Recorder<RecurringExecutorEvent>()
        let box = Locked<RecurringExecutor?>(nil)
        let inner = Locked<QueueSafeValueError?>(nil)
        let executor = RecurringExecutor(eventHandler: recorder.handler) {
            guard let executor = box.value else { return }
            // A child task inherits the operation's task-locals: refused too.
            async let child = thrownError { try await executor.runNowAndWait() }
            let direct = await thrownError { try await executor.runNowAndWait() }
            let fromChild = await child
            inner.set(
                direct == fromChild
                    ? direct : .invalidArgument("\(String(describing: direct)) ≠ \(String(describing: fromChild))"))
        }
        box.set(executor)
        #expect(try await withHangTimeout { try await executor.runNowAndWait() } == .finished(run: 1))
        #expect(inner.value == .reentrantAccess)
        #expect(recorder.kinds.filter { if case .requested = $0 { true } else { false } }.count == 1)
        box.set(nil)
        await executor.stopAndWait()
    }
}
