// MARK: - EngineWord

/// The engine's state word: what the lock-free idle path reads and writes.
///
/// | bits | meaning |
/// | --- | --- |
/// | 0–1 | the kind of command holding the section (``CommandKind/wordBits``), 0 when it is free |
/// | 2 | `slowRelease`: the holder must release under the lock (commands wait, or the state machine keeps a record of the holder) |
/// | 3 | `closed`: the container was released; new commands are refused |
/// | 4 | `shared`: shared reads that the machine keeps records of hold the section (bits 0–1 are 0, `slowRelease` is set) |
/// | 5… | how many shared reads that took the idle path hold the section (``idleReaderUnit`` each) |
///
/// The idle path of an exclusive command is exactly two compare-and-swaps: `0 → kind` to take a
/// free section and `kind → 0` to release one that nobody waits for. A blocking shared read's idle
/// path is one compare-and-swap each way too: it joins while the word shows no holder bits,
/// `slowRelease` or `closed` (`w → w + unit`), and leaves the same way while `slowRelease` and
/// `closed` are clear (`w → w - unit`). Each fails as soon as a bit it
/// must not see is set, and every other change of the word happens under the engine lock. That
/// gives the one invariant the idle path relies on:
///
/// > While `slowRelease` is clear, no command waits in the queue and the state machine keeps no
/// > holder record: the holder (an exclusive command, or the idle readers the word counts) may leave
/// > unseen.
///
/// In the eventually fair mode (``Barging``) the word may also be `slowRelease` alone: the section
/// is free, commands wait, and one of them was woken to claim it. Both idle takes fail on it (the
/// word is not 0, and `slowRelease` is set), so every arrival reaches the machine, which decides
/// whether it may take the section ahead of the waiting commands.
///
/// A locked transition that may race with the idle path first sets a bit with one atomic
/// read-modify-write (`slowRelease` to enqueue, `closed` to close): from then on no idle
/// compare-and-swap can succeed, so the transition decides on the value it read and stores its
/// result without a retry loop. In particular a writer that arrives while idle readers hold sets
/// `slowRelease`: no reader joins past it on the idle path, each leaves through the lock, and the
/// last one hands the section on.
@usableFromInline
enum EngineWord {
    /// The bits that say which kind of command holds the section.
    @usableFromInline static let holderMask = 0b0011
    /// The holder must release under the lock.
    @usableFromInline static let slowRelease = 0b0100
    /// The container was released.
    @usableFromInline static let closed = 0b1000
    /// Shared reads with records in the machine hold the section. Never set together with holder
    /// bits; always with `slowRelease`, so that they release through the lock.
    @usableFromInline static let shared = 0b1_0000
    /// One shared read that joined on the idle path: the word counts them from bit 5 up.
    @usableFromInline static let idleReaderUnit = 0b10_0000

    /// Whether a command (or several shared reads) holds the section: any bit but `slowRelease`
    /// and `closed`.
    @inline(__always)
    static func isHeld(_ word: Int) -> Bool { word & ~(slowRelease | closed) != 0 }

    /// Whether shared reads hold the section: listed ones (`shared`), or idle ones (the count).
    @inline(__always)
    static func readersHold(_ word: Int) -> Bool { word & shared != 0 || word >= idleReaderUnit }

    /// How many shared reads that took the idle path hold the section.
    @inline(__always)
    @inlinable
    static func idleReaders(_ word: Int) -> Int { word >> 5 }

    /// Whether a shared read may join on the idle path: nothing holds the section exclusively,
    /// nobody waits, and the container is open.
    @inlinable
    @inline(__always)
    static func admitsIdleReader(_ word: Int) -> Bool {
        // mutant(idle-reader-joins-past-writer): word & (holderMask | closed) == 0
        word & (holderMask | slowRelease | closed) == 0
    }

    /// Whether `word` shows `kind` holding the section with `slowRelease` or `closed` announced:
    /// the word an idle release that fails must leave (the holder then releases through the lock).
    @inlinable
    static func isAnnounced(_ word: Int, heldBy kind: CommandKind) -> Bool {
        word & holderMask == kind.wordBits && word & (slowRelease | closed) != 0
    }

    /// Whether an idle reader may leave on the idle path: nobody waits and the container is open.
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

    /// A command whose issuer goes on after issuing it (a dispatch command, a ``CommandQueue``
    /// operation): the issuer's next command may arrive while it still waits. A blocking or
    /// awaiting command's issuer waits with it.
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
