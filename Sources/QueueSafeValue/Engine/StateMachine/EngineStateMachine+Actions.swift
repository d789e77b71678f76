// The machine's one action vocabulary: what the storage does after a transition, once it has
// unlocked. Every transition that changes who holds, waits or is freed returns `Actions`, and
// `CommandEngine+Perform.swift` performs them in one place. Who starts a granted command (its own
// waiting party, a helper thread, the releasing block) is decided here, not by the storage.

extension EngineStateMachine {
    /// Who starts a command the machine has granted the section.
    enum Starter {
        /// Its own waiting party: a blocking command's thread is handed the section (spinning or
        /// parked), an awaiting command's task is resumed, a dispatched command's block is queued on
        /// its queue (published in the dispatched holder's slot first, so that a waiter running on
        /// that queue may still take it over).
        case itself
        /// A blocking command waiting on a thread that runs on the granted dispatched command's
        /// queue: that queue cannot run the command's block while the thread waits, so the thread
        /// runs the command itself, as a job handed to it.
        case helper(Handle)
        /// The dispatched block that just released runs on the same queue and may run its successor
        /// inline, without a new block (see `DispatchedCommand`'s batches). The grant is still
        /// published, so a waiter on that queue may take it over first.
        case releasingBlock
    }

    /// The command a transition granted the section, and how it starts.
    struct Grant {
        /// Its waiter.
        var handle: Handle
        /// Who starts it.
        var starter: Starter
        /// How long it waited, in milliseconds (for the monitor's long waits); ``unknownWait`` when
        /// it was granted ahead of the waiting order or in a batch of reads. Placed here, where the
        /// grant has room, so that the actions stay their size.
        var waited = Grant.unknownWait
        /// Parked waiters remain behind it: it inherits this urgency, raised by the releaser before
        /// it is started (see ``Urgency``); `none` if there is nothing to raise.
        var urgency: Urgency
        var kind: CommandKind
        /// It is a shared read: it holds beside other readers, and releases by its ticket (a
        /// dispatched one is not published in the dispatched holder's slot).
        var shared: Bool

        /// ``waited`` when the time the command waited is not at hand.
        static let unknownWait = UInt32.max
    }

    /// A rarer effect, kept out of the fields every release copies: the one vocabulary for them. The
    /// machine names each effect; the storage, in the transition's lock section, attaches what it
    /// needs from the waiter there (a continuation, a task: guarded by the engine lock), and adds
    /// the monitor's reports (``report(_:)``). After unlocking it carries them out in order.
    enum Other {
        /// The command left the queue and will never run: its suspended task is resumed (it then
        /// reads its verdict and throws). `resume`: its continuation, taken under the lock.
        case left(Handle, resume: TurnContinuation? = nil)
        /// The command's task is cancelled (``cancelAll()``: the operations that left, and the
        /// holder). `task`: the task, read under the lock.
        case cancel(Handle, task: (any CancellableTask)? = nil)
        /// A manual-completion command's completion arrived after its closure returned: finish it
        /// (wake its blocked thread, or release and deliver its dispatched completion).
        case finish(Handle)
        /// A shared read granted beside ``Actions/grant`` (in the same batch, or admitted while
        /// readers hold): its own party starts it.
        case startReader(Handle)
        /// A dispatched shared read granted beside ``Actions/grant``, for a queue on which
        /// `helper`, a waiting thread, runs: that thread runs it.
        case helpReader(Handle, helper: Handle)
        /// Eventually fair mode: the first waiting command, a blocking one, is woken to claim the
        /// section a release freed (``claim(_:parking:word:now:)``); a command that arrives
        /// meanwhile may take it first.
        case claim(Handle)
        /// A waiting command's deadline had passed when a grant came to it (``dropGivenUp(_:now:)``):
        /// it left the queue and fails with `.timedOut`: its suspended task is resumed (`resume`,
        /// taken under the lock), or else its parked thread woken.
        case expired(Handle, resume: TurnContinuation? = nil)
        /// A hold the monitor reported as long (``Hold/isReportedLong``) ended, after at least
        /// `nanoseconds`: the storage reports its end, naming the holder from the words that still
        /// name it (under the lock, it becomes a ``report(_:)``).
        case longHoldEnded(nanoseconds: UInt64)
        /// Tell the running monitor (the storage's: a long hold's end, a long wait).
        case report(QueueMonitor.Event)
    }

