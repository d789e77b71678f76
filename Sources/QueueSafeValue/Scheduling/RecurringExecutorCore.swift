import Dispatch

// MARK: - RecurringExecutorCore

/// The loop, state and event delivery behind a ``RecurringExecutor``.
///
/// One driver task runs ``runLoop()``: it decides the next step under the lock (run, wait, or end),
/// performs it outside the lock, and decides again. Callers (`runNow`, `setPolicy`, `stop`) change
/// the state under the lock and, after unlocking, wake the driver, cancel the abandoned sleep and
/// cancel the running operation's task. No user code runs, no continuation is resumed and no task is
/// cancelled while the lock is held.
///
/// Events are emitted under the lock, at the transition they describe, by enqueuing one block per
/// event on a private serial queue; that block calls the handler and yields to every subscriber
/// registered at the moment of emission. So both channels see the same events in the same order.
///
/// The public executor owns the core; the driver task keeps it alive until the loop has ended, and
/// the sleep tasks reference it weakly.
// @unchecked Sendable: `state` is guarded by `lock`; the other stored properties are immutable
final class RecurringExecutorCore: @unchecked Sendable {
    typealias Operation = @Sendable () async throws -> Void
    typealias EventHandler = @Sendable (RecurringExecutorEvent) -> Void
    typealias Subscriber = AsyncStream<RecurringExecutorEvent>.Continuation

    private let lock = Lock()
    private var state: State  // guarded by `lock`

    private let operation: Operation
    private let target: RecurringRunTarget
    private let sleeper: any RecurringSleeper
    private let eventHandler: EventHandler?
    private let deliveryQueue = DispatchQueue(label: "QueueSafeValue.RecurringExecutor.events")

    init(
        policy: RecurringPolicy,
        target: RecurringRunTarget,
        sleeper: any RecurringSleeper,
        eventHandler: EventHandler?,
        operation: @escaping Operation
    ) {
        state = State(policy: policy)
        self.target = target
        self.sleeper = sleeper
        self.eventHandler = eventHandler
        self.operation = operation
    }

    // MARK: State

    /// What the driver is doing.
    enum Phase {
        /// Between two steps: the driver is about to decide what comes next.
        case deciding
        /// Waiting for the interval, a `runNow()`, a policy change or a stop.
        case waiting(Wait)
        /// Run number `run` is in progress.
        case running(Run)
        /// The loop ended. Nothing runs any more.
        case ended
    }

    struct Wait {
        /// Identifies this wait, so a sleep that elapses after the wait was abandoned is ignored.
        let token: UInt64
        /// Set once something ended the wait; the driver then decides again.
        var woken = false
        var continuation: CheckedContinuation<Void, Never>?
        var sleepTask: Task<Void, Never>?
    }

    struct Run {
        let number: UInt64
        var task: Task<Void, any Error>?
        /// `runNow()` or `stop()` asked this run to stop.
        var cancelRequested = false
    }

    struct State {
        var policy: RecurringPolicy
        var phase = Phase.deciding
        var stopRequested = false
        /// The number of the latest `runNow()` call.
        var lastRequest: UInt64 = 0
        /// The latest `runNow()` call not served by a run yet.
        var pendingRequest: UInt64?
        /// The interval elapsed and its run has not started yet.
        var intervalDue = false
        var runCount: UInt64 = 0
        var waitCount: UInt64 = 0
        var nextSubscriberID: UInt64 = 0
        var subscribers: [UInt64: Subscriber] = [:]
        /// Callers of `stopAndWait()` suspended until the loop has ended and its events were delivered.
        var stopWaiters: [CheckedContinuation<Void, Never>] = []

        init(policy: RecurringPolicy) {
            self.policy = policy
        }
    }

    /// Work to do after unlocking, collected by a transition.
    private struct Wakeups {
        var continuation: CheckedContinuation<Void, Never>?
        var sleepTask: Task<Void, Never>?
        var runTask: Task<Void, any Error>?

        func perform() {
            sleepTask?.cancel()
            runTask?.cancel()
            continuation?.resumeFromAnotherThread()
        }

