// MARK: - RecurringRunTarget

/// Where a ``RecurringExecutor`` runs its operation: ``detached`` or ``commandQueue(_:priority:)``.
///
/// Whatever the target, every run gets a task of its own, and that task is what the executor cancels
/// when ``RecurringExecutor/runNow()`` or ``RecurringExecutor/stop()`` asks the run to stop. To run
/// inside the critical section of a ``QueueSafeValue``, use
/// ``RecurringExecutor/init(updating:priority:policy:sleeper:eventHandler:operation:)``.
public struct RecurringRunTarget: Sendable {
    /// Starts one run of an operation and returns its task.
    let launch: @Sendable (_ operation: @escaping @Sendable () async throws -> Void) -> Task<Void, any Error>

    /// Each run is a detached task (off any actor, no inherited task-locals or priority) that starts
    /// at once.
    public static let detached = RecurringRunTarget { operation in
        SyncPoints.throwingTask(detached: true) { try await operation() }
    }

    /// Each run is enqueued on `queue` with ``CommandQueue/enqueue(priority:policy:_:file:line:)`` at the
    /// moment it starts, and runs in its turn: after every operation of higher priority and every
    /// earlier one of the same priority, and never alongside another operation of the queue (on a
    /// ``CommandQueue/Ordering/startsInOrder`` queue, only its start is ordered so). Cancelled while
    /// it waits for its turn, the run leaves the queue and never starts
    /// (``RecurringExecutorEvent/Kind/cancelled(run:)``); once it has started, it sees
    /// `Task.isCancelled`.
    public static func commandQueue(_ queue: CommandQueue, priority: CommandPriority = .medium) -> RecurringRunTarget {
        RecurringRunTarget { operation in
            queue.enqueue(priority: priority, operation)
        }
    }
}
