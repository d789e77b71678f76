// MARK: - EngineStateMachine

/// Every decision of the command engine, as a plain value: who holds the critical section, who
/// waits and in which order, who left, when the value may be freed, and what ``CommandQueue``'s
/// `cancelAll()` and manual completions do.
///
/// No locks, atomics, semaphores, continuations or dispatch live here. ``CommandEngine`` owns one
/// machine, calls a transition with its lock held and performs the returned action after unlocking:
/// wake a thread, dispatch a block, resume a task, cancel a task, free the value. `Handle` is what
/// the engine needs to start a command (its waiter object); the machine only stores and returns it,
/// so the tests drive the very same transitions with plain integers.
///
/// Transitions that race with the lock-free idle path take the state word the engine observed
/// (`observed`) and return the word to store; see ``EngineWord``.
struct EngineStateMachine {
    /// What the machine keeps for a command: the storage's waiter object, which it only stores,
    /// returns in its actions, and asks one thing (``Waiter/targetQueueID``, to decide who starts
    /// a dispatched command).
    typealias Handle = Waiter

    /// Identifies a command's record while it waits or holds the section. A ticket of a command
    /// that has ended no longer matches its slot: the generation moved on.
    struct Ticket: Hashable, Sendable {
        let slot: UInt32
        let generation: UInt32

        /// A ticket that matches no command.
        static var none: Ticket { Ticket(slot: .max, generation: 0) }

        init(slot: UInt32, generation: UInt32) {
            self.slot = slot
            self.generation = generation
        }

        /// The ticket in one 64-bit word on every platform (the slot in the high half): how the
        /// wait-for graph and a shared read's token keep it. Never an `Int`, which has 32 bits on
        /// watchOS's arm64_32.
        var packed: UInt64 { UInt64(slot) << 32 | UInt64(generation) }

        /// The ticket ``packed`` packed.
        init(packed: UInt64) {
            let (high, low): (UInt64, UInt64) = (packed >> 32, packed)
            self.init(slot: UInt32(truncatingIfNeeded: high), generation: UInt32(truncatingIfNeeded: low))
        }
    }

    /// What ``enqueue(_:kind:priority:reentrant:observed:)`` decided.
    enum Admission {
        /// The section was free: the command holds it now. The ticket is its holder record, for an
        /// operation.
        case granted(Ticket?)
        /// The command waits in the queue; it is started when its turn comes.
        case queued(Ticket)
        /// The command never runs.
        case refused(QueueSafeValueError)
        /// The section is held and the command's deadline had passed when it arrived: it never
        /// runs, and the storage refuses it with `.timedOut` (a zero timeout only takes a free
        /// section).
        case expired
    }

    /// What a waiting command that may give up before its turn says when a grant comes to it
    /// (``Waiter/givesUp(at:)``).
    enum GiveUp {
        /// It still wants its turn.
        case stays
        /// Its deadline has passed: it leaves, and fails with `.timedOut`.
        case timedOut
        /// Its task was cancelled before it could ask for its turn (an operation whose task has not
        /// started): it leaves, and its task throws `.cancelled` when it runs.
        case cancelled
    }

    /// What ``attach(_:)`` decided about the task of an operation.
    enum Attachment: Equatable {
        /// Keep the task: ``cancelAll()`` may need it.
        case keep
        /// `cancelAll()` ran before the task was attached: cancel it now.
        case cancelNow
        /// The operation ended already: drop the task.
        case drop
    }

    /// What the closure of a manual-completion command does once it returned (see
    /// ``manualClosureReturned(_:)``).
    enum ManualStep {
        /// The completion arrived already: the caller releases the section now.
        case release
        /// The completion has not arrived: wait until it does (its arrival finishes the command).
        /// `boosted`: the hold is raised, so a thread that stops running its code ends its boost.
        case waitForCompletion(boosted: Bool)
        /// Nothing to do (the ticket is stale).
        case none
    }

    /// The phases of a manual-completion command, between its two parties.
    enum ManualPhase: UInt8, Hashable {
        case notManual
        /// The closure runs and `done` has not been called.
        case running
        /// The closure returned; the command waits for `done`.
        case closureReturned
        /// `done` was called (or dropped) while the closure still ran.
        case completionArrived
    }

