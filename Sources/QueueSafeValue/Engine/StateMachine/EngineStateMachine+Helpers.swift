// Helping: waiting blocking commands that run on dispatch queues, and which of them takes a
// dispatched command granted for its queue.
extension EngineStateMachine {
    // MARK: Helpers

    /// The waiting command `ticket` runs on these dispatch queues: dispatched commands granted for
    /// them while it waits go to it (see ``helper(forQueue:)``).
    mutating func registerHelper(_ ticket: Ticket, queues: [Int]) {
        guard isWaiting(ticket) else { return }
        helpers[ticket.slot] = queues
    }

    /// Whether any waiting command helps with dispatched commands.
    var hasHelpers: Bool { !helpers.isEmpty }

    /// The waiting command that runs on the queue `queue`, if any: it runs a dispatched command
    /// granted for that queue, which could not run its block while that command waits.
    func helper(forQueue queue: Int) -> Handle? {
        guard queue != 0 else { return nil }
        for (slot, queues) in helpers where queues.contains(queue) && records[Int(slot)].state == .waiting {
            return records[Int(slot)].handle
        }
        return nil
    }
}
