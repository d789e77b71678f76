// MARK: - RecurringStateMachine

/// Every decision of a ``RecurringExecutor``, as a plain value: what the driver does next, which
/// run serves which `runNow()`, when a wait ends, how a run ended, and what each of those emits.
///
/// No locks, tasks, continuations, sleepers or dispatch live here: ``RecurringExecutorCore`` calls
/// each transition under its lock and performs the ``Actions`` it returned after unlocking. The
/// machine only stores the three handles the core needs for that and hands them back, so the tests
/// drive the very same transitions with plain values.
///
/// - `Driver`: resumes the driver task suspended in a wait (a continuation).
/// - `Job`: a task to cancel: a wait's sleep, or a run's operation.
/// - `Caller`: resumes a caller of ``RecurringExecutor/runNowAndWait()`` with its outcome.
///
/// The phases: `deciding` (between two steps) → `running` or `waiting` → `deciding` → … →
/// `ended`. Only ``decide()`` leaves `deciding`; only ``runEnded(_:result:)`` leaves `running`; a
/// wait is *woken* (by the interval, a request, a policy change, a stop or a failed sleep) and the
/// driver then calls ``decide()`` again.
struct RecurringStateMachine<Driver, Job, Caller> {
    typealias Event = RecurringExecutorEvent.Kind

    /// What the driver is doing.
    enum Phase {
        case deciding
        case waiting(Wait)
        case running(Run)
        case ended
    }

    struct Wait {
        /// Identifies this wait, so a sleep that ends after the wait was abandoned is ignored.
        let token: UInt64
        /// Set once something ended the wait; the driver then decides again.
        var woken = false
        var driver: Driver?
        var sleep: Job?
    }

    struct Run {
        let number: UInt64
        var job: Job?
        /// `runNow()` or `stop()` asked this run to stop (its task is cancelled).
        var cancelRequested = false
        /// The callers of `runNowAndWait()` this run serves, in request order.
        var callers: [UInt64] = []
    }

    /// A caller of `runNowAndWait()` that has no outcome delivered yet.
    struct CallerRecord {
        var continuation: Caller?
        /// Known, but the continuation has not arrived yet.
        var outcome: RecurringRunOutcome?
    }

    /// What the driver does next.
    enum Step: Equatable {
        /// Start run `number` and report its end with ``runEnded(_:result:)``.
        case run(number: UInt64)
        /// Sleep for `nanoseconds` (only wait, when `nil`) until wait `token` is woken.
        case wait(token: UInt64, nanoseconds: UInt64?)
        /// The loop is over.
        case end
    }

    /// What the core does after unlocking: deliver `events`, `outcomes` and (if `ended`) the end, in
    /// that order, behind the deliveries of earlier transitions; cancel `cancel` and resume
    /// `resumeDriver` at once.
    struct Actions {
        var events: [Event] = []
        var outcomes: [(caller: Caller, outcome: RecurringRunOutcome)] = []
        var cancel: [Job] = []
        var resumeDriver: Driver?
        /// The loop ended with this transition: `.stopped` is the last of `events`.
        var ended = false
    }

    private(set) var policy: RecurringPolicy
    private(set) var phase = Phase.deciding
    private(set) var stopRequested = false
    /// The number of the latest request (`runNow()` or `runNowAndWait()`).
    private(set) var lastRequest: UInt64 = 0
    /// The latest request not served by a run yet.
    private(set) var pendingRequest: UInt64?
    /// The interval elapsed and its run has not started yet.
    private(set) var intervalDue = false
    private(set) var runCount: UInt64 = 0
    private(set) var waitCount: UInt64 = 0
    /// Callers waiting for the next run to start, in request order.
    private(set) var pendingCallers: [UInt64] = []
    /// Every caller whose outcome has not been handed over yet, by id.
    private(set) var callers: [UInt64: CallerRecord] = [:]
    private var callerCount: UInt64 = 0

    init(policy: RecurringPolicy) {
        self.policy = policy
    }

    var isEnded: Bool {
        if case .ended = phase { return true }
        return false
    }

    // MARK: Commands

    /// `setPolicy(_:)`: a different policy restarts the wait in progress; a run is left alone.
    /// Ignored once stopping, and when `newPolicy` is the current one.
    mutating func setPolicy(_ newPolicy: RecurringPolicy) -> Actions {
        var actions = Actions()
        guard !stopRequested, policy != newPolicy else { return actions }
        actions.events.append(.policyChanged(from: policy, to: newPolicy))
        policy = newPolicy
        intervalDue = false
        wakeWait(&actions, cancellingSleep: true)
        return actions
    }

