// Shared reads: several commands that only read hold the section at once.
//
// The waiting order does not change: priority, then arrival. What changes is how many commands a
// grant covers:
//
// - When the section is granted to a shared read, every shared read standing directly behind it
//   in that order, up to the first exclusive command, is granted with it (`grantReaders`).
// - A shared read that arrives while readers hold joins them only if it would stand before every
//   waiting exclusive command: its priority is higher than that of the first waiting command,
//   which, while readers hold, is always exclusive (`mayJoinReaders`). Otherwise it waits, so a
//   stream of readers never starves a waiting writer.
// - Under a bounded-overtaking policy a reader that joins, or is granted in a batch, overtakes the
//   oldest waiting command like any other grant: once the bound is reached, nothing joins or is
//   batched past it.
// - When a waiting exclusive command leaves the queue, the shared reads that now stand first are
//   granted at once (`admitWaitingReaders`).
//
// Every shared read keeps a record while it holds (its slot is in `readers`); the last one to
// release hands the section on (`handOn`). The state word says `shared | slowRelease` while
// readers hold, so both idle compare-and-swaps fail and every reader releases under the lock.
extension EngineStateMachine {
    // MARK: Shared reads

    /// A record for a shared read about to be granted at once.
    mutating func allocateReader(_ waiter: Handle, kind: CommandKind) -> UInt32 {
        table.allocate(waiter, kind: kind, state: .waiting, role: Self.sharedRole(of: kind)).slot
    }

    /// The role of a shared holder of `kind`: a shared read, or an operation of a queue of width
    /// above 1.
    static func sharedRole(of kind: CommandKind) -> Role {
        kind == .operation ? .sharedOperation(.unattached) : .reader(.notManual)
    }

    /// Makes the shared read in `slot` a holder. Its record keeps its handle until it releases
    /// (the release hands it back), so a helper can still find a dispatched read whose block has
    /// not started.
    /// - Returns: its ticket, for its release.
    mutating func grantReader(_ slot: UInt32) -> Ticket {
        table[slot].state = .holding
        hold.addReader(slot)
        return table.ticket(of: slot)
    }

    /// Whether a shared read of `priority` that arrives while readers hold may join them now: it
    /// would stand before every waiting command (while readers hold, the first waiting command is
    /// exclusive), and a bounded-overtaking policy allows one more overtake. Counts the overtake
    /// if it may.
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

    /// The slot of the command ``popNext()`` would grant next, without granting it.
    mutating func peekNext() -> UInt32? {
        if let oldest = bound.oldestWaiting(in: table), bound.isDue { return oldest.ticket.slot }
        return table.firstWaitingEntry()?.slot
    }

    /// The handle of the shared read `slot`, granted now in a batch or by admission, as an action
    /// beside the first grant: who starts it, and whether a helper runs it.
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

    /// ``handOn(closedBit:now:releaserQueue:)`` popped a shared read: grant it, and every shared read
    /// standing directly behind it, up to the first exclusive command.
    /// - Returns: the word to store.
    mutating func grantReaders(
        _ actions: inout Actions, first slot: UInt32, kind: CommandKind, closedBit: Int, now: UInt64
    ) -> Int {
        if inheritance.hasParked { inheritance.clear(slot) }
        _ = grantReader(slot)
        guard let handle = table[slot].handle else { preconditionFailure("a granted read without its waiter") }
        // Readers never run inline in a releasing block: their releases go by ticket.
        let starter = starter(of: handle, kind: kind)
        if case .helper = starter { table[slot].role = .startedReader(table[slot].manual) }
        admitWaitingReaders(&actions, now: now)
        var inherited = Urgency.none
        if inheritance.hasParked {
            // The waiters still parked now wait for these readers: the first inherits their
            // urgency at once, and every other one as it lists itself (see `enterReader`).
            inherited = inheritance.parkedUrgency
            if !inherited.isNone { inheritance.inherit(inherited) }
        }
        actions.grant = Grant(handle: handle, starter: starter, urgency: inherited, kind: kind, shared: true)
        hold.stamp(now, exact: true)
        // Readers always release under the lock: `slowRelease` stays set while they hold.
        return closedBit | EngineWord.shared | EngineWord.slowRelease
    }

