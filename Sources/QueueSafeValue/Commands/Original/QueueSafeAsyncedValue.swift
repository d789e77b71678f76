import Dispatch

// MARK: - QueueSafeAsyncedValue

/// A ``QueueSafeValue`` that only offers dispatch commands on one queue, without the schedule step:
/// `asyncedValue.highestPriority.set(newValue: 1)` is
/// `value.async(performIn: queue).highestPriority.set(newValue: 1)`.
///
/// Commands return at once, wait in the queue without occupying a thread, and run their closures
/// and completions on `queue`; see ``DispatchSchedule`` for ordering and failures. The commands and
/// the priority selectors are the dispatch schedule's (``DispatchScheduling``); without a priority a
/// command runs at ``CommandPriority/default``.
public final class QueueSafeAsyncedValue<Value> {
    /// Owns the engine: closes it when this container goes (see ``ContainerOwnership``).
    @usableFromInline let ownership: ContainerOwnership<Value>

    @inlinable var engine: ValueEngine<Value> { ownership.engine }
    /// The queue every command's closures and completions run on.
    public let queue: DispatchQueue

    /// Wraps `value`; commands run their closures on `queue`.
    /// - Parameters:
    ///   - value: the value to guard; read and change it only through commands from now on.
    ///   - queue: the queue every command's closures and completions run on.
    ///   - label: a name for diagnostics and deadlock reports.
    ///   - fairness: how priority is weighed against waiting time: ``CommandFairness/strictPriority``
    ///     (the default) or a bound on how often a waiting command is overtaken.
    public init(
        value: Value, queue: DispatchQueue, label: String? = nil, fairness: CommandFairness = .strictPriority
    ) {
        let engine = ValueEngine(value: value, label: label, fairness: fairness)
        ownership = ContainerOwnership(engine)
        self.queue = queue
        storedSchedule = DispatchSchedule(engine: engine, queue: queue)
    }

    /// The dispatch schedule of the value on ``queue``: what its commands run on. Stored, so a
    /// command issued on the container costs no reference counting to reach it.
    @usableFromInline let storedSchedule: DispatchSchedule<Value>

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
extension QueueSafeAsyncedValue: @unchecked Sendable where Value: Sendable {}

extension QueueSafeAsyncedValue: DispatchScheduling {
    /// The container's schedule: the value on ``queue``, at ``CommandPriority/default``.
    @_transparent
    public func dispatchSchedule(_ key: SchedulingKey) -> DispatchSchedule<Value> { storedSchedule }
}
