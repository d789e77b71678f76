// MARK: - EngineWord

/// The engine's state word: what the lock-free idle path reads and writes.
///
/// | bits | meaning |
/// | --- | --- |
/// | 0–1 | the kind of command holding the section (``CommandKind/wordBits``), 0 when it is free |
/// | 2 | `slowRelease`: the holder must release under the lock (commands wait, or the state machine keeps a record of the holder) |
/// | 3 | `closed`: the container was released; new commands are refused |
/// | 4 | `shared`: shared reads hold the section (their number is the machine's; bits 0–1 are 0 and `slowRelease` is set, so every reader releases under the lock) |
///
/// The idle path is exactly two compare-and-swaps: `0 → kind` to take a free section and
/// `kind → 0` to release one that nobody waits for. Either fails as soon as any other bit is set,
/// and every other change of the word happens under the engine lock. That gives the one invariant
/// the idle path relies on:
///
/// > While no holder bits are set, no command waits in the queue and the state machine keeps no
/// > holder record.
///
/// A locked transition that may race with the idle path first sets a bit with one atomic
/// read-modify-write (`slowRelease` to enqueue, `closed` to close): from then on neither
/// compare-and-swap can succeed, so the transition decides on the value it read and stores its
/// result without a retry loop.
@usableFromInline
enum EngineWord {
    /// The bits that say which kind of command holds the section.
    @usableFromInline static let holderMask = 0b0011
    /// The holder must release under the lock.
    static let slowRelease = 0b0100
    /// The container was released.
    static let closed = 0b1000
    /// Shared reads hold the section. Never set together with holder bits; always with
    /// `slowRelease`, so that neither idle compare-and-swap succeeds while readers hold.
    static let shared = 0b1_0000

    /// Whether a command (or several shared reads) holds the section.
    @inline(__always)
    static func isHeld(_ word: Int) -> Bool { word & (holderMask | shared) != 0 }
}

// MARK: - CommandKind

/// How a command waits for its turn and where its closure runs.
@usableFromInline
enum CommandKind: UInt8, Hashable, Sendable, CustomStringConvertible {
    /// `wait` / `wait(timeout:)`: a thread blocks; the closure runs on it.
    case blocking
    /// `async(performIn:)`: nothing waits; the closure runs on a dispatch queue.
    case dispatched
    /// `value.async`: a task suspends; the closure runs in the caller's isolation.
    case awaiting
    /// A ``CommandQueue`` operation: a task of its own, which ``CommandQueue/cancelAll()`` reaches.
    case operation

    /// The holder bits of ``EngineWord`` for a holder of this kind: 1, 2, or 3 for a task (an
    /// awaiting command or an operation; the machine's record tells the two apart).
    @inline(__always)
    @inlinable
    var wordBits: Int {
        switch self {
        case .blocking: return 0b01
        case .dispatched: return 0b10
        case .awaiting, .operation: return 0b11
        }
    }

    @usableFromInline
    var description: String {
        switch self {
        case .blocking: return "blocking"
        case .dispatched: return "dispatch"
        case .awaiting: return "awaiting"
        case .operation: return "CommandQueue operation"
        }
    }
}

// MARK: - Urgency

/// How urgently a waiting party must run, which the holder of the section inherits while it waits:
/// `thread`, as the operating system schedules threads (on Linux a real-time priority, on Apple
/// platforms a QoS class; 0 for nothing to inherit), and `task`, a `TaskPriority` raw value (0 for
/// nothing). Each axis is compared on its own.
struct Urgency: Hashable, Sendable {
    var thread: Int32
    var task: UInt8

    init(thread: Int32 = 0, task: UInt8 = 0) {
        self.thread = thread
        self.task = task
    }

    static let none = Urgency()

    var isNone: Bool { self == .none }

    /// The higher of the two on each axis.
    func merged(_ other: Urgency) -> Urgency {
        Urgency(thread: max(thread, other.thread), task: max(task, other.task))
    }

    /// What a holder of the kind with these word bits (``CommandKind/wordBits``) inherits: a thread
    /// holder (blocking, dispatched) is raised as a thread, and runs no task section whose priority
    /// could matter; a task holder (awaiting, an operation) is escalated as a task and keeps the
    /// thread axis too, which it raises nothing with itself (it holds across suspensions on no
    /// thread of its own) but passes on to a thread holder it waits for in turn (a chain).
    func inheritable(byHolder holderBits: Int) -> Urgency {
        holderBits == CommandKind.awaiting.wordBits ? self : Urgency(thread: thread)
    }
}
