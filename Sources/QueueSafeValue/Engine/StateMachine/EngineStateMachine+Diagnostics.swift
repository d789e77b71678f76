// What diagnostics, the storage and the tests read of the machine (under the engine lock): views of
// its typed parts, none of them settable.
extension EngineStateMachine {
    // MARK: Diagnostics

    /// The kind of the tracked holder, if the machine tracks one.
    var trackedHolderKind: CommandKind? {
        hold.trackedSlot.map { table[$0].kind }
    }

    /// The kind of the first shared read holding the section, while readers hold.
    var firstReaderKind: CommandKind? {
        hold.readers.first.map { table[$0].kind }
    }

    /// Whether the tracked holder waits for its manual completion.
    var holderAwaitsCompletion: Bool {
        guard let slot = hold.trackedSlot else { return false }
        let phase = table[slot].manual
        return phase == .running || phase == .closureReturned
    }

    /// The ticket of the holder's record, if the machine tracks the holder.
    var trackedHolder: Ticket? {
        hold.trackedSlot.map { table.ticket(of: $0) }
    }

    /// How many commands wait, per priority.
    /// - Complexity: O(n)
    func waitingCountsByPriority() -> [CommandPriority: Int] {
        var counts: [CommandPriority: Int] = [:]
        for entry in table.waitingEntries {
            counts[CommandHeap.priority(of: entry.key), default: 0] += 1
        }
        return counts
    }

    /// Commands waiting for their turn.
    var waitingCount: Int { table.waitingCount }
    /// The container was released.
    var isClosed: Bool { life.isClosed }
    /// The value was freed (or the machine guards no value and was closed).
    var isValueFreed: Bool { life.isValueFreed }
    /// Manual completions released without being called.
    var droppedCompletions: Int { life.droppedCompletions }
    /// When the holder got the section, or began to be waited for; 0 when unknown (see
    /// ``Hold/since``).
    var holderSince: UInt64 { hold.since }
    /// Whether ``holderSince`` is when the holder got the section.
    var holderSinceIsExact: Bool { hold.sinceIsExact }
    /// The slots of the shared reads that hold the section, in grant order.
    var readers: [UInt32] { hold.readers }
    /// The urgency the current holder inherits now.
    var holdUrgency: Urgency { inheritance.holdUrgency }
    /// Whether a boost may have been applied to the current holder.
    var isHoldBoosted: Bool { inheritance.isHoldBoosted }
}

extension EngineStateMachine {
    // MARK: Watching the holder

    /// A report (``CommandEngine/diagnostics``, the monitor's watchdog) looks at the section:
    /// if one exclusive command holds it, its release is made to go through the lock from now on
    /// (as a waiting command's arrival would), so that the holder stays in the section, and its
    /// thread alive, while the report reads it under the lock; and the hold is stamped, if nothing
    /// waited for it, as held at least since `now` (``Hold/since``). A free section, or one held
    /// by shared reads, is left as it was.
    ///
    /// - Parameters:
    ///   - word: the word before the engine set `slowRelease` on it; on return, the word to store.
    ///   - now: the machine's clock.
    /// - Returns: whether one exclusive command holds the section (and now releases through the lock).
    mutating func watch(word: inout Int, now: UInt64) -> Bool {
        let observed = word
        hold.observe(observed)
        guard EngineWord.isHeld(observed), !EngineWord.readersHold(observed) else {
            word = observed  // nothing to watch: `slowRelease` as it was
            return false
        }
        hold.foundHeld()
        if observed & EngineWord.slowRelease == 0 {
            // The holder took a free section unseen: it has held it at least since now.
            hold.stamp(now, exact: false)
        }
        word = observed | EngineWord.slowRelease
        return true
    }

    /// The monitor's watchdog looks at the section (after ``watch(word:now:)``): whether one
    /// exclusive command has held it for `threshold` nanoseconds or more at `now`, and was not
    /// reported yet; the hold is reported once, and its end is reported with it.
    /// - Returns: how long it has held, at least, if it is to be reported now.
    mutating func reportLongHold(now: UInt64, threshold: UInt64) -> UInt64? {
        guard hold.since != 0, now >= hold.since, now - hold.since >= threshold else { return nil }
        guard hold.markReportedLong() else { return nil }
        return now - hold.since
    }

    /// The waiting commands' heap entries and records, in the order they will be granted the
    /// section (the heap's: priority, then arrival), at most `limit` of them.
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

    /// The first shared holder's record (its waiter), while listed shared holders hold.
    var firstReaderHandle: Handle? {
        hold.readers.first.flatMap { table[$0].handle }
    }
}
