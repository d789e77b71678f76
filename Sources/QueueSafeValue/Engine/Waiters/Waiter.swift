import Dispatch

// MARK: - Waiter

/// A command's representative in the engine: what ``CommandEngine`` starts when the command's
/// turn comes. One kind per way of waiting, side by side in this folder:
///
/// | waiter | waits by | started by |
/// | --- | --- | --- |
/// | ``BlockingWaiter`` | its thread spinning, then parking on a semaphore | a store into its word, and a signal if it parked |
/// | ``DispatchedCommand`` | nothing: it is a record in the queue | `queue.async` of its block |
/// | ``AwaitingWaiter`` | its task suspending on a continuation | resuming the continuation |
///
/// The engine's state machine decides when a waiter starts and who starts it; the waiter only
/// knows how. The hooks below let the storage perform the machine's actions on any kind of waiter
/// without asking which kind it is (see `CommandEngine+Perform.swift`); each kind overrides the
/// ones that concern it.
// @unchecked Sendable: `isGranted` is touched only under the engine lock
@usableFromInline
class Waiter: @unchecked Sendable {
    /// The engine's verdict for the waiting party, written under the engine lock when the state
    /// machine grants the command. Read under the same lock (see
    /// ``CommandEngine/waitForTurn(_:deadline:holdsNothing:startedLater:cancellable:)``).
    final var isGranted = false
    /// Whether the grant made it a shared holder (a shared read, or an operation of a queue of width
    /// above 1), written and read like ``isGranted``.
    final var isGrantedShared = false
    /// The command's priority with bit 8 set, once its issuer placed it (see ``issuedPriority``);
    /// 0 before. Beside the two flags, in the padding before ``siteLine``.
    private final var priorityTag: UInt16 = 0
    /// The line of the command's call site (see ``keptSite``). Declared here, beside the two flags,
    /// so that it takes the padding before the next word instead of a word of its own (see the field
    /// order of `DispatchedCommand`).
    private final var siteLine: UInt32 = 0
    /// The address of the command's `#fileID` (see ``keptSite``).
    private final var siteFile: UnsafeRawPointer?

    /// The priority the command was issued with, set by its issuer before the command is enqueued
    /// (`nil` before); read like ``keptSite``.
    final var issuedPriority: CommandPriority? {
        get { priorityTag == 0 ? nil : CommandPriority(rawValue: UInt8(truncatingIfNeeded: priorityTag)) }
        set {
            priorityTag = 0
            if let newValue { priorityTag = 0x100 | UInt16(newValue.rawValue) }
        }
    }

    /// Where the command was issued, set by its issuer before the command can be seen by anyone
    /// else (before it is enqueued), and read under the engine lock: by diagnostics, and by the
    /// storage when the command is granted the section (``CommandEngine/keepHolderSite(_:)``).
    final var keptSite: KeptCallSite {
        get { KeptCallSite(file: siteFile, line: UInt(siteLine)) }
        set {
            siteFile = newValue.file
            siteLine = newValue.line
        }
    }

    /// A shared read's ticket, stored under the engine lock when it takes its place (before any
    /// release can grant it); read by the read's own party once granted. Only a dispatched shared
    /// read keeps it (``DispatchedSharedRead``): it is the one party that reads it back (blocking
    /// and awaiting reads take theirs from the admission), and a stored ticket here made every
    /// waiter a word larger, and a dispatch command a larger allocation (see `DispatchedCommand`).
    var readerTicket: CommandEngine.Ticket {
        get { .none }
        set {}  // nothing kept: see above
    }

    /// The queue a dispatched command runs on; `nil` for the other kinds.
    var targetQueue: DispatchQueue? { nil }

    /// The identity of ``targetQueue`` (see `QueueTag`) for a dispatched command; 0 otherwise.
    var targetQueueID: Int { 0 }

    /// The thread that runs this command once it is granted, if it is known and alive until then
    /// (a blocking waiter's own thread); 0 otherwise. Priority inheritance raises it.
    var threadToBoost: Int { 0 }