    /// While readers hold: grants every shared read that now stands first in the waiting order, up
    /// to the first exclusive command (or the oldest command, once a bounded-overtaking policy
    /// says it is next), as actions beside the first grant.
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

    /// A shared read ends: it releases its share of the section. The last reader to release hands
    /// the section on.
    /// - Parameters:
    ///   - ticket: the reader's ticket, from its grant.
    ///   - word: the word (it says `shared | slowRelease`); on return, the word to store.
    mutating func releaseReader(_ ticket: Ticket, word: inout Int, now: UInt64 = 0) -> Actions {
        var actions = Actions()
        let observed = word
        hold.observe(observed)
        guard isHoldingReader(ticket), hold.removeReader(ticket.slot) else {
            assertionFailure("release of a shared read that does not hold")
            return actions
        }
        actions.ended = table[ticket.slot].handle.take()
        table.end(ticket.slot)
        // Each reader ends its own thread's boost; the hold's boost ends with the last reader.
        actions.endBoost = inheritance.isHoldBoosted
        // mutant(writer-beside-reader): if hold.readersHold && table.waitingCount == 0 {
        if hold.readersHold {
            // A queue's operation gave its slot back: the most urgent waiting one takes it. (Without
            // a limit, the first waiting command is exclusive while readers hold: nothing to admit.)
            // mutant(freed-slot-unused): _ = ()
            if hold.isLimited && table.waitingCount > 0 { admitWaitingReaders(&actions, now: now) }
            word = wordWhileReadersHold(observed)
            return actions
        }
        word = handOn(&actions, closedBit: observed & EngineWord.closed, now: now, releaserQueue: 0)
        return actions
    }

    /// A shared read that took the idle path gives its share back through the lock (it saw a
    /// command waiting, or the container released). The last reader hands the section on.
    /// - Parameter word: the word before the engine set `slowRelease` on it (it counts the reader;
    ///   `slowRelease` may have been cleared since the reader saw it, when the last listed reader
    ///   left and nobody waited); on return, the word to store.
    mutating func releaseIdleReader(word: inout Int, now: UInt64 = 0) -> Actions {
        assert(EngineWord.idleReaders(word) > 0, "an idle reader released that the word does not count")
        var actions = Actions()
        let observed = word
        hold.observe(observed)
        hold.removeIdleReader()
        // It may have been raised as a holder: it ends its own boost.
        actions.endBoost = inheritance.isHoldBoosted
        if hold.readersHold {
            word = wordWhileReadersHold(observed &- EngineWord.idleReaderUnit)
            return actions
        }
        word = handOn(&actions, closedBit: observed & EngineWord.closed, now: now, releaserQueue: 0)
        return actions
    }

    /// The word to store after a reader left while others still hold: `shared` stays while a
    /// listed reader holds; `slowRelease` stays while a command waits or a listed reader holds (it
    /// releases by its ticket); once only idle readers hold and nobody waits, both are cleared, so
    /// that reads join and leave on the idle path again.
    private func wordWhileReadersHold(_ word: Int) -> Int {
        guard !hold.hasListedReaders else { return word }
        let idleOnly = word & ~EngineWord.shared
        return table.waitingCount == 0 ? idleOnly & ~EngineWord.slowRelease : idleOnly
    }

    /// The block of the granted dispatched shared read `ticket` is about to run it.
    /// - Returns: `false` if a helper started it already (the block then does nothing).
    mutating func claimReaderStart(_ ticket: Ticket) -> Bool {
        guard isHoldingReader(ticket), case .reader(let phase) = table[ticket.slot].role else { return false }
        table[ticket.slot].role = .startedReader(phase)
        return true
    }

    /// The granted dispatched shared reads for these queues whose blocks have not started: a
    /// waiting thread that runs on one of the queues (where the blocks cannot run while it waits)
    /// starts them itself.
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

    /// Whether `ticket` is a shared read that holds the section now.
    func isHoldingReader(_ ticket: Ticket) -> Bool {
        table.isCurrent(ticket) && table[ticket.slot].isShared && table[ticket.slot].state == .holding
    }

    /// A shared read that holds the section starts a manual completion: it keeps its share until
    /// both its closure has returned and its completion arrived (see `EngineStateMachine+Manual`).
    mutating func beginReaderManual(_ ticket: Ticket) {
        guard isHoldingReader(ticket) else { return }
        table[ticket.slot].manual = .running
    }
}
