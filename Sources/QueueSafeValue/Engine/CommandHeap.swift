// MARK: - CommandHeap

/// A binary min-heap of pending commands ordered by a 64-bit key: priority descending in the top
/// byte, arrival sequence ascending below it. Equal priorities therefore leave in FIFO order
/// (the heap is stable by construction: no two keys are equal).
///
/// Removal of a command that is not at the top (a timed-out or cancelled waiter) is lazy: the
/// caller marks the command dead (its status leaves `.pending`) and calls ``noteRemoved()``; dead
/// entries are skipped when they surface and are swept out in one O(n) pass once they outnumber the
/// live ones, so memory stays proportional to the live count.
///
/// Entries hold their command as an `Unmanaged` reference (retained on insert, released when it
/// leaves), so sifting moves plain words instead of retaining and releasing at every level.
///
/// Not thread-safe: the engine uses it under its lock. Its owner calls ``releaseAll()`` before
/// dropping it.
struct CommandHeap {
    struct Entry {
        let key: UInt64
        let reference: Unmanaged<PendingCommand>

        /// The command, without touching its reference count.
        var command: PendingCommand { reference.takeUnretainedValue() }
    }

    private var entries: [Entry] = []
    /// Entries whose command is dead but still in `entries`.
    private var deadCount = 0

    /// The number of live (still pending) commands.
    /// - Complexity: O(1)
    var count: Int { entries.count - deadCount }

    /// `true` when no live command is pending.
    /// - Complexity: O(1)
    var isEmpty: Bool { entries.count == deadCount }

    /// The key that orders a command of `priority` that arrived as number `sequence`.
    static func key(priority: CommandPriority, sequence: UInt64) -> UInt64 {
        (UInt64(255 &- priority.rawValue) << 56) | (sequence & 0x00FF_FFFF_FFFF_FFFF)
    }

    /// Adds a pending command whose `key` is already set.
    /// - Complexity: O(log n); O(1) on average when keys arrive in increasing order.
    mutating func insert(_ command: PendingCommand) {
        entries.append(Entry(key: command.key, reference: .passRetained(command)))
        siftUp(entries.count - 1)
        checkInvariantsIfSmall()
    }

    /// Removes and returns the live command with the smallest key, dropping dead entries on the way.
    /// - Complexity: O(log n) amortized.
    mutating func popFirst() -> PendingCommand? {
        while let top = entries.first {
            removeTop()
            let command = top.reference.takeRetainedValue()
            if command.status == .pending {
                checkInvariantsIfSmall()
                return command
            }
            deadCount -= 1
        }
        return nil
    }

    /// Removes and returns every live command, in key order.
    /// - Complexity: O(n log n)
    mutating func removeAll() -> [PendingCommand] {
        var result: [PendingCommand] = []
        result.reserveCapacity(count)
        while let command = popFirst() { result.append(command) }
        entries.removeAll()
        deadCount = 0
        return result
    }

    /// Records that a command still stored in the heap was marked dead by its owner.
    /// - Complexity: O(1) amortized: a sweep of O(n) runs once dead entries outnumber live ones.
    mutating func noteRemoved() {
        deadCount += 1
        if deadCount > 32 && deadCount > entries.count / 2 {
            compact()
        }
    }

    /// Drops every entry, live or dead, releasing the commands. The heap is empty afterwards.
    /// - Complexity: O(n)
    mutating func releaseAll() {
        for entry in entries { entry.reference.release() }
        entries.removeAll()
        deadCount = 0
    }

    private mutating func compact() {
        entries.removeAll { entry in
            guard entry.command.status != .pending else { return false }
            entry.reference.release()
            return true
        }
        deadCount = 0
        // Floyd's bottom-up construction.
        var index = entries.count / 2
        while index > 0 {
            index -= 1
            siftDown(index)
        }
        checkInvariantsIfSmall()
    }

    private mutating func removeTop() {
        let last = entries.removeLast()
        if !entries.isEmpty {
            entries[0] = last
            siftDown(0)
        }
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

    /// Checks the heap order and the dead-entry count; traps on a violation.
    /// - Complexity: O(n)
    func checkInvariants() {
        var dead = 0
        for index in entries.indices {
            if entries[index].command.status != .pending { dead += 1 }
            if index > 0 {
                precondition(entries[(index - 1) / 2].key < entries[index].key, "CommandHeap order violated")
            }
        }
        precondition(dead == deadCount, "CommandHeap dead count \(deadCount) but found \(dead)")
    }

    @inline(__always)
    private func checkInvariantsIfSmall() {
        #if DEBUG
            if entries.count <= 16 { checkInvariants() }
        #endif
    }
}
