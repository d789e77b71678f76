// The eventually fair mode (`CommandFairness.eventual`): one typed part of `EngineStateMachine`,
// whose fields only this file touches, and the machine's rules for the mode (who may barge, the
// wake-up to claim a freed section, the claim).

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

// MARK: - The machine's barging rules

extension EngineStateMachine {
    /// Eventually fair mode, the section free while the first waiting command is on its way to
    /// claim it: whether a command of `priority` that arrives now may take it first. Never past a
    /// command of higher priority, nor past one that waited the bound; not while a waiting command
    /// asks the holder for urgency (the barging holder would not inherit it in time); and not while
    /// a dispatch command or an operation waits (its issuer went on, and may be the one arriving
    /// now: one issuer's commands keep their order).
    mutating func mayBarge(priority: CommandPriority, now: UInt64) -> Bool {
        // mutant(barge-past-own-dispatch): let detachedWaits = false
        let detachedWaits = table.waitingDetachedCount > 0
        guard !inheritance.hasParked, !detachedWaits, let first = table.firstWaitingEntry() else { return false }
        let firstPriority = CommandHeap.priority(of: first.key)
        // mutant(barge-past-higher-priority): return !barging.isDue(first.slot, now: now)
        return priority > firstPriority || (priority == firstPriority && !barging.isDue(first.slot, now: now))
    }

    /// Eventually fair mode: whether a release may free the section instead of handing it to
    /// `first`, the first waiting command: it is a blocking exclusive command (a thread that can
    /// claim it when it runs), it has waited less than the bound, and no waiting command asks the
    /// holder for urgency.
    mutating func mayFreeForBarging(_ first: CommandHeap.Entry, now: UInt64) -> Bool {
        table[first.slot].kind == .blocking && !table[first.slot].isShared && !inheritance.hasParked
            && !barging.isDue(first.slot, now: now)
    }

    /// The first waiting command, in `slot`, is woken to claim the free section, unless it was.
    mutating func wakeToClaim(_ actions: inout Actions, _ slot: UInt32) {
        let ticket = table.ticket(of: slot)
        guard barging.woken != ticket, let handle = table[slot].handle else { return }
        barging.wake(ticket)
        actions.others.append(.claim(handle))
    }

    /// Eventually fair mode: the waiting command `ticket`, woken to claim a free section, claims
    /// it. If the section is free it is granted (or, if another command is first now, that one is
    /// woken or granted); if a command took it first, the claimer waits on.
    /// - Parameters:
    ///   - parking: the claimer is about to park: it is no longer on its way, so the next release
    ///     wakes it again.
    ///   - word: the word, with `slowRelease` set by the engine; on return, the word to store.
    /// - Returns: the actions; ``Actions/found`` says what the claimer does next: ``Found/settled``
    ///   (it was granted, its start among the actions, or no longer waits: it looks at its own
    ///   state), ``Found/stillHeld`` or ``Found/passedOn``.
    mutating func claim(_ ticket: Ticket, parking: Bool, word: inout Int, now: UInt64) -> Actions {
        var actions = Actions()
        let held = hold.observeHolder(word)
        guard table.isWaiting(ticket) else {
            barging.clearWoken(ticket)
            actions.found = .settled
            return actions
        }
        if held {
            if parking { barging.clearWoken(ticket) }
            actions.found = .stillHeld
            return actions
        }
        let closedBit = word & EngineWord.closed
        if table.waitingMayGiveUp > 0 { dropGivenUp(&actions, now: now) }
        guard table.isWaiting(ticket) else {
            // It gave up itself (its deadline passed): the next waiting command takes its place.
            barging.clearWoken(ticket)
            if !barging.isClaimOnItsWay(table), let granted = settleFree(&actions, closedBit: closedBit, now: now) {
                word = granted
            }
            actions.found = .settled
            return actions
        }
        guard let first = table.firstWaitingEntry(), first.slot == ticket.slot else {
            // Another command is first now: it is woken to claim the section, or granted it.
            barging.clearWoken(ticket)
            if !barging.isClaimOnItsWay(table), let granted = settleFree(&actions, closedBit: closedBit, now: now) {
                word = granted
            }
            actions.found = .passedOn
            return actions
        }
        word = grantFirst(first, &actions, closedBit: closedBit, now: now)
        actions.found = .settled
        return actions
    }

    /// Eventually fair mode, the section free with commands waiting and no claim on its way: the
    /// first waiting command is woken to claim it, or granted it.
    /// - Returns: the word to store after a grant; `nil` if the word stays.
    mutating func settleFree(_ actions: inout Actions, closedBit: Int, now: UInt64) -> Int? {
        if table.waitingMayGiveUp > 0 { dropGivenUp(&actions, now: now) }
        guard let first = table.firstWaitingEntry() else { return nil }
        if mayFreeForBarging(first, now: now) {
            wakeToClaim(&actions, first.slot)
            return nil
        }
        return grantFirst(first, &actions, closedBit: closedBit, now: now)
    }

    /// Eventually fair mode, the section free: grants it to `first`, the first waiting command.
    /// - Returns: the word to store.
    mutating func grantFirst(
        _ first: CommandHeap.Entry, _ actions: inout Actions, closedBit: Int, now: UInt64
    ) -> Int {
        barging.granted(at: now, priority: CommandHeap.priority(of: first.key), slot: first.slot)
        let popped = table.popWaiting()
        assert(popped?.slot == first.slot, "the first waiting entry was not the one popped")
        return grantPopped(
            &actions, slot: first.slot, kind: table[first.slot].kind, closedBit: closedBit, now: now,
            releaserQueue: 0)
    }
}