    enum RecordState: UInt8, Hashable {
        case free
        /// In the heap, waiting for its turn.
        case waiting
        /// Holds the section (tracked holders and shared reads only).
        case holding
        /// Left the queue before its turn (timed out, cancelled); its heap entry may remain.
        case left
        /// Ended, kept only until its task is attached (or its heap entry surfaces).
        case ended
    }

    // The machine's state: a few typed parts, each with its fields private to its own file and its
    // own invariant. The parts are internal only so that the machine's extensions in the
    // `EngineStateMachine+….swift` files reach them; nothing but the machine's transitions changes
    // them (the storage reads what it needs through the views in `EngineStateMachine+Diagnostics`).

    /// The records and the waiting order (`RecordTable.swift`).
    var table = RecordTable()
    /// The bounded-overtaking policy (`OvertakeBound.swift`).
    var bound: OvertakeBound
    /// Who holds the section, and since when (`Hold.swift`).
    var hold = Hold()
    /// Priority inheritance's bookkeeping (`Inheritance.swift`).
    var inheritance = Inheritance()
    /// The container's life (`Lifecycle.swift`).
    var life = Lifecycle()
    /// ``CommandQueue``'s discardable operations (`Lifecycle.swift`).
    var discarding = Discarding()
    /// The eventually fair mode (`Barging.swift`).
    var barging: Barging
    /// The opt-in statistics (`Statistics.swift`): `nil` while off.
    var statistics: Statistics?
    /// - Parameters:
    ///   - maxOvertakes: `nil` for strict priority (the default), or how many commands that
    ///     arrived after a waiting command may be granted before it (see ``CommandFairness``).
    ///   - bargingBound: `nil`, or the eventually fair mode's bound in nanoseconds (see ``Barging``).
    init(maxOvertakes: Int? = nil, bargingBound: UInt64? = nil) {
        bound = OvertakeBound(limit: maxOvertakes)
        barging = Barging(bound: bargingBound)
    }

    // MARK: Enqueue

    /// A command asks for the section. The machine keeps a record of an operation while it holds
    /// the section (for `cancelAll()`), so an operation's release goes through the lock.
    ///
    /// - Parameters:
    ///   - reentrant: the caller is inside this section already, so waiting would wait for itself.
    ///   - word: the word before the engine set `slowRelease` on it; on return, the word to store.
    ///   - now: the time, for ``Hold/since``.
    /// - Returns: the decision.
    mutating func enqueue(
        _ waiter: Handle,
        kind: CommandKind,
        priority: CommandPriority,
        reentrant: Bool,
        word: inout Int,
        now: UInt64 = 0,
        shared: Bool = false,
        deadline: UInt64 = 0
    ) -> Admission {
        let observed = word
        if life.isClosed { return .refused(.valueContainerDeinited) }
        hold.observe(observed)
        // mutant(double-grant): guard EngineWord.isHeld(observed), table.waitingCount > 0 else {
        guard EngineWord.isHeld(observed) else {
            assert(hold.trackedSlot == nil, "a free section with a holder record")
            // Commands wait behind a free section only in the eventually fair mode, while the first
            // of them is on its way to claim it: this command may take it first, or waits too.
            let waiting = table.waitingCount > 0
            assert(!waiting || barging.isActive, "a free section with waiters")
            guard !waiting || mayBarge(priority: priority, now: now) else {
                return wait(
                    waiter, kind: kind, priority: priority, shared: shared, word: &word, now: now, deadline: deadline)
            }
            barging.granted(at: now, priority: priority)
            // With commands waiting, the holder hands the section on through the lock.
            let waitingBit = waiting ? EngineWord.slowRelease : 0
            if shared {
                hold.stamp(now, exact: true)
                word = EngineWord.shared | EngineWord.slowRelease
                return .granted(grantReader(allocateReader(waiter, kind: kind)))
            }
            guard kind == .operation else {
                hold.grant(tracked: nil)
                word = kind.wordBits | waitingBit
                return .granted(nil)
            }
            let ticket = table.allocate(waiter, kind: kind, state: .holding, role: .operation(.unattached))
            hold.grant(tracked: ticket.slot)
            hold.stamp(now, exact: true)
            // mutant(stale-holder-record): word = kind.wordBits
            word = kind.wordBits | EngineWord.slowRelease
            return .granted(ticket)
        }
        if reentrant { return .refused(.reentrantAccess) }
        hold.foundHeld()
        if observed & EngineWord.slowRelease == 0 {
            // The holder took a free section unseen: it has held it at least since now.
            hold.stamp(now, exact: false)
        }
        if shared && EngineWord.readersHold(observed) && mayJoinReaders(priority: priority) {
            word = observed | EngineWord.shared | EngineWord.slowRelease
            return .granted(grantReader(allocateReader(waiter, kind: kind)))
        }
        return wait(waiter, kind: kind, priority: priority, shared: shared, word: &word, now: now, deadline: deadline)
    }

