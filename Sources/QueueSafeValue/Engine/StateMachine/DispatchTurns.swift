// The dispatch schedule's turns: a small typed part of `EngineStateMachine`, whose fields only this
// file touches.

/// How many *turns* are outstanding on each dispatch queue.
///
/// A dispatched command that has to wait dispatches one block at the moment it is queued: a turn
/// on its queue. A turn is not tied to its command: when it runs, it takes whichever exclusive
/// command the machine has granted for that queue and not yet started (see
/// `CommandEngine.claimTurn(_:)`), or spends itself if there is none. So when the machine grants a
/// dispatched command and a turn is outstanding on its queue, it only publishes the grant
/// (``EngineStateMachine/Starter/turn``); only a grant with no turn left on its queue dispatches a
/// block of its own (the rare path: its turn ran another command, or found nothing before the grant).
///
/// A turn is outstanding from the enqueue that dispatched it until it is spent, under the engine
/// lock, in one of two ways: the release of the command it ran (which goes through the lock for
/// this), or its finding nothing granted for its queue (checked again under the lock, so that a
/// grant that counted on it is never missed).
///
/// Invariant: every count is positive (a queue with no outstanding turn has no entry), and the
/// counts add up to the turns dispatched and not yet spent.
struct DispatchTurns {
    /// One entry per queue with outstanding turns: most values target one queue, a few several.
    private var entries: [(queue: Int, count: Int)] = []

    /// No turn is outstanding on any queue.
    var isEmpty: Bool { entries.isEmpty }

    /// Outstanding turns on every queue.
    var total: Int { entries.reduce(0) { $0 + $1.count } }

    /// A turn was dispatched on `queue` (a queue identity, see `QueueTag`).
    mutating func add(_ queue: Int) {
        if let index = entries.firstIndex(where: { $0.queue == queue }) {
            entries[index].count += 1
        } else {
            entries.append((queue, 1))
        }
    }

    /// A turn on `queue` is outstanding: a grant for that queue can count on it.
    func isOutstanding(on queue: Int) -> Bool {
        !entries.isEmpty && entries.contains { $0.queue == queue }
    }

    /// A turn on `queue` is spent (it ran its command, which released; or it found nothing).
    mutating func spend(_ queue: Int) {
        guard let index = entries.firstIndex(where: { $0.queue == queue }) else {
            preconditionFailure("a turn spent on a queue with none outstanding")
        }
        if entries[index].count == 1 {
            entries.remove(at: index)
        } else {
            entries[index].count -= 1
        }
    }

    /// The entries' invariant, for ``EngineStateMachine/violation(word:)``-style checks.
    var violation: String? {
        entries.contains { $0.count <= 0 } ? "a queue listed with no outstanding turn" : nil
    }
}
