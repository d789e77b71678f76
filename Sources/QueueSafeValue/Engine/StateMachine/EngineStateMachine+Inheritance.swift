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
        guard !urgencies.isEmpty else { return .none }
        return readers.isEmpty ? parkedUrgency.inheritable(byHolder: holdBits) : parkedUrgency
    }

    /// The waiting command `ticket` is about to park its thread or suspend its task, which runs at
    /// `urgency` and inherits `inherited` from sections it holds: while it waits, the holder must
    /// run at least that urgently. `holderBits` are the holder bits of the word (stable under the
    /// lock while a command waits).
    /// - Returns: whether the holder must now run more urgently (``holdUrgency`` says how); `false`
    ///   if it already inherits at least that much, if the holder's kind has nothing to inherit
    ///   from this waiter (a normal thread waiting for a thread holder on Linux: the common
    ///   contended case pays no more), or the command no longer waits.
    mutating func park(_ ticket: Ticket, urgency: Urgency, inherited: Urgency = .none, holderBits: Int) -> Bool {
        guard !(urgency.isNone && inherited.isNone), isWaiting(ticket) else { return false }
        let slot = ticket.slot
        if inherited.isNone && chained[slot] == nil {
            // Kept whole: a later holder of the other kind inherits it (see `release`).
            setUrgency(slot, to: (urgencies[slot] ?? .none).merged(urgency))
        } else {
            let own = (chained[slot]?.own ?? urgencies[slot] ?? .none).merged(urgency)
            setChainedUrgency(slot, ChainedUrgency(own: own, inherited: inherited))
        }
        holdBits = holderBits
        return refreshHoldUrgency()
    }

    /// The waiting command `ticket`, a link of a chain, now inherits `inherited` from the sections
    /// it holds elsewhere (up or down).
    /// - Returns: whether what the holder must run at changed (``holdUrgency`` says to what).
    mutating func setInherited(_ ticket: Ticket, _ inherited: Urgency, holderBits: Int) -> Bool {
        guard isWaiting(ticket) else { return false }
        let own = chained[ticket.slot]?.own ?? urgencies[ticket.slot] ?? .none
        if urgencies[ticket.slot] == nil && inherited.isNone { return false }
        setChainedUrgency(ticket.slot, ChainedUrgency(own: own, inherited: inherited))
        holdBits = holderBits
        return refreshHoldUrgency()
    }

    /// Sets ``holdUrgency`` to what the parked waiters ask for now.
    /// - Returns: whether it changed.
    mutating func refreshHoldUrgency() -> Bool {
        let required = requiredHoldUrgency
        guard required != holdUrgency else { return false }
        holdUrgency = required
        return true
    }

    /// A parked waiter stopped waiting without being granted (it left), or became a holder beside
    /// others (a shared read admitted): if the holder inherited from it, it drops to what still
    /// waits, and the storage brings the raised parties down (``boostSyncNeeded``).
    mutating func lowerHoldUrgencyIfNeeded() {
        if refreshHoldUrgency() && isHoldBoosted { boostSyncNeeded = true }
    }

    /// The highest urgency of the parked waiters, on each axis.
    /// - Complexity: O(d), d the number of distinct urgencies among them.
    var parkedUrgency: Urgency {
        urgencyTally.keys.reduce(Urgency.none) { $0.merged($1) }
    }

    /// The engine is about to bring the parties raised for the current hold to ``holdUrgency``.
    /// While it is not none, parked waiters keep the holder from releasing without the lock, and
    /// its release, which sees ``isHoldBoosted``, ends the raise under the boost lock after this.
    /// - Returns: the urgency to raise the holder to (none: every raise of this hold ends).
    mutating func beginBoost() -> Urgency {
        // mutant(boost-outlives-hold): if !holdUrgency.isNone || true { isHoldBoosted = true }
        if !holdUrgency.isNone { isHoldBoosted = true }
        boostSyncNeeded = false
        return holdUrgency
    }

    /// Whether the storage must bring the raised parties down now; clears the request.
    mutating func takeBoostSync() -> Bool {
        guard boostSyncNeeded else { return false }
        boostSyncNeeded = false
        return true
    }
}
