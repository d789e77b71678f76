// A CommandQueue of width n (Architecture.md, "Shared reads"), and re-prioritizing. A waiting
// operation moved to a new priority keeps its overtake count under a bounded-overtaking policy:
// the bound promises a command waits behind at most so many later ones, whatever its priority.
extension EngineStateMachine {
    /// A ``CommandQueue`` of width above 1: its operations hold as shared holders, one slot each.
    var operationsShare: Bool { hold.isLimited }

    var width: Int { hold.isLimited ? hold.shareLimit : 1 }

    /// Crossing 1 converts only the waiting operations (one that started alone was promised to run
    /// alone); the first waiting ones take the slots it frees.
    mutating func setWidth(_ width: Int, now: UInt64 = 0) -> Actions {
        precondition(width >= 1, "a width below 1")
        let sharedBefore = operationsShare
        // A width of 1 is kept as "no sharing" (exclusive operations), not as a limit of one.
        hold.setShareLimit(width == 1 ? .max : width)
        if operationsShare != sharedBefore { table.convertWaitingOperations(shared: operationsShare) }
        var actions = Actions()
        if hold.hasListedReaders && table.waitingCount > 0 { admitWaitingReaders(&actions, now: now) }
        return actions
    }

    /// The waiting command `ticket` takes the place of a command of `priority` arriving now; standing
    /// first while a share is free, it is granted at once.
    /// - Complexity: O(n) in the number of waiting commands.
    mutating func reprioritize(_ ticket: Ticket, to priority: CommandPriority, now: UInt64 = 0) -> Actions {
        guard table.isCurrent(ticket) else { return Actions(found: .gone) }
        var actions = Actions()
        switch table[ticket.slot].state {
        case .waiting:
            table.requeue(ticket.slot, priority: priority)
            if hold.hasListedReaders { admitWaitingReaders(&actions, now: now) }
            actions.found = .moved
        case .holding:
            actions.found = .holding
        case .left, .ended, .free:
            actions.found = .gone
        }
        return actions
    }
}
