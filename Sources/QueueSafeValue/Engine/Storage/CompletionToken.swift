// MARK: - CommandCompletionClosure

/// The closure a manual-completion command hands to its command or access closure.
///
/// Calling it ends the command: the value stays exclusively held until **both** the closure has
/// returned and this completion was called, in either order, so `done()` inside the closure and
/// `done()` later from another queue are equally safe. It may be called from any thread or queue.
/// Calling it more than once is harmless: only the first call counts.
///
/// If every copy of the closure is released without it ever being called, the command still ends
/// (the queue never stalls) and the container's `abandonedCompletionCount` goes up by one: check it
/// in tests or debug builds to find the code path that forgot to call it.
public typealias CommandCompletionClosure = @Sendable () -> Void

// MARK: - CompletionToken

/// The object behind a ``CommandCompletionClosure``: tells the engine once that the completion
/// arrived, at the first call or when the last copy is released (*dropped*). It refers to the
/// engine and the ticket only, so a kept closure keeps nothing alive but the engine.
// @unchecked Sendable: `arrived` is atomic, the rest immutable
final class CompletionToken: @unchecked Sendable {
    private let arrived = AtomicWord(0)
    private let engine: CommandEngine
    private let ticket: CommandEngine.Ticket

    private init(engine: CommandEngine, ticket: CommandEngine.Ticket) {
        self.engine = engine
        self.ticket = ticket
    }

    deinit {
        if arrived.exchange(1) == 0 {
            engine.manualCompletionArrived(ticket, dropped: true)
        }
    }

    func complete() {
        if arrived.exchange(1) == 0 {
            engine.manualCompletionArrived(ticket, dropped: false)
        }
    }

    /// Calls `body` with the closure of a new token for `ticket`, referenced only by that closure.
    @inline(never)
    static func withCompletion(
        engine: CommandEngine,
        ticket: CommandEngine.Ticket,
        _ body: (@escaping CommandCompletionClosure) -> Void
    ) {
        let token = CompletionToken(engine: engine, ticket: ticket)
        body(token.complete)
    }
}
