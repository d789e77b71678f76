// The machine's invariants, and the views the test suite's explorers and checker take of it.
extension EngineStateMachine {
    /// What the machine knows of one command, for the interleaving explorer and diagnostics.
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

    /// What the machine knows of the command with `ticket`, or `nil` once its record is gone.
    func summary(of ticket: Ticket) -> Summary? {
        guard isCurrent(ticket) else { return nil }
        let record = records[Int(ticket.slot)]
        return Summary(
            state: record.state, kind: record.kind, manual: record.manual, taskUnattached: record.taskUnattached,
            hasTask: record.hasTask, inHeap: record.inHeap, cancelRequested: record.cancelRequested,
            discarded: record.discarded)
    }

    /// The waiting commands in the order they will get the section, with their priorities.
    /// - Complexity: O(n log n)
    func waitingInOrder() -> [(waiter: Handle, priority: CommandPriority, kind: CommandKind)] {
        heap.unordered.sorted { $0.key < $1.key }.compactMap { entry in
            let record = records[Int(entry.slot)]
            guard record.state == .waiting, let handle = record.handle else { return nil }
            return (handle, CommandHeap.priority(of: entry.key), record.kind)
        }
    }

    /// Checks the machine's bookkeeping against itself and the word; traps on a violation.
    /// - Complexity: O(n)
    func checkInvariants(word: Int) {
        if let violation = invariantViolation(word: word) { preconditionFailure(violation) }
    }

    /// What is wrong with the machine's bookkeeping, or with the word it left, if anything.
    /// - Complexity: O(n)
    func invariantViolation(word: Int) -> String? {
        heap.checkInvariants()
        let waitingInHeap = heap.unordered.filter { records[Int($0.slot)].state == .waiting }.count
        if waitingInHeap != waitingCount { return "waiting count \(waitingCount) but \(waitingInHeap) in the heap" }
        if heap.count - waitingInHeap != deadEntries { return "dead entry count is off" }
        if !EngineWord.isHeld(word) {
            if waitingCount != 0 { return "commands wait while the section is free" }
            if holderSlot != nil { return "a holder record while the section is free" }
        }
        if (waitingCount > 0 || holderSlot != nil) && word & EngineWord.slowRelease == 0 {
            return "the holder could release without the lock while the machine needs it to"
        }
        if (word & EngineWord.closed != 0) != isClosed { return "closed bit and state disagree" }
        if isValueFreed && (EngineWord.isHeld(word) || waitingCount > 0) { return "value freed while in use" }
        if urgencies.keys.contains(where: { records[Int($0)].state != .waiting }) {
            return "an urgency kept for a command that no longer waits"
        }
        if urgencyTally != Dictionary(urgencies.values.map { ($0, 1) }, uniquingKeysWith: +) {
            return "the urgency tally disagrees with the parked waiters' urgencies"
        }
        if !EngineWord.isHeld(word) && (isHoldBoosted || !holdUrgency.isNone) { return "a boost outlived its hold" }
        if EngineWord.isHeld(word) && holdUrgency != requiredHoldUrgency {
            return "the holder inherits \(holdUrgency) but its parked waiters ask for \(requiredHoldUrgency)"
                + " (a boost outlived its reason, or a raise was missed)"
        }
        if chained.keys.contains(where: { urgencies[$0] == nil }) { return "a chained urgency of a waiter that left" }
        if boostSyncNeeded { return "a boost to bring down was left for nobody" }
        if !outbox.isEmpty { return "a transition's actions were left in the outbox: nobody performs them" }
        if let violation = sharedReadViolation(word: word) { return violation }
        if maxOvertakes != nil {
            let live = arrivals[arrivalsStart...].filter { isWaiting($0.ticket) }.count
            if live != waitingCount { return "\(waitingCount) commands wait but \(live) are in the arrival order" }
        }
        return nil
    }
}

extension EngineStateMachine {
    /// What is wrong with the shared reads' bookkeeping, if anything: the word and the readers
    /// disagree, an exclusive holder beside readers, or a shared read waiting that the order says
    /// holds with them (it stands first, before every exclusive command).
    /// - Complexity: O(n log n)
    func sharedReadViolation(word: Int) -> String? {
        if (word & EngineWord.shared != 0) != !readers.isEmpty {
            return "the word's shared bit says \(word & EngineWord.shared != 0) but \(readers.count) readers hold"
        }
        guard !readers.isEmpty else { return nil }
        if word & EngineWord.holderMask != 0 { return "an exclusive holder beside \(readers.count) shared reads" }
        if holderSlot != nil { return "an exclusive holder record beside shared reads" }
        if word & EngineWord.slowRelease == 0 { return "shared reads could release without the lock" }
        for slot in readers where !(records[Int(slot)].shared && records[Int(slot)].state == .holding) {
            return "slot \(slot) is listed as a reader but its record is \(records[Int(slot)].state)"
        }
        if Set(readers).count != readers.count { return "a reader listed twice" }
        let firstWaiting = heap.unordered.filter { records[Int($0.slot)].state == .waiting }.min { $0.key < $1.key }
        if let first = firstWaiting, records[Int(first.slot)].shared {
            // A bounded-overtaking policy may hold it back behind the oldest command, once due.
            let boundDue =
                maxOvertakes.map { limit in
                    arrivals[arrivalsStart...].contains { isWaiting($0.ticket) } && oldestOvertakes >= limit
                } ?? false
            if !boundDue { return "a shared read waits first in line while shared reads hold" }
        }
        return nil
    }
}