        /// Ends the current wait, if any: its continuation is resumed and its sleep cancelled after
        /// unlocking.
        mutating func takeWait(from state: inout State) {
            guard case .waiting(var wait) = state.phase, !wait.woken else { return }
            wait.woken = true
            continuation = wait.continuation
            sleepTask = wait.sleepTask
            wait.continuation = nil
            wait.sleepTask = nil
            state.phase = .waiting(wait)
        }

        /// Marks the running operation as asked to stop; its task is cancelled after unlocking (or as
        /// soon as it exists).
        mutating func takeRunForCancellation(from state: inout State) {
            guard case .running(var run) = state.phase else { return }
            run.cancelRequested = true
            runTask = run.task
            state.phase = .running(run)
        }
    }

    // MARK: Commands from the public executor

    var policy: RecurringPolicy {
        lock.withLock { state.policy }
    }

    func setPolicy(_ policy: RecurringPolicy) {
        var wakeups = Wakeups()
        lock.withLock {
            guard !state.stopRequested, state.policy != policy else { return }
            state.policy = policy
            state.intervalDue = false
            emitLocked(.policyChanged(policy))
            wakeups.takeWait(from: &state)
        }
        wakeups.perform()
    }

    func runNow() {
        var wakeups = Wakeups()
        lock.withLock {
            guard !state.stopRequested else { return }
            state.lastRequest += 1
            state.pendingRequest = state.lastRequest
            emitLocked(.requested(request: state.lastRequest))
            wakeups.takeWait(from: &state)
            wakeups.takeRunForCancellation(from: &state)
        }
        wakeups.perform()
    }

    func stop() {
        var wakeups = Wakeups()
        lock.withLock {
            guard !state.stopRequested else { return }
            state.stopRequested = true
            state.pendingRequest = nil
            wakeups.takeWait(from: &state)
            wakeups.takeRunForCancellation(from: &state)
        }
        wakeups.perform()
    }

