// The container's life and the CommandQueue's discard policy: two typed parts of `EngineStateMachine`.

/// Whether the container still exists, and whether the value has been freed.
struct Lifecycle {
    enum Phase: Equatable {
        case open
        /// New commands are refused; queued ones still run.
        case closed
        /// Or the machine guards no value.
        case valueFreed
    }

    private(set) var phase = Phase.open
    private(set) var droppedCompletions = 0

    @inline(__always)
    var isClosed: Bool { phase != .open }

    var isValueFreed: Bool { phase == .valueFreed }

    /// `false` if it had been already.
    mutating func close() -> Bool {
        guard phase == .open else { return false }
        phase = .closed
        return true
    }

    /// Closed, and nothing holds or waits; `false` if not closed or freed already.
    mutating func freeValue() -> Bool {
        guard phase == .closed else { return false }
        phase = .valueFreed
        return true
    }

    mutating func completionDropped() {
        droppedCompletions += 1
    }

    func violation(word: Int, waitingCount: Int) -> String? {
        if (word & EngineWord.closed != 0) != isClosed { return "closed bit and state disagree" }
        if isValueFreed && (EngineWord.isHeld(word) || waitingCount > 0) { return "value freed while in use" }
        return nil
    }
}

/// ``CommandQueue``'s discardable operations.
struct Discarding {
    typealias Ticket = EngineStateMachine.Ticket

    /// The newest discardable operation that has not begun.
    private(set) var pending: Ticket?
    /// Granted but not begun when a later operation discarded it: it releases instead of beginning.
    private(set) var discardedHolder: Ticket?

    mutating func takePending() -> Ticket? {
        defer { pending = nil }
        return pending
    }

    mutating func setPending(_ ticket: Ticket) {
        pending = ticket
    }

    mutating func discardHolder(_ ticket: Ticket) {
        discardedHolder = ticket
    }

    /// `false` if it was discarded after its grant.
    mutating func begin(_ ticket: Ticket) -> Bool {
        if pending == ticket { pending = nil }
        guard discardedHolder == ticket else { return true }
        discardedHolder = nil
        return false
    }

    func violation(_ table: RecordTable) -> String? {
        guard let pending, table.isCurrent(pending) else { return nil }
        let record = table[pending.slot]
        if record.kind != .operation || (record.state != .waiting && record.state != .holding) {
            return "the pending discardable operation is a \(record.kind) that is \(record.state)"
        }
        return nil
    }
}
