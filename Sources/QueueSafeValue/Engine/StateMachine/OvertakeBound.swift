// The bounded-overtaking policy (`CommandFairness.bounded`): a typed part of `EngineStateMachine`.

/// How many commands that arrived after the oldest waiting one may be granted before it; keeps
/// nothing under strict priority.
struct OvertakeBound {
    typealias Ticket = EngineStateMachine.Ticket

    struct Arrival {
        let ticket: Ticket
        let sequence: UInt64
    }

    /// `nil` for strict priority.
    private let limit: Int?
    /// In arrival order; ones that no longer wait are dropped when they reach the front.
    private var arrivals: [Arrival] = []
    private var start = 0
    /// At least how often the oldest waiting command was overtaken: it is next once this is `limit`.
    private var oldestOvertakes = 0

    init(limit: Int?) {
        self.limit = limit
    }

    var isActive: Bool { limit != nil }

    mutating func arrived(_ ticket: Ticket, sequence: UInt64) {
        if limit != nil { arrivals.append(Arrival(ticket: ticket, sequence: sequence)) }
    }

    /// The oldest waiting command is granted next.
    var isDue: Bool {
        guard let limit else { return false }
        // mutant(bound-off-by-one): return oldestOvertakes > limit
        // mutant(bound-never-promotes): return false
        return oldestOvertakes >= limit
    }

    /// Drops the ones ahead of it that no longer wait.
    mutating func oldestWaiting(in table: RecordTable) -> Arrival? {
        guard limit != nil else { return nil }
        while start < arrivals.count {
            let front = arrivals[start]
            if table.isWaiting(front.ticket) { return front }
            dropOldest(next: table.sequence)
        }
        return nil
    }

    mutating func overtook() {
        oldestOvertakes += 1
    }

    /// The oldest is gone. The next was overtaken at most as often (whatever overtook it overtook
    /// the older), and at most as often as commands arrived after it (`next`: the next arrival number).
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

    mutating func reset() {
        (arrivals, start, oldestOvertakes) = ([], 0, 0)
    }

    func isSomeoneDue(in table: RecordTable) -> Bool {
        isDue && arrivals[start...].contains { table.isWaiting($0.ticket) }
    }

    /// Every waiting command is in the arrival order.
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