    /// Whether the thread that runs this command once granted was last seen waiting on the
    /// processor the caller runs on (a blocking waiter's own thread): it cannot start while the
    /// caller keeps that processor. A hint, `false` when unknown.
    var waitsOnCallersProcessor: Bool { false }

    /// The task that runs this command once it is granted, if it is known and alive until then (a
    /// suspended task); 0 otherwise. Priority inheritance escalates it.
    var taskToEscalate: Int { 0 }

    /// Runs a granted dispatched command on the calling thread, which runs on its queue and waits
    /// for the same section (see *helping* in ``BlockingWaiter``): the command's block is not run.
    /// A dispatched command's queue identity, which the storage gives it when it arrives (see
    /// ``CommandEngine/admitDispatched(_:on:priority:)``). Other waiters run on no queue of their own.
    func adoptQueueID(_ identity: Int) {}

    func runOnHelper() {
        preconditionFailure("only dispatched commands run on a helper")
    }

    /// Starts the command after the engine granted it the section. Called once per grant, by the
    /// releasing thread, outside the engine lock.
    @usableFromInline
    func start() {
        preconditionFailure("Waiter.start() must be overridden")
    }

    /// The manual completion of the command arrived after its closure had returned: finish the
    /// command. Called outside the engine lock, on the thread that called (or dropped) `done`.
    func finishManualCompletion() {
        preconditionFailure("Waiter.finishManualCompletion() must be overridden by manual-completion waiters")
    }

    // MARK: Hooks for the engine's actions

    /// Under the engine lock: the machine chose this waiting command's thread to run `command`, a
    /// granted dispatched command for a queue the thread runs on (see *helping* in
    /// ``BlockingWaiter``). ``postJob()`` follows after unlocking.
    func assignJob(_ command: Waiter) {
        preconditionFailure("only blocking waiters help")
    }

    /// After unlocking: wakes this waiting thread to run the job assigned to it.
    func postJob() {
        preconditionFailure("only blocking waiters help")
    }

    /// After unlocking, eventually fair mode: wakes this waiting thread to claim the section a
    /// release freed (see ``EngineStateMachine/claim(_:parking:word:now:)``).
    func postClaim() {
        preconditionFailure("only blocking waiters claim")
    }

    /// Under the engine lock: the command left the queue and never runs. The continuation of its
    /// suspended task, to resume after unlocking, if it has one (a thread that left wakes by itself,
    /// and a dispatched command has no one waiting).
    var continuationToResume: TurnContinuation? { nil }

    /// Under the engine lock, when a grant comes to this waiting command that may give up (see
    /// ``EngineStateMachine/dropGivenUp(_:now:)``): whether it still wants its turn at `now`
    /// (`uptimeNanoseconds`, the engine's clock; 0 where the transition read no clock: a command
    /// with a deadline then reads the engine's coarse clock itself).
    func givesUp(at now: UInt64) -> EngineStateMachine.GiveUp { .stays }

    /// Whether `deadline` (`uptimeNanoseconds`; 0: none) has passed at `now`, read as
    /// ``givesUp(at:)`` reads it (0: the engine's coarse clock, read here).
    @inline(__always)
    static func deadline(_ deadline: UInt64, hasPassedAt now: UInt64) -> Bool {
        deadline != 0 && deadline <= (now != 0 ? now : SyncPoints.coarseNow())
    }

    /// Under the engine lock: the machine found this command's deadline passed before its turn
    /// (``EngineStateMachine/Other/expired(_:)``); `diagnostics` is the queue as it was. The
    /// command keeps them for its error.
    func expired(_ diagnostics: QueueDiagnostics) {}

    /// After unlocking: this waiting command left the queue on the machine's decision (it expired):
    /// a thread that waits for it is woken to find out. (A suspended task is resumed instead.)
    func postLeft() {}

    /// Under the engine lock: the task that runs the command, to cancel after unlocking, if it has
    /// one (a ``CommandQueue`` operation).
    var taskToCancel: (any CancellableTask)? { nil }

    /// After unlocking: the command, whose record the machine kept while it held the section,
    /// ended (the machine forgot it in the same transition, so nothing else touches it through the
    /// engine any more). It lets go of its task.
    func endHold() {}
}
