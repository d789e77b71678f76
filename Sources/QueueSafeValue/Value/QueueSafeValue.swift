import Dispatch

// MARK: - QueueSafeValue

/// A value shared between threads, dispatch queues and tasks, with one critical section and a
/// priority command queue in front of it.
///
/// Every access is a command written as `value.{schedule}.{priority}.{command}`:
///
/// ```swift
/// let counter = QueueSafeValue(value: 0)
/// let next = try counter.wait.withLock { $0 += 1; return $0 }          // blocks this thread
/// counter.wait.highestPriority.set { $0 += 1 }                         // the same, returning a Result
/// counter.async(performIn: .main).lowestPriority.get { print($0) }     // returns at once, runs on main
/// let now = try await counter.async.priority(.high).get()              // suspends this task
/// ```
///
/// - The **schedule** decides where the caller waits: ``wait`` blocks the calling thread and runs
///   closures on it; ``async(performIn:)-(DispatchQueue)`` returns at once and runs closures on a
///   dispatch queue; ``async`` suspends a task and runs closures in the caller's isolation.
/// - The **priority** decides when the command runs: highest priority first, first-come-first-served
///   within a priority. A running command is never preempted.
/// - The **command** decides what happens to the value: `withLock` (returns the closure's result,
///   throws on failure) and `read`, which does the same beside other reads; or the original `get`,
///   `set` and `map`, which return a `Result`, each with automatic or manual completion. A priority
///   left out (`counter.wait.get()`) is ``CommandPriority/default``.
///
/// The container is `Sendable` whatever it holds: a value that is not `Sendable` is reached only
/// through `withLock`, whose closure gets it as `inout sending` and returns a `sending` result; the
/// commands that hand the value out need a `Sendable` value.
///
/// All schedules share one queue: one command at a time, across every caller. Schedulers and
/// commands do not retain the container; once it is released, new commands fail with
/// ``QueueSafeValueError/valueContainerDeinited`` while commands already queued still run.
public final class QueueSafeValue<Value> {
    /// Owns the engine: closes it when this container goes (see ``ContainerOwnership``).
    @usableFromInline let ownership: ContainerOwnership<Value>

    @inlinable var engine: ValueEngine<Value> { ownership.engine }

    /// Blocking commands: the calling thread waits for its turn and the closures run on it.
    ///
    /// A stored property (as are the schedule's `highestPriority`, `lowestPriority` and
    /// `defaultPriority`), so the idle path of `value.wait.highestPriority.set { … }` costs no
    /// reference counting: the schedule holds the engine, which the container keeps alive while you
    /// hold the container.
    public let wait: WaitSchedule<Value>

    /// Wraps `value`. The container owns it from now on (`sending`: the caller gives it up); read and
    /// change it only through commands.
    /// - Parameters:
    ///   - value: the value to guard.
    ///   - label: a name for diagnostics and deadlock reports (`"balance"`); without one they show
    ///     the value's type and a short identity.
    ///   - fairness: how priority is weighed against waiting time: ``CommandFairness/strictPriority``
    ///     (the default) or a bound on how often a waiting command is overtaken.
    public init(value: sending Value, label: String? = nil, fairness: CommandFairness = .strictPriority) {
        let engine = ValueEngine(value: value, label: label, fairness: fairness)
        ownership = ContainerOwnership(engine)
        wait = WaitSchedule(engine: engine, timeout: nil)
        async = AwaitSchedule(engine: engine)
    }

    /// Blocking commands that give up with ``QueueSafeValueError/timedOut(_:)`` if they have not started
    /// within `timeout`. A timed-out command never runs later. `.never` waits forever; zero only
    /// succeeds if the value is free at once; a negative interval is a mistake, and every command
    /// fails with ``QueueSafeValueError/invalidArgument(_:)`` without running.
    ///
    /// The deadline holds on both sides: a command is never handed the value after its deadline
    /// as the engine's clock sees it (a release passes it over, even if its thread could not run to
    /// look), and it gives up once its thread sees the deadline pass. The engine's clock is coarse:
    /// a release up to one tick of it after the deadline (1 to 4 ms on Linux, about 1 ms on Apple
    /// platforms) may still hand the value on; one later than that never does. A thread that gives
    /// up returns as soon as it runs again after its deadline.
    @inlinable
    public func wait(timeout: DispatchTimeInterval) -> WaitSchedule<Value> {
        WaitSchedule(engine: engine, timeout: timeout)
    }

