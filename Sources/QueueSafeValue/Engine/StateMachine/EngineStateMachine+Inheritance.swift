// Priority inheritance, decided: which urgency the holder must be raised to, and when a raise is
// allowed. `PriorityInheritance.swift` performs it.
extension EngineStateMachine {
    // MARK: Priority inheritance

    /// The waiting command `ticket` is about to park its thread or suspend its task, which runs at
    /// `urgency`: while it waits, the holder must run at least that urgently. `holderBits` are the
    /// holder bits of the word (stable under the lock while a command waits).
    /// - Returns: the urgency the holder must be raised to now, or `nil` if it already inherits at
    ///   least that much, if the holder's kind has nothing to inherit from this waiter (a normal
    ///   thread waiting for a thread holder on Linux: the common contended case pays no more), or
    ///   the command no longer waits.
    mutating func park(_ ticket: Ticket, urgency: Urgency, holderBits: Int) -> Urgency? {
        guard !urgency.isNone, isWaiting(ticket) else { return nil }
        // Kept whole: a later holder of the other kind inherits it (see `release`).
        setUrgency(ticket.slot, to: (urgencies[ticket.slot] ?? .none).merged(urgency))
        // Shared reads may be threads and tasks at once: each axis is raised where it applies.
        let raised = holdUrgency.merged(readers.isEmpty ? urgency.inheritable(byHolder: holderBits) : urgency)
        guard raised != holdUrgency else { return nil }
        holdUrgency = raised
        return raised
    }

    /// The highest urgency of the parked waiters, on each axis.
    /// - Complexity: O(d), d the number of distinct urgencies among them.
    var parkedUrgency: Urgency {
        urgencyTally.keys.reduce(Urgency.none) { $0.merged($1) }
    }

    /// The engine is about to raise the current holder on behalf of the waiting command
    /// `ticket`: allowed only while that command still waits, so the holder cannot change without
    /// a release that sees ``isHoldBoosted`` and ends the boost.
    /// - Returns: whether to raise the holder.
    mutating func beginBoost(for ticket: Ticket) -> Bool {
        // mutant(boost-outlives-hold): guard isWaiting(ticket) || true else { return false }
        guard isWaiting(ticket) else { return false }
        isHoldBoosted = true
        return true
    }
}
