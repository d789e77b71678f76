// What the storage performs after a transition, once it unlocked (`CommandEngine+Perform.swift`;
// Architecture.md, "What a transition returns", lists each action), and who starts a grant.

extension EngineStateMachine {
    /// Who starts a granted command.
    enum Starter {
        /// Its own party (a dispatched block is published first, so a waiter on its queue may take it
        /// over).
        case itself
        /// A blocking command whose thread runs on the dispatched command's queue, which cannot run
        /// the block while that thread waits.
        case helper(Handle)
        /// The releasing dispatched block, on the same queue, runs it inline (still published).
        case releasingBlock
    }

    struct Grant {
        var handle: Handle
        var starter: Starter
        /// In milliseconds, for the monitor's long waits; here, where the grant has room, so the
        /// actions stay their size.
        var waited = Grant.unknownWait
        /// What it inherits from the parked waiters behind it, raised before it starts.
        var urgency: Urgency
        var kind: CommandKind
        /// A shared read: it releases by its ticket, and is not published in the dispatched slot.
        var shared: Bool

        /// Granted ahead of the order, or in a batch of reads.
        static let unknownWait = UInt32.max
    }

    /// The rare effects, kept out of the fields every release copies. The storage attaches what it
    /// needs from the waiter under the lock (`resume`, `task`: guarded by the engine lock).
    enum Other {
        case left(Handle, resume: TurnContinuation? = nil)
        case cancel(Handle, task: (any CancellableTask)? = nil)
        case finish(Handle)
        case startReader(Handle)
        case helpReader(Handle, helper: Handle)
        case claim(Handle)
        case expired(Handle, resume: TurnContinuation? = nil)
        /// Under the lock it becomes a ``report(_:)`` naming the holder from the words.
        case longHoldEnded(nanoseconds: UInt64)
        case report(QueueMonitor.Event)
    }

    /// Performed in this order: raise and start the grant, end the releaser's boost, free the
    /// value, let go of an ended holder's task, the others, and last lower the boost.
    struct Actions {
        var grant: Grant?
        /// After starting the grant: at its own priority the releaser might not get the processor
        /// to hand the section on.
        var endBoost = false
        var lowersBoost = false
        var freeValue = false
        var ended: Handle?
        var found = Found.nothing
        var others: [Other] = []

        // Transparent: a debug build's `perform` makes one per transition, inline as before.
        @_transparent init() {}

        /// The answer of a transition that has nothing else to do.
        init(found: Found) { self.found = found }
    }

    /// What a transition that answers its caller found.
    enum Found: UInt8 {
        case nothing
        /// ``reprioritize(_:to:now:)`` moved it.
        case moved
        /// It waited and left: it never runs.
        case left
        /// It held without having begun, and gave the section back: it never runs.
        case gaveBack
        /// It holds (and has begun); for ``reprioritize(_:to:now:)``, holds at all.
        case holding
        /// It ended, or left earlier.
        case gone
        /// A claim settled: the claimer was granted, or no longer waits.
        case settled
        /// A claim found the section held: the claimer waits on, on its way unless it parks.
        case stillHeld
        /// Another command is first now: the claimer waits on, no longer on its way.
        case passedOn
    }
}

extension EngineStateMachine {
    /// Who starts `handle`, just granted as `kind`. `boosted`: the release ends a boost, so the
    /// releaser runs no more holders' code.
    ///
    /// `mutating` so that a transition passes the machine in place: a non-mutating call copied the
    /// machine, and the next write to its records then copied the records array.
    mutating func starter(of handle: Handle, kind: CommandKind, releaserQueue: Int = 0, boosted: Bool = false)
        -> Starter
    {
        guard kind == .dispatched else { return .itself }
        let queue = handle.targetQueueID
        // mutant(helper-never-chosen): if false, table.hasHelpers, let helper = table.helper(forQueue: queue) { return .helper(helper) }
        if table.hasHelpers, let helper = table.helper(forQueue: queue) { return .helper(helper) }
        // mutant(inline-off-its-queue): if releaserQueue != 0 && !boosted { return .releasingBlock }
        if releaserQueue != 0 && queue == releaserQueue && !boosted { return .releasingBlock }
        return .itself
    }

    /// The waiting command `ticket`'s thread runs on `queues`: it runs the dispatched commands
    /// granted for them while it waits.
    mutating func registerHelper(_ ticket: Ticket, queues: [Int]) {
        table.registerHelper(ticket, queues: queues)
    }

    mutating func grant(
        _ handle: Handle, kind: CommandKind, urgency: Urgency = .none, releaserQueue: Int = 0, boosted: Bool = false,
        waited: UInt32 = Grant.unknownWait
    ) -> Grant {
        let starter = starter(of: handle, kind: kind, releaserQueue: releaserQueue, boosted: boosted)
        return Grant(handle: handle, starter: starter, waited: waited, urgency: urgency, kind: kind, shared: false)
    }

    /// A thread that took a dispatched holder over, but does not run on its queue, gives it back.
    mutating func returnTakenOver(_ handle: Handle) -> Actions {
        var actions = Actions()
        actions.grant = grant(handle, kind: .dispatched)
        return actions
    }
}

extension EngineStateMachine.Actions {
    var isEmpty: Bool {
        grant == nil && ended == nil && others.isEmpty && !endBoost && !freeValue && !lowersBoost
    }
}
