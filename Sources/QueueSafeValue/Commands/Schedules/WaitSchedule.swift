import Dispatch

// MARK: - WaitSchedule

/// The blocking schedule: `value.wait` (or `value.wait(timeout:)`).
///
/// A command issued here blocks the calling thread until the command has run, and its closures run
/// **on the calling thread**. Issued on the schedule itself (`value.wait.withLock { … }`) a command
/// runs at ``CommandPriority/default``; pick another with ``highestPriority``, ``lowestPriority`` or
/// ``WaitScheduling/priority(_:)``, which give the same commands (``WaitCommands``) at that
/// priority. As on every schedule, a later choice of priority replaces an earlier one. Every
/// command is declared once, on ``WaitScheduling``, which the synced container shares.
///
/// Every command waits its turn in the value's command queue (higher priority first, FIFO within a
/// priority; a running command is never preempted), then runs its closure on the calling thread
/// while it holds the value exclusively (or shared, for `read`). When the queue is idle the command
/// runs at once, with no allocation and no thread switch.
///
/// Failures, and then no closure has run:
/// - `.valueContainerDeinited`: the container was released before the call;
/// - `.reentrantAccess`: the calling thread (or task) is inside a critical section of this same
///   value, where waiting would deadlock;
/// - `.timedOut(_:)`: issued through `wait(timeout:)` and not started in time (it never runs later);
///   the diagnostics say what held the value and what waited for it;
/// - `.deadlock(_:)`: waiting would never end, and the command failed at once instead of parking
///   the thread: the value's holder waits (directly or through a chain of holders) for a value this
///   thread or task holds, or parking would leave Swift's cooperative pool no thread to resume the
///   task that holds the value. The report names the cycle;
/// - `.invalidArgument(_:)`: a negative timeout;
/// - `.commandClosureDeallocated`: the closure passed was `nil`.
///
/// A command issued from a block running on a dispatch queue never waits forever for a dispatch
/// command that targets that queue and runs before it: the waiting thread runs that command itself
/// (it is running on the queue), and the command's own block then does nothing. See
/// <doc:GettingStarted#Deadlocks> for what is and is not detected.
///
/// Holds the value's engine, not the container: it does not keep the container alive, and a
/// command issued after the container was released fails with `.valueContainerDeinited`.
public struct WaitSchedule<Value> {
    @usableFromInline let engine: ValueEngine<Value>
    /// How long each command may wait for its turn (`nil`: no limit).
    @usableFromInline let timeout: DispatchTimeInterval?

    /// Commands that run before every other pending command (FIFO among themselves).
    ///
    /// Stored rather than computed, like ``QueueSafeValue/wait``: reaching it from a value you hold
    /// costs no reference counting (a computed one would retain and release the engine on every
    /// command; `Benchmarks.md` has the measurement).
    public let highestPriority: WaitCommands<Value>

    /// Commands that run after every other pending command (FIFO among themselves).
    ///
    /// Under steady load they can wait without bound: with the default
    /// ``CommandFairness/strictPriority`` every command of a higher priority that arrives goes
    /// first. For recurring or reporting work that must still run, give the value a bound,
    /// `QueueSafeValue(value: …, fairness: try .bounded(maxOvertakes: 16))`: then a waiting command
    /// is passed over by at most that many later arrivals (see ``CommandFairness``).
    public let lowestPriority: WaitCommands<Value>

    /// Commands of ``CommandPriority/default`` priority: what a command issued on the schedule
    /// itself (`value.wait.set …`) runs at. Stored, like ``highestPriority``.
    public let defaultPriority: WaitCommands<Value>

    @usableFromInline
    init(engine: ValueEngine<Value>, timeout: DispatchTimeInterval?) {
        self.engine = engine
        self.timeout = timeout
        highestPriority = WaitCommands(engine: engine, priority: .highest, timeout: timeout)
        lowestPriority = WaitCommands(engine: engine, priority: .lowest, timeout: timeout)
        defaultPriority = WaitCommands(engine: engine, priority: .default, timeout: timeout)
    }

}

// Holds the engine (Sendable) and plain values: shareable for any value, since the commands that
// hand the value out require a Sendable one.
extension WaitSchedule: Sendable {}

extension WaitSchedule: WaitScheduling {
    /// The commands issued on the schedule itself: ``defaultPriority``.
    @_transparent
    public func waitCommands(_ key: SchedulingKey) -> WaitCommands<Value> { defaultPriority }
}