    /// Returns once the loop has ended and every event, `.stopped` included, was delivered.
    func waitUntilEnded() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            lock.withLock {
                if case .ended = state.phase {
                    // Behind every delivery already enqueued, the stream finishes included.
                    deliveryQueue.async { continuation.resumeFromAnotherThread() }
                } else {
                    state.stopWaiters.append(continuation)
                }
            }
        }
    }

    func events(bufferingPolicy: Subscriber.BufferingPolicy) -> AsyncStream<RecurringExecutorEvent> {
        var subscriber: Subscriber?
        let stream = AsyncStream(RecurringExecutorEvent.self, bufferingPolicy: bufferingPolicy) { subscriber = $0 }
        guard let subscriber else { return stream }
        let id: UInt64 = lock.withLock {
            state.nextSubscriberID += 1
            return state.nextSubscriberID
        }
        // Set outside the lock: the stream may call it from `finish()` or from its deinit.
        subscriber.onTermination = { [weak self] _ in self?.removeSubscriber(id) }
        let registered: Bool = lock.withLock {
            if case .ended = state.phase { return false }
            state.subscribers[id] = subscriber
            return true
        }
        if !registered { subscriber.finish() }
        return stream
    }

    private func removeSubscriber(_ id: UInt64) {
        // Released after unlocking: dropping the last reference may call back into `onTermination`.
        let removed = lock.withLock { state.subscribers.removeValue(forKey: id) }
        _ = removed
    }

    // MARK: The loop

    private enum Step {
        case run(number: UInt64)
        case wait(token: UInt64, nanoseconds: UInt64?)
        case end
    }

    /// The driver: runs until `stop()` (or the executor's release) and the last run has ended.
    func runLoop() async {
        while true {
            switch lock.withLock({ decideLocked() }) {
            case .run(let number):
                await perform(run: number)
            case .wait(let token, let nanoseconds):
                await wait(token: token, nanoseconds: nanoseconds)
            case .end:
                return
            }
        }
    }

    /// Chooses the next step: end if stopping, run for a pending `runNow()` (the latest wins) or an
    /// elapsed interval, or wait.
    private func decideLocked() -> Step {
        if state.stopRequested {
            endLocked()
            return .end
        }
        let trigger: RecurringTrigger
        if let request = state.pendingRequest {
            trigger = .runNow(request: request)
        } else if state.intervalDue {
            trigger = .interval
        } else {
            state.waitCount += 1
            let token = state.waitCount
            state.phase = .waiting(Wait(token: token))
            emitLocked(.waiting(nextRunIn: state.policy.intervalSeconds))
            return .wait(token: token, nanoseconds: state.policy.intervalNanoseconds)
        }
        state.pendingRequest = nil
        state.intervalDue = false
        state.runCount += 1
        state.phase = .running(Run(number: state.runCount))
        emitLocked(.started(run: state.runCount, trigger: trigger))
        return .run(number: state.runCount)
    }

    /// Suspends the driver until the wait `token` is woken: by the interval, or by `runNow()`,
    /// `setPolicy(_:)` or `stop()`.
    private func wait(token: UInt64, nanoseconds: UInt64?) async {
        if let nanoseconds {
            let sleeper = self.sleeper
            let sleepTask = Task.detached { [weak self] in
                do {
                    try await sleeper.sleep(nanoseconds: nanoseconds)
                } catch {
                    return
                }
                self?.intervalElapsed(token: token)
            }
            let abandoned: Bool = lock.withLock {
                guard case .waiting(var wait) = state.phase, wait.token == token, !wait.woken else { return true }
                wait.sleepTask = sleepTask
                state.phase = .waiting(wait)
                return false
            }
            if abandoned { sleepTask.cancel() }
        }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let resumeNow: Bool = lock.withLock {
                guard case .waiting(var wait) = state.phase, wait.token == token, !wait.woken else { return true }
                wait.continuation = continuation
                state.phase = .waiting(wait)
                return false
            }
            if resumeNow { continuation.resume() }
        }
    }

    /// Called by the sleep task of wait `token` when its interval has elapsed.
    private func intervalElapsed(token: UInt64) {
        var wakeups = Wakeups()
        lock.withLock {
            // A wait that was already woken (or replaced) is stale: its interval must not cause a run.
            guard case .waiting(let wait) = state.phase, wait.token == token, !wait.woken else { return }
            state.intervalDue = true
            emitLocked(.intervalElapsed)
            wakeups.takeWait(from: &state)
            wakeups.sleepTask = nil  // it is the caller; it ends by itself
        }
        wakeups.perform()
    }

    /// Runs `number` on its target and reports how it ended.
    private func perform(run number: UInt64) async {
        let task = target.launch(operation)
        let cancelNow: Bool = lock.withLock {
            guard case .running(var run) = state.phase, run.number == number else { return true }
            run.task = task
            state.phase = .running(run)
            return run.cancelRequested
        }
        if cancelNow { task.cancel() }
        let result = await task.result
        lock.withLock {
            var cancelRequested = false
            if case .running(let run) = state.phase, run.number == number {
                cancelRequested = run.cancelRequested
            }
            state.phase = .deciding
            switch result {
            case .success:
                emitLocked(.finished(run: number))
            case .failure(let error):
                if cancelRequested || Self.isCancellation(error) {
                    emitLocked(.cancelled(run: number))
                } else {
                    emitLocked(.failed(run: number, error: RecurringExecutorFailure(error)))
                }
            }
        }
    }

    private static func isCancellation(_ error: any Error) -> Bool {
        error is CancellationError || (error as? QueueSafeValueError) == .cancelled
    }

    // MARK: Events

    /// Emits `event` in the order of the lock sections: one block per event on the serial delivery
    /// queue, which calls the handler and yields to the subscribers registered now.
    private func emitLocked(_ event: RecurringExecutorEvent) {
        let handler = eventHandler
        let subscribers = Array(state.subscribers.values)
        guard handler != nil || !subscribers.isEmpty else { return }
        deliveryQueue.async {
            handler?(event)
            for subscriber in subscribers { subscriber.yield(event) }
        }
    }

    /// Ends the loop: `.stopped`, then the streams finish and `stopAndWait()` callers resume, all on
    /// the delivery queue after every earlier event.
    private func endLocked() {
        state.phase = .ended
        emitLocked(.stopped)
        let subscribers = Array(state.subscribers.values)
        let stopWaiters = state.stopWaiters
        state.subscribers = [:]
        state.stopWaiters = []
        deliveryQueue.async {
            for subscriber in subscribers { subscriber.finish() }
            for waiter in stopWaiters { waiter.resumeFromAnotherThread() }
        }
    }
}
