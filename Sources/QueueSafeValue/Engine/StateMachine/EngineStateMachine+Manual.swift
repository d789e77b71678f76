// Manual completion: a command whose closure and `done` are two parties, either of which may
// arrive first.
extension EngineStateMachine {
    // MARK: Manual completion

    /// The holder starts a manual-completion command: the machine keeps a record of it until both
    /// its closure has returned and its completion arrived. The holder's release then goes
    /// through the lock.
    /// - Parameter word: the word (the caller holds the section); on return, the word to store.
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

    /// The closure of a manual-completion command returned.
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

    /// The completion of a manual-completion command was called, or dropped uncalled. Arrives once
    /// per command (the completion closure lets only its first call through).
    /// - Returns: the actions: if the closure had returned already, finish the command.
    mutating func manualCompletionArrived(_ ticket: Ticket, dropped: Bool) -> Actions {
        var actions = Actions()
        guard table.isCurrent(ticket) else { return actions }
        if dropped { life.completionDropped() }
        switch table[ticket.slot].manual {
        case .running:
            table[ticket.slot].manual = .completionArrived
        case .closureReturned:
            table[ticket.slot].manual = .completionArrived
            if let waiter = table[ticket.slot].handle { actions.others.append(.finish(waiter)) }
        case .notManual, .completionArrived:
            break
        }
        return actions
    }
}