    /// What the storage performs after a transition, once the engine lock is released, in this
    /// order: raise and start the grant, end the releaser's boost, free the value, let go of an
    /// ended holder's task, then the others in order. Empty by default: most transitions need one
    /// or two of these. The one result of every transition that changes who holds, waits or is
    /// freed; the storage performs it in one place (`CommandEngine+Perform.swift`).
    struct Actions {
        /// The command granted the section, if any.
        var grant: Grant?
        /// The releasing thread had been raised for this hold: it ends its boost (after starting
        /// the grant: at its own priority it might not get the processor to hand the section on).
        var endBoost = false
        /// A waiter the holder inherited from stopped waiting without being granted: the holder's
        /// raised parties come down to what still waits (last, once everything else is done).
        var lowersBoost = false
        /// The container is gone and nothing holds or waits: free the value.
        var freeValue = false
        /// A tracked holder (an operation, a manual completion) ended: its task reference goes.
        var ended: Handle?
        /// What the transition found, for the caller that asked (most answer nothing).
        var found = Found.nothing
        /// The rarer actions, in order.
        var others: [Other] = []

        // Transparent: a debug build's `perform` makes one per transition, inline as before.
        @_transparent init() {}
    }

    /// What a transition that answers its caller found (``Actions/found``).
    enum Found: UInt8 {
        /// Nothing to answer.
        case nothing
        /// The command waits, in the place it was moved to (``reprioritize(_:to:now:)``).
        case moved
        /// The command waited and left the queue: it never runs.
        case left
        /// The command held the section without having begun: it gave it back and never runs.
        case gaveBack
        /// The command holds the section and has begun (or, for ``reprioritize(_:to:now:)``, holds
        /// it at all): its place no longer matters.
        case holding
        /// The command is gone: it ended, or left the queue earlier.
        case gone
        /// A claim (``claim(_:parking:word:now:)``) settled: the claimer was granted the section,
        /// or no longer waits; it looks at its own state.
        case settled
        /// A claim found the section held: the claimer goes on waiting, still on its way unless it
        /// parks.
        case stillHeld
        /// A claim found another command first now (woken or granted instead): the claimer goes on
        /// waiting, no longer on its way.
        case passedOn
    }
}

extension EngineStateMachine {
    /// Who starts `handle`, just granted as `kind`.
    /// - Parameters:
    ///   - releaserQueue: the queue of a dispatched block that released and could run a successor
    ///     for the same queue inline; 0 when the release came from anywhere else.
    ///   - boosted: the release ends a boost, so the releaser must not run more holders' code.
    ///
    /// `mutating` only so that calling it from a transition passes the machine in place: a
    /// non-mutating call from a mutating transition copied the machine, and the transition's next
    /// write to its records then copied the records array.
    mutating func starter(of handle: Handle, kind: CommandKind, releaserQueue: Int = 0, boosted: Bool = false)
        -> Starter
    {
        guard kind == .dispatched else { return .itself }
        let queue = handle.targetQueueID
        // A thread blocked on the command's queue runs it: its block could not run meanwhile.
        // mutant(helper-never-chosen): if false, table.hasHelpers, let helper = table.helper(forQueue: queue) { return .helper(helper) }
        if table.hasHelpers, let helper = table.helper(forQueue: queue) { return .helper(helper) }
        // mutant(inline-off-its-queue): if releaserQueue != 0 && !boosted { return .releasingBlock }
        if releaserQueue != 0 && queue == releaserQueue && !boosted { return .releasingBlock }
        return .itself
    }

    /// The exclusive grant of `handle`, with the urgency it inherits and how long it waited.
    mutating func grant(
        _ handle: Handle, kind: CommandKind, urgency: Urgency = .none, releaserQueue: Int = 0, boosted: Bool = false,
        waited: UInt32 = Grant.unknownWait
    ) -> Grant {
        let starter = starter(of: handle, kind: kind, releaserQueue: releaserQueue, boosted: boosted)
        return Grant(handle: handle, starter: starter, waited: waited, urgency: urgency, kind: kind, shared: false)
    }

    /// A dispatched holder was taken over by a waiting thread that does not run on its queue: it
    /// goes back. A waiter running on its queue that registered meanwhile runs it; otherwise it is
    /// published again and given a block of its own.
    mutating func returnTakenOver(_ handle: Handle) -> Actions {
        var actions = Actions()
        actions.grant = grant(handle, kind: .dispatched)
        return actions
    }
}

extension EngineStateMachine.Actions {
    /// Nothing to do.
    var isEmpty: Bool {
        grant == nil && ended == nil && others.isEmpty && !endBoost && !freeValue && !lowersBoost
    }
}