    /// The command takes its place in the waiting order, unless its `deadline` (0: none) has passed.
    /// A command with a deadline, and every operation (its task may be cancelled before it
    /// starts), may give up before its turn: a grant asks it first (``dropGivenUp(_:now:)``).
    private mutating func wait(
        _ waiter: Handle, kind: CommandKind, priority: CommandPriority, shared: Bool, word: inout Int, now: UInt64,
        deadline: UInt64
    ) -> Admission {
        // The engine set `slowRelease` before deciding, and the holder may have seen it and be on
        // its way to the lock: it stays set, also for a command refused here.
        word |= EngineWord.slowRelease
        // mutant(zero-timeout-waits): if false { return .expired }
        if deadline != 0 && deadline <= now { return .expired }
        let role: Role =
            shared ? Self.sharedRole(of: kind) : kind == .operation ? .operation(.unattached) : .exclusive(.notManual)
        let ticket = table.allocate(waiter, kind: kind, state: .waiting, role: role)
        let arrival = table.enqueue(
            ticket.slot, priority: priority, now: now, mayGiveUp: deadline != 0 || kind == .operation)
        bound.arrived(ticket, sequence: arrival)
        barging.arrived(ticket.slot, at: now)
        statistics?.contended += 1
        return .queued(ticket)
    }

    // MARK: Release

    /// The holder ends its command: grant the next waiting command, or free the section.
    /// - Parameters:
    ///   - word: the word (it has holder bits, and `slowRelease` or `closed`); on return, the word
    ///     to store.
    ///   - now: the time, for ``Hold/since``.
    ///   - releaserQueue: the queue of a dispatched block that may run a successor for the same queue
    ///     inline (see ``Starter/releasingBlock``); 0 otherwise.
    mutating func release(word: inout Int, now: UInt64 = 0, releaserQueue: Int = 0) -> Actions {
        assert(EngineWord.isHeld(word), "release of a free section")
        var actions = Actions()
        if let slot = hold.endTracked() {
            actions.ended = table[slot].handle.take()
            table.end(slot)
        }
        word = handOn(&actions, closedBit: word & EngineWord.closed, now: now, releaserQueue: releaserQueue)
        return actions
    }

    /// The section's last holder (an exclusive command, or the last shared read) released it: grant
    /// the next waiting command (with the shared reads directly behind it, if it is one), or free
    /// the section.
    /// - Returns: the word to store.
    mutating func handOn(_ actions: inout Actions, closedBit: Int, now: UInt64, releaserQueue: Int) -> Int {
        let reportedLong = hold.takeReportedLong()
        if reportedLong || statistics != nil { noteHoldEnded(&actions, reportedLong: reportedLong, now: now) }
        hold.stamp(0, exact: false)
        actions.endBoost = inheritance.endHold()
        if table.waitingMayGiveUp > 0 { dropGivenUp(&actions, now: now) }
        if barging.isActive, let first = table.firstWaitingEntry() {
            if mayFreeForBarging(first, now: now) {
                // Eventually fair mode: the section goes free, and the first waiting command is
                // woken to claim it (unless it was woken already); an arrival may take it first.
                hold.free()
                wakeToClaim(&actions, first.slot)
                return closedBit | EngineWord.slowRelease
            }
            barging.granted(at: now, priority: CommandHeap.priority(of: first.key), slot: first.slot)
        }
        guard let (slot, kind) = popNext() else {
            hold.free()
            // mutant(value-outlives-container): if false, life.freeValue() {
            if life.freeValue() {
                actions.freeValue = true
            }
            return closedBit
        }
        return grantPopped(
            &actions, slot: slot, kind: kind, closedBit: closedBit, now: now, releaserQueue: releaserQueue)
    }

