// MARK: - RecurringRunTarget

/// Where a ``RecurringExecutor`` runs its operation.
///
/// Whatever the target, every run gets a task of its own, and that task is what the executor cancels
/// when ``RecurringExecutor/runNow()`` or ``RecurringExecutor/stop()`` asks the run to stop.
///
/// - ``detached``: the operation runs in a detached task, off any actor, at once.
/// - ``commandQueue(_:priority:)``: the operation takes its place in a ``CommandQueue`` at the given
///   priority and runs in its turn, never at the same time as the queue's other operations. Cancelling
///   the run while it waits for its turn takes it out of the queue (it never starts and the run
///   reports ``RecurringExecutorEvent/Kind/cancelled(run:)``); once it has started, it sees
///   `Task.isCancelled`.
///
/// To run inside the critical section of a ``QueueSafeValue``, use
/// ``RecurringExecutor/init(updating:priority:policy:sleeper:eventHandler:operation:)``.
public struct RecurringRunTarget: Sendable {
    /// Starts one run of an operation and returns its task.
    let launch: @Sendable (_ operation: @escaping @Sendable () async throws -> Void) -> Task<Void, any Error>

    init(
        launch: @escaping @Sendable (_ operation: @escaping @Sendable () async throws -> Void) -> Task<Void, any Error>
    ) {
        self.launch = launch
    }

    /// Each run is a detached task (no actor, no inherited task-locals or priority) that starts at
    /// once.
    public static let detached = RecurringRunTarget { operation in
        SyncPoints.throwingTask(detached: true) { try await operation() }
    }

    /// Each run is enqueued on `queue` with ``CommandQueue/enqueue(priority:policy:_:file:line:)`` at the
    /// moment it starts, and runs in its turn: after every operation of higher priority and every
    /// earlier one of the same priority, and never alongside another operation of the queue (on a
    /// ``CommandQueue/Ordering/startsInOrder`` queue, only its start is ordered so).
    public static func commandQueue(_ queue: CommandQueue, priority: CommandPriority = .medium) -> RecurringRunTarget {
        RecurringRunTarget { operation in
            queue.enqueue(priority: priority, operation)
        }
    }
}
