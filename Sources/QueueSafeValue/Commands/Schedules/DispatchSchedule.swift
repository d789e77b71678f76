import Dispatch

// MARK: - DispatchSchedule

/// The dispatch schedule: `value.async(performIn: queue)`, at a priority.
///
/// A command issued here returns at once. It takes its place in the value's command queue at the
/// moment of the call (so commands issued one after another from one thread keep that order within a
/// priority; higher priority first; a running command is never preempted), waits there without
/// occupying any thread, and runs its closures **on `queue`** when its turn comes, holding the value
/// exclusively (or shared, for `read`). A `completion` runs on the same queue after the value has
/// been released. The schedule carries the queue and the command's priority
/// (``CommandPriority/default`` until you pick one), so every command is declared once (on
/// ``DispatchScheduling``, which the asynced container shares).
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
///
/// Holds the value's engine, not the container: it does not keep the container alive, and a
/// command issued after the container was released reports `.valueContainerDeinited` on `queue`.
public struct DispatchSchedule<Value> {
    @usableFromInline let engine: ValueEngine<Value>
    @usableFromInline let queue: DispatchQueue
    /// The priority its commands queue at.
    @usableFromInline let commandPriority: CommandPriority

    @usableFromInline
    init(engine: ValueEngine<Value>, queue: DispatchQueue, priority: CommandPriority = .default) {
        self.engine = engine
        self.queue = queue
        self.commandPriority = priority
    }
}

extension DispatchSchedule: Sendable {}

extension DispatchSchedule: DispatchScheduling {
    /// The schedule itself.
    @_transparent
    public func dispatchSchedule(_ key: SchedulingKey) -> DispatchSchedule<Value> { self }
}

// MARK: - DispatchScheduling

/// What dispatch commands are issued on: the dispatch schedule (``DispatchSchedule``) and the
/// asynced container (``QueueSafeAsyncedValue``), which is a dispatch schedule on its queue without
/// the schedule step.
///
/// The dispatch commands (`withLock`, `read`, `transaction`, `get`, `set`, `map`) and the priority
/// selectors are declared once, in this protocol's extensions, and run on the schedule its one
/// requirement names: its queue and its priority. A protocol, because the container is a class (it
/// owns its value and closes it when it goes) and a class can share a struct's methods no other
/// way; the requirement is plumbing that only this module can call (see ``SchedulingKey``).
public protocol DispatchScheduling {
    /// The type of the guarded value.
    associatedtype Value
    /// The dispatch schedule the commands run on: the value's engine, a queue and a priority.
    /// Plumbing: only this module can make the key, so only it can call this.
    func dispatchSchedule(_ key: SchedulingKey) -> DispatchSchedule<Value>
}

extension DispatchScheduling {
    /// The schedule the commands run on.
    @inlinable var schedule: DispatchSchedule<Value> { dispatchSchedule(SchedulingKey()) }
}

extension DispatchScheduling {
    /// Commands that run before every other pending command (FIFO among themselves).
    @inlinable
    public var highestPriority: DispatchSchedule<Value> { priority(.highest) }

    /// Commands that run after every other pending command (FIFO among themselves).
    ///
    /// Under steady load they can wait without bound: with the default
    /// ``CommandFairness/strictPriority`` every command of a higher priority that arrives goes
    /// first. For recurring or reporting work that must still run, give the value a bound,
    /// `QueueSafeValue(value: …, fairness: try .bounded(maxOvertakes: 16))`: then a waiting command
    /// is passed over by at most that many later arrivals (see ``CommandFairness``).
    @inlinable
    public var lowestPriority: DispatchSchedule<Value> { priority(.lowest) }

    /// Commands of ``CommandPriority/default`` priority: what a command without one runs at.
    @inlinable
    public var defaultPriority: DispatchSchedule<Value> { priority(.default) }

    /// Commands of the given priority: higher priorities run first, FIFO within a priority. Picking
    /// a priority again replaces the one before.
    @inlinable
    public func priority(_ priority: CommandPriority) -> DispatchSchedule<Value> {
        let schedule = self.schedule
        return DispatchSchedule(engine: schedule.engine, queue: schedule.queue, priority: priority)
    }
}