    /// The hold ends (``handOn(_:closedBit:now:releaserQueue:)``) while the monitor reported it as long,
    /// or statistics are on: its end is reported, its length counted. Out of line: a hand-on
    /// without either pays one test.
    @inline(never)
    mutating func noteHoldEnded(_ actions: inout Actions, reportedLong: Bool, now: UInt64) {
        let length = hold.since != 0 && now >= hold.since ? now - hold.since : 0
        // mutant(long-hold-end-dropped): if false {
        if reportedLong {
            actions.others.append(.longHoldEnded(nanoseconds: length))
        }
        if length > 0 { statistics?.holdEnded(after: length) }
    }

    /// Statistics are on: the command just popped (``RecordTable/lastPoppedArrival``) is handed the
    /// section.
    @inline(never)
    mutating func noteHandedOn(now: UInt64) {
        guard table.lastPoppedArrival != 0 else { return }
        let waited = UInt32(truncatingIfNeeded: now / 1_000_000) &- table.lastPoppedArrival
        statistics?.handedOn(priority: table.lastPoppedPriority, waited: waited)
    }

    /// Grants the section to the waiting command in `slot`, just popped from the waiting order
    /// (with the shared reads directly behind it, if it is one).
    /// - Returns: the word to store.
    mutating func grantPopped(
        _ actions: inout Actions, slot: UInt32, kind: CommandKind, closedBit: Int, now: UInt64, releaserQueue: Int
    ) -> Int {
        if barging.isActive { barging.clearWoken(table.ticket(of: slot)) }
        if table[slot].isShared {
            return grantReaders(&actions, first: slot, kind: kind, closedBit: closedBit, now: now)
        }
        // popNext() left the record's handle in place: the grant takes it, unless the record stays
        // as the holder's (an operation's, for cancelAll); the others' records go below.
        guard let next = kind == .operation ? table[slot].handle : table[slot].handle.take() else {
            preconditionFailure("a waiting command without its waiter")
        }
        var inherited = Urgency.none
        if inheritance.hasParked {
            inheritance.clear(slot)
            // The waiters still parked are now waiting for `next`: it inherits their urgency.
            inheritance.noteHolder(kind.wordBits)
            inherited = inheritance.required(readersHold: false)
            if !inherited.isNone { inheritance.inherit(inherited) }
        }
        // Decided before the record goes: a helper is found among the records still waiting.
        let arrived = table.lastPoppedArrival
        actions.grant = grant(
            next, kind: kind, urgency: inherited, releaserQueue: releaserQueue, boosted: actions.endBoost,
            waited: arrived != 0 ? UInt32(truncatingIfNeeded: now / 1_000_000) &- arrived : Grant.unknownWait)
        if statistics != nil { noteHandedOn(now: now) }
        var word = closedBit | kind.wordBits
        if kind == .operation {
            table[slot].state = .holding
            hold.grant(tracked: slot)
        } else {
            hold.grant(tracked: nil)
            if table[slot].inHeap {
                table.end(slot)  // promoted past the heap: its entry is dropped when it surfaces
            } else {
                table.free(slot)
            }
        }
        // mutant(stall-with-waiters): if hold.trackedSlot != nil {
        if table.waitingCount > 0 || hold.trackedSlot != nil {
            word |= EngineWord.slowRelease
            hold.stamp(now, exact: true)
        }
        return word
    }

    /// The command to grant next: the first in the waiting order, unless a bounded-overtaking policy
    /// says the oldest waiting command has been overtaken enough.
    mutating func popNext() -> (slot: UInt32, kind: CommandKind)? {
        guard bound.isActive, let oldest = bound.oldestWaiting(in: table) else { return table.popWaiting() }
        if bound.isDue {
            // Granted ahead of the waiting order: its heap entry is now dead, and dropped when it
            // surfaces (its record stays until then).
            let slot = oldest.ticket.slot
            table.grantAhead(slot)
            table.forgetPoppedArrival()  // its entry stays in the heap: the time it waited is not at hand
            bound.dropOldest(next: table.sequence)
            return (slot, table[slot].kind)
        }
        guard let next = table.popWaiting() else { return nil }
        if next.slot == oldest.ticket.slot {
            bound.dropOldest(next: table.sequence)
        } else {
            bound.overtook()  // it arrived after the oldest, which every later one waits behind
        }
        return next
    }

