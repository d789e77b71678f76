// A CommandQueue of width n, and re-prioritizing its waiting operations.
//
// A queue of width 1 (the default) runs its operations as exclusive holders, as it always has. A
// queue of width n > 1 runs them as shared holders, one slot each, with the shared reads' rules
// (`EngineStateMachine+Shared.swift`) and one more: no more than ``Hold/shareLimit`` (the width)
// hold at once. So the waiting order is the one every command keeps (priority, then arrival), and
// a slot is granted to the first waiting operation:
//
// - when the section is free or a slot is free at its arrival, and nobody waits before it, it takes
//   a slot at once (`enqueue`, `mayJoinReaders`);
// - when an operation gives its slot back, the first waiting one takes it (`releaseReader`, then
//   `admitWaitingReaders`, which stops at the width);
// - when the width grows, as many waiting operations as it allows take slots at once (`setWidth`).
//
// Crossing between 1 and more converts the waiting operations between exclusive and shared; the
// running ones keep how they hold until they end. A width lowered below the running count takes no
// slot back: the running operations finish, and none starts until fewer than the width run.
//
// A waiting operation's priority can change (`reprioritize`): it takes the place of an operation of
// the new priority arriving now, behind every operation already waiting at that priority. Under a
// bounded-overtaking policy it keeps its arrival age (its overtake count): the bound promises that
// a command waits behind at most so many later ones, and a new priority does not restart the count.
extension EngineStateMachine {
    /// Whether a ``CommandQueue``'s operations hold the section as shared holders, one slot each:
    /// its width is above 1.
    var operationsShare: Bool { hold.isLimited }

    /// The queue's width: how many operations may hold at once.
    var width: Int { hold.isLimited ? hold.shareLimit : 1 }

    /// A ``CommandQueue``'s width changes to `width` (at least 1). Waiting operations are converted
    /// when it crosses between 1 and more, and the first waiting ones take the slots it frees.
    /// - Returns: the actions: the operations granted now are started.
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

    /// The waiting command `ticket` changes its priority to `priority`: it takes the place a
    /// command of that priority arriving now would take. If readers or a queue's operations hold,
    /// and it stands first now, it is granted at once when a share is free.
    /// - Returns: the actions; ``Actions/found`` says whether it ``Found/moved``, holds the section
    ///   (``Found/holding``: its place no longer matters) or is ``Found/gone``.
    /// - Complexity: O(n) in the number of waiting commands.
    mutating func reprioritize(_ ticket: Ticket, to priority: CommandPriority, now: UInt64 = 0) -> Actions {
        var actions = Actions()
        guard table.isCurrent(ticket) else {
            actions.found = .gone
            return actions
        }
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
