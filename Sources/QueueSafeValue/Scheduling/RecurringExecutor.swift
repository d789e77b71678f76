// MARK: - RecurringExecutor

/// Runs one asynchronous operation at a time: on a fixed interval, on demand, or both.
///
/// ```swift
/// let poller = try RecurringExecutor(policy: .interval(seconds: 30)) {
///     try await inbox.sync()
/// }
/// poller.runNow()                                     // sync now: the running sync is cancelled first
/// let outcome = try await poller.runNowAndWait()      // sync now, and learn how that sync ended
/// poller.setPolicy(try .interval(seconds: 300))       // back off; the wait in progress restarts
/// poller.stop()                                       // or just release it
/// ```
///
/// Guarantees:
/// - **One run at a time.** A run starts only after the previous one has ended, whatever triggered
///   it: the interval of the ``RecurringPolicy`` (see ``setPolicy(_:)``), or a request
///   (``runNow()``, ``runNowAndWait()``), which first cancels the running operation's task. After an
///   on-demand run the interval starts from zero again.
/// - **Robust.** An operation that throws reports ``RecurringExecutorEvent/Kind/failed(run:error:)``
///   and the executor carries on. An operation that ignores cancellation delays the hand-off until
///   it returns, but the executor never loses track: the pending request runs right after it. A
///   sleeper that throws stops the executor (see ``RecurringSleeper``).
/// - **Events** (``RecurringExecutorEvent``) go to the `eventHandler` and to every stream from
///   ``events(bufferingPolicy:)``, in the order the transitions happened, the same order on both.
/// - **Lifetime.** Releasing the executor stops it as ``stop()`` does, and its tasks and closures are
///   released once its loop has ended. The executor does not retain itself: an operation or event
///   handler that captures it strongly keeps it alive (capture it `weak`, as with a `Timer`).
///
/// The executor is `Sendable`: every method may be called from any thread, task or actor, at any
/// time; none of them blocks a thread, and only ``runNowAndWait()`` and ``stopAndWait()`` suspend.
public final class RecurringExecutor: Sendable {
    private let core: RecurringExecutorCore

    /// Creates an executor and starts its loop at once.
    ///
    /// - Parameters:
    ///   - policy: when to run by itself; ``RecurringPolicy/onDemand`` (the default) runs only on
    ///     ``runNow()``. With an interval, the first run comes one interval after creation.
    ///   - target: where each run executes: ``RecurringRunTarget/detached`` (the default) or
    ///     ``RecurringRunTarget/commandQueue(_:priority:)``.
    ///   - sleeper: how intervals are waited for; replace it in tests to control time.
    ///   - eventHandler: called with every event, one at a time and in order, on a private serial
    ///     dispatch queue of the executor (never while the executor's lock is held, so it may call
    ///     back into the executor). Events emitted before the handler returns wait for it.
    ///   - operation: the work of one run. It may throw, and should return soon after its task is
    ///     cancelled.
    public init(
        policy: RecurringPolicy = .onDemand,
        runningOn target: RecurringRunTarget = .detached,
        sleeper: any RecurringSleeper = TaskRecurringSleeper(),
        eventHandler: (@Sendable (RecurringExecutorEvent) -> Void)? = nil,
        operation: @escaping @Sendable () async throws -> Void
    ) {
        let core = RecurringExecutorCore(
            policy: policy,
            target: target,
            sleeper: sleeper,
            eventHandler: eventHandler,
            operation: operation
        )
        self.core = core
        SyncPoints.task(detached: true) { await core.runLoop() }
    }

    /// Creates an executor whose every run, in a detached task, is
    /// `value.async.priority(priority).withLock { try await operation(&$0) }`: the operation has
    /// in-place access to the value in a critical section that lasts across its suspension points,
    /// so runs take their turn with every other command on the value, in its priority order, and
    /// never overlap one.
    ///
    /// A run cancelled while it waits for its turn leaves the queue and never starts
    /// (``RecurringExecutorEvent/Kind/cancelled(run:)``). Changes the operation made to the value are
    /// kept even if it throws afterwards. The executor retains `value`. The other parameters are
    /// those of ``init(policy:runningOn:sleeper:eventHandler:operation:)``.
    public convenience init<Value: Sendable>(
        updating value: QueueSafeValue<Value>,
        priority: CommandPriority = .medium,
        policy: RecurringPolicy = .onDemand,
        sleeper: any RecurringSleeper = TaskRecurringSleeper(),
        eventHandler: (@Sendable (RecurringExecutorEvent) -> Void)? = nil,
        operation: @escaping @Sendable (inout Value) async throws -> Void
    ) {
        self.init(policy: policy, runningOn: .detached, sleeper: sleeper, eventHandler: eventHandler) {
            try await value.async.priority(priority).withLock { try await operation(&$0) }
        }
    }

    /// Stops the executor, as ``stop()`` does.
    deinit {
        core.apply { $0.stop() }
    }

    // MARK: Control

