import Dispatch

// MARK: - WaitSchedule

/// The blocking schedule: `value.wait` (or `value.wait(timeout:)`).
///
/// A command issued here blocks the calling thread until the command has run, and its closures run
/// **on the calling thread**. Pick the command's priority next: `.highestPriority`,
/// `.lowestPriority` or `.priority(_:)`.
///
/// Holds the value's engine, not the container: it does not keep the container alive, and a
/// command issued after the container was released fails with `.valueContainerDeinited`.
public struct WaitSchedule<Value> {
    @usableFromInline let engine: ValueEngine<Value>
    @usableFromInline let timeout: DispatchTimeInterval?

    /// Commands that run before every other pending command (FIFO among themselves).
    ///
    /// Stored rather than computed, like ``QueueSafeValue/wait``: reaching it from a value you hold
    /// costs no reference-count traffic.
    public let highestPriority: WaitCommands<Value>

    /// Commands that run after every other pending command (FIFO among themselves).
    ///
    /// Under steady load they can wait without bound: with the default
    /// ``CommandFairness/strictPriority`` every command of a higher priority that arrives goes
    /// first. For recurring or reporting work that must still run, give the value a bound,
    /// `QueueSafeValue(value: …, fairness: try .bounded(maxOvertakes: 16))`: then a waiting command
    /// is passed over by at most that many later arrivals (see ``CommandFairness``).
    public let lowestPriority: WaitCommands<Value>

    @usableFromInline
    init(engine: ValueEngine<Value>, timeout: DispatchTimeInterval?) {
        self.engine = engine
        self.timeout = timeout
        highestPriority = WaitCommands(engine: engine, priority: .highest, timeout: timeout)
        lowestPriority = WaitCommands(engine: engine, priority: .lowest, timeout: timeout)
    }

    /// Commands of the given priority: higher priorities run first, FIFO within a priority.
    @inlinable
    public func priority(_ priority: CommandPriority) -> WaitCommands<Value> {
        WaitCommands(engine: engine, priority: priority, timeout: timeout)
    }
}

extension WaitSchedule: Sendable {}

// MARK: - WaitCommands

/// Blocking commands of one priority: `value.wait.highestPriority.{command}`.
///
/// Every command waits its turn in the value's command queue (higher priority first, FIFO within a
/// priority; a running command is never preempted), then runs its closure **on the calling thread**
/// while it holds the value exclusively. When the queue is idle the command runs at once, with no
/// allocation and no thread switch.
///
/// Failures come back as `.failure`, and then no closure has run:
/// - `.valueContainerDeinited`: the container was released before the call;
/// - `.reentrantAccess`: the calling thread (or task) is inside a critical section of this same
///   value, where waiting would deadlock;
/// - `.timedOut(_:)`: issued through `wait(timeout:)` and not started in time (it never runs later);
///   the diagnostics say what held the value and what waited for it;
/// - `.deadlock(_:)`: waiting would never end, and the command failed at once instead of parking
///   the thread: the value's holder waits (directly or through a chain of holders) for a value this
///   thread or task holds, or parking would leave Swift's cooperative pool no thread to resume the
///   task that holds the value. The report names the cycle;
/// - `.commandClosureDeallocated`: the closure passed was `nil`.
///
/// A command issued from a block running on a dispatch queue never waits forever for a dispatch
/// command that targets that queue and runs before it: the waiting thread runs that command itself
/// (it is running on the queue), and the command's own block then does nothing. See
/// <doc:GettingStarted#Deadlocks> for what is and is not detected.
public struct WaitCommands<Value> {
    @usableFromInline let engine: ValueEngine<Value>
    @usableFromInline let priority: CommandPriority
    @usableFromInline let timeout: DispatchTimeInterval?

    @usableFromInline
    init(engine: ValueEngine<Value>, priority: CommandPriority, timeout: DispatchTimeInterval?) {
        self.engine = engine
        self.priority = priority
        self.timeout = timeout
    }
}

// Holds the engine (Sendable) and plain values: shareable for any value, since the commands that
// hand the value out require a Sendable one.
extension WaitCommands: Sendable {}