    /// Awaiting commands that give up with ``QueueSafeValueError/timedOut(_:)`` if they have not
    /// started within `timeout`, like ``wait(timeout:)-(DispatchTimeInterval)`` for a thread. A timed-out command left the
    /// queue and never runs later; once its closure has started, the timeout no longer applies.
    /// `.never` waits forever; zero only succeeds if the value is free when the command is issued;
    /// a negative interval fails every command with ``QueueSafeValueError/invalidArgument(_:)``.
    /// The deadline holds as for ``wait(timeout:)-(DispatchTimeInterval)``: to one tick of the
    /// engine's coarse clock, even when the task's own timer fires late on a busy pool.
    @inlinable
    public func async(timeout: DispatchTimeInterval) -> AwaitSchedule<Value> {
        AwaitSchedule(engine: engine, timeout: timeout)
    }

    /// ``wait(timeout:)-(DispatchTimeInterval)`` with a `Duration` (`value.wait(timeout: .seconds(2))`
    /// keeps meaning a `DispatchTimeInterval`; a `Duration` you hold, `try value.wait(timeout:
    /// budget).withLock { … }`, comes here). The timeout is kept to the nanosecond; one beyond what
    /// a `DispatchTimeInterval` holds waits as long as the largest one; a negative one fails every
    /// command with ``QueueSafeValueError/invalidArgument(_:)``.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @_disfavoredOverload  // `.seconds(2)` names both types: it keeps meaning a DispatchTimeInterval
    @inlinable
    public func wait(timeout: Duration) -> WaitSchedule<Value> {
        WaitSchedule(engine: engine, timeout: DispatchTimeInterval(timeout: timeout))
    }

    /// ``async(timeout:)-(DispatchTimeInterval)`` with a `Duration`, converted as
    /// ``wait(timeout:)-(Duration)`` converts it.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @_disfavoredOverload  // `.seconds(2)` names both types: it keeps meaning a DispatchTimeInterval
    @inlinable
    public func async(timeout: Duration) -> AwaitSchedule<Value> {
        AwaitSchedule(engine: engine, timeout: DispatchTimeInterval(timeout: timeout))
    }

    /// Non-blocking commands whose closures and completions run on `queue`.
    @inlinable
    public func async(performIn queue: DispatchQueue) -> DispatchSchedule<Value> {
        DispatchSchedule(engine: engine, queue: queue)
    }

    /// Non-blocking commands whose closures and completions run on the global concurrent queue of
    /// the given quality of service.
    @inlinable
    public func async(performIn qos: DispatchQoS.QoSClass) -> DispatchSchedule<Value> {
        DispatchSchedule(engine: engine, queue: .global(qos: qos))
    }

    /// Awaiting commands for Swift tasks: the task suspends for its turn, and closures may `await`
    /// while they hold the value. A stored property, like ``wait``.
    public let async: AwaitSchedule<Value>

    /// How many manual-completion closures (`done`) of this value's commands were released without
    /// being called. Each such command still ended; a growing count points at a code path that
    /// forgets to call `done()`.
    public var abandonedCompletionCount: Int {
        engine.droppedCompletionCount
    }

    /// What holds the value and what waits for it, right now: the kind of command in the critical
    /// section, whether it waits for its `done()`, and how many commands wait per priority. Never
    /// waits for the critical section, so it is safe to read while the value is stuck.
    public var diagnostics: QueueDiagnostics {
        engine.diagnostics
    }
}

// @unchecked Sendable: the value is touched only by the command holding the critical section, and
// for a non-Sendable value only through `withLock`, whose closure gets it as `inout sending` and
// returns a `sending` result (the commands that hand the value out require a Sendable one)
extension QueueSafeValue: @unchecked Sendable {}
