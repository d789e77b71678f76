// MARK: - CommandHeap

/// A binary min-heap of `(key, slot)` entries: the order in which waiting commands get the
/// critical section. The key puts priority (descending) in the top byte and the arrival sequence
/// (ascending) below it, so no two keys are equal and equal priorities leave in FIFO order.
///
/// A plain value: entries are two integers, so sifting compares and moves words and never touches
/// a command or a reference count. What a slot means (which command, whether it still waits) is the
/// business of ``EngineStateMachine``, which also removes entries of commands that left the queue:
/// lazily, when they surface, or all at once through ``removeAll(where:)``.
struct CommandHeap: Hashable {
    /// One waiting command: its order and where the state machine keeps its record.
    struct Entry: Hashable {
        let key: UInt64
        let slot: UInt32
    }

    private var entries: [Entry] = []

    /// The number of entries.
    /// - Complexity: O(1)
    var count: Int { entries.count }

    /// Whether there are no entries.
    /// - Complexity: O(1)
    var isEmpty: Bool { entries.isEmpty }

    /// The entry with the smallest key.
    /// - Complexity: O(1)
    var first: Entry? { entries.first }

    /// Every entry, in no particular order.
    var unordered: [Entry] { entries }

    /// The key that orders a command of `priority` that arrived as number `sequence`.
    static func key(priority: CommandPriority, sequence: UInt64) -> UInt64 {
        (UInt64(255 &- priority.rawValue) << 56) | (sequence & 0x00FF_FFFF_FFFF_FFFF)
    }

    /// The priority encoded in `key`.
    static func priority(of key: UInt64) -> CommandPriority {
        CommandPriority(rawValue: 255 &- UInt8(truncatingIfNeeded: key >> 56))
    }

    /// Adds an entry.
    /// - Complexity: O(log n); O(1) on average when keys arrive in increasing order.
    mutating func insert(_ entry: Entry) {
        entries.append(entry)
        siftUp(entries.count - 1)
        checkInvariantsIfSmall()
    }

    /// Removes and returns the entry with the smallest key.
    /// - Complexity: O(log n)
    mutating func popFirst() -> Entry? {
        guard !entries.isEmpty else { return nil }
        let top = entries[0]
        let last = entries.removeLast()
        if !entries.isEmpty {
            entries[0] = last
            siftDown(0)
        }
        checkInvariantsIfSmall()
        return top
    }

    /// Removes every entry for which `shouldRemove` is true and restores the heap order.
    /// - Complexity: O(n)
    mutating func removeAll(where shouldRemove: (Entry) -> Bool) {
        entries.removeAll(where: shouldRemove)
        // Floyd's bottom-up construction.
        var index = entries.count / 2
        while index > 0 {
            index -= 1
            siftDown(index)
        }
        checkInvariantsIfSmall()
    }

    /// Removes every entry.
    /// - Complexity: O(n)
    mutating func removeAll() {
        entries.removeAll()
    }

    private mutating func siftUp(_ start: Int) {
        var child = start
        let moving = entries[child]
        while child > 0 {
            let parent = (child - 1) / 2
            if entries[parent].key <= moving.key { break }
            entries[child] = entries[parent]
            child = parent
        }
        entries[child] = moving
    }

    private mutating func siftDown(_ start: Int) {
        let count = entries.count
        var parent = start
        let moving = entries[parent]
        while true {
            var child = 2 * parent + 1
            if child >= count { break }
            if child + 1 < count && entries[child + 1].key < entries[child].key { child += 1 }
            if moving.key <= entries[child].key { break }
            entries[parent] = entries[child]
            parent = child
        }
        entries[parent] = moving
    }

    // MARK: Invariants

    /// Checks that every parent's key is smaller than its children's; traps on a violation.
    /// - Complexity: O(n)
    func checkInvariants() {
        for index in entries.indices.dropFirst() {
            precondition(entries[(index - 1) / 2].key < entries[index].key, "CommandHeap order violated")
        }
    }

    @inline(__always)
    private func checkInvariantsIfSmall() {
        #if DEBUG
            if entries.count <= 16 { checkInvariants() }
        #endif
    }
}
