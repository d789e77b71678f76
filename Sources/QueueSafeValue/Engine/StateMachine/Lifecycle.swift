// The container's life and the CommandQueue's discard policy: two small typed parts of
// `EngineStateMachine`, whose fields only this file touches.

/// Whether the container still exists, and whether the value has been freed.
///
/// Invariant (``violation(word:waitingCount:)``): the word's `closed` bit says closed exactly when
/// the container was released; the value is freed only once nothing holds or waits for it.
struct Lifecycle {
    enum Phase: Equatable {
        /// The container exists: commands are admitted.
        case open
        /// The container was released: new commands are refused; queued ones still run.
        case closed
        /// Closed, and the value was freed (or the machine guards no value): nothing holds or waits.
        case valueFreed
    }

    private(set) var phase = Phase.open
    /// Manual completions released without being called.
    private(set) var droppedCompletions = 0

    @inline(__always)
    var isClosed: Bool { phase != .open }

    var isValueFreed: Bool { phase == .valueFreed }

    /// The container was released.
    /// - Returns: `false` if it had been already.
    mutating func close() -> Bool {
        guard phase == .open else { return false }
        phase = .closed
        return true
    }

    /// The value is freed now (closed, and nothing holds or waits).
    /// - Returns: `false` if it was not closed or was freed already: nothing to free.
    mutating func freeValue() -> Bool {
        guard phase == .closed else { return false }
        phase = .valueFreed
        return true
    }

    /// A manual completion was released uncalled.
    mutating func completionDropped() {
        droppedCompletions += 1
    }

    func violation(word: Int, waitingCount: Int) -> String? {
        if (word & EngineWord.closed != 0) != isClosed { return "closed bit and state disagree" }
        if isValueFreed && (EngineWord.isHeld(word) || waitingCount > 0) { return "value freed while in use" }
        return nil
    }
}

/// ``CommandQueue``'s discardable operations: the newest one that has not begun, and the one that
/// was discarded after its grant (it must not begin).
///
/// Invariant (``violation(_:)``): a pending discardable operation, while its record is current, is
/// an operation that waits or holds.
struct Discarding {
    typealias Ticket = EngineStateMachine.Ticket

    /// The newest discardable operation that has not begun, if any.
    private(set) var pending: Ticket?
    /// A discardable operation, granted but not begun, that a later operation discarded: it
    /// releases instead of beginning. (At most one: one command holds at a time.)
    private(set) var discardedHolder: Ticket?

    /// Takes the pending discardable operation, which a new operation is about to discard.
    mutating func takePending() -> Ticket? {
        defer { pending = nil }
        return pending
    }

    /// `ticket`, a discardable operation, waits or holds without having begun.
    mutating func setPending(_ ticket: Ticket) {
        pending = ticket
    }

    /// The pending operation `ticket` holds the section: it is discarded before it begins.
    mutating func discardHolder(_ ticket: Ticket) {
        discardedHolder = ticket
    }

    /// The operation `ticket` is about to begin: it is no longer pending.
    /// - Returns: `false` if it was discarded after its grant.
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
