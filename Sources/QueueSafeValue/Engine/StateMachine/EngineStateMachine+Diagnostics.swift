// What diagnostics, the storage and the tests read of the machine, under the engine lock.
extension EngineStateMachine {
    // MARK: Diagnostics

    var trackedHolderKind: CommandKind? {
        hold.trackedSlot.map { table[$0].kind }
    }

    var firstReaderKind: CommandKind? {
        hold.readers.first.map { table[$0].kind }
    }

    var holderAwaitsCompletion: Bool {
        guard let slot = hold.trackedSlot else { return false }
        let phase = table[slot].manual
        return phase == .running || phase == .closureReturned
    }

    /// - Complexity: O(n)
    func waitingCountsByPriority() -> [CommandPriority: Int] {
        Dictionary(table.waitingEntries.map { (CommandHeap.priority(of: $0.key), 1) }, uniquingKeysWith: +)
    }

    var waitingCount: Int { table.waitingCount }
    var isClosed: Bool { life.isClosed }
    var isValueFreed: Bool { life.isValueFreed }
    var droppedCompletions: Int { life.droppedCompletions }
    /// See ``Hold/since``.
    var holderSince: UInt64 { hold.since }
    var holderSinceIsExact: Bool { hold.sinceIsExact }
    var readers: [UInt32] { hold.readers }
    var holdUrgency: Urgency { inheritance.holdUrgency }
    var isHoldBoosted: Bool { inheritance.isHoldBoosted }
}

extension EngineStateMachine {
    // MARK: Watching the holder

    /// A report looks at the section: an exclusive holder must now release through the lock, so it
    /// stays in the section, and its thread alive, while the report reads it under the lock.
    /// - Returns: whether one exclusive command holds the section.
    mutating func watch(word: inout Int, now: UInt64) -> Bool {
        let observed = word
        hold.observe(observed)
        guard EngineWord.isHeld(observed), !EngineWord.readersHold(observed) else {
            word = observed  // nothing to watch: `slowRelease` as it was
            return false
        }
        hold.foundHeld(observed, now: now)
        word = observed | EngineWord.slowRelease
        return true
    }

    /// After ``watch(word:now:)``: how long the holder has held, if `threshold` or more and not
    /// reported yet (a hold is reported once, and its end with it).
    mutating func reportLongHold(now: UInt64, threshold: UInt64) -> UInt64? {
        guard hold.since != 0, now >= hold.since, now - hold.since >= threshold else { return nil }
        guard hold.markReportedLong() else { return nil }
        return now - hold.since
    }

    /// The first `limit` waiting commands, in grant order.
    /// - Complexity: O(n log k), n waiting, k = `limit`.
    func waitingInGrantOrder(limit: Int) -> [(entry: CommandHeap.Entry, kind: CommandKind, handle: Handle?)] {
        var first: [CommandHeap.Entry] = []
        first.reserveCapacity(min(limit, table.waitingCount))
        for entry in table.waitingEntries {
            if first.count == limit, let last = first.last, last.key < entry.key { continue }
            let index = first.firstIndex { $0.key > entry.key } ?? first.count
            first.insert(entry, at: index)
            if first.count > limit { first.removeLast() }
        }
        return first.map { ($0, table[$0.slot].kind, table[$0.slot].handle) }
    }

    var firstReaderHandle: Handle? {
        hold.readers.first.flatMap { table[$0].handle }
    }
}