    // MARK: Leave

    /// A waiting command leaves the queue (its deadline passed, its task was cancelled, or waiting
    /// would deadlock).
    /// - Returns: `nil` if its turn came first (it holds the section, or is about to) or it already
    ///   left; otherwise the actions for a command that will never run (its task, if suspended, is
    ///   resumed).
    /// - Complexity: O(1) amortized: the heap entry is dropped when it surfaces, or in one O(n)
    ///   sweep once such entries outnumber the live ones.
    mutating func leave(_ ticket: Ticket, now: UInt64 = 0) -> Actions? {
        guard table.isWaiting(ticket) else { return nil }
        var actions = Actions()
        if let waiter = markLeft(ticket.slot, &actions) { actions.others.append(.left(waiter)) }
        // An exclusive command that left may have been all that kept shared reads behind it waiting.
        if hold.readersHold { admitWaitingReaders(&actions, now: now) }
        table.sweepIfMostlyDead()
        return actions
    }

    /// ``leave(_:)`` in the eventually fair mode, which may find the section free (the command that
    /// leaves may be the one woken to claim it): the next waiting command is then woken to claim it,
    /// or granted it.
    /// - Parameter word: the word, with `slowRelease` set by the engine; on return, the word to store.
    mutating func leave(_ ticket: Ticket, word: inout Int, now: UInt64) -> Actions? {
        let observed = word
        let held = hold.observeHolder(observed)
        // A free section that nobody waits for goes back to the idle path.
        defer { if !EngineWord.isHeld(word) && table.waitingCount == 0 { word &= ~EngineWord.slowRelease } }
        guard var actions = leave(ticket, now: now) else { return nil }
        barging.clearWoken(ticket)
        if !held && !barging.isClaimOnItsWay(table) {
            if let granted = settleFree(&actions, closedBit: observed & EngineWord.closed, now: now) { word = granted }
        }
        return actions
    }

    /// Before a grant: the commands first in line that gave up (their deadline passed by `now`, or
    /// the task of an operation was cancelled before it started) leave instead, each failing as it
    /// says, and the grant goes to the next. Only the first in line is asked: one further back
    /// leaves by its own timer, or is asked when it comes first.
    mutating func dropGivenUp(_ actions: inout Actions, now: UInt64) {
        while let slot = peekNext(), table[slot].flags.contains(.mayGiveUp), let handle = table[slot].handle {
            let verdict = handle.givesUp(at: now)
            // mutant(grant-past-deadline): if verdict != .cancelled { return }
            if verdict == .stays { return }
            _ = markLeft(slot, &actions)
            actions.others.append(verdict == .timedOut ? .expired(handle) : .left(handle))
        }
    }

    /// Whether the command is still waiting for its turn.
    func isWaiting(_ ticket: Ticket) -> Bool {
        table.isWaiting(ticket)
    }

    /// The waiting command in `slot` leaves the queue.
    /// - Returns: its handle.
    mutating func markLeft(_ slot: UInt32, _ actions: inout Actions) -> Handle? {
        if inheritance.hasParked {
            inheritance.clear(slot)
            // The boost it asked for ends with it: the holder drops to what still waits.
            // mutant(leave-keeps-boost): _ = ()
            if inheritance.lowerIfNeeded(readersHold: hold.readersHold) { actions.lowersBoost = true }
        }
        return table.markLeft(slot)
    }

    // MARK: Container release

    /// The container was released: refuse every new command, and free the value as soon as nothing
    /// holds or waits for it.
    /// - Parameter word: the word before the engine set `closed` on it; on return, the word to store.
    /// - Returns: the actions (the value is freed now if nothing holds it).
    mutating func close(word: inout Int) -> Actions {
        var actions = Actions()
        let observed = word
        word = observed | EngineWord.closed
        guard life.close() else { return actions }
        if hold.observeHolder(observed) { return actions }
        // Eventually fair mode: free while a woken command is on its way to claim it.
        if table.waitingCount > 0 { return actions }
        hold.free()
        actions.freeValue = life.freeValue()
        word = EngineWord.closed
        return actions
    }

    // MARK: Records

    func isCurrent(_ ticket: Ticket) -> Bool {
        table.isCurrent(ticket)
    }
}
