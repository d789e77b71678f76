// CommandQueue operations: the discardable policy, cancelAll() and attaching an operation's task.
extension EngineStateMachine {
    // MARK: Discardable operations

    /// An operation is about to ask for the section: the pending discardable one leaves, or, if
    /// granted, is marked so that it never begins. Called in the lock section of the
    /// ``enqueueOperation(_:priority:discardable:handled:word:now:deadline:)`` that follows, so
    /// "enqueued later" and "discarded" are one instant.
    mutating func discardPending() -> Actions {
        var actions = Actions()
        guard let pending = discarding.takePending(), table.isCurrent(pending) else { return actions }
        switch table[pending.slot].state {
        case .waiting:
            if let discarded = markLeft(pending.slot, &actions) { actions.others.append(.left(discarded)) }
            table.sweepIfMostlyDead()
        case .holding:
            // mutant(discard-forgets-granted): break
            discarding.discardHolder(pending)
        case .left, .ended, .free:
            break
        }
        return actions
    }

    /// An operation asks for the section; it keeps a record while it waits and holds (for
    /// `cancelAll()`). `handled`: a ``QueuedOperation`` may cancel it until it begins
    /// (``beginOperation(_:taskCancelled:word:now:)``).
    mutating func enqueueOperation(
        _ waiter: Handle,
        priority: CommandPriority,
        discardable isDiscardable: Bool,
        handled: Bool = false,
        word: inout Int,
        now: UInt64 = 0,
        deadline: UInt64 = 0
    ) -> Admission {
        let admission = enqueue(
            waiter, kind: .operation, priority: priority, reentrant: false, word: &word, now: now,
            shared: operationsShare, deadline: deadline)
        switch admission {
        case .granted(let ticket?), .queued(let ticket):
            if handled { table[ticket.slot].flags.insert(.unbegun) }
            // mutant(discard-standard): if true { discarding.setPending(ticket) }
            if isDiscardable { discarding.setPending(ticket) }
        case .granted(nil), .refused, .expired: break
        }
        return admission
    }

    /// A discardable holder is about to begin; `false` if it was discarded after its grant (it
    /// releases instead).
    mutating func beginDiscardable(_ ticket: Ticket) -> Bool {
        discarding.begin(ticket)
    }

    // MARK: Operations with a handle

    /// The granted operation `ticket`, which has a handle, is about to begin its body, unless its
    /// task was cancelled or it was discarded: then it gives its turn back in this transition.
    /// - Returns: ``Found/holding`` if it begins, else ``Found/gone`` (it must not release).
    mutating func beginOperation(_ ticket: Ticket, taskCancelled: Bool, word: inout Int, now: UInt64) -> Actions {
        let held = hold.observeHolder(word)
        let kept = discarding.begin(ticket)
        guard table.isCurrent(ticket), table[ticket.slot].state == .holding else {
            // Given back already (it was cancelled): the word goes back to the idle path if free.
            if !held && table.waitingCount == 0 { word &= ~EngineWord.slowRelease }
            return Actions(found: .gone)
        }
        guard kept && !taskCancelled else {
            var actions = giveBack(ticket, word: &word, now: now)
            actions.found = .gone
            return actions
        }
        table[ticket.slot].flags.remove(.unbegun)
        return Actions(found: .holding)
    }

    /// ``QueuedOperation/cancel()``: a waiting operation leaves; a granted one that has not begun
    /// gives its turn back; its task is cancelled either way, and once it began, only that.
    mutating func cancelOperation(_ ticket: Ticket, word: inout Int, now: UInt64) -> Actions {
        let held = hold.observeHolder(word)
        var actions = Actions()
        defer { if !held && table.waitingCount == 0 { word &= ~EngineWord.slowRelease } }
        guard table.isCurrent(ticket), let handle = table[ticket.slot].handle else { return Actions(found: .gone) }
        switch table[ticket.slot].state {
        case .waiting:
            // Its task may have been cancelled already: it was cancelled then, not now.
            actions.found = handle.givesUp(at: now) == .cancelled ? .gone : .left
            // mutant(cancel-leaves-it-queued): return actions
            _ = markLeft(ticket.slot, &actions)
            actions.others += [.left(handle), .cancel(handle)]
            if hold.readersHold { admitWaitingReaders(&actions, now: now) }
            table.sweepIfMostlyDead()
        case .holding where table[ticket.slot].flags.contains(.unbegun):
            actions = giveBack(ticket, word: &word, now: now)
            actions.others.append(.cancel(handle))
            actions.found = .gaveBack
        case .holding:
            actions.others.append(.cancel(handle))
            actions.found = .holding
        case .left, .ended, .free:
            actions.found = .gone
        }
        return actions
    }

    /// It holds (alone, or one slot) without having begun: it releases as its own release would.
    private mutating func giveBack(_ ticket: Ticket, word: inout Int, now: UInt64) -> Actions {
        table[ticket.slot].flags.remove(.unbegun)
        if table[ticket.slot].isShared { return releaseReader(ticket, word: &word, now: now) }
        return release(word: &word, now: now)
    }

    /// It neither ended nor left.
    func isLive(_ ticket: Ticket) -> Bool {
        table.isCurrent(ticket) && (table[ticket.slot].state == .waiting || table[ticket.slot].state == .holding)
    }

    var pendingDiscardable: Ticket? { discarding.pending }

    // MARK: Operations and cancelAll

    /// Every waiting command leaves, and the holders' tasks are cancelled (now, or once attached), in
    /// one transition, so a release cannot hand the section to work meant to be cancelled.
    mutating func cancelAll() -> Actions {
        var result = Actions()
        while let (slot, _) = table.popWaiting() {
            if inheritance.hasParked { inheritance.clear(slot) }
            if let waiter = table.markLeftPopped(slot) { result.others += [.left(waiter), .cancel(waiter)] }
            if table[slot].attachment == .unattached { table[slot].attachment = .unattachedCancelRequested }
            table.freeIfUnused(slot)
        }
        if inheritance.lowerIfNeeded(readersHold: hold.readersHold) { result.lowersBoost = true }
        assert(table.waitingCount == 0)
        bound.reset()
        for slot in hold.trackedSlot.map({ [$0] }) ?? hold.readers where table[slot].kind == .operation {
            switch table[slot].attachment {
            case .attached:
                if let holder = table[slot].handle { result.others.append(.cancel(holder)) }
            case .unattached:
                table[slot].attachment = .unattachedCancelRequested
            default:
                break
            }
        }
        return result
    }

    /// The operation's task exists now (created after it took its place, it may have ended already).
    mutating func attach(_ ticket: Ticket) -> Attachment {
        guard table.isCurrent(ticket), table[ticket.slot].taskUnattached else { return .drop }
        let slot = ticket.slot
        let cancel = table[slot].attachment == .unattachedCancelRequested
        switch table[slot].state {
        case .waiting, .holding:
            table[slot].attachment = cancel ? .done : .attached
            return cancel ? .cancelNow : .keep
        case .left, .ended, .free:
            table[slot].attachment = .done
            table.freeIfUnused(slot)
            return cancel ? .cancelNow : .drop
        }
    }
}
