import Dispatch

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

/// Whoever is told that a manual completion arrived.
protocol CompletionTarget: AnyObject, Sendable {
    /// Called once: when the completion closure is called, or when it is released uncalled.
    func completionArrived()
}

/// The object behind a ``CommandCompletionClosure``: the first call wins, and releasing it uncalled
/// completes it too (and is counted as abandoned on the engine).
final class CompletionToken: @unchecked Sendable {
    private let called = AtomicWord(0)
    private let target: any CompletionTarget
    private let engine: CommandEngine

    init(target: any CompletionTarget, engine: CommandEngine) {
        self.target = target
        self.engine = engine
    }

    deinit {
        if called.exchange(1) == 0 {
            engine.recordAbandonedCompletion()
            target.completionArrived()
        }
        called.deallocate()
    }

    func complete() {
        if called.exchange(1) == 0 {
            target.completionArrived()
        }
    }

    /// Makes a token for `target` and calls `body` with its closure. The token is referenced only by
    /// that closure, so when `body` (and whatever it handed the closure to) lets go of it, it
    /// completes itself.
    @inline(never)
    static func withCompletion(
        target: any CompletionTarget,
        engine: CommandEngine,
        _ body: (@escaping CommandCompletionClosure) -> Void
    ) {
        let token = CompletionToken(target: target, engine: engine)
        body(token.complete)
    }
}

// MARK: - Latches

/// Blocks a thread until a manual completion arrives.
final class BlockingLatch: CompletionTarget, @unchecked Sendable {
    private let semaphore = DispatchSemaphore(value: 0)

    func completionArrived() { semaphore.signal() }

    func wait() { semaphore.wait() }
}
