import Dispatch

// MARK: - DispatchSchedule

/// The dispatch schedule: `value.async(performIn: queue)`.
///
/// A command issued here returns at once. It takes its place in the value's command queue at the
/// moment of the call (so commands issued one after another from one thread keep that order within a
/// priority), waits there without occupying any thread, and runs its closures **on `queue`** when its
/// turn comes. Pick the command's priority next.
///
/// Holds the value's engine, not the container: it does not keep the container alive, and a
/// command issued after the container was released reports `.valueContainerDeinited` on `queue`.
public struct DispatchSchedule<Value> {
    @usableFromInline let engine: ValueEngine<Value>
    @usableFromInline let queue: DispatchQueue

    @usableFromInline
    init(engine: ValueEngine<Value>, queue: DispatchQueue) {
        self.engine = engine
        self.queue = queue
    }

    /// Commands that run before every other pending command (FIFO among themselves).
    @inlinable
    public var highestPriority: DispatchCommands<Value> { priority(.highest) }

    /// Commands that run after every other pending command (FIFO among themselves).
    ///
    /// Under steady load they can wait without bound: with the default
    /// ``CommandFairness/strictPriority`` every command of a higher priority that arrives goes
    /// first. For recurring or reporting work that must still run, give the value a bound,
    /// `QueueSafeValue(value: …, fairness: try .bounded(maxOvertakes: 16))`: then a waiting command
    /// is passed over by at most that many later arrivals (see ``CommandFairness``).
    @inlinable
    public var lowestPriority: DispatchCommands<Value> { priority(.lowest) }

    /// Commands of the given priority: higher priorities run first, FIFO within a priority.
    @inlinable
    public func priority(_ priority: CommandPriority) -> DispatchCommands<Value> {
        DispatchCommands(engine: engine, queue: queue, priority: priority)
    }
}

extension DispatchSchedule: Sendable {}

// MARK: - DispatchCommands

/// Non-blocking commands of one priority: `value.async(performIn: queue).highestPriority.{command}`.
///
/// Each call returns immediately. The command is placed in the value's command queue at the moment
/// of the call (higher priority first, FIFO within a priority; a running command is never
/// preempted), waits there without occupying a thread, and then runs its closures on the schedule's
/// queue while it holds the value exclusively. A `completion` runs on the same queue after the
/// value has been released.
///
/// Failures are delivered on the queue too, and then no access closure has run:
/// `.valueContainerDeinited` if the container was released before the call,
/// `.commandClosureDeallocated` if the closure passed was `nil`.
///
/// If a thread running on the schedule's queue blocks in a `wait` command of the same value while
/// such a command must run first, that thread runs the command's closures itself (it is running on
/// the queue, so they still run "on the queue"), and the command's block then does nothing: the
/// queue never waits for a block it is blocking. Each command runs exactly once either way; its
/// completion is then delivered in a block of its own on the queue.
public struct DispatchCommands<Value> {
    @usableFromInline let engine: ValueEngine<Value>
    @usableFromInline let queue: DispatchQueue
    @usableFromInline let priority: CommandPriority

    @usableFromInline
    init(engine: ValueEngine<Value>, queue: DispatchQueue, priority: CommandPriority) {
        self.engine = engine
        self.queue = queue
        self.priority = priority
    }
}

extension DispatchCommands: Sendable {}
