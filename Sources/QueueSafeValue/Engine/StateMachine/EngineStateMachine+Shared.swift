// Shared reads (Architecture.md, "Shared reads"). The waiting order stays priority, then arrival;
// a grant covers the reads directly behind the first, and a read joins holding readers only ahead
// of every waiting writer, so a stream of readers never starves one.
extension EngineStateMachine {
    // MARK: Shared reads

    /// A record for a shared read about to be granted at once.
    mutating func allocateReader(_ waiter: Handle, kind: CommandKind) -> UInt32 {
        table.allocate(waiter, kind: kind, state: .waiting, role: Self.sharedRole(of: kind)).slot
    }

    static func sharedRole(of kind: CommandKind) -> Role {
        kind == .operation ? .sharedOperation(.unattached) : .reader(.notManual)
    }

    /// The record keeps its handle until the release, so a helper can still find a dispatched read
    /// whose block has not started. Returns its ticket, for its release.
    mutating func grantReader(_ slot: UInt32) -> Ticket {
        table[slot].state = .holding
        hold.addReader(slot)
        return table.ticket(of: slot)
    }

    /// Whether a read arriving while readers hold joins: it would stand before every waiting command,
    /// and the overtaking bound allows one more (counted if so).
    mutating func mayJoinReaders(priority: CommandPriority) -> Bool {
        guard hold.hasFreeShare else { return false }
        let boundApplies = bound.oldestWaiting(in: table) != nil
        if boundApplies && bound.isDue { return false }
        if let first = table.firstWaitingEntry() {
            // mutant(reader-joins-past-writer): if priority.rawValue < CommandHeap.priority(of: first.key).rawValue { return false }
            if priority.rawValue <= CommandHeap.priority(of: first.key).rawValue { return false }
        }
        if boundApplies { bound.overtook() }
        return true
    }

    mutating func peekNext() -> UInt32? {
        if let oldest = bound.oldestWaiting(in: table), bound.isDue { return oldest.ticket.slot }
        return table.firstWaitingEntry()?.slot
    }

    /// The read in `slot`, granted beside the first grant, is started by its party or a helper.
    mutating func startReader(_ actions: inout Actions, _ slot: UInt32, kind: CommandKind) {
        guard let handle = table[slot].handle else { preconditionFailure("a granted read without its waiter") }
        // Readers never run inline in a releasing block: their releases go by ticket.
        switch starter(of: handle, kind: kind) {
        case .helper(let helper):
            table[slot].role = .startedReader(table[slot].manual)
            actions.others.append(.helpReader(handle, helper: helper))
        case .itself, .releasingBlock:
            actions.others.append(.startReader(handle))
        }
    }

    /// ``handOn(_:closedBit:now:releaserQueue:)`` popped a read: grant it and the reads directly
    /// behind it. Returns the word to store.
    mutating func grantReaders(
        _ actions: inout Actions, first slot: UInt32, kind: CommandKind, closedBit: Int, now: UInt64
    ) -> Int {
        if inheritance.hasParked { inheritance.clear(slot) }
        _ = grantReader(slot)
        guard let handle = table[slot].handle else { preconditionFailure("a granted read without its waiter") }
        let starter = starter(of: handle, kind: kind)
        if case .helper = starter { table[slot].role = .startedReader(table[slot].manual) }
        admitWaitingReaders(&actions, now: now)
        var inherited = Urgency.none
        if inheritance.hasParked {
            // The first inherits at once; every other one as it lists itself (`enterReader`).
            inherited = inheritance.parkedUrgency
            if !inherited.isNone { inheritance.inherit(inherited) }
        }
        actions.grant = Grant(handle: handle, starter: starter, urgency: inherited, kind: kind, shared: true)
        hold.stamp(now, exact: true)
        return closedBit | EngineWord.shared | EngineWord.slowRelease
    }

