// The machine's invariants, and the views the test suite's explorers and checker take of it.
extension EngineStateMachine {
    struct Summary: Hashable {
        var state: RecordState
        var kind: CommandKind
        var manual: ManualPhase
        var taskUnattached: Bool
        var hasTask: Bool
        var inHeap: Bool
        var cancelRequested: Bool
        var discarded: Bool
    }

    /// `nil` once its record is gone.
    func summary(of ticket: Ticket) -> Summary? {
        guard table.isCurrent(ticket) else { return nil }
        let record = table[ticket.slot]
        return Summary(
            state: record.state, kind: record.kind, manual: record.manual, taskUnattached: record.taskUnattached,
            hasTask: record.attachment == .attached,
            inHeap: record.inHeap, cancelRequested: record.attachment == .unattachedCancelRequested,
            discarded: discarding.discardedHolder == ticket)
    }

    /// - Complexity: O(n log n)
    func waitingInOrder() -> [(waiter: Handle, priority: CommandPriority, kind: CommandKind)] {
        table.waitingEntries.sorted { $0.key < $1.key }.compactMap { entry in
            guard let handle = table[entry.slot].handle else { return nil }
            return (handle, CommandHeap.priority(of: entry.key), table[entry.slot].kind)
        }
    }

    /// - Complexity: O(n)
    func checkInvariants(word: Int) {
        if let violation = invariantViolation(word: word) { preconditionFailure(violation) }
    }

    /// What is wrong with the word a locked transition leaves; the storage asserts it (debug builds).
    /// - Complexity: O(readers)
    func wordViolation(_ word: Int) -> String? {
        if !EngineWord.isHeld(word) && table.waitingCount != 0 && !barging.isActive {
            return "commands wait while the section is free"
        }
        if (table.waitingCount > 0 || hold.trackedSlot != nil) && word & EngineWord.slowRelease == 0 {
            return "the holder could release without the lock while the machine needs it to"
        }
        if let violation = life.violation(word: word, waitingCount: table.waitingCount) { return violation }
        return hold.violation(word: word)
    }

    /// Each part's invariant in turn (Architecture.md, "States, events and actions").
    /// - Complexity: O(n)
    func invariantViolation(word: Int) -> String? {
        if let violation = table.violation() { return violation }
        if let violation = wordViolation(word) { return violation }
        if let slot = hold.trackedSlot, table[slot].state != .holding {
            return "the tracked holder's record is \(table[slot].state)"
        }
        if let violation = inheritance.violation(
            isWaiting: { table[$0].state == .waiting }, isHeld: EngineWord.isHeld(word), readersHold: hold.readersHold)
        {
            return violation
        }
        if let violation = sharedReadViolation(word: word) { return violation }
        if let violation = bound.violation(table) { return violation }
        if let violation = barging.violation(table, isHeld: EngineWord.isHeld(word)) { return violation }
        if let violation = discarding.violation(table) { return violation }
        return nil
    }
}

extension EngineStateMachine {
    /// Listed readers hold, within the limit, and no read waits first while a share is free.
    /// - Complexity: O(n log n)
    func sharedReadViolation(word: Int) -> String? {
        guard hold.hasListedReaders else { return nil }
        for slot in hold.readers where !(table[slot].isShared && table[slot].state == .holding) {
            return "slot \(slot) is listed as a reader but its record is \(table[slot].state)"
        }
        if let violation = hold.shareLimitViolation { return violation }
        let firstWaiting = table.waitingEntries.min { $0.key < $1.key }
        // A bounded-overtaking policy may hold it back behind the oldest command, once due.
        guard let first = firstWaiting, table[first.slot].isShared, hold.hasFreeShare, !bound.isSomeoneDue(in: table)
        else { return nil }
        return "a shared read waits first in line while shared reads hold and a share (a slot of a queue) is free"
    }
}
