import Dispatch

// MARK: - PendingCommand

/// A command that could not run at once and waits in the engine's heap for the critical section.
///
/// Subclasses decide how the command is started once the engine grants it: wake a parked thread
/// (``BlockingWaiter``), dispatch onto a queue (``DispatchedCommand``) or resume a task
/// (``AwaitingWaiter``). `key` and `status` belong to the engine and change only under its lock.
@usableFromInline
class PendingCommand: @unchecked Sendable {
    enum Status: UInt8 {
        /// In the heap, waiting.
        case pending
        /// Given the critical section (it runs, or will as soon as its owner wakes up).
        case granted
        /// Left the queue before it was granted (timed out or cancelled). It never runs.
        case cancelled
    }

    /// The heap order: see ``CommandHeap/key(priority:sequence:)``.
    final var key: UInt64 = 0
    final var status: Status = .pending

    /// The thread that will run the command's closure as soon as it is granted, or 0 when that is not
    /// known yet (dispatch and task commands record their thread when they start).
    var ownerThread: Int { 0 }

    /// The queue a dispatched command runs on; `nil` for other kinds.
    var targetQueue: DispatchQueue? { nil }

    /// Called under the engine lock when the command is granted.
    /// - Returns: `true` if the command runs a task that ``CommandEngine/cancelAll()`` must reach.
    func didGrantLocked() -> Bool { false }

    /// Called under the engine lock when the command leaves the queue without running.
    /// - Returns: a suspended task to resume after the lock is released.
    func didCancelLocked() -> TurnContinuation? { nil }

    /// Called under the engine lock by ``CommandEngine/cancelAll()``: the task to cancel, if any.
    func takeTaskLocked() -> (any CancellableTask)? { nil }

    /// Starts the command after the engine granted it. Called exactly once, outside the engine lock.
    func start() {
        preconditionFailure("PendingCommand.start() must be overridden")
    }
}
