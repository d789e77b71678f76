import Dispatch

// MARK: - AwaitSchedule

/// The Swift-concurrency schedule: `value.async` (the property, beside the dispatch method
/// `async(performIn:)`).
///
/// A command issued here is awaited: the task suspends (never blocking a thread) until its turn,
/// and its closures run in the caller's isolation. Awaiting, blocking and dispatch commands share one
/// queue and one priority order. Pick the command's priority next.
public struct AwaitSchedule<Value> {
    @usableFromInline let engine: ValueEngine<Value>
    /// How long each command may wait for its turn (`nil`: no limit).
    @usableFromInline let timeout: DispatchTimeInterval?
    /// Whether a cancelled task's command leaves the queue (`false`: see ``evenIfCancelled``).
    @usableFromInline let cancellable: Bool

    /// Commands that run before every other pending command (FIFO among themselves).
    ///
    /// Stored rather than computed, like ``QueueSafeValue/async``: reaching it from a value you hold
    /// costs no reference-count traffic.
    public let highestPriority: AwaitCommands<Value>

    /// Commands that run after every other pending command (FIFO among themselves).
    ///
    /// Under steady load they can wait without bound: with the default
    /// ``CommandFairness/strictPriority`` every command of a higher priority that arrives goes
    /// first. For recurring or reporting work that must still run, give the value a bound,
    /// `QueueSafeValue(value: …, fairness: try .bounded(maxOvertakes: 16))`: then a waiting command
    /// is passed over by at most that many later arrivals (see ``CommandFairness``).
    public let lowestPriority: AwaitCommands<Value>

    @usableFromInline
    init(engine: ValueEngine<Value>, timeout: DispatchTimeInterval? = nil, cancellable: Bool = true) {
        self.engine = engine
        self.timeout = timeout
        self.cancellable = cancellable
        highestPriority = AwaitCommands(engine: engine, priority: .highest, timeout: timeout, cancellable: cancellable)
        lowestPriority = AwaitCommands(engine: engine, priority: .lowest, timeout: timeout, cancellable: cancellable)
    }

    /// Commands of the given priority: higher priorities run first, FIFO within a priority.
    @inlinable
    public func priority(_ priority: CommandPriority) -> AwaitCommands<Value> {
        AwaitCommands(engine: engine, priority: priority, timeout: timeout, cancellable: cancellable)
    }

    /// The same schedule for cleanup that must run: a command issued here waits for its turn and
    /// runs **even if the task is cancelled**, before the call or while it waits.
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
        AwaitSchedule(engine: engine, timeout: timeout, cancellable: false)
    }
}

extension AwaitSchedule: Sendable {}

// MARK: - AwaitCommands

/// Awaiting commands of one priority: `try await value.async.highestPriority.{command}`.
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
/// - `.timedOut(_:)`: only from ``QueueSafeValue/QueueSafeValue/async(timeout:)-(DispatchTimeInterval)``: the command did
///   not get its turn within the timeout. It left the queue and never runs; the payload is a
///   snapshot of the queue at that moment.
public struct AwaitCommands<Value> {
    @usableFromInline let engine: ValueEngine<Value>
    @usableFromInline let priority: CommandPriority
    @usableFromInline let timeout: DispatchTimeInterval?
    /// Whether a cancelled task's command leaves the queue (`false`: see ``evenIfCancelled``).
    @usableFromInline let cancellable: Bool

    @usableFromInline
    init(
        engine: ValueEngine<Value>, priority: CommandPriority, timeout: DispatchTimeInterval? = nil,
        cancellable: Bool = true
    ) {
        self.engine = engine
        self.priority = priority
        self.timeout = timeout
        self.cancellable = cancellable
    }

    /// The same commands for cleanup that must run: each waits for its turn and runs even if the
    /// task is cancelled (`value.async.highestPriority.evenIfCancelled.withLock { … }`). See
    /// ``AwaitSchedule/evenIfCancelled``.
    @inlinable
    public var evenIfCancelled: AwaitCommands<Value> {
        AwaitCommands(engine: engine, priority: priority, timeout: timeout, cancellable: false)
    }
}

extension AwaitCommands: Sendable {}
