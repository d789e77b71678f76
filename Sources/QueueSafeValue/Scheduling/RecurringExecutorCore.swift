import Dispatch

// MARK: - RecurringExecutorCore

/// The thin layer behind a ``RecurringExecutor``: the lock, the driver task, the sleeps, the run
/// tasks, the continuations and the event delivery. Every decision is ``RecurringStateMachine``'s.
///
/// Each entry point is one machine transition (`apply`), whose events and outcomes enter the
/// outbox under the lock, so the outbox is in transition order. No user code runs, no continuation
/// is resumed, no task is cancelled and nothing is dispatched while the lock is held.
///
/// One driver task runs ``runLoop()``: it asks the machine for the next step (run, wait, or end),
/// performs it outside the lock, reports how it ended, and asks again. The public executor owns
/// the core; the driver task keeps it alive until the loop has ended, and the sleep tasks
/// reference it weakly.
// @unchecked Sendable: all mutable state is in `guarded`, under its lock; the rest is immutable
final class RecurringExecutorCore: @unchecked Sendable {
    typealias Operation = @Sendable () async throws -> Void
    typealias EventHandler = @Sendable (RecurringExecutorEvent) -> Void
    typealias Subscriber = AsyncStream<RecurringExecutorEvent>.Continuation
    typealias Caller = CheckedContinuation<RecurringRunOutcome, any Error>
    typealias Machine = RecurringStateMachine<CheckedContinuation<Void, Never>, Task<Void, any Error>, Caller>

    /// Something the delivery queue does, in outbox order.
    private enum Delivery {
        /// Call the handler, then yield to the subscribers registered when it was emitted.
        case event(RecurringExecutorEvent, [Subscriber])
        /// Resume a caller of `runNowAndWait()`.
        case outcome(Caller, RecurringRunOutcome)
        /// The loop ended: finish the streams, then resume the callers of `stopAndWait()`.
        case end([Subscriber], [CheckedContinuation<Void, Never>])
    }

    private struct Guarded {
        var machine: Machine
        var nextSubscriberID: UInt64 = 0
        var subscribers: [UInt64: Subscriber] = [:]
        /// Callers of `stopAndWait()`, resumed once the loop has ended and its events were delivered.
        var stopWaiters: [CheckedContinuation<Void, Never>] = []
        /// Deliveries not taken by a drain yet: while it is not empty, a drain is on the delivery queue.
        var outbox: [Delivery] = []
    }

    /// The executor whose operation the current task runs (for `runNowAndWait()`'s reentrancy check).
    @TaskLocal static var runningExecutor: ObjectIdentifier?