    /// `runNow()`: a new pending request; the wait in progress ends and the running operation is
    /// asked to stop. Ignored once stopping.
    mutating func runNow() -> Actions {
        runNowAndWait(registeringCaller: false).actions
    }

    /// `runNowAndWait()`: as ``runNow()``, and registers a caller that the run serving this request
    /// will resume (none for `runNow()`). Returns `nil` (and does nothing) once stopping: the caller
    /// gets ``RecurringRunOutcome/stopped`` at once.
    mutating func runNowAndWait(registeringCaller: Bool = true) -> (caller: UInt64?, actions: Actions) {
        var actions = Actions()
        guard !stopRequested else { return (nil, actions) }
        var caller: UInt64?
        if registeringCaller {
            callerCount += 1
            caller = callerCount
            callers[callerCount] = CallerRecord()
            pendingCallers.append(callerCount)
        }
        lastRequest += 1
        pendingRequest = lastRequest
        actions.events.append(.requested(request: lastRequest))
        wakeWait(&actions, cancellingSleep: true)
        askRunToStop(&actions)
        return (caller, actions)
    }

    /// The continuation of caller `id` arrived: it is kept until its run ends, or resumed with the
    /// outcome if that is known (behind the deliveries queued before). Returns `cancelled` when the
    /// caller was cancelled before it arrived (the core resumes it with the cancellation).
    mutating func attachCaller(_ id: UInt64, _ continuation: Caller) -> (cancelled: Bool, actions: Actions) {
        var actions = Actions()
        guard var record = callers[id] else { return (true, actions) }
        record.continuation = continuation
        callers[id] = record
        if let outcome = record.outcome { resolve(id, outcome, &actions) }
        return (false, actions)
    }

    /// The task of caller `id` was cancelled. Unless its outcome is known already, the caller leaves:
    /// returns its record (with the continuation to resume with the cancellation, if it has arrived).
    /// The request itself stands: its run is not affected.
    mutating func cancelCaller(_ id: UInt64) -> CallerRecord? {
        guard let record = callers[id], record.outcome == nil else { return nil }
        callers[id] = nil
        pendingCallers.removeAll { $0 == id }
        if case .running(var run) = phase {
            run.callers.removeAll { $0 == id }
            phase = .running(run)
        }
        return record
    }

    /// The task of caller `id` was cancelled before its call: it leaves without waiting, even if
    /// the run it asked for has already ended (the cancellation came first). The request stands.
    mutating func abandonCaller(_ id: UInt64) {
        if cancelCaller(id) == nil { callers[id] = nil }
    }

    /// `stop()`: drops the pending request (its callers get ``RecurringRunOutcome/stopped``), ends
    /// the wait in progress and asks the running operation to stop. The loop ends at the driver's
    /// next ``decide()``. Ignored the second time. Returns `actions` (those of the transition that
    /// stops) followed by its own.
    mutating func stop(after actions: Actions = Actions()) -> Actions {
        var actions = actions
        guard !stopRequested else { return actions }
        stopRequested = true
        pendingRequest = nil
        for id in pendingCallers { resolve(id, .stopped, &actions) }
        pendingCallers = []
        wakeWait(&actions, cancellingSleep: true)
        askRunToStop(&actions)
        return actions
    }

    // MARK: The driver

    /// The driver's next step: end if stopping, run for a pending request (the latest wins) or an
    /// elapsed interval, or wait.
    mutating func decide() -> (step: Step, actions: Actions) {
        var actions = Actions()
        if isEnded { return (.end, actions) }
        if stopRequested {
            phase = .ended
            actions.events.append(.stopped)
            actions.ended = true
            return (.end, actions)
        }
        let trigger: RecurringTrigger
        if let request = pendingRequest {
            trigger = .runNow(request: request)
        } else if intervalDue {
            trigger = .interval
        } else {
            waitCount += 1
            phase = .waiting(Wait(token: waitCount))
            actions.events.append(.waiting(nextRunIn: policy.intervalSeconds))
            return (.wait(token: waitCount, nanoseconds: policy.intervalNanoseconds), actions)
        }
        pendingRequest = nil
        intervalDue = false
        runCount += 1
        phase = .running(Run(number: runCount, callers: pendingCallers))
        pendingCallers = []
        actions.events.append(.started(run: runCount, trigger: trigger))
        return (.run(number: runCount), actions)
    }

    /// The sleep of wait `token` started: keep its task, or cancel it at once if the wait is over.
    mutating func attachSleep(_ token: UInt64, _ sleep: Job) -> Actions {
        var actions = Actions()
        if !withLiveWait(token, { $0.sleep = sleep }) { actions.cancel.append(sleep) }
        return actions
    }

