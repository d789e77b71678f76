@_spi(Testing) @testable import QueueSafeValue

/// The transition tests' and the cycle explorer's handles: waiters that carry only a number. None
/// runs on a dispatch queue of its own, so no helper or inline successor is ever chosen for one.
// @unchecked Sendable: its number never changes (and `isGranted`, as for every waiter, is touched
// only under the engine lock)
final class NumberedHandle: Waiter, @unchecked Sendable {
    let id: Int
    /// When it gives up waiting (the machine's clock), or 0: never.
    let deadline: UInt64
    /// Whether it gives up as an operation whose task was cancelled before it started (set by a
    /// test, under no lock: the transition tests run on one thread).
    var taskCancelled = false

    init(_ id: Int, deadline: UInt64 = 0) {
        self.id = id
        self.deadline = deadline
    }

    override func givesUp(at now: UInt64) -> EngineStateMachine.GiveUp {
        if deadline != 0 && deadline <= now { return .timedOut }
        return taskCancelled ? .cancelled : .stays
    }
}

extension Waiter {
    /// The number of a ``NumberedHandle`` (-1 for any other waiter).
    var number: Int { (self as? NumberedHandle)?.id ?? -1 }
}

// The transitions in the shape the tests read best: numbered handles in, numbers and the word to
// store out. Each calls the machine's one form of the transition.
extension EngineStateMachine {
    mutating func enqueue(
        _ number: Int, kind: CommandKind, priority: CommandPriority, reentrant: Bool, observed: Int,
        now: UInt64 = 0, shared: Bool = false, deadline: UInt64 = 0
    ) -> (Admission, word: Int) {
        var word = observed
        let admission = enqueue(
            NumberedHandle(number, deadline: deadline), kind: kind, priority: priority, reentrant: reentrant,
            word: &word, now: now, shared: shared, deadline: deadline)
        return (admission, word)
    }

    /// ``discardPending()`` and ``enqueueOperation(_:priority:discardable:word:now:)``, as the
    /// storage runs them: in one lock section.
    mutating func enqueueOperation(
        _ number: Int, priority: CommandPriority, discardable: Bool, observed: Int, now: UInt64 = 0
    ) -> (Admission, Actions, word: Int) {
        var word = observed
        let actions = discardPending()
        let admission = enqueueOperation(
            NumberedHandle(number), priority: priority, discardable: discardable, word: &word, now: now)
        return (admission, actions, word)
    }

    mutating func release(observed: Int, now: UInt64 = 0, releaserQueue: Int = 0) -> (Actions, word: Int) {
        var word = observed
        let actions = release(word: &word, now: now, releaserQueue: releaserQueue)
        return (actions, word)
    }

    mutating func releaseReader(_ ticket: Ticket, observed: Int, now: UInt64 = 0) -> (Actions, word: Int) {
        var word = observed
        let actions = releaseReader(ticket, word: &word, now: now)
        return (actions, word)
    }

    mutating func releaseIdleReader(observed: Int, now: UInt64 = 0) -> (Actions, word: Int) {
        var word = observed
        let actions = releaseReader(nil, word: &word, now: now)
        return (actions, word)
    }

    mutating func close(observed: Int) -> (Actions, word: Int) {
        var word = observed
        let actions = close(word: &word)
        return (actions, word)
    }

    mutating func beginManual(_ number: Int, kind: CommandKind, observed: Int, now: UInt64 = 0) -> (Ticket, word: Int) {
        var word = observed
        let ticket = beginManual(NumberedHandle(number), kind: kind, word: &word, now: now)
        return (ticket, word)
    }

    /// ``leave(_:)``, answering with the number of the command that left (`nil` if it was granted
    /// first or had left already).
    mutating func leaving(_ ticket: Ticket) -> Int? {
        guard let actions = leave(ticket) else { return nil }
        return actions.left.first
    }
}

extension EngineStateMachine.Actions {
    /// The number of the command this release granted, if any.
    var next: Int? { grant?.handle.number }

    /// The commands that left the queue, in order.
    var left: [Int] {
        others.compactMap { if case .left(let handle, _) = $0 { handle.number } else { nil } }
    }

    /// The commands that expired (their deadline had passed when a grant came to them), in order.
    var expired: [Int] {
        others.compactMap { if case .expired(let handle, _) = $0 { handle.number } else { nil } }
    }

    /// The commands whose tasks are cancelled, in order.
    var cancelled: [Int] {
        others.compactMap { if case .cancel(let handle, _) = $0 { handle.number } else { nil } }
    }

    /// The manual-completion command to finish, if any.
    var finish: Int? {
        others.lazy.compactMap { if case .finish(let handle) = $0 { handle.number } else { nil } }.first
    }
}