    private let guarded: LockedState<Guarded>
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
        guarded = .make(Guarded(machine: Machine(policy: policy)))
        self.target = target
        self.sleeper = sleeper
        self.eventHandler = eventHandler
        self.operation = operation
    }

    // MARK: Performing transitions

    /// Runs `transition` under the lock and queues its deliveries; after unlocking, cancels its tasks,
    /// resumes the driver and schedules a drain. Returns what `transition` returned besides its actions.
    private func apply<R>(_ transition: (inout Guarded) -> (R, Machine.Actions)) -> R {
        let (result, actions, drain) = guarded.withLock { guarded -> (R, Machine.Actions, Bool) in
            let (result, actions) = transition(&guarded)
            return (result, actions, queue(actions, in: &guarded))
        }
        perform(actions, drain: drain)
        return result
    }

    /// The public executor's commands (`setPolicy(_:)`, `runNow()`, `stop()`) are these transitions.
    func apply(_ transition: (inout Machine) -> Machine.Actions) {
        apply { guarded in ((), transition(&guarded.machine)) }
    }

    /// Under the lock: stamps the events and puts them, the outcomes and the end in the outbox.
    /// Returns whether a drain of the outbox must be scheduled.
    private func queue(_ actions: Machine.Actions, in guarded: inout Guarded) -> Bool {
        let drainScheduled = !guarded.outbox.isEmpty
        if !actions.events.isEmpty {
            let now = SyncPoints.now()
            let subscribers = Array(guarded.subscribers.values)
            if eventHandler != nil || !subscribers.isEmpty {
                for kind in actions.events {
                    guarded.outbox.append(.event(RecurringExecutorEvent(kind, at: now), subscribers))
                }
            }
        }
        for (caller, outcome) in actions.outcomes {
            guarded.outbox.append(.outcome(caller, outcome))
        }
        if actions.ended {
            guarded.outbox.append(.end(Array(guarded.subscribers.values), guarded.stopWaiters))
            guarded.subscribers = [:]
            guarded.stopWaiters = []
        }
        return !drainScheduled && !guarded.outbox.isEmpty
    }

    /// After unlocking: the actions that are not deliveries.
    private func perform(_ actions: Machine.Actions, drain: Bool) {
        for task in actions.cancel { task.cancel() }
        actions.resumeDriver?.resumeFromAnotherThread()
        if drain {
            SyncPoints.async(deliveryQueue) { self.drain() }
        }
    }

    /// On the delivery queue: delivers everything in the outbox, in order. Drains run one at a time
    /// and each takes every entry queued before it, so deliveries keep the transitions' order.
    private func drain() {
        let deliveries = guarded.withLock { guarded -> [Delivery] in
            defer { guarded.outbox = [] }
            return guarded.outbox
        }
        for delivery in deliveries {
            switch delivery {
            case .event(let event, let subscribers):
                eventHandler?(event)
                for subscriber in subscribers { subscriber.yield(event) }
            case .outcome(let caller, let outcome):
                caller.resumeFromAnotherThread(with: .success(outcome))
            case .end(let subscribers, let stopWaiters):
                for subscriber in subscribers { subscriber.finish() }
                for waiter in stopWaiters { waiter.resumeFromAnotherThread() }
            }
        }
    }

    // MARK: Commands from the public executor

    var policy: RecurringPolicy {
        guarded.withLock { $0.machine.policy }
    }

    func runNowAndWait() async throws(QueueSafeValueError) -> RecurringRunOutcome {
        if Self.runningExecutor == ObjectIdentifier(self) {
            // The requested run cannot start before this operation returns, which waits for it.
            throw .reentrantAccess
        }
        guard let id = apply({ $0.machine.runNowAndWait() }) else { return .stopped }
        if Task.isCancelled {
            // Cancelled before the call: the request stands, and the call throws at once, even if
            // the run ended meanwhile (its outcome came after the cancellation).
            guarded.withLock { $0.machine.abandonCaller(id) }
            throw .cancelled
        }
        do {
            return try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { (continuation: Caller) in
                    // A known outcome goes through the outbox, behind every delivery queued: the run's end event first.
                    if apply({ $0.machine.attachCaller(id, continuation) }) {
                        continuation.resume(throwing: QueueSafeValueError.cancelled)
                    }
                }
            } onCancel: {
                let record = guarded.withLock { $0.machine.cancelCaller(id) }
                record?.continuation?.resumeFromAnotherThread(with: .failure(QueueSafeValueError.cancelled))
            }
        } catch {
            throw .cancelled  // the only error a caller is resumed with
        }
    }

    /// Returns once the loop has ended and every event, `.stopped` included, was delivered.
    func waitUntilEnded() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            apply { guarded -> ((), Machine.Actions) in
                guarded.stopWaiters.append(continuation)
                var actions = Machine.Actions()
                // Once ended, resumed through the outbox, behind every delivery queued (the streams' end included).
                actions.ended = guarded.machine.isEnded
                return ((), actions)
            }
        }
    }

    func events(bufferingPolicy: Subscriber.BufferingPolicy) -> AsyncStream<RecurringExecutorEvent> {
        let (stream, subscriber) = AsyncStream.makeStream(
            of: RecurringExecutorEvent.self, bufferingPolicy: bufferingPolicy)
        let id: UInt64 = guarded.withLock {
            $0.nextSubscriberID += 1
            return $0.nextSubscriberID
        }
        // Set outside the lock: the stream may call it from `finish()` or from its deinit.
        subscriber.onTermination = { [weak self] _ in self?.removeSubscriber(id) }
        let registered: Bool = guarded.withLock {
            if $0.machine.isEnded { return false }
            $0.subscribers[id] = subscriber
            return true
        }
        if !registered { subscriber.finish() }
        return stream
    }

    private func removeSubscriber(_ id: UInt64) {
        // Released after unlocking: dropping the last reference may call back into `onTermination`.
        _ = guarded.withLock { $0.subscribers.removeValue(forKey: id) }
    }

    // MARK: The loop

    /// The driver: runs until `stop()` (or the executor's release) and the last run has ended.
    func runLoop() async {
        while true {
            switch apply({ $0.machine.decide() }) {
            case .run(let number):
                await perform(run: number)
            case .wait(let token, let nanoseconds):
                await wait(token: token, nanoseconds: nanoseconds)
            case .end:
                return
            }
        }
    }

    /// Sleeps (when `nanoseconds` is set) and suspends the driver until wait `token` is woken: by
    /// the interval, a request, a policy change, a stop or a failed sleep.
    private func wait(token: UInt64, nanoseconds: UInt64?) async {
        if let nanoseconds {
            let sleeper = self.sleeper
            let sleep = SyncPoints.throwingTask(detached: true) { [weak self] in
                do {
                    try await sleeper.sleep(nanoseconds: nanoseconds)
                    self?.apply { $0.intervalElapsed(token) }
                } catch {
                    self?.apply { $0.sleepFailed(token, error: error) }
                }
            }
            apply { $0.attachSleep(token, sleep) }
        }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let resumeNow = guarded.withLock { $0.machine.attachDriver(token, continuation) }
            resumeNow?.resume()
        }
    }

    /// Runs `number` on its target and reports how it ended.
    private func perform(run number: UInt64) async {
        let operation = self.operation
        let identity = ObjectIdentifier(self)
        let task = target.launch {
            try await Self.$runningExecutor.withValue(identity) { try await operation() }
        }
        apply { $0.attachRun(number, task) }
        let result = await task.result
        apply { $0.runEnded(number, result: result) }
    }
}
