// Priority inheritance, decided: which urgency the holder must run at, and when that changes.
// `PriorityInheritance.swift` performs it, and walks it along chains of holders.

/// The urgency of a parked waiter that holds a section elsewhere (a link of a chain): its own, and
/// what it inherits from its own waiters there, kept apart so that the inherited part can go down.
struct ChainedUrgency: Hashable {
    var own: Urgency
    var inherited: Urgency
}

extension EngineStateMachine {
    // MARK: Priority inheritance

    /// What the current holder must run at: the highest urgency of the parked waiters, on the axis
    /// its kind inherits (see ``Urgency/inheritable(byHolder:)``); every axis while shared reads
    /// hold (they may be threads and tasks at once).
    /// - Complexity: O(d), d the number of distinct urgencies among the parked waiters.
    var requiredHoldUrgency: Urgency {
        inheritance.required(readersHold: hold.readersHold)
    }

    /// The waiting command `ticket` is about to park its thread or suspend its task, which runs at
    /// `urgency` and inherits `inherited` from sections it holds: while it waits, the holder must
    /// run at least that urgently. `holderBits` are the holder bits of the word (stable under the
    /// lock while a command waits).
    /// - Returns: whether the holder must now run more urgently (``Inheritance/holdUrgency`` says
    ///   how); `false` if it already inherits at least that much, if the holder's kind has nothing
    ///   to inherit from this waiter (a normal thread waiting for a thread holder on Linux: the
    ///   common contended case pays no more), or the command no longer waits.
    mutating func park(_ ticket: Ticket, urgency: Urgency, inherited: Urgency = .none, holderBits: Int) -> Bool {
        guard !(urgency.isNone && inherited.isNone), table.isWaiting(ticket) else { return false }
        let slot = ticket.slot
        let chained = inheritance.chainedUrgency(of: slot)
        if inherited.isNone && chained == nil {
            // Kept whole: a later holder of the other kind inherits it (see `release`).
            inheritance.set(slot, to: (inheritance.urgency(of: slot) ?? .none).merged(urgency))
        } else {
            let own = (chained?.own ?? inheritance.urgency(of: slot) ?? .none).merged(urgency)
            inheritance.setChained(slot, ChainedUrgency(own: own, inherited: inherited))
        }
        // Eventually fair mode, the section free while a claim is on its way: nobody to raise yet;
        // the command granted next inherits it (and nobody barges meanwhile).
        if isFreeWithWaiters { return false }
        inheritance.noteHolder(holderBits)
        return inheritance.refresh(readersHold: hold.readersHold)
    }

    /// Eventually fair mode: the section is free while commands wait (a claim is on its way).
    /// Exact: with commands waiting, every change of the holder happens under the lock.
    var isFreeWithWaiters: Bool {
        barging.isActive && hold.holder == .free && table.waitingCount > 0
    }

    /// The waiting command `ticket`, a link of a chain, now inherits `inherited` from the sections
    /// it holds elsewhere (up or down).
    /// - Returns: whether what the holder must run at changed (``Inheritance/holdUrgency`` says to
    ///   what).
    mutating func setInherited(_ ticket: Ticket, _ inherited: Urgency, holderBits: Int) -> Bool {
        guard table.isWaiting(ticket) else { return false }
        let own = inheritance.chainedUrgency(of: ticket.slot)?.own ?? inheritance.urgency(of: ticket.slot) ?? .none
        if inheritance.urgency(of: ticket.slot) == nil && inherited.isNone { return false }
        inheritance.setChained(ticket.slot, ChainedUrgency(own: own, inherited: inherited))
        if isFreeWithWaiters { return false }
        inheritance.noteHolder(holderBits)
        return inheritance.refresh(readersHold: hold.readersHold)
    }

    /// The engine is about to bring the parties raised for the current hold to what it inherits
    /// (see ``Inheritance/beginBoost()``).
    /// - Returns: the urgency to raise the holder to (none: every raise of this hold ends).
    mutating func beginBoost() -> Urgency {
        inheritance.beginBoost()
    }

}