    /// The current policy.
    public var policy: RecurringPolicy {
        core.policy
    }

    /// Changes when the executor runs by itself, from now on.
    ///
    /// If the executor is waiting, the wait restarts with `policy` (a new interval counts from this
    /// call; ``RecurringPolicy/onDemand`` waits for ``runNow()`` only). A running operation is not
    /// disturbed; the new policy applies to the wait after it. A change never causes a run by itself.
    /// Emits ``RecurringExecutorEvent/Kind/policyChanged(from:to:)`` unless `policy` equals the
    /// current one, in which case nothing happens (a wait in progress is not restarted). Ignored
    /// after ``stop()``.
    public func setPolicy(_ policy: RecurringPolicy) {
        core.apply { $0.setPolicy(policy) }
    }

    /// Requests a run now, and returns at once.
    ///
    /// Emits ``RecurringExecutorEvent/Kind/requested(request:)``. A wait in progress ends; a running
    /// operation's task is cancelled, and the requested run starts once that operation has returned.
    /// Requests made before the requested run starts collapse into one run, whose trigger is the
    /// latest request; one made while it runs preempts it in turn. Ignored after ``stop()``.
    public func runNow() {
        core.apply { $0.runNow() }
    }

    /// Requests a run now, as ``runNow()`` does (at once, in the caller's order with the other
    /// calls), and returns how the run that served the request ended (see ``RecurringRunOutcome``
    /// for which run that is):
    ///
    /// ```swift
    /// let executor = RecurringExecutor { /* the work of one run */ }
    /// switch try await executor.runNowAndWait() {
    /// case .finished(let run): print("run \(run) served the request")
    /// case .failed(let run, let failure): print("run \(run) failed: \(failure.error)")
    /// case .cancelled(let run): print("run \(run) was stopped")
    /// case .stopped: print("the executor stopped before a run served the request")
    /// }
    /// ```
    ///
    /// It returns once the event that reports the outcome was delivered to the event handler and the
    /// streams. It suspends the calling task and never blocks a thread.
    ///
    /// **Cancellation.** Cancelling the calling task abandons the wait, not the request: the call
    /// throws ``QueueSafeValueError/cancelled`` at once, and the run goes on for everyone else (other
    /// callers, the interval, the events). An outcome that was already known when the cancellation
    /// arrived is returned instead. A task that is cancelled before the call still makes the
    /// request, then throws.
    ///
    /// - Returns: the outcome, ``RecurringRunOutcome/stopped`` if no run served the request.
    /// - Throws: ``QueueSafeValueError/cancelled`` when the calling task is cancelled first;
    ///   ``QueueSafeValueError/reentrantAccess``, without making a request, when called from inside
    ///   this executor's own operation (or a task it created that inherits its task-locals), where it
    ///   would wait for a run that cannot start before the operation returns.
    public func runNowAndWait() async throws(QueueSafeValueError) -> RecurringRunOutcome {
        try await core.runNowAndWait()
    }

    /// Stops the executor, and returns at once.
    ///
    /// Pending requests are dropped, a wait in progress ends, and the running operation's task is
    /// cancelled. Once that operation has returned, the loop ends: ``RecurringExecutorEvent/Kind/stopped``
    /// is emitted, the event streams finish and nothing of the executor runs any more. Callers of
    /// ``runNowAndWait()`` whose run had not started get ``RecurringRunOutcome/stopped`` at once;
    /// those of the running operation get its outcome when it returns. Calling it again does
    /// nothing; ``runNow()``, ``runNowAndWait()`` and ``setPolicy(_:)`` are ignored from now on.
    public func stop() {
        core.apply { $0.stop() }
    }

    /// Stops the executor (see ``stop()``) and returns once its loop has ended: the last operation
    /// has returned, the handler has been called with ``RecurringExecutorEvent/Kind/stopped`` and every
    /// event stream has finished.
    ///
    /// Waits as long as the running operation takes to return; calling it from inside the operation
    /// waits forever.
    public func stopAndWait() async {
        stop()
        await core.waitUntilEnded()
    }

    // MARK: Events

    /// A stream of the events emitted from now on, ending after ``RecurringExecutorEvent/Kind/stopped``.
    ///
    /// Earlier events are not replayed (pass an `eventHandler` to the initializer to see every event
    /// from the first). Any number of streams may be open at once; a stream whose consumer stops
    /// iterating is dropped. If the executor has stopped already, the stream is finished and empty.
    ///
    /// - Parameter bufferingPolicy: what the stream keeps while its consumer is slower than the
    ///   executor; `.unbounded` (the default) keeps every event, `.bufferingNewest(n)` and
    ///   `.bufferingOldest(n)` drop some of them.
    public func events(
        bufferingPolicy: AsyncStream<RecurringExecutorEvent>.Continuation.BufferingPolicy = .unbounded
    ) -> AsyncStream<RecurringExecutorEvent> {
        core.events(bufferingPolicy: bufferingPolicy)
    }
}