    /// The driver suspends in wait `token`. Returns `driver` when it must be resumed at once (the
    /// wait was woken already).
    mutating func attachDriver(_ token: UInt64, _ driver: Driver) -> Driver? {
        withLiveWait(token, { $0.driver = driver }) ? nil : driver
    }

    /// The sleep of wait `token` returned normally: the interval elapsed, unless the wait was
    /// abandoned (then nothing happens: an abandoned wait never causes a run).
    mutating func intervalElapsed(_ token: UInt64) -> Actions {
        var actions = Actions()
        guard wakeWait(&actions, token: token, cancellingSleep: false) else { return actions }  // the sleep is over
        intervalDue = true
        actions.events.append(.intervalElapsed)
        return actions
    }

    /// The sleep of wait `token` threw. If the wait was abandoned, that is the expected end of a
    /// cancelled sleep. If not, the clock failed: ``RecurringExecutorEvent/Kind/sleeperFailed(_:)``,
    /// and the executor stops (a retry could spin on a sleeper that fails at once, and waiting on
    /// demand only would hide the failure).
    mutating func sleepFailed(_ token: UInt64, error: any Error) -> Actions {
        var actions = Actions()
        guard wakeWait(&actions, token: token, cancellingSleep: false) else { return actions }  // the sleep is over
        actions.events.append(.sleeperFailed(RecurringExecutorFailure(error)))
        return stop(after: actions)
    }

    /// Run `number`'s task exists: keep it, and cancel it at once if the run was asked to stop
    /// before.
    mutating func attachRun(_ number: UInt64, _ job: Job) -> Actions {
        var actions = Actions()
        guard case .running(var run) = phase, run.number == number, run.job == nil else {
            actions.cancel.append(job)
            return actions
        }
        run.job = job
        phase = .running(run)
        if run.cancelRequested { actions.cancel.append(job) }
        return actions
    }

    /// Run `number`'s operation returned (`.success`) or threw. Emits how it ended and resolves its
    /// callers. A run that ends cancelled because a later request preempted it hands its callers on
    /// to that request's run, which starts next.
    mutating func runEnded(_ number: UInt64, result: Result<Void, any Error>) -> Actions {
        var actions = Actions()
        guard case .running(let run) = phase, run.number == number else { return actions }
        phase = .deciding
        let outcome: RecurringRunOutcome
        switch result {
        case .success:
            outcome = .finished(run: number)
        case .failure(let error) where run.cancelRequested || Self.isCancellation(error):
            outcome = .cancelled(run: number)
        case .failure(let error):
            outcome = .failed(run: number, error: RecurringExecutorFailure(error))
        }
        actions.events.append(outcome.event)
        if case .cancelled = outcome, pendingRequest != nil, !stopRequested {
            pendingCallers.insert(contentsOf: run.callers, at: 0)
        } else {
            for id in run.callers { resolve(id, outcome, &actions) }
        }
        return actions
    }

    static func isCancellation(_ error: any Error) -> Bool {
        error is CancellationError || (error as? QueueSafeValueError) == .cancelled
    }

    // MARK: Helpers

    /// Calls `body` with the wait in progress if it is wait `token` (any, when `nil`) and was not
    /// woken yet; returns whether there was such a wait.
    private mutating func withLiveWait(_ token: UInt64?, _ body: (inout Wait) -> Void) -> Bool {
        guard case .waiting(var wait) = phase, token == nil || wait.token == token, !wait.woken else { return false }
        body(&wait)
        phase = .waiting(wait)
        return true
    }

    /// Ends that wait, if any: the driver is resumed (and the sleep cancelled) after unlocking.
    /// Returns whether there was one.
    @discardableResult
    private mutating func wakeWait(_ actions: inout Actions, token: UInt64? = nil, cancellingSleep: Bool) -> Bool {
        withLiveWait(token) { wait in
            wait.woken = true
            actions.resumeDriver = wait.driver
            if cancellingSleep, let sleep = wait.sleep { actions.cancel.append(sleep) }
            wait.driver = nil
            wait.sleep = nil
        }
    }

    /// Marks the running operation as asked to stop; its task is cancelled after unlocking (or as
    /// soon as it is attached).
    private mutating func askRunToStop(_ actions: inout Actions) {
        guard case .running(var run) = phase, !run.cancelRequested else { return }
        run.cancelRequested = true
        if let job = run.job { actions.cancel.append(job) }
        phase = .running(run)
    }

    private mutating func resolve(_ id: UInt64, _ outcome: RecurringRunOutcome, _ actions: inout Actions) {
        guard var record = callers[id] else { return }
        if let continuation = record.continuation {
            callers[id] = nil
            actions.outcomes.append((continuation, outcome))
        } else {
            record.outcome = outcome
            callers[id] = record
        }
    }
}
