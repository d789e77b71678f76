// Helping: waiting blocking commands that run on dispatch queues, and which of them takes a
// dispatched command granted for its queue (the registrations live in the record table).
extension EngineStateMachine {
    // MARK: Helpers

    /// The waiting command `ticket` runs on these dispatch queues: dispatched commands granted for
    /// them while it waits go to it (see ``RecordTable/helper(forQueue:)``).
    mutating func registerHelper(_ ticket: Ticket, queues: [Int]) {
        table.registerHelper(ticket, queues: queues)
    }
}
