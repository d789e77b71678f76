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
