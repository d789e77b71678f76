// CommandQueue operations: the discardable policy, cancelAll() and attaching an operation's task.
extension EngineStateMachine {
    // MARK: Discardable operations

    /// An operation of a ``CommandQueue`` is about to ask for the section: the discardable
    /// operation that has not begun, if any, is discarded. A waiting one leaves the queue (its task
    /// is resumed by the actions, and throws "cancelled"); one that was granted but has not begun
    /// is marked, and ``beginDiscardable(_:)`` then refuses it. The storage calls it in the lock
    /// section of the ``enqueueOperation(_:priority:discardable:word:now:)`` that follows, so
    /// "enqueued later" and "discarded" are the same instant.
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

    /// An operation of a ``CommandQueue`` asks for the section (after ``discardPending()``). It
    /// keeps a record while it waits and while it holds (for `cancelAll()`).
    /// - Parameters:
    ///   - isDiscardable: the new operation is itself discardable: it is discarded in turn if
    ///     another operation is enqueued before it begins.
    ///   - word: as for ``enqueue(_:kind:priority:reentrant:word:now:shared:)``.
    ///   - handled: the operation has a handle (``QueuedOperation``) that may cancel it: it begins
    ///     through ``beginOperation(_:taskCancelled:word:now:)``, and until then
    ///     ``cancelOperation(_:word:now:)`` takes it out of the queue or gives its turn back.
    ///   - deadline: when it gives up waiting (0: never), as for
    ///     ``enqueue(_:kind:priority:reentrant:word:now:shared:deadline:)``.
    mutating func enqueueOperation(
        _ waiter: Handle,
        priority: CommandPriority,
        discardable isDiscardable: Bool,
        handled: Bool = false,
        word: inout Int,
        now: UInt64 = 0,
        deadline: UInt64 = 0
    ) -> Admission {
        // A queue of width above 1 shares the section among its operations, one slot each.
        let admission = enqueue(
            waiter, kind: .operation, priority: priority, reentrant: false, word: &word, now: now,
            shared: operationsShare, deadline: deadline)
        if handled {
            switch admission {
            case .granted(let ticket?), .queued(let ticket): table[ticket.slot].flags.insert(.unbegun)
            case .granted(nil), .refused, .expired: break
            }
        }
        // mutant(discard-standard): if true {
        if isDiscardable {
            switch admission {
            case .granted(let ticket?), .queued(let ticket): discarding.setPending(ticket)
            case .granted(nil), .refused, .expired: break
            }
        }
        return admission
    }

    /// A discardable operation that holds the section is about to begin. It no longer counts as
    /// waiting: operations enqueued from now on leave it alone.
    /// - Returns: `false` if it was discarded after it was granted: it must not begin, and
    ///   releases the section instead.
    mutating func beginDiscardable(_ ticket: Ticket) -> Bool {
        discarding.begin(ticket)
    }

    // MARK: Operations with a handle

    /// The operation `ticket`, which has a handle, is about to begin its body: its own task, once
    /// granted. It begins unless its task was cancelled (`taskCancelled`) or a later operation
    /// discarded it: then it gives its turn back here, in the same transition.
    /// - Parameter word: the word (it shows the operations that hold); on return, the word to store.
    /// - Returns: the actions (a give-back hands the turn on); ``Actions/found`` is
    ///   ``Found/holding`` if it begins, else ``Found/gone`` (it never runs, and must not release).
    mutating func beginOperation(_ ticket: Ticket, taskCancelled: Bool, word: inout Int, now: UInt64) -> Actions {
        let held = hold.observeHolder(word)
        let kept = discarding.begin(ticket)
        guard table.isCurrent(ticket), table[ticket.slot].state == .holding else {
            // Given back already (it was cancelled): the word goes back to the idle path if free.
            if !held && table.waitingCount == 0 { word &= ~EngineWord.slowRelease }
            var actions = Actions()
            actions.found = .gone
            return actions
        }
        guard kept && !taskCancelled else {
            var actions = giveBack(ticket, word: &word, now: now)
            actions.found = .gone
            return actions
        }
        table[ticket.slot].flags.remove(.unbegun)
        var actions = Actions()
        actions.found = .holding
        return actions
    }

    /// ``QueuedOperation/cancel()``: the operation `ticket` never begins if it has not yet. While it
    /// waits, it leaves the queue; granted but not begun, it gives its turn back, so the next
    /// operation may start now; either way its task is cancelled and throws `.cancelled` without
    /// running the body. Once it has begun, only its task is cancelled.
    /// - Parameter word: the word, with `slowRelease` set by the engine; on return, the word to store.
    /// - Returns: the actions; ``Actions/found`` says what it found: ``Found/left``,
    ///   ``Found/gaveBack``, ``Found/holding`` (it runs) or ``Found/gone``.
    mutating func cancelOperation(_ ticket: Ticket, word: inout Int, now: UInt64) -> Actions {
        let held = hold.observeHolder(word)
        var actions = Actions()
        defer { if !held && table.waitingCount == 0 { word &= ~EngineWord.slowRelease } }
        guard table.isCurrent(ticket), let handle = table[ticket.slot].handle else {
            actions.found = .gone
            return actions
        }
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

    /// The operation `ticket` holds the section (alone, or one slot) without having begun: it
    /// releases it as its own release would, handing the turn on.
    private mutating func giveBack(_ ticket: Ticket, word: inout Int, now: UInt64) -> Actions {
        table[ticket.slot].flags.remove(.unbegun)
        if table[ticket.slot].isShared { return releaseReader(ticket, word: &word, now: now) }
        return release(word: &word, now: now)
    }

    /// Whether the operation `ticket` still waits or holds the section (it has neither ended nor
    /// left).
    func isLive(_ ticket: Ticket) -> Bool {
        table.isCurrent(ticket) && (table[ticket.slot].state == .waiting || table[ticket.slot].state == .holding)
    }

    /// The newest discardable operation that has not begun, if any.
    var pendingDiscardable: Ticket? { discarding.pending }

    // MARK: Operations and cancelAll

    /// Every waiting command leaves the queue, and the holder's task is cancelled (now, or as soon
    /// as it is attached). All in one transition, so the holder's release cannot hand the section
    /// to work that was meant to be cancelled.
    /// - Returns: the actions: the operations that left are resumed and their tasks cancelled, and
    ///   so is the holder's task if it is attached.
    mutating func cancelAll() -> Actions {
        var result = Actions()
        while let (slot, waited) = table.popAny() {
            if waited {
                if inheritance.hasParked { inheritance.clear(slot) }
                if let waiter = table.markLeftPopped(slot) { result.others += [.left(waiter), .cancel(waiter)] }
                if table[slot].attachment == .unattached { table[slot].attachment = .unattachedCancelRequested }
            }
            table.freeIfUnused(slot)
        }
        // Nobody waits now: a boost of the holder has lost every reason.
        if inheritance.lowerIfNeeded(readersHold: hold.readersHold) { result.lowersBoost = true }
        assert(table.waitingCount == 0)
        bound.reset()
        // The running operations: the one tracked holder, or every operation holding a slot.
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

    /// The task that runs an operation exists now (it is created after the operation took its
    /// place, and may even have run to the end already).
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
