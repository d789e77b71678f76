import Dispatch

// MARK: - AwaitSchedule

/// The Swift-concurrency schedule: `value.async` (the property, beside the dispatch method
/// `async(performIn:)`), at a priority.
///
/// A command issued here is awaited: the task suspends (never blocking a thread) until its turn,
/// and its closures run in the caller's isolation. Awaiting, blocking and dispatch commands share one
/// queue and one priority order. The schedule carries the command's priority
/// (``CommandPriority/default`` until you pick one), its timeout, and whether a cancelled task's
/// command leaves the queue (``evenIfCancelled``), so `value.async`, `value.async.highestPriority`
/// and `value.async.evenIfCancelled` are all this type, and every command is declared once.
///
/// Each command takes its place in the value's command queue when it is called (higher priority
/// first, FIFO within a priority; a running command is never preempted) and suspends the task until
/// its turn. When the queue is idle it does not suspend at all. Its closure runs in the caller's
/// isolation and may itself `await`: **the value stays exclusively held across every suspension
/// point of the closure**, so read-`await`-write never loses an update. That is the difference from
/// an actor, which lets other calls interleave at each `await`.
///
/// Errors (the command then never ran):
/// - `.cancelled`: the task was cancelled before the command started, or while it waited (it leaves
///   the queue at once). Cancellation after the closure started is the closure's business: it sees
///   `Task.isCancelled`. Commands for cleanup that must run are on ``evenIfCancelled``: they never
///   throw `.cancelled`.
/// - `.reentrantAccess`: the task (or a parent task) is inside a critical section of this value.
/// - `.deadlock(_:)`: suspending would never end: the value's holder waits, directly or through a
///   chain of holders, for a value this task holds. The report names the cycle.
/// - `.valueContainerDeinited`: the container was released before the call.
/// - `.timedOut(_:)`: only from ``QueueSafeValue/QueueSafeValue/async(timeout:)-(DispatchTimeInterval)``:
///   the command did not get its turn within the timeout. It left the queue and never runs; the
///   payload is a snapshot of the queue at that moment.
/// - `.invalidArgument(_:)`: a negative timeout.
public struct AwaitSchedule<Value> {
    @usableFromInline let engine: ValueEngine<Value>
    /// The priority its commands queue at.
    @usableFromInline let commandPriority: CommandPriority
    /// How long each command may wait for its turn (`nil`: no limit).
    @usableFromInline let timeout: DispatchTimeInterval?
    /// Whether a cancelled task's command leaves the queue (`false`: see ``evenIfCancelled``).
    @usableFromInline let cancellable: Bool

    @usableFromInline
    init(
        engine: ValueEngine<Value>, priority: CommandPriority = .default, timeout: DispatchTimeInterval? = nil,
        cancellable: Bool = true
    ) {
        self.engine = engine
        self.commandPriority = priority
        self.timeout = timeout
        self.cancellable = cancellable
    }

    /// Commands that run before every other pending command (FIFO among themselves).
    @inlinable
    public var highestPriority: AwaitSchedule<Value> { priority(.highest) }

    /// Commands that run after every other pending command (FIFO among themselves).
    ///
    /// Under steady load they can wait without bound: with the default
    /// ``CommandFairness/strictPriority`` every command of a higher priority that arrives goes
    /// first. For recurring or reporting work that must still run, give the value a bound,
    /// `QueueSafeValue(value: …, fairness: try .bounded(maxOvertakes: 16))`: then a waiting command
    /// is passed over by at most that many later arrivals (see ``CommandFairness``).
    @inlinable
    public var lowestPriority: AwaitSchedule<Value> { priority(.lowest) }

    /// Commands of ``CommandPriority/default`` priority: what a command without one runs at.
    @inlinable
    public var defaultPriority: AwaitSchedule<Value> { priority(.default) }

    /// Commands of the given priority: higher priorities run first, FIFO within a priority. Picking
    /// a priority again replaces the one before.
    @inlinable
    public func priority(_ priority: CommandPriority) -> AwaitSchedule<Value> {
        AwaitSchedule(engine: engine, priority: priority, timeout: timeout, cancellable: cancellable)
    }

    /// The same schedule for cleanup that must run: a command issued here waits for its turn and
    /// runs **even if the task is cancelled**, before the call or while it waits. It may come before
    /// or after the priority (`value.async.evenIfCancelled.highestPriority`,
    /// `value.async.highestPriority.evenIfCancelled`).
    ///
    /// ```swift
    /// let slots = QueueSafeValue(value: 1, label: "download slots")
    /// try? await slots.async.evenIfCancelled.withLock { $0 -= 1 }  // gives the slot back, always
    /// ```
    ///
    /// A plain awaiting command in a cancelled task throws `.cancelled` without running, which is
    /// what work should do and what cleanup must not: a slot, a count or a reservation given back
    /// with `try? await value.async.withLock { … }` in a `defer` or a `catch` is silently not given
    /// back once the task was cancelled. Everything else is as on the plain schedule: the same
    /// order (priority, then arrival), the same failures but `.cancelled` (`.timedOut(_:)` through
    /// ``QueueSafeValue/async(timeout:)-(DispatchTimeInterval)``, `.deadlock(_:)`, `.reentrantAccess`,
    /// `.valueContainerDeinited`), and the closure runs in the caller's isolation. Inside the
    /// closure `Task.isCancelled` still says `true`: keep cleanup short, and bound it with a timeout
    /// where the holder may take long. See <doc:Concurrency#Cleaning-up-in-a-cancelled-task>.
    @inlinable
    public var evenIfCancelled: AwaitSchedule<Value> {
        AwaitSchedule(engine: engine, priority: commandPriority, timeout: timeout, cancellable: false)
    }
}

extension AwaitSchedule: Sendable {}
