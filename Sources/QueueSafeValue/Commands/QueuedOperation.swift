// MARK: - QueuedOperation

/// A handle to one operation of a ``CommandQueue``, returned by
/// ``CommandQueue/submit(priority:policy:_:file:line:)``: its task, where it stands, and two ways to change
/// its course while it waits: a new priority, or cancellation.
///
/// ```swift
/// let queue = try CommandQueue(width: 4)
/// let load = queue.submit(priority: .low) { try await Task.sleep(nanoseconds: 1_000_000); return 42 }
/// load.setPriority(.high)   // still waiting: it moves behind the waiting .high operations
/// load.cancel()             // still waiting: it leaves the queue and never runs
/// let result = try? await load.value   // nil: it threw QueueSafeValueError.cancelled
/// ```
///
/// Every member may be called from any thread, task or actor, at any time, as often as you like;
/// none waits for the operation. A change that comes too late (the operation has finished, or will
/// never run) changes nothing and loses nothing: ``setPriority(_:)`` and ``cancel()`` say what they
/// found.
public final class QueuedOperation<Success: Sendable>: Sendable {
    /// Where an operation stands: ``QueuedOperationState``.
    public typealias State = QueuedOperationState

    /// The task that runs the operation: awaiting its `value` is awaiting the operation's result
    /// (the same as ``value``); cancelling it is ``cancel()``.
    public let task: Task<Success, any Error>
    @usableFromInline let engine: CommandEngine
    @usableFromInline let waiter: AwaitingWaiter
    @usableFromInline let progress: OperationProgress

    @usableFromInline
    init(task: Task<Success, any Error>, engine: CommandEngine, waiter: AwaitingWaiter, progress: OperationProgress) {
        (self.task, self.engine, self.waiter, self.progress) = (task, engine, waiter, progress)
    }

    /// The operation's result, once it has run: what it returned, or what it threw. Throws
    /// ``QueueSafeValueError/cancelled`` if it never ran (see ``QueuedOperationState/cancelled``; a timeout throws
    /// ``QueueSafeValueError/timedOut(_:)``). Cancelling the task that awaits this does not cancel
    /// the operation (as for `Task.value`): call ``cancel()``.
    public var value: Success {
        get async throws { try await task.value }
    }

    /// Where the operation stands now. It may have moved on by the time you read it.
    public var state: State { progress.state }

    /// The operation's priority in its queue: the one it was submitted with, or the last one
    /// ``setPriority(_:)`` set while it waited (or raised while it ran).
    public var priority: CommandPriority { progress.priority }

    /// Changes the operation's priority.
    ///
    /// - While it **waits**, it takes its new place at once: the place an operation of `priority`
    ///   submitted now would take, behind every operation already waiting at that priority (even
    ///   when the priority is the same as before). If a slot is free for it there, it starts.
    /// - While it **runs**, a higher priority escalates its task, as awaiting a task of higher
    ///   priority does (`.high` and `.highest` to `TaskPriority.high`, `.medium` to `.medium`,
    ///   `.low` to `.utility`, below that `.background`); a lower one changes nothing (a task's
    ///   priority is never lowered).
    /// - Once it has **finished** or been **cancelled**, nothing changes.
    ///
    /// - Returns: where the operation stood when the change was made (``QueuedOperationState/waiting``: it moved;
    ///   ``QueuedOperationState/running``: at most its task was escalated; otherwise: nothing changed).
    @discardableResult
    public func setPriority(_ priority: CommandPriority) -> State {
        let found = engine.reprioritize(waiter, to: priority)
        if found == .moved {
            progress.waitingPriorityChanged(to: priority)
            return .waiting
        }
        // Granted (or started) already: at most an escalation, now or as its task starts.
        let (state, escalate) = progress.raiseRunning(to: priority, granted: found == .holding)
        if let escalate { withExtendedLifetime(task) { CommandEngine.escalate(task: escalate, to: priority) } }
        return state
    }

    /// Cancels the operation: while it waits, it leaves its queue at once and never runs (its task
    /// throws ``QueueSafeValueError/cancelled``), and frees no slot, since it held none; while it
    /// runs, its task is cancelled (it sees `Task.isCancelled`, decides when to end, and its slot is
    /// given back when it does); once it has finished, nothing happens.
    /// - Returns: where the operation stood when it was cancelled.
    @discardableResult
    public func cancel() -> State {
        let state = progress.state
        task.cancel()
        return state
    }
}

// MARK: - QueuedOperationState

/// Where an operation of a ``CommandQueue`` stands (see ``QueuedOperation``).
public enum QueuedOperationState: Sendable, Hashable {
    /// It waits for a slot of its queue.
    case waiting
    /// It runs (it holds a slot of its queue, or, on a ``CommandQueue/Ordering/startsInOrder``
    /// queue, it has started).
    case running
    /// It ran to its end: it returned or threw.
    case finished
    /// It will never run: it was cancelled (``QueuedOperation/cancel()``, its task, or
    /// ``CommandQueue/cancelAll()``), discarded (``CommandQueue/Policy/discardable``) or refused
    /// (a timeout, a deadlock) before it started. Its task throws.
    case cancelled
}

// MARK: - OperationProgress

/// Where a submitted operation stands, for its ``QueuedOperation``: written by the operation's task
/// as it starts and ends, and by ``QueuedOperation/setPriority(_:)``.
// @unchecked Sendable: every field is behind the lock
@usableFromInline
final class OperationProgress: @unchecked Sendable {
    struct Fields {
        var state = QueuedOperationState.waiting
        var priority: CommandPriority
        /// The running operation's task (its address), while it runs: for an escalation.
        var task = 0
        /// A raise asked for between the operation's grant and its start: made as it starts.
        var raiseAtStart = false
    }

    private let fields: LockedState<Fields>

    @usableFromInline
    init(priority: CommandPriority) {
        fields = .make(Fields(priority: priority))
    }

    var state: QueuedOperationState { fields.withLock { $0.state } }
    var priority: CommandPriority { fields.withLock { $0.priority } }

    /// The operation starts running, in the current task.
    @usableFromInline
    func started() {
        let task = currentTaskID()
        let raise: CommandPriority? = fields.withLock { fields in
            fields.state = .running
            fields.task = task
            defer { fields.raiseAtStart = false }
            return fields.raiseAtStart ? fields.priority : nil
        }
        // The current task, raised by a `setPriority` that came between its grant and now.
        if let raise { CommandEngine.escalate(task: task, to: raise) }
    }

    /// The operation ended: it ran (`ran`), or it will never run.
    @usableFromInline
    func ended(ran: Bool) {
        fields.withLock { fields in
            fields.state = ran ? .finished : .cancelled
            fields.task = 0
        }
    }

    func waitingPriorityChanged(to priority: CommandPriority) {
        fields.withLock { $0.priority = priority }
    }

    /// The priority of an operation that no longer waits changes: it rises if it runs (or was
    /// `granted` and has not started yet: then it rises as it starts) and `priority` is higher.
    /// - Returns: the state (``QueuedOperationState/running`` for a granted one), and the running
    ///   task to escalate now, if any.
    func raiseRunning(to priority: CommandPriority, granted: Bool) -> (QueuedOperationState, escalate: Int?) {
        fields.withLock { fields in
            if granted && fields.state == .waiting {
                if priority > fields.priority {
                    fields.priority = priority
                    fields.raiseAtStart = true
                }
                return (.running, nil)
            }
            guard fields.state == .running, priority > fields.priority else { return (fields.state, nil) }
            fields.priority = priority
            return (fields.state, fields.task == 0 ? nil : fields.task)
        }
    }
}
