// Helping: a waiting blocking command whose thread runs on dispatch queues runs the dispatched
// commands granted for them (the registrations live in the record table).
extension EngineStateMachine {
    // MARK: Helpers

    mutating func registerHelper(_ ticket: Ticket, queues: [Int]) {
        table.registerHelper(ticket, queues: queues)
    }
}
