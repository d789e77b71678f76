// The bounded-overtaking policy (`CommandFairness`): one typed part of `EngineStateMachine`, whose
// fields only this file touches.

/// How many commands that arrived after the oldest waiting command may be granted before it.
/// Inactive (``isActive`` false) under strict priority, the default: then it keeps nothing.
///
/// Invariant (``violation(_:)``): the arrivals from ``start`` on include every waiting command, in
/// arrival order; ``oldestOvertakes`` is 0 when none remains.
struct OvertakeBound {
    typealias Ticket = EngineStateMachine.Ticket

    /// A waiting command, in arrival order.
    struct Arrival {
        let ticket: Ticket
        let sequence: UInt64
    }

    /// How many later commands may be granted before a waiting one; `nil` for strict priority.
    private let limit: Int?
    /// The waiting commands in arrival order (commands that left or were granted are dropped when
    /// they reach the front).
    private var arrivals: [Arrival] = []
    private var start = 0
    /// An upper bound of how many commands that arrived after the oldest waiting command have been
    /// granted the section while it waited: it is granted next once this reaches `limit`.
    private var oldestOvertakes = 0

    init(limit: Int?) {
        self.limit = limit
    }

    /// Whether a bound applies (not strict priority).
    var isActive: Bool { limit != nil }

    /// A command took its place in the waiting order, with arrival number `sequence`.
    mutating func arrived(_ ticket: Ticket, sequence: UInt64) {
        if limit != nil { arrivals.append(Arrival(ticket: ticket, sequence: sequence)) }
    }

    /// Whether the oldest waiting command has been overtaken as often as the bound allows: it is
    /// granted next.
    var isDue: Bool {
        guard let limit else { return false }
        // mutant(bound-off-by-one): return oldestOvertakes > limit
        // mutant(bound-never-promotes): return false
        return oldestOvertakes >= limit
    }

    /// The oldest command that still waits, if a bound applies; drops the ones ahead of it that no
    /// longer wait.
    mutating func oldestWaiting(in table: RecordTable) -> Arrival? {
        guard limit != nil else { return nil }
        while start < arrivals.count {
            let front = arrivals[start]
            if table.isWaiting(front.ticket) { return front }
            dropOldest(next: table.sequence)
        }
        return nil
    }

    /// A command that arrived after the oldest waiting one was granted before it.
    mutating func overtook() {
        oldestOvertakes += 1
    }

    /// The oldest arrival is gone (granted or left). The next one has been overtaken at most as
    /// often as it (every command granted ahead of the newer one was granted ahead of the older),
    /// and at most as often as commands arrived after it.
    /// - Parameter next: the arrival number the next command will get.
    mutating func dropOldest(next: UInt64) {
        start += 1
        if start == arrivals.count {
            arrivals.removeAll(keepingCapacity: true)
            start = 0
            oldestOvertakes = 0
            return
        }
        if start >= 64 && start * 2 >= arrivals.count {
            arrivals.removeFirst(start)
            start = 0
        }
        // 32-bit: a count past Int.max changes nothing: the min with an Int count below ignores it
        let arrivedSince = Int(clamping: next &- 1 &- arrivals[start].sequence)
        oldestOvertakes = min(oldestOvertakes, arrivedSince)
    }

    /// Nobody waits any more (``EngineStateMachine/cancelAll()``).
    mutating func reset() {
        (arrivals, start, oldestOvertakes) = ([], 0, 0)
    }

    /// Whether some waiting command is due (it waits, and the bound says it is next).
    func isSomeoneDue(in table: RecordTable) -> Bool {
        isDue && arrivals[start...].contains { table.isWaiting($0.ticket) }
    }

    /// What is wrong with the bound's bookkeeping, if anything.
    /// - Complexity: O(n)
    func violation(_ table: RecordTable) -> String? {
        guard limit != nil else { return arrivals.isEmpty ? nil : "arrivals kept under strict priority" }
        let live = arrivals[start...].filter { table.isWaiting($0.ticket) }.count
        if live != table.waitingCount {
            return "\(table.waitingCount) commands wait but \(live) are in the arrival order"
        }
        if live == 0 && start == arrivals.count && oldestOvertakes != 0 {
            return "overtakes counted with nobody waiting"
        }
        return nil
    }
}
