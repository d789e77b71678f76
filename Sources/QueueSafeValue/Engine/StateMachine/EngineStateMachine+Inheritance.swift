// Priority inheritance, decided; `PriorityInheritance.swift` performs it along chains of holders.

/// A parked waiter that holds a section elsewhere (a link of a chain): its own urgency and what it
/// inherits there, apart, so that the inherited part can go down.
struct ChainedUrgency: Hashable {
    var own: Urgency
    var inherited: Urgency
}

extension EngineStateMachine {
    // MARK: Priority inheritance

    /// The waiting command `ticket` is about to park or suspend, at `urgency`, inheriting `inherited`
    /// from sections it holds. `holderBits`: the word's, stable under the lock while a command waits.
    /// - Returns: whether the holder must now run more urgently (``Inheritance/holdUrgency``).
    mutating func park(_ ticket: Ticket, urgency: Urgency, inherited: Urgency = .none, holderBits: Int) -> Bool {
        guard !(urgency.isNone && inherited.isNone), table.isWaiting(ticket) else { return false }
        // Kept whole: a later holder of the other kind inherits it (see `release`).
        let own = inheritance.ownUrgency(of: ticket.slot).merged(urgency)
        inheritance.setChained(ticket.slot, ChainedUrgency(own: own, inherited: inherited))
        return refreshHolder(holderBits)
    }

    /// The waiting command `ticket`, a link of a chain, now inherits `inherited` (up or down).
    /// - Returns: whether what the holder must run at changed.
    mutating func setInherited(_ ticket: Ticket, _ inherited: Urgency, holderBits: Int) -> Bool {
        guard table.isWaiting(ticket) else { return false }
        if inheritance.urgency(of: ticket.slot) == nil && inherited.isNone { return false }
        let own = inheritance.ownUrgency(of: ticket.slot)
        inheritance.setChained(ticket.slot, ChainedUrgency(own: own, inherited: inherited))
        return refreshHolder(holderBits)
    }

    /// Whether the holder's urgency changed. Not while the section is free with a claim on its way
    /// (eventually fair mode): the command granted next inherits it, and nobody barges meanwhile.
    private mutating func refreshHolder(_ holderBits: Int) -> Bool {
        if barging.isActive && hold.holder == .free && table.waitingCount > 0 { return false }
        inheritance.noteHolder(holderBits)
        return inheritance.refresh(readersHold: hold.readersHold)
    }

    /// See ``Inheritance/beginBoost()``.
    mutating func beginBoost() -> Urgency {
        inheritance.beginBoost()
    }

}
