// What diagnostics read of the machine (under the engine lock).
extension EngineStateMachine {
    // MARK: Diagnostics

    /// The kind of the tracked holder, if the machine tracks one.
    var trackedHolderKind: CommandKind? {
        holderSlot.map { records[Int($0)].kind }
    }

    /// The kind of the first shared read holding the section, while readers hold.
    var firstReaderKind: CommandKind? {
        readers.first.map { records[Int($0)].kind }
    }

    /// Whether the tracked holder waits for its manual completion.
    var holderAwaitsCompletion: Bool {
        guard let slot = holderSlot else { return false }
        let phase = records[Int(slot)].manual
        return phase == .running || phase == .closureReturned
    }

    /// The ticket of the holder's record, if the machine tracks the holder.
    var trackedHolder: Ticket? {
        holderSlot.map { Ticket(slot: $0, generation: records[Int($0)].generation) }
    }

    /// How many commands wait, per priority.
    /// - Complexity: O(n)
    func waitingCountsByPriority() -> [CommandPriority: Int] {
        var counts: [CommandPriority: Int] = [:]
        for entry in heap.unordered where records[Int(entry.slot)].state == .waiting {
            counts[CommandHeap.priority(of: entry.key), default: 0] += 1
        }
        return counts
    }
}
