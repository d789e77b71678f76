// MARK: - EngineStateMachine

/// Every decision of the command engine, as a plain value without locks, atomics or dispatch
/// (Architecture.md, "One state machine, one storage"). Transitions that race the idle path take
/// the word `inout` (see ``EngineWord``).
struct EngineStateMachine {
    /// The storage's waiter: stored, returned in actions, and asked only ``Waiter/targetQueueID``.
    typealias Handle = Waiter

    /// A command's record while it waits or holds; a stale ticket matches nothing (the generation
    /// moved on).
    struct Ticket: Hashable, Sendable {
        let slot: UInt32
        let generation: UInt32

        /// A ticket that matches no command.
        static var none: Ticket { Ticket(slot: .max, generation: 0) }

        /// One 64-bit word on every platform, never an `Int` (32 bits on watchOS's arm64_32).
        var packed: UInt64 { UInt64(slot) << 32 | UInt64(generation) }
    }

    /// What ``enqueue(_:kind:priority:reentrant:word:now:shared:deadline:)`` decided.
    enum Admission {
        /// The section was free: it holds now (with a holder record if it is an operation).
        case granted(Ticket?)
        case queued(Ticket)
        case refused(QueueSafeValueError)
        /// Its deadline had passed on arrival at a held section: the storage refuses it `.timedOut`.
        case expired
    }

    /// A waiter's answer when a grant comes to it (``Waiter/givesUp(at:)``).
    enum GiveUp {
        case stays
        /// Its deadline passed: it leaves and fails `.timedOut`.
        case timedOut
        /// An operation's task was cancelled before it started: it leaves and throws `.cancelled`.
        case cancelled
    }

    /// What ``attach(_:)`` decided about an operation's task.
    enum Attachment: Equatable {
        /// ``cancelAll()`` may need it.
        case keep
        /// `cancelAll()` ran before the task was attached.
        case cancelNow
        /// The operation ended already.
        case drop
    }

    /// What a manual-completion command does once its closure returned.
    enum ManualStep {
        /// The completion arrived already: release now.
        case release
        /// Wait for the completion; `boosted`: a thread that stops running its code ends its boost.
        case waitForCompletion(boosted: Bool)
        /// The ticket is stale.
        case none
    }

    /// A manual-completion command's phase, between its closure and its `done`.
    enum ManualPhase: UInt8, Hashable {
        case notManual
        case running
        case closureReturned
        /// `done` was called (or dropped) while the closure still ran.
        case completionArrived
    }

    enum RecordState: UInt8, Hashable {
        case free
        case waiting
        /// Tracked holders and shared reads only.
        case holding
        /// Left before its turn; its heap entry may remain.
        case left
        /// Kept only until its task is attached (or its heap entry surfaces).
        case ended
    }

    // The typed parts (Architecture.md, "States, events and actions"): internal only so that the
    // machine's extensions reach them; only its transitions change them.
    var table = RecordTable()
    var bound: OvertakeBound
    var hold = Hold()
    var inheritance = Inheritance()
    var life = Lifecycle()
    var discarding = Discarding()
    var barging: Barging
    /// `nil` while statistics are off.
    var statistics: Statistics?
    /// `maxOvertakes`: `nil` for strict priority; `bargingBound`: the eventually fair mode's, in ns.
    init(maxOvertakes: Int? = nil, bargingBound: UInt64? = nil) {
        bound = OvertakeBound(limit: maxOvertakes)
        barging = Barging(bound: bargingBound)
    }

    // MARK: Enqueue