    /// While readers hold: grants the reads that now stand first, up to an exclusive or due command.
    mutating func admitWaitingReaders(_ actions: inout Actions, now: UInt64 = 0) {
        if table.waitingMayGiveUp > 0 { dropGivenUp(&actions, now: now) }
        // mutant(batch-stops-early): while hold.readersHold, hold.readers.count < 1, let slot = peekNext(), table[slot].isShared {
        while hold.readersHold, hold.hasFreeShare, let slot = peekNext(), table[slot].isShared {
            guard let (popped, kind) = popNext() else { break }
            assert(popped == slot, "popNext() granted another command than it showed")
            if inheritance.hasParked {
                inheritance.clear(popped)
                if inheritance.lowerIfNeeded(readersHold: true) { actions.lowersBoost = true }
            }
            _ = grantReader(popped)
            startReader(&actions, popped, kind: kind)
            if table.waitingMayGiveUp > 0 { dropGivenUp(&actions, now: now) }
        }
    }

    /// A read releases its share: a listed one by its `ticket`, an idle one (`nil`) through the lock,
    /// where the word may have lost `slowRelease` since the reader saw it (the last listed reader
    /// left, nobody waited). The last hands the section on.
    mutating func releaseReader(_ ticket: Ticket?, word: inout Int, now: UInt64 = 0) -> Actions {
        var actions = Actions()
        var observed = word
        hold.observe(observed)
        if let ticket {
            guard isHoldingReader(ticket), hold.removeReader(ticket.slot) else {
                assertionFailure("release of a shared read that does not hold")
                return actions
            }
            actions.ended = table[ticket.slot].handle.take()
            table.end(ticket.slot)
        } else {
            hold.removeIdleReader()
            observed &-= EngineWord.idleReaderUnit
        }
        // Each reader ends its own thread's boost.
        actions.endBoost = inheritance.isHoldBoosted
        // mutant(writer-beside-reader): if hold.readersHold && table.waitingCount == 0 {
        if hold.readersHold {
            // Without a limit, the first waiting command is exclusive while readers hold.
            // mutant(freed-slot-unused): _ = ()
            if hold.isLimited && table.waitingCount > 0 { admitWaitingReaders(&actions, now: now) }
            word = wordWhileReadersHold(observed)
            return actions
        }
        word = handOn(&actions, closedBit: observed & EngineWord.closed, now: now, releaserQueue: 0)
        return actions
    }

    /// Once only idle readers hold and nobody waits, `shared` and `slowRelease` clear, so that reads
    /// join and leave on the idle path again.
    private func wordWhileReadersHold(_ word: Int) -> Int {
        guard !hold.hasListedReaders else { return word }
        let idleOnly = word & ~EngineWord.shared
        return table.waitingCount == 0 ? idleOnly & ~EngineWord.slowRelease : idleOnly
    }

    /// A dispatched read's block is about to run it; `false` if a helper started it already.
    mutating func claimReaderStart(_ ticket: Ticket) -> Bool {
        guard isHoldingReader(ticket), case .reader(let phase) = table[ticket.slot].role else { return false }
        table[ticket.slot].role = .startedReader(phase)
        return true
    }

    /// A waiting thread on one of `queues`, where their blocks cannot run, starts their granted reads.
    mutating func takeUnstartedReaders(forQueues queues: [Int]) -> [Handle] {
        var taken: [Handle] = []
        for slot in hold.readers where table[slot].kind == .dispatched {
            guard case .reader(let phase) = table[slot].role, let handle = table[slot].handle,
                queues.contains(handle.targetQueueID)
            else { continue }
            table[slot].role = .startedReader(phase)
            taken.append(handle)
        }
        return taken
    }

    func isHoldingReader(_ ticket: Ticket) -> Bool {
        table.isCurrent(ticket) && table[ticket.slot].isShared && table[ticket.slot].state == .holding
    }

    /// It keeps its share until its closure returned and its completion arrived.
    mutating func beginReaderManual(_ ticket: Ticket) {
        guard isHoldingReader(ticket) else { return }
        table[ticket.slot].manual = .running
    }
}
