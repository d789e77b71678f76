// MARK: - EngineWord

/// The engine's state word, beside the lock (Architecture.md, "The state word: the one exception").
///
/// | bits | meaning |
/// | --- | --- |
/// | 0–1 | the kind of command holding the section (``CommandKind/wordBits``), 0 when it is free |
/// | 2 | `slowRelease`: the holder must release under the lock (commands wait, or the state machine keeps a record of the holder) |
/// | 3 | `closed`: the container was released; new commands are refused |
/// | 4 | `shared`: shared reads that the machine keeps records of hold the section (bits 0–1 are 0, `slowRelease` is set) |
/// | 5… | how many shared reads that took the idle path hold the section (``idleReaderUnit`` each) |
///
/// > While `slowRelease` is clear, no command waits in the queue and the state machine keeps no
/// > holder record: the holder (an exclusive command, or the idle readers the word counts) may leave
/// > unseen.
///
/// A writer that arrives while idle readers hold sets `slowRelease`: no reader joins past it, each
/// leaves through the lock, and the last hands the section on.
@usableFromInline
enum EngineWord {
    @usableFromInline static let holderMask = 0b0011
    @usableFromInline static let slowRelease = 0b0100
    @usableFromInline static let closed = 0b1000
    /// Never beside holder bits; always with `slowRelease`, so listed readers release through the lock.
    @usableFromInline static let shared = 0b1_0000
    @usableFromInline static let idleReaderUnit = 0b10_0000

    @inline(__always)
    static func isHeld(_ word: Int) -> Bool { word & ~(slowRelease | closed) != 0 }

    @inline(__always)
    static func readersHold(_ word: Int) -> Bool { word & shared != 0 || word >= idleReaderUnit }

    @inline(__always)
    @inlinable
    static func idleReaders(_ word: Int) -> Int { word >> 5 }

    @inlinable
    @inline(__always)
    static func admitsIdleReader(_ word: Int) -> Bool {
        // mutant(idle-reader-joins-past-writer): word & (holderMask | closed) == 0
        word & (holderMask | slowRelease | closed) == 0
    }

    /// The word an idle release that fails must leave.
    @inlinable
    static func isAnnounced(_ word: Int, heldBy kind: CommandKind) -> Bool {
        word & holderMask == kind.wordBits && word & (slowRelease | closed) != 0
    }

    @inlinable
    @inline(__always)
    static func releasesIdleReader(_ word: Int) -> Bool {
        // mutant(idle-reader-leaves-without-handing-on): word & closed == 0
        word & (slowRelease | closed) == 0
    }
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

    /// A task's (awaiting or operation) are one value: the machine's record tells them apart.
    @inline(__always)
    @inlinable
    var wordBits: Int {
        switch self {
        case .blocking: return 0b01
        case .dispatched: return 0b10
        case .awaiting, .operation: return 0b11
        }
    }

    /// Its issuer goes on, and the issuer's next command may arrive while it still waits.
    @inline(__always)
    var isDetached: Bool { self == .dispatched || self == .operation }

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

/// How urgently a waiting party must run, which the holder inherits: `thread` (Linux: a real-time
/// priority; Apple: a QoS class) and `task` (a `TaskPriority` raw value), 0 for nothing, each axis
/// compared on its own.
struct Urgency: Hashable, Sendable {
    var thread: Int32 = 0
    var task: UInt8 = 0

    static let none = Urgency()

    var isNone: Bool { self == .none }

    func merged(_ other: Urgency) -> Urgency {
        Urgency(thread: max(thread, other.thread), task: max(task, other.task))
    }

    /// A thread holder inherits the thread axis alone; a task holder both, raising nothing with the
    /// thread axis itself but passing it on to a thread holder it waits for (a chain).
    func inheritable(byHolder holderBits: Int) -> Urgency {
        holderBits == CommandKind.awaiting.wordBits ? self : Urgency(thread: thread)
    }
}
