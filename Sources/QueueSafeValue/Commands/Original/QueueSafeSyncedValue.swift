import Dispatch

// MARK: - QueueSafeSyncedValue

/// A ``QueueSafeValue`` that only offers blocking commands, without the schedule step:
/// `syncedValue.lowestPriority.get()` is `value.wait.lowestPriority.get()`.
///
/// Commands block the calling thread until they have run, and their closures run on that thread;
/// see ``WaitSchedule`` for ordering and failures. The commands and the priority selectors are the
/// blocking schedule's (``WaitScheduling``); without a priority a command runs at
/// ``CommandPriority/default``.
public final class QueueSafeSyncedValue<Value> {
    /// Owns the engine: closes it when this container goes (see ``ContainerOwnership``).
    @usableFromInline let ownership: ContainerOwnership<Value>

    @inlinable var engine: ValueEngine<Value> { ownership.engine }
    @usableFromInline let timeout: DispatchTimeInterval?

    /// Wraps `value`. Commands wait for their turn as long as it takes.
    /// - Parameters:
    ///   - value: the value to guard; read and change it only through commands from now on.
    ///   - label: a name for diagnostics and deadlock reports.
    ///   - fairness: how priority is weighed against waiting time: ``CommandFairness/strictPriority``
    ///     (the default) or a bound on how often a waiting command is overtaken.
    public init(value: Value, label: String? = nil, fairness: CommandFairness = .strictPriority) {
        let engine = ValueEngine(value: value, label: label, fairness: fairness)
        ownership = ContainerOwnership(engine)
        timeout = nil
        schedule = WaitSchedule(engine: engine, timeout: nil)
    }

    /// Wraps `value`. Every command gives up with ``QueueSafeValueError/timedOut(_:)`` if it has not
    /// started within `timeout` (and then never runs); with a negative `timeout`, every command
    /// fails with ``QueueSafeValueError/invalidArgument(_:)``.
    /// - Parameters:
    ///   - value: the value to guard; read and change it only through commands from now on.
    ///   - timeout: how long each command may wait for its turn.
    ///   - label: a name for diagnostics and deadlock reports.
    ///   - fairness: how priority is weighed against waiting time: ``CommandFairness/strictPriority``
    ///     (the default) or a bound on how often a waiting command is overtaken.
    public init(
        value: Value, timeout: DispatchTimeInterval, label: String? = nil, fairness: CommandFairness = .strictPriority
    ) {
        let engine = ValueEngine(value: value, label: label, fairness: fairness)
        ownership = ContainerOwnership(engine)
        self.timeout = timeout
        schedule = WaitSchedule(engine: engine, timeout: timeout)
    }

    /// ``init(value:timeout:label:fairness:)-(_,DispatchTimeInterval,_,_)`` with a `Duration`, kept to
    /// the nanosecond; one beyond what a `DispatchTimeInterval` holds waits as long as the largest
    /// one.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @_disfavoredOverload  // `.seconds(2)` names both types: it keeps meaning a DispatchTimeInterval
    public convenience init(
        value: Value, timeout: Duration, label: String? = nil, fairness: CommandFairness = .strictPriority
    ) {
        self.init(value: value, timeout: DispatchTimeInterval(timeout: timeout), label: label, fairness: fairness)
    }

    /// The blocking schedule of the value, with the container's timeout: what its commands and
    /// priorities are. Stored, so reaching a priority costs no reference counting.
    @usableFromInline let schedule: WaitSchedule<Value>

    /// Commands that run before every other pending command (FIFO among themselves).
    @inlinable
    public var highestPriority: WaitCommands<Value> { schedule.highestPriority }

    /// Commands that run after every other pending command (FIFO among themselves).
    ///
    /// Under steady load they can wait without bound: with the default
    /// ``CommandFairness/strictPriority`` every command of a higher priority that arrives goes
    /// first. For recurring or reporting work that must still run, give the value a bound,
    /// `QueueSafeSyncedValue(value: …, fairness: try .bounded(maxOvertakes: 16))`: then a waiting
    /// command is passed over by at most that many later arrivals (see ``CommandFairness``).
    @inlinable
    public var lowestPriority: WaitCommands<Value> { schedule.lowestPriority }

    /// Commands of ``CommandPriority/default`` priority: what a command issued on the container
    /// itself runs at.
    @inlinable
    public var defaultPriority: WaitCommands<Value> { schedule.defaultPriority }

    /// How many manual-completion closures of this value's commands were released without being
    /// called (each such command still ended).
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

// @unchecked Sendable: the value is touched only by the command holding the critical section
extension QueueSafeSyncedValue: @unchecked Sendable where Value: Sendable {}

extension QueueSafeSyncedValue: WaitScheduling {
    /// The commands issued on the container itself: ``defaultPriority``.
    @_transparent
    public func waitCommands(_ key: SchedulingKey) -> WaitCommands<Value> { schedule.defaultPriority }
}
