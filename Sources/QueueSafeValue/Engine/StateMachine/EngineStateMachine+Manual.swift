// Manual completion: a closure and its `done`, two parties either of which may arrive first.
extension EngineStateMachine {
    // MARK: Manual completion

    /// The holder starts a manual completion: a record, kept until both its closure returned and
    /// its completion arrived, makes its release go through the lock.
    /// - Returns: the ticket its completion reports to.
    mutating func beginManual(
        _ waiter: Handle,
        kind: CommandKind,
        word: inout Int,
        now: UInt64 = 0
    ) -> Ticket {
        assert(EngineWord.isHeld(word) && hold.trackedSlot == nil, "manual completion without a plain holder")
        let ticket = table.allocate(waiter, kind: kind, state: .holding, role: .exclusive(.running))
        hold.grant(tracked: ticket.slot)
        if word & EngineWord.slowRelease == 0 { hold.stamp(now, exact: false) }
        word |= EngineWord.slowRelease
        return ticket
    }

    mutating func manualClosureReturned(_ ticket: Ticket) -> ManualStep {
        guard table.isCurrent(ticket) else { return .none }
        switch table[ticket.slot].manual {
        case .running:
            table[ticket.slot].manual = .closureReturned
            return .waitForCompletion(boosted: isHoldBoosted)
        case .completionArrived:
            return .release
        case .notManual, .closureReturned:
            return .none
        }
    }

    /// The completion was called, or dropped uncalled; once per command. Finishes it if its closure
    /// returned already.
    mutating func manualCompletionArrived(_ ticket: Ticket, dropped: Bool) -> Actions {
        var actions = Actions()
        guard table.isCurrent(ticket) else { return actions }
        if dropped { life.completionDropped() }
        let phase = table[ticket.slot].manual
        guard phase == .running || phase == .closureReturned else { return actions }
        table[ticket.slot].manual = .completionArrived
        if phase == .closureReturned, let waiter = table[ticket.slot].handle { actions.others.append(.finish(waiter)) }
        return actions
    }
}
