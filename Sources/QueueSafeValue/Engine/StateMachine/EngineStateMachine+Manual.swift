// Manual completion: a command whose closure and `done` are two parties, either of which may
// arrive first.
extension EngineStateMachine {
    // MARK: Manual completion

    /// The holder starts a manual-completion command: the machine keeps a record of it until both
    /// its closure has returned and its completion arrived. The holder's release then goes
    /// through the lock.
    /// - Parameter observed: the word (the caller holds the section).
    mutating func beginManual(
        _ waiter: Handle,
        kind: CommandKind,
        observed: Int,
        now: UInt64 = 0
    ) -> (Ticket, word: Int) {
        assert(EngineWord.isHeld(observed) && holderSlot == nil, "manual completion without a plain holder")
        let ticket = allocate(waiter, kind: kind, state: .holding)
        records[Int(ticket.slot)].manual = .running
        holderSlot = ticket.slot
        if observed & EngineWord.slowRelease == 0 { (holderSince, holderSinceIsExact) = (now, false) }
        return (ticket, observed | EngineWord.slowRelease)
    }

    /// The closure of a manual-completion command returned.
    mutating func manualClosureReturned(_ ticket: Ticket) -> ManualStep {
        guard isCurrent(ticket) else { return .none }
        switch records[Int(ticket.slot)].manual {
        case .running:
            records[Int(ticket.slot)].manual = .closureReturned
            return .waitForCompletion
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
        guard isCurrent(ticket) else { return actions }
        if dropped { droppedCompletions += 1 }
        switch records[Int(ticket.slot)].manual {
        case .running:
            records[Int(ticket.slot)].manual = .completionArrived
        case .closureReturned:
            records[Int(ticket.slot)].manual = .completionArrived
            if let waiter = records[Int(ticket.slot)].handle { actions.others.append(.finish(waiter)) }
        case .notManual, .completionArrived:
            break
        }
        return actions
    }
}
