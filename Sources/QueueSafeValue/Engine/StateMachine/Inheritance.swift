// Priority inheritance's bookkeeping: one typed part of `EngineStateMachine`, whose fields only
// this file touches. The transitions that use it are in `EngineStateMachine+Inheritance.swift`.

/// The urgencies of the parked waiters, and what the current holder inherits from them.
///
/// Invariant (``violation(isWaiting:isHeld:readersHold:)``): the tally counts the parked waiters'
/// urgencies exactly; every chained urgency belongs to a parked waiter, and every parked waiter
/// waits; while the section is held, ``holdUrgency`` is what the parked waiters ask for; while it
/// is free, no boost remains; between transitions, no drop is left undone.
struct Inheritance {
    /// The urgencies of parked waiters, indexed by slot (`nil`: the command in that slot has not
    /// parked). For a link of a chain, its own urgency and the inherited one, merged. An array, not
    /// a dictionary: a contended awaiting command parks and is cleared once each, and an array
    /// indexed by slot spares both the hashing of its slot and urgency.
    private var urgencies: [Urgency?] = []
    /// How many entries of ``urgencies`` are not `nil`.
    private var parkedCount = 0
    /// How many parked waiters have each urgency: what a hand-on merges, so that it costs the number
    /// of distinct urgencies (a few), not the number of parked waiters (every task waiting in a
    /// deep `CommandQueue` parks with its priority: merging them all made draining n operations
    /// cost n² steps). A few pairs, searched in turn.
    private var tally: [(urgency: Urgency, count: Int)] = []
    /// The parked waiters that inherit an urgency from a section they hold elsewhere (a link of a
    /// chain), by slot: their own urgency and the inherited one, kept apart so that the inherited
    /// part can go down again when its reason leaves.
    private var chained: [UInt32: ChainedUrgency] = [:]
    /// The urgency the current holder inherits now: what its parked waiters ask for, kept equal to
    /// it by every transition that changes them, so that a waiter that asks for no more asks
    /// nothing, and a raise that lost its reason is seen.
    private(set) var holdUrgency = Urgency.none
    /// The holder bits (``CommandKind/wordBits``) of the current holder, as last seen by a
    /// transition that knew them: which axis of an urgency it inherits.
    private(set) var holdBits = 0
    /// Whether a boost may have been applied to the current holder: its release (or the end of its
    /// closure) must end it. While shared reads hold, it stays set until the last of them released
    /// (each reader's release ends its own thread's boost).
    private(set) var isHoldBoosted = false

    /// Whether any waiter is parked with an urgency.
    @inline(__always)
    var hasParked: Bool { parkedCount > 0 }

    /// The urgency the parked waiter in `slot` runs at (with what it inherits), if it parked.
    func urgency(of slot: UInt32) -> Urgency? {
        // Compared as `UInt`: `Int(slot)` traps where `Int` has 32 bits and the slot is a stale
        // ticket's or `Ticket.none`'s (`UInt32.max`).
        UInt(slot) < UInt(urgencies.count) ? urgencies[Int(slot)] : nil
    }

    /// The own and inherited urgency of the parked waiter in `slot`, if it is a link of a chain.
    func chainedUrgency(of slot: UInt32) -> ChainedUrgency? { chained.isEmpty ? nil : chained[slot] }

    /// Records that the parked waiter in `slot` runs at `urgency` (replacing what it had).
    mutating func set(_ slot: UInt32, to urgency: Urgency) {
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

    /// Forgets the urgency of the waiter in `slot`, if it had one.
    mutating func clear(_ slot: UInt32) {
        let index = Int(slot)
        if index < urgencies.count, let old = urgencies[index] {
            urgencies[index] = nil
            parkedCount -= 1
            untally(old)
        }
        if !chained.isEmpty { chained[slot] = nil }
    }

    /// Records the own and inherited urgency of the parked waiter in `slot` (see ``chained``).
    mutating func setChained(_ slot: UInt32, _ urgency: ChainedUrgency) {
        let merged = urgency.own.merged(urgency.inherited)
        guard !merged.isNone else { return clear(slot) }
        chained[slot] = urgency.inherited.isNone ? nil : urgency
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

    /// The highest urgency of the parked waiters, on each axis.
    /// - Complexity: O(d), d the number of distinct urgencies among them.
    var parkedUrgency: Urgency {
        tally.reduce(Urgency.none) { $0.merged($1.urgency) }
    }

    /// What the current holder must run at: the highest urgency of the parked waiters, on the axis
    /// its kind inherits (see ``Urgency/inheritable(byHolder:)``); every axis while shared reads
    /// hold (they may be threads and tasks at once).
    func required(readersHold: Bool) -> Urgency {
        guard parkedCount > 0 else { return .none }
        return readersHold ? parkedUrgency : parkedUrgency.inheritable(byHolder: holdBits)
    }

    /// The holder's kind, as its holder bits: which axis it inherits.
    mutating func noteHolder(_ bits: Int) {
        holdBits = bits
    }

    /// Sets ``holdUrgency`` to what the parked waiters ask for now.
    /// - Returns: whether it changed.
    mutating func refresh(readersHold: Bool) -> Bool {
        let required = required(readersHold: readersHold)
        guard required != holdUrgency else { return false }
        holdUrgency = required
        return true
    }

    /// A parked waiter stopped waiting without being granted, or became a holder beside others:
    /// if the holder inherited from it, it drops to what still waits.
    /// - Returns: whether a boost may be in effect above that: the storage brings the raised
    ///   parties down (``EngineStateMachine/Actions/lowersBoost``).
    mutating func lowerIfNeeded(readersHold: Bool) -> Bool {
        refresh(readersHold: readersHold) && isHoldBoosted
    }

    /// A new holder (or the first of a batch of shared reads) inherits `urgency` from the waiters
    /// still parked: it is raised before it starts.
    mutating func inherit(_ urgency: Urgency) {
        (holdUrgency, isHoldBoosted) = (urgency, true)
    }

    /// The hold ended (its last holder released).
    /// - Returns: whether a boost may have been applied to it: the releaser ends its own.
    mutating func endHold() -> Bool {
        defer { (holdUrgency, isHoldBoosted) = (.none, false) }
        return isHoldBoosted
    }

    /// The engine is about to bring the parties raised for the current hold to ``holdUrgency``.
    /// While it is not none, parked waiters keep the holder from releasing without the lock, and
    /// its release, which sees ``isHoldBoosted``, ends the raise under the boost lock after this.
    /// - Returns: the urgency to raise the holder to (none: every raise of this hold ends).
    mutating func beginBoost() -> Urgency {
        // mutant(boost-outlives-hold): if !holdUrgency.isNone || true { isHoldBoosted = true }
        if !holdUrgency.isNone { isHoldBoosted = true }
        return holdUrgency
    }

    /// What is wrong with the inheritance bookkeeping, if anything.
    /// - Parameters:
    ///   - isWaiting: whether the command in a slot waits.
    ///   - isHeld: the word says the section is held.
    ///   - readersHold: shared reads hold it.
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