// MARK: - WaitCommands

/// Blocking commands of one priority: `value.wait.highestPriority`, `value.wait.priority(.high)`.
///
/// The same commands as ``WaitSchedule`` (declared once, on ``WaitScheduling``), at the priority
/// chosen. Choosing again replaces it, as on every schedule: `value.wait.lowestPriority.highestPriority`
/// runs at the highest. Ordering, the thread the closures run on and the failures are
/// ``WaitSchedule``'s.
public struct WaitCommands<Value> {
    @usableFromInline let engine: ValueEngine<Value>
    /// The priority its commands queue at.
    @usableFromInline let commandPriority: CommandPriority
    /// How long each command may wait for its turn (`nil`: no limit).
    @usableFromInline let timeout: DispatchTimeInterval?

    @usableFromInline
    init(engine: ValueEngine<Value>, priority: CommandPriority, timeout: DispatchTimeInterval?) {
        self.engine = engine
        self.commandPriority = priority
        self.timeout = timeout
    }
}

// Holds the engine (Sendable) and plain values, as WaitSchedule.
extension WaitCommands: Sendable {}

extension WaitCommands: WaitScheduling {
    /// The commands themselves.
    @_transparent
    public func waitCommands(_ key: SchedulingKey) -> WaitCommands<Value> { self }
}

// MARK: - WaitScheduling

/// What blocking commands are issued on: the blocking schedule (``WaitSchedule``), its commands of
/// one priority (``WaitCommands``) and the synced container (``QueueSafeSyncedValue``).
///
/// The blocking commands (`withLock`, `read`, `transaction`, `get`, `set`, `map`) are declared once,
/// in this protocol's extensions, and run with the priority and timeout its one requirement names. A protocol,
/// because two structs and a class share them: the schedule and its priorities are two types so
/// that `value.wait.highestPriority` is a stored property (no reference counting on the idle path),
/// and the container is a class (it owns its value and closes it when it goes). Its one requirement
/// is plumbing that only this module can call (see ``SchedulingKey``).
public protocol WaitScheduling {
    /// The type of the guarded value.
    associatedtype Value
    /// The value's engine, the priority the commands queue at and how long they may wait. Plumbing:
    /// only this module can make the key, so only it can call this.
    func waitCommands(_ key: SchedulingKey) -> WaitCommands<Value>
}

/// The key to the plumbing requirements of ``WaitScheduling`` and ``DispatchScheduling``: only this
/// module can make one, so code outside it can conform to neither in a way that matters and can
/// call neither requirement (`value.wait.waitCommands(…)` does not compile without a key). It
/// carries nothing and costs nothing.
public struct SchedulingKey: Sendable {
    // Transparent, as the requirements' implementations are: inlined even in a debug build, where
    // the plumbing then reads a field as a stored property's accessor would.
    @_transparent @usableFromInline init() {}
}

extension WaitScheduling {
    // The parts the commands' bodies read.
    @inlinable var commands: WaitCommands<Value> { waitCommands(SchedulingKey()) }
    @inlinable var engine: ValueEngine<Value> { commands.engine }
    @inlinable var commandPriority: CommandPriority { commands.commandPriority }
    @inlinable var timeout: DispatchTimeInterval? { commands.timeout }
}

extension WaitScheduling {
    /// The same commands at ``CommandPriority/highest``, replacing the priority chosen before: they
    /// run before every other pending command (FIFO among themselves).
    ///
    /// ``WaitSchedule`` has its own, stored, and ``QueueSafeSyncedValue`` reads those: they reach the
    /// commands with no reference counting. This one serves a priority chosen again.
    @inlinable public var highestPriority: WaitCommands<Value> { priority(.highest) }

    /// The same commands at ``CommandPriority/lowest``, replacing the priority chosen before: they
    /// run after every other pending command (FIFO among themselves).
    @inlinable public var lowestPriority: WaitCommands<Value> { priority(.lowest) }

    /// The same commands at ``CommandPriority/default``, replacing the priority chosen before.
    @inlinable public var defaultPriority: WaitCommands<Value> { priority(.default) }

    /// The same commands at the given priority, replacing the one chosen before: higher priorities
    /// run first, FIFO within a priority.
    @inlinable
    public func priority(_ priority: CommandPriority) -> WaitCommands<Value> {
        WaitCommands(engine: engine, priority: priority, timeout: timeout)
    }
}
