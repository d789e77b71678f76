// Priority inheritance's bookkeeping: a typed part of `EngineStateMachine`.

/// The parked waiters' urgencies, and what the current holder inherits from them.
struct Inheritance {
    /// By slot (`nil`: not parked); a link of a chain's own and inherited, merged. An array, not a
    /// dictionary: a contended awaiting command parks and clears once each, without hashing.
    private var urgencies: [Urgency?] = []
    private var parkedCount = 0
    /// How many parked waiters have each urgency, so a hand-on merges a few distinct ones, not every
    /// waiter (merging every task of a deep `CommandQueue` made draining it quadratic).
    private var tally: [(urgency: Urgency, count: Int)] = []
    /// Links of chains, by slot (see ``ChainedUrgency``).
    private var chained: [UInt32: ChainedUrgency] = [:]
    /// Kept equal to what the parked waiters ask for by every transition that changes them, so a
    /// waiter that asks for no more asks nothing, and a raise that lost its reason is seen.
    private(set) var holdUrgency = Urgency.none
    /// The holder's word bits, as last seen: which axis it inherits.
    private(set) var holdBits = 0
    /// Its release must end the boost. While reads hold, set until the last released (each ends
    /// its own thread's).
    private(set) var isHoldBoosted = false

    @inline(__always)
    var hasParked: Bool { parkedCount > 0 }

    func urgency(of slot: UInt32) -> Urgency? {
        // Compared as `UInt`: `Int(slot)` traps where `Int` has 32 bits and the slot is a stale
        // ticket's or `Ticket.none`'s (`UInt32.max`).
        UInt(slot) < UInt(urgencies.count) ? urgencies[Int(slot)] : nil
    }

    func chainedUrgency(of slot: UInt32) -> ChainedUrgency? { chained.isEmpty ? nil : chained[slot] }

    /// A parked waiter's own urgency, apart from what it inherits as a link of a chain.
    func ownUrgency(of slot: UInt32) -> Urgency { chainedUrgency(of: slot)?.own ?? urgency(of: slot) ?? .none }

    private mutating func set(_ slot: UInt32, to urgency: Urgency) {
        let index = Int(slot)
        if index >= urgencies.count {
            urgencies.append(contentsOf: repeatElement(nil, count: index + 1 - urgencies.count))
        }
        if let old = urgencies[index] { untally(old) } else { parkedCount += 1 }
        urgencies[index] = urgency
        if let counted = tally.firstIndex(where: { $0.urgency == urgency }) {
            tally[counted].count += 1
        } else {
            tally.append((urgency, 1))
        }
    }

    mutating func clear(_ slot: UInt32) {
        let index = Int(slot)
        if index < urgencies.count, let old = urgencies[index] {
            urgencies[index] = nil
            parkedCount -= 1
            untally(old)
        }
        if !chained.isEmpty { chained[slot] = nil }
    }

    mutating func setChained(_ slot: UInt32, _ urgency: ChainedUrgency) {
        let merged = urgency.own.merged(urgency.inherited)
        guard !merged.isNone else { return clear(slot) }
        if !urgency.inherited.isNone || !chained.isEmpty { chained[slot] = urgency.inherited.isNone ? nil : urgency }
        set(slot, to: merged)
    }

    private mutating func untally(_ urgency: Urgency) {
        guard let counted = tally.firstIndex(where: { $0.urgency == urgency }) else { return }
        tally[counted].count -= 1
        if tally[counted].count == 0 {
            tally.swapAt(counted, tally.count - 1)
            tally.removeLast()
        }
    }

    /// - Complexity: O(d), d the number of distinct urgencies.
    var parkedUrgency: Urgency {
        tally.reduce(Urgency.none) { $0.merged($1.urgency) }
    }

    /// Every axis while reads hold (they may be threads and tasks at once).
    func required(readersHold: Bool) -> Urgency {
        guard parkedCount > 0 else { return .none }
        return readersHold ? parkedUrgency : parkedUrgency.inheritable(byHolder: holdBits)
    }

    mutating func noteHolder(_ bits: Int) {
        holdBits = bits
    }

    /// Returns whether ``holdUrgency`` changed.
    mutating func refresh(readersHold: Bool) -> Bool {
        let required = required(readersHold: readersHold)
        guard required != holdUrgency else { return false }
        holdUrgency = required
        return true
    }

    /// A parked waiter stopped waiting ungranted, or holds beside others now: whether a boost may be
    /// in effect above what still waits (``EngineStateMachine/Actions/lowersBoost``).
    mutating func lowerIfNeeded(readersHold: Bool) -> Bool {
        refresh(readersHold: readersHold) && isHoldBoosted
    }

    /// A new holder is raised to `urgency` before it starts.
    mutating func inherit(_ urgency: Urgency) {
        (holdUrgency, isHoldBoosted) = (urgency, true)
    }

    /// Returns whether the releaser ends its own boost.
    mutating func endHold() -> Bool {
        defer { (holdUrgency, isHoldBoosted) = (.none, false) }
        return isHoldBoosted
    }

    /// The engine is about to raise the hold's parties to ``holdUrgency`` (none: every raise ends).
    /// While it is not none, parked waiters keep the holder from releasing without the lock.
    mutating func beginBoost() -> Urgency {
        // mutant(boost-outlives-hold): if !holdUrgency.isNone || true { isHoldBoosted = true }
        if !holdUrgency.isNone { isHoldBoosted = true }
        return holdUrgency
    }

    func violation(isWaiting: (UInt32) -> Bool, isHeld: Bool, readersHold: Bool) -> String? {
        if urgencies.indices.contains(where: { urgencies[$0] != nil && !isWaiting(UInt32($0)) }) {
            return "an urgency kept for a command that no longer waits"
        }
        let parked = urgencies.compactMap { $0 }
        if parkedCount != parked.count { return "\(parkedCount) parked waiters counted, \(parked.count) parked" }
        let counted = Dictionary(tally.map { ($0.urgency, $0.count) }, uniquingKeysWith: +)
        if tally.contains(where: { $0.count <= 0 }) || counted.count != tally.count
            || counted != Dictionary(parked.map { ($0, 1) }, uniquingKeysWith: +)
        {
            return "the urgency tally disagrees with the parked waiters' urgencies"
        }
        if !isHeld && (isHoldBoosted || !holdUrgency.isNone) { return "a boost outlived its hold" }
        if isHeld && holdUrgency != required(readersHold: readersHold) {
            return "the holder inherits \(holdUrgency) but its parked waiters ask for"
                + " \(required(readersHold: readersHold)) (a boost outlived its reason, or a raise was missed)"
        }
        if chained.keys.contains(where: { urgency(of: $0) == nil }) { return "a chained urgency of a waiter that left" }
        return nil
    }
}
