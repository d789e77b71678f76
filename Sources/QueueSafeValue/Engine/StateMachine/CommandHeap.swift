// MARK: - CommandHeap

/// The order in which waiting commands get the critical section: a min-queue of `(key, slot)`
/// entries. The key puts priority (descending) in the top byte and the arrival sequence
/// (ascending) below it, so no two keys are equal and equal priorities leave in FIFO order.
///
/// Two sorted parts: a FIFO *run* that takes every entry whose key is above the run's last one
/// (each command of the same priority as the one before it, or lower: the common case, O(1)), and
/// a binary heap for the others (a command that overtakes waiting ones, O(log n)). The first entry
/// is the smaller of the two fronts.
///
/// A plain value: entries are two integers, so moving them compares and moves words and never
/// touches a command or a reference count. What a slot means (which command, whether it still
/// waits) is the business of ``EngineStateMachine``, which also removes entries of commands that
/// left the queue: lazily, when they surface, or all at once through ``removeAll(where:)``.
struct CommandHeap: Hashable {
    /// One waiting command: its order and where the state machine keeps its record.
    struct Entry: Hashable {
        let key: UInt64
        let slot: UInt32
        /// When the command began to wait, in milliseconds of the machine's clock, wrapping every
        /// 49 days (a wait's length is a wrapping difference): for diagnostics. It takes the
        /// padding after `slot`, so an entry grows no larger for it.
        var arrivedAt: UInt32 = 0
    }

    /// The heap part: every parent's key is below its children's.
    private var entries: [Entry] = []
    /// The run part, in increasing key order from `runStart` on (the entries before it left).
    private var run: [Entry] = []
    private var runStart = 0

    /// The number of entries.
    /// - Complexity: O(1)
    var count: Int { entries.count + run.count - runStart }

    /// Whether there are no entries.
    /// - Complexity: O(1)
    var isEmpty: Bool { count == 0 }

    /// The entry with the smallest key.
    /// - Complexity: O(1)
    var first: Entry? {
        let runFirst = runStart < run.count ? run[runStart] : nil
        guard let heapFirst = entries.first else { return runFirst }
        guard let runFirst else { return heapFirst }
        return heapFirst.key < runFirst.key ? heapFirst : runFirst
    }

    /// Every entry, in no particular order.
    var unordered: [Entry] { entries + run[runStart...] }

    /// The key that orders a command of `priority` that arrived as number `sequence`.
    static func key(priority: CommandPriority, sequence: UInt64) -> UInt64 {
        // mutant(lifo-within-priority): (UInt64(255 &- priority.rawValue) << 56) | (~sequence & 0x00FF_FFFF_FFFF_FFFF)
        (UInt64(255 &- priority.rawValue) << 56) | (sequence & 0x00FF_FFFF_FFFF_FFFF)
    }

    /// The priority encoded in `key`.
    static func priority(of key: UInt64) -> CommandPriority {
        CommandPriority(rawValue: 255 &- UInt8(truncatingIfNeeded: key >> 56))  // 32-bit: key is a UInt64
    }

    /// Adds an entry.
    /// - Complexity: O(1) when its key is above the run's last one (same or lower priority than the
    ///   previous arrival); O(log n) otherwise.
    mutating func insert(_ entry: Entry) {
        if runStart == run.count || run[run.count - 1].key < entry.key {
            run.append(entry)
        } else {
            entries.append(entry)
            siftUp(entries.count - 1)
        }
        checkInvariantsIfSmall()
    }

    /// Removes and returns the entry with the smallest key.
    /// - Complexity: O(1) amortized from the run, O(log n) from the heap.
    mutating func popFirst() -> Entry? {
        let fromRun: Bool
        if runStart == run.count {
            fromRun = false
        } else if let heapFirst = entries.first {
            fromRun = run[runStart].key < heapFirst.key
        } else {
            fromRun = true
        }
        if fromRun {
            let top = run[runStart]
            runStart += 1
            // The consumed entries stay until they are most of at least 64: emptying the array at
            // every pop that emptied the run was a large part of such a pop's cost, and in a
            // hand-off between two threads nearly every pop empties the run.
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

    /// Removes the entry of `slot`, if there is one, and keeps the order.
    /// - Complexity: O(n) to find it; then O(n) moves in the run, O(log n) in the heap. No
    ///   allocation.
    /// - Returns: the entry removed.
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

    /// Removes every entry for which `shouldRemove` is true and restores the order.
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

    /// Equal when both parts hold the same entries in the same places (the run from its start).
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

    /// Checks that every parent's key in the heap is smaller than its children's and that the run
    /// is in increasing order; traps on a violation.
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
