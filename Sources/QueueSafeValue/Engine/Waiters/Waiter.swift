import Dispatch

// MARK: - Waiter

/// A command's representative in the engine: what ``CommandEngine`` starts when the command's
/// turn comes (Architecture.md, "The three kinds of waiter"). The machine decides when and who
/// starts it; the hooks let the storage perform that on any kind without asking which it is.
// @unchecked Sendable: `isGranted` is touched only under the engine lock
@usableFromInline
class Waiter: @unchecked Sendable {
    /// The engine's verdict for the waiting party, written and read under the engine lock.
    final var isGranted = false
    /// Whether the grant made it a shared holder, written and read like ``isGranted``.
    final var isGrantedShared = false
    /// ``issuedPriority`` with bit 8 set, or 0. This and ``siteLine`` fill the padding after the
    /// flags instead of words of their own (see the field order of `DispatchedCommand`).
    private final var priorityTag: UInt16 = 0
    private final var siteLine: UInt32 = 0
    private final var siteFile: UnsafeRawPointer?

    /// The priority the command was issued with, set before it is enqueued; read like ``keptSite``.
    final var issuedPriority: CommandPriority? {
        get { priorityTag == 0 ? nil : CommandPriority(rawValue: UInt8(truncatingIfNeeded: priorityTag)) }
        set {
            priorityTag = 0
            if let newValue { priorityTag = 0x100 | UInt16(newValue.rawValue) }
        }
    }

    /// Where the command was issued, set before anyone else can see it, read under the engine lock.
    final var keptSite: KeptCallSite {
        get { KeptCallSite(file: siteFile, line: UInt(siteLine)) }
        set {
            siteFile = newValue.file
            siteLine = newValue.line
        }
    }

    /// A shared read's ticket, stored under the engine lock as it takes its place. Only a dispatched
    /// read keeps it (the others take theirs from the admission): stored here, it made every waiter
    /// a word larger.
    var readerTicket: CommandEngine.Ticket {
        get { .none }
        set {}  // nothing kept
    }

    /// The identity of the queue a dispatched command runs on (see `QueueTag`), or 0.
    var targetQueueID: Int { 0 }

    /// The thread that runs this command once granted, if known and alive until then, or 0.
    var threadToBoost: Int { 0 }

    /// A hint: the thread that runs this command once granted was last seen on the caller's processor.
    var waitsOnCallersProcessor: Bool { false }

    /// The task that runs this command once granted, if known and alive until then, or 0.
    var taskToEscalate: Int { 0 }

    /// A dispatched command's queue identity, given when it arrives.
    func adoptQueueID(_ identity: Int) {}

    /// Runs a granted dispatched command on a helping thread, instead of its block.
    func runOnHelper() {
        preconditionFailure("only dispatched commands run on a helper")
    }

    /// Starts the granted command, once per grant, outside the engine lock.
    @usableFromInline
    func start() {
        preconditionFailure("Waiter.start() must be overridden")
    }

    /// The manual completion arrived after the closure returned: finish the command, outside the lock.
    func finishManualCompletion() {
        preconditionFailure("Waiter.finishManualCompletion() must be overridden by manual-completion waiters")
    }

    // MARK: Hooks for the engine's actions

    /// Under the engine lock: this waiting thread is to run `command`, granted for its queue.
    func assignJob(_ command: Waiter) {
        preconditionFailure("only blocking waiters help")
    }

    /// After unlocking: wakes this waiting thread to run the job assigned to it.
    func postJob() {
        preconditionFailure("only blocking waiters help")
    }

    /// After unlocking, eventually fair mode: wakes this waiting thread to claim a freed section.
    func postClaim() {
        preconditionFailure("only blocking waiters claim")
    }

    /// Under the engine lock: the command left and never runs. Its task's continuation, to resume
    /// after unlocking, if it has one.
    var continuationToResume: TurnContinuation? { nil }

    /// Under the engine lock, when a grant comes to this command that may give up: whether it still
    /// wants its turn at `now` (0: no clock read yet; one with a deadline reads the coarse clock).
    func givesUp(at now: UInt64) -> EngineStateMachine.GiveUp { .stays }

    /// Whether `deadline` (0: none) has passed at `now`, read as ``givesUp(at:)`` reads it.
    @inline(__always)
    static func deadline(_ deadline: UInt64, hasPassedAt now: UInt64) -> Bool {
        deadline != 0 && deadline <= (now != 0 ? now : SyncPoints.coarseNow())
    }

    /// Under the engine lock: the command's deadline passed before its turn; it keeps `diagnostics`
    /// for its error.
    func expired(_ diagnostics: QueueDiagnostics) {}

    /// After unlocking: the command expired; a thread that waits for it is woken to find out.
    func postLeft() {}

    /// Under the engine lock: an operation's task, to cancel after unlocking.
    var taskToCancel: (any CancellableTask)? { nil }

    /// After unlocking: the tracked holder ended and the machine forgot it; it lets go of its task.
    func endHold() {}
}
