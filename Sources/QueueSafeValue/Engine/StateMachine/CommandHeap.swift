// MARK: - CommandHeap

/// The waiting order (Architecture.md, "The waiting order and the records"): `(key, slot)` pairs,
/// so ordering never touches a command or a reference count. A FIFO *run* takes each key above its
/// last (O(1), the common case), a binary min-heap the others (O(log n)).
struct CommandHeap: Hashable {
    struct Entry: Hashable {
        let key: UInt64
        let slot: UInt32
        /// In milliseconds of the machine's clock, wrapping every 49 days: for diagnostics, in the
        /// padding after `slot`.
        var arrivedAt: UInt32 = 0
    }

    private var entries: [Entry] = []
    /// In increasing key order from `runStart` on.
    private var run: [Entry] = []
    private var runStart = 0

    var count: Int { entries.count + run.count - runStart }

    var isEmpty: Bool { count == 0 }

    var first: Entry? {
        let runFirst = runStart < run.count ? run[runStart] : nil
        guard let heapFirst = entries.first else { return runFirst }
        guard let runFirst else { return heapFirst }
        return heapFirst.key < runFirst.key ? heapFirst : runFirst
    }

    var unordered: [Entry] { entries + run[runStart...] }

    /// Priority descending in the top byte, arrival below: no two keys are equal.
    static func key(priority: CommandPriority, sequence: UInt64) -> UInt64 {
        // mutant(lifo-within-priority): (UInt64(255 &- priority.rawValue) << 56) | (~sequence & 0x00FF_FFFF_FFFF_FFFF)
        (UInt64(255 &- priority.rawValue) << 56) | (sequence & 0x00FF_FFFF_FFFF_FFFF)
    }

    static func priority(of key: UInt64) -> CommandPriority {
        CommandPriority(rawValue: 255 &- UInt8(truncatingIfNeeded: key >> 56))  // 32-bit: key is a UInt64
    }

    mutating func insert(_ entry: Entry) {
        if runStart == run.count || run[run.count - 1].key < entry.key {
            run.append(entry)
        } else {
            entries.append(entry)
            siftUp(entries.count - 1)
        }
        checkInvariantsIfSmall()
    }

    mutating func popFirst() -> Entry? {
        if runStart < run.count, entries.first.map({ run[runStart].key < $0.key }) ?? true {
            let top = run[runStart]
            runStart += 1
            // Consumed entries stay until they are most of at least 64: in a hand-off between two
            // threads nearly every pop empties the run, and emptying the array was most of its cost.
            if runStart >= 64 && runStart * 2 >= run.count {
                run.removeFirst(runStart)
                runStart = 0
            }
            checkInvariantsIfSmall()
            return top
        }
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

    /// - Complexity: O(n), without allocating.
    @discardableResult
    mutating func remove(slot: UInt32) -> Entry? {
        var removed: Entry?
        defer { checkInvariantsIfSmall() }
        if let index = run[runStart...].firstIndex(where: { $0.slot == slot }) {
            removed = run[index]
            run.remove(at: index)
            if runStart == run.count {
                run.removeAll(keepingCapacity: true)
                runStart = 0
            }
        } else if let index = entries.firstIndex(where: { $0.slot == slot }) {
            removed = entries[index]
            let last = entries.removeLast()
            if index < entries.count {
                entries[index] = last
                siftDown(index)
                siftUp(index)
            }
        }
        return removed
    }

    /// - Complexity: O(n)
    mutating func removeAll(where shouldRemove: (Entry) -> Bool) {
        run.removeFirst(runStart)
        runStart = 0
        run.removeAll(where: shouldRemove)
        entries.removeAll(where: shouldRemove)
        // Floyd's bottom-up construction.
        var index = entries.count / 2
        while index > 0 {
            index -= 1
            siftDown(index)
        }
        checkInvariantsIfSmall()
    }

    // MARK: Equality

    /// Where the run starts does not count.
    static func == (lhs: CommandHeap, rhs: CommandHeap) -> Bool {
        lhs.entries == rhs.entries && lhs.run[lhs.runStart...].elementsEqual(rhs.run[rhs.runStart...])
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(entries)
        hasher.combine(run.count - runStart)
        for entry in run[runStart...] { hasher.combine(entry) }
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

    /// - Complexity: O(n)
    func checkInvariants() {
        for index in entries.indices.dropFirst() {
            precondition(entries[(index - 1) / 2].key < entries[index].key, "CommandHeap order violated")
        }
        for index in run.indices.dropFirst() where index > runStart {
            precondition(run[index - 1].key < run[index].key, "CommandHeap run order violated")
        }
    }

    @inline(__always)
    private func checkInvariantsIfSmall() {
        #if DEBUG
            if count <= 16 { checkInvariants() }
        #endif
    }
}
