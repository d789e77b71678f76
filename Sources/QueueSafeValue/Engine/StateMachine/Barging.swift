// The eventually fair mode (`CommandFairness.eventual`; Architecture.md, "Eventually fair mode"):
// a typed part of `EngineStateMachine`, and the machine's rules for it.

/// Barging within one priority, bounded; keeps nothing while the mode is off. Times are the
/// storage's clock (`DispatchTime`'s uptime; a controlled scheduler's virtual clock).
struct Barging {
    typealias Ticket = EngineStateMachine.Ticket

    /// In nanoseconds; `nil` when the mode is off.
    let bound: UInt64?
    /// By slot, meaningful while that record waits.
    private var arrivals: [UInt64] = []
    /// The first waiting command, woken to claim a freed section; `nil` when no claim is on its way.
    private(set) var woken: Ticket?
    /// For the checker's fairness invariant: when, at which priority, arrived when.
    private(set) var lastGrant: (at: UInt64, priority: CommandPriority, arrival: UInt64)?

    init(bound: UInt64?) {
        self.bound = bound
    }

    @inline(__always)
    var isActive: Bool { bound != nil }

    mutating func arrived(_ slot: UInt32, at now: UInt64) {
        guard isActive else { return }
        let index = Int(slot)
        if index >= arrivals.count { arrivals.append(contentsOf: repeatElement(0, count: index + 1 - arrivals.count)) }
        arrivals[index] = now
    }

    func arrival(of slot: UInt32) -> UInt64 {
        arrivals[Int(slot)]
    }

    /// It waited the bound: the next release hands it the section, and nobody barges past it.
    func isDue(_ slot: UInt32, now: UInt64) -> Bool {
        guard let bound else { return false }
        // mutant(bound-never-enforced): return false
        return now &- arrivals[Int(slot)] >= bound
    }

    mutating func wake(_ ticket: Ticket) {
        woken = ticket
    }

    /// It claimed, left, was granted, or parks again: no claim is on its way.
    mutating func clearWoken(_ ticket: Ticket) {
        if woken == ticket { woken = nil }
    }

    /// `slot`: the waiting command granted, or `nil` for one that arrived now.
    mutating func granted(at now: UInt64, priority: CommandPriority, slot: UInt32? = nil) {
        if isActive { lastGrant = (now, priority, slot.map { arrivals[Int($0)] } ?? now) }
    }

    func isClaimOnItsWay(_ table: RecordTable) -> Bool {
        woken.map { table.isWaiting($0) } ?? false
    }

    /// Commands wait behind a free section only while a claim is on its way.
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
    /// Whether an arrival may take the free section ahead of the one on its way to claim it. Not
    /// while a waiter asks for urgency (the barging holder would not inherit it in time), nor while
    /// a dispatch command or operation waits (its issuer may be the one arriving).
    mutating func mayBarge(priority: CommandPriority, now: UInt64) -> Bool {
        // mutant(barge-past-own-dispatch): let detachedWaits = false
        let detachedWaits = table.waitingDetachedCount > 0
        guard !inheritance.hasParked, !detachedWaits, let first = table.firstWaitingEntry() else { return false }
        let firstPriority = CommandHeap.priority(of: first.key)
        // mutant(barge-past-higher-priority): return !barging.isDue(first.slot, now: now)
        return priority > firstPriority || (priority == firstPriority && !barging.isDue(first.slot, now: now))
    }

    /// Whether a release may free the section instead of granting `first`: only a thread can claim
    /// cheaply, and no waiter may ask for urgency.
    mutating func mayFreeForBarging(_ first: CommandHeap.Entry, now: UInt64) -> Bool {
        table[first.slot].kind == .blocking && !table[first.slot].isShared && !inheritance.hasParked
            && !barging.isDue(first.slot, now: now)
    }

    mutating func wakeToClaim(_ actions: inout Actions, _ slot: UInt32) {
        let ticket = table.ticket(of: slot)
        guard barging.woken != ticket, let handle = table[slot].handle else { return }
        barging.wake(ticket)
        actions.others.append(.claim(handle))
    }

    /// The woken command `ticket` claims the section. `parking`: it is no longer on its way, so the
    /// next release wakes it again.
    mutating func claim(_ ticket: Ticket, parking: Bool, word: inout Int, now: UInt64) -> Actions {
        let held = hold.observeHolder(word)
        guard table.isWaiting(ticket) else {
            barging.clearWoken(ticket)
            return Actions(found: .settled)
        }
        if held {
            if parking { barging.clearWoken(ticket) }
            return Actions(found: .stillHeld)
        }
        var actions = Actions()
        let closedBit = word & EngineWord.closed
        if table.waitingMayGiveUp > 0 { dropGivenUp(&actions, now: now) }
        let stillWaits = table.isWaiting(ticket)
        guard stillWaits, let first = table.firstWaitingEntry(), first.slot == ticket.slot else {
            // It gave up (its deadline passed), or another is first now: the first is woken or granted.
            barging.clearWoken(ticket)
            settleFree(&actions, word: &word, now: now)
            actions.found = stillWaits ? .passedOn : .settled
            return actions
        }
        word = grantFirst(first, &actions, closedBit: closedBit, now: now)
        actions.found = .settled
        return actions
    }

    /// Free, commands waiting: unless a claim is on its way, the first is woken to claim it, or
    /// granted it (`word` then says so).
    mutating func settleFree(_ actions: inout Actions, word: inout Int, now: UInt64) {
        guard !barging.isClaimOnItsWay(table) else { return }
        if table.waitingMayGiveUp > 0 { dropGivenUp(&actions, now: now) }
        guard let first = table.firstWaitingEntry() else { return }
        if mayFreeForBarging(first, now: now) { return wakeToClaim(&actions, first.slot) }
        word = grantFirst(first, &actions, closedBit: word & EngineWord.closed, now: now)
    }

    /// Returns the word to store.
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