    /// A command asks for the section; an operation keeps a record while it holds (for
    /// `cancelAll()`). `word`: as read before `slowRelease` was set; on return, the word to store.
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
            // Only in the eventually fair mode, while a claim is on its way.
            let waiting = table.waitingCount > 0
            assert(!waiting || barging.isActive, "a free section with waiters")
            guard !waiting || mayBarge(priority: priority, now: now) else {
                return wait(
                    waiter, kind: kind, priority: priority, shared: shared, word: &word, now: now, deadline: deadline)
            }
            barging.granted(at: now, priority: priority)
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
        hold.foundHeld(observed, now: now)
        if shared && EngineWord.readersHold(observed) && mayJoinReaders(priority: priority) {
            word = observed | EngineWord.shared | EngineWord.slowRelease
            return .granted(grantReader(allocateReader(waiter, kind: kind)))
        }
        return wait(waiter, kind: kind, priority: priority, shared: shared, word: &word, now: now, deadline: deadline)
    }

    /// The command waits, unless its `deadline` (0: none) has passed. One with a deadline, and every
    /// operation, may give up before its turn (``dropGivenUp(_:now:)``).
    private mutating func wait(
        _ waiter: Handle, kind: CommandKind, priority: CommandPriority, shared: Bool, word: inout Int, now: UInt64,
        deadline: UInt64
    ) -> Admission {
        // The holder may have seen `slowRelease` and be on its way to the lock: it stays set.
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

    /// The holder releases. `releaserQueue`: a releasing dispatched block's queue, on which it may run
    /// a successor inline (``Starter/releasingBlock``); 0 otherwise.
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

    /// The last holder released: grant the next waiting command (with the reads behind a read), or
    /// free the section. Returns the word to store.
    mutating func handOn(_ actions: inout Actions, closedBit: Int, now: UInt64, releaserQueue: Int) -> Int {
        let reportedLong = hold.takeReportedLong()
        if reportedLong || statistics != nil { noteHoldEnded(&actions, reportedLong: reportedLong, now: now) }
        hold.stamp(0, exact: false)
        actions.endBoost = inheritance.endHold()
        if table.waitingMayGiveUp > 0 { dropGivenUp(&actions, now: now) }
        if barging.isActive, let first = table.firstWaitingEntry() {
            if mayFreeForBarging(first, now: now) {
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

    /// Out of line: a hand-on with neither a long hold nor statistics pays one test.
    @inline(never)
    mutating func noteHoldEnded(_ actions: inout Actions, reportedLong: Bool, now: UInt64) {
        let length = hold.since != 0 && now >= hold.since ? now - hold.since : 0
        // mutant(long-hold-end-dropped): if false {
        if reportedLong {
            actions.others.append(.longHoldEnded(nanoseconds: length))
        }
        if length > 0 { statistics?.holdEnded(after: length) }
    }

    /// Statistics are on: count the hand-on to the command just popped.
    @inline(never)
    mutating func noteHandedOn(now: UInt64) {
        guard table.lastPoppedArrival != 0 else { return }
        let waited = UInt32(truncatingIfNeeded: now / 1_000_000) &- table.lastPoppedArrival
        statistics?.handedOn(priority: table.lastPoppedPriority, waited: waited)
    }

    /// Grants the command just popped from `slot` (with the reads behind a read); returns the word.
    mutating func grantPopped(
        _ actions: inout Actions, slot: UInt32, kind: CommandKind, closedBit: Int, now: UInt64, releaserQueue: Int
    ) -> Int {
        if barging.isActive { barging.clearWoken(table.ticket(of: slot)) }
        if table[slot].isShared {
            return grantReaders(&actions, first: slot, kind: kind, closedBit: closedBit, now: now)
        }
        // An operation's record stays as the holder's (for cancelAll): it keeps its handle.
        guard let next = kind == .operation ? table[slot].handle : table[slot].handle.take() else {
            preconditionFailure("a waiting command without its waiter")
        }
        var inherited = Urgency.none
        if inheritance.hasParked {
            inheritance.clear(slot)
            inheritance.noteHolder(kind.wordBits)
            inherited = inheritance.required(readersHold: false)
            if !inherited.isNone { inheritance.inherit(inherited) }
        }
        // Before the record goes: a helper is found among the records still waiting.
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

    /// The first in the waiting order, unless the overtaking bound makes the oldest one due.
    mutating func popNext() -> (slot: UInt32, kind: CommandKind)? {
        guard bound.isActive, let oldest = bound.oldestWaiting(in: table) else { return table.popWaiting() }
        if bound.isDue {
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

    /// A waiting command leaves (deadline, cancellation, deadlock); `nil` if it no longer waits.
    /// - Complexity: O(1) amortized (its heap entry is dropped lazily).
    mutating func leave(_ ticket: Ticket, now: UInt64 = 0) -> Actions? {
        guard table.isWaiting(ticket) else { return nil }
        var actions = Actions()
        if let waiter = markLeft(ticket.slot, &actions) { actions.others.append(.left(waiter)) }
        // It may have been all that kept the reads behind it waiting.
        if hold.readersHold { admitWaitingReaders(&actions, now: now) }
        table.sweepIfMostlyDead()
        return actions
    }

    /// ``leave(_:now:)`` in the eventually fair mode, where the one leaving may be the one woken to
    /// claim a free section: the next is then woken, or granted.
    mutating func leave(_ ticket: Ticket, word: inout Int, now: UInt64) -> Actions? {
        let observed = word
        let held = hold.observeHolder(observed)
        defer { if !EngineWord.isHeld(word) && table.waitingCount == 0 { word &= ~EngineWord.slowRelease } }
        guard var actions = leave(ticket, now: now) else { return nil }
        barging.clearWoken(ticket)
        if !held { settleFree(&actions, word: &word, now: now) }
        return actions
    }

    /// Before a grant, the first in line that gave up leave instead. Only the first is asked: one
    /// further back leaves by its own timer, or is asked when it comes first.
    mutating func dropGivenUp(_ actions: inout Actions, now: UInt64) {
        while let slot = peekNext(), table[slot].flags.contains(.mayGiveUp), let handle = table[slot].handle {
            let verdict = handle.givesUp(at: now)
            // mutant(grant-past-deadline): if verdict != .cancelled { return }
            if verdict == .stays { return }
            _ = markLeft(slot, &actions)
            actions.others.append(verdict == .timedOut ? .expired(handle) : .left(handle))
        }
    }

    func isWaiting(_ ticket: Ticket) -> Bool {
        table.isWaiting(ticket)
    }

    mutating func markLeft(_ slot: UInt32, _ actions: inout Actions) -> Handle? {
        if inheritance.hasParked {
            inheritance.clear(slot)
            // mutant(leave-keeps-boost): _ = ()
            if inheritance.lowerIfNeeded(readersHold: hold.readersHold) { actions.lowersBoost = true }
        }
        return table.markLeft(slot)
    }

    // MARK: Container release

    /// The container was released: refuse new commands; free the value once nothing holds or waits.
    mutating func close(word: inout Int) -> Actions {
        var actions = Actions()
        let observed = word
        word = observed | EngineWord.closed
        guard life.close() else { return actions }
        if hold.observeHolder(observed) { return actions }
        // Eventually fair mode: free while a claim is on its way.
        if table.waitingCount > 0 { return actions }
        hold.free()
        actions.freeValue = life.freeValue()
        word = EngineWord.closed
        return actions
    }
}

extension EngineStateMachine.Ticket {
    /// The ticket ``packed`` packed (here, so that the memberwise initializer stays).
    init(packed: UInt64) {
        let (high, low): (UInt64, UInt64) = (packed >> 32, packed)
        self.init(slot: UInt32(truncatingIfNeeded: high), generation: UInt32(truncatingIfNeeded: low))
    }
}
