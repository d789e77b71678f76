// The eventually fair mode (`CommandFairness.eventual`): one typed part of `EngineStateMachine`,
// whose fields only this file touches.

/// Barging within one priority, with a bound on how long a waiting command may be passed over.
/// Inactive (``isActive`` false) under the other fairness modes: then it keeps nothing, and every
/// release hands the section directly to the first waiting command.
///
/// Under the mode, a release whose first waiting command is a blocking exclusive command that has
/// waited less than ``bound`` does not hand the section to it: it frees the section and wakes that
/// command (the *candidate*, ``woken``), which claims the section when its thread runs. Meanwhile a
/// command that arrives may take the free section ahead of it, if its priority is at least the
/// candidate's. Once the first waiting command has waited ``bound`` or longer it is *due*: the next
/// release hands the section to it, and nobody takes the section ahead of it.
///
/// The times are the clock the storage passes in (`DispatchTime`'s uptime nanoseconds; under a
/// controlled scheduler, a virtual clock).
///
/// Invariant (``violation(_:isHeld:)``): while the section is free and commands wait, a woken
/// command that still waits is on its way to claim it.
struct Barging {
    typealias Ticket = EngineStateMachine.Ticket

    /// How long the first waiting command may wait before it is handed the section directly, in
    /// nanoseconds; `nil` when the mode is off.
    let bound: UInt64?
    /// When each waiting command arrived, by slot (meaningful only while that record waits).
    private var arrivals: [UInt64] = []
    /// The first waiting command, woken to claim a section that a release freed; `nil` when no
    /// claim is on its way.
    private(set) var woken: Ticket?
    /// The last grant (for the fairness invariant the test suite's checker asserts): when, to a
    /// command of which priority, which arrived when (a command that took a free section arrived
    /// then).
    private(set) var lastGrant: (at: UInt64, priority: CommandPriority, arrival: UInt64)?

    init(bound: UInt64?) {
        self.bound = bound
    }

    /// Whether the mode is on.
    @inline(__always)
    var isActive: Bool { bound != nil }

    /// The waiting command in `slot` arrived at `now`.
    mutating func arrived(_ slot: UInt32, at now: UInt64) {
        guard isActive else { return }
        let index = Int(slot)
        if index >= arrivals.count { arrivals.append(contentsOf: repeatElement(0, count: index + 1 - arrivals.count)) }
        arrivals[index] = now
    }

    /// When the waiting command in `slot` arrived.
    func arrival(of slot: UInt32) -> UInt64 {
        arrivals[Int(slot)]
    }

    /// Whether the waiting command in `slot` has waited `bound` or longer at `now`.
    func isDue(_ slot: UInt32, now: UInt64) -> Bool {
        guard let bound else { return false }
        // mutant(bound-never-enforced): return false
        return now &- arrivals[Int(slot)] >= bound
    }

    /// The command `ticket` is woken to claim the free section.
    mutating func wake(_ ticket: Ticket) {
        woken = ticket
    }

    /// The candidate claimed the section, left the queue, was handed the section, or went back to
    /// parking: no claim is on its way now.
    mutating func clearWoken(_ ticket: Ticket) {
        if woken == ticket { woken = nil }
    }

    /// A command of `priority` was granted the section at `now`: the waiting one in `slot`, or
    /// (`nil`) one that arrived now.
    mutating func granted(at now: UInt64, priority: CommandPriority, slot: UInt32? = nil) {
        if isActive { lastGrant = (now, priority, slot.map { arrivals[Int($0)] } ?? now) }
    }

    /// Whether a woken command is on its way to claim the section (it still waits).
    func isClaimOnItsWay(_ table: RecordTable) -> Bool {
        woken.map { table.isWaiting($0) } ?? false
    }

    /// What is wrong with the mode's bookkeeping, if anything: commands wait behind a free section
    /// only while a claim is on its way (whoever claims hands the section to the first of them).
    /// - Parameter isHeld: whether the word shows a holder.
    func violation(_ table: RecordTable, isHeld: Bool) -> String? {
        guard isActive else {
            return arrivals.isEmpty && woken == nil ? nil : "barging bookkeeping kept outside the eventual mode"
        }
        if !isHeld && table.waitingCount > 0 && !isClaimOnItsWay(table) {
            return "the section is free while commands wait, and none of them was woken to claim it"
        }
        return nil
    }
}
