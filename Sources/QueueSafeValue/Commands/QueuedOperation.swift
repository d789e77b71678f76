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
    ///
    /// Throws ``QueueSafeValueError/deadlock(_:)`` at once, without waiting, where the wait could
    /// never end: awaited from inside an operation that holds the turn of the same one-at-a-time
    /// queue of width 1 while this operation has not begun (it can begin only once the awaiting
    /// one ends), or from inside this operation itself. (On a wider queue a slot may still free
    /// up, so the wait is allowed; awaiting ``task``'s `value` directly is not checked.)
    public var value: Success {
        get async throws {
            if let refusal = engine.refusalToAwait(waiter, progress: progress, task: Self.address(of: task)) {
                throw refusal
            }
            return try await task.value
        }
    }

    /// Where the operation stands now. It may have moved on by the time you read it (unless you
    /// cancelled it: then it stays ``QueuedOperationState/cancelled``).
    public var state: State { engine.operationState(waiter, progress: progress, task: task) }

    /// The operation's priority in its queue: the one it was submitted with, or the last one
    /// ``setPriority(_:)`` set while it waited (or raised while it held its turn).
    public var priority: CommandPriority { engine.machine.withLock { _ in progress.priority } }

    /// Changes the operation's priority.
    ///
    /// - While it **waits**, it takes its new place at once: the place an operation of `priority`
    ///   submitted now would take, behind every operation already waiting at that priority (even
    ///   when the priority is the same as before). If a slot is free for it there, it starts.
    /// - Once its turn has come (it **runs**, or it was granted its slot and its task has not begun
    ///   it yet), a higher priority escalates its task, as awaiting a task of higher priority does
    ///   (`.high` and `.highest` to `TaskPriority.high`, `.medium` to `.medium`, `.low` to
    ///   `.utility`, below that `.background`); a lower one changes nothing (a task's priority is
    ///   never lowered).
    /// - Once it has **finished** or been **cancelled**, nothing changes.
    ///
    /// - Returns: where the operation stands (see ``state``): ``QueuedOperationState/waiting`` if
    ///   it moved, or its turn has come and its body has not begun; ``QueuedOperationState/running``
    ///   if it runs (at most its task was escalated); otherwise nothing changed.
    @discardableResult
    public func setPriority(_ priority: CommandPriority) -> State {
        // Its task was cancelled: unless it runs, it never will (its turn passes it over).
        if task.isCancelled, case let state = state, state != .running { return state }
        switch engine.reprioritize(waiter, to: priority, progress: progress) {
        case .moved:
            return .waiting
        case .holding:
            withExtendedLifetime(task) { CommandEngine.escalate(task: Self.address(of: task), to: priority) }
            return state
        default:
            return state
        }
    }

    /// Cancels the operation, in one step with its queue: while it **waits**, it leaves its queue
    /// before this returns, and never runs; if its turn has come but its body has not begun, it
    /// gives its slot back before this returns (the next operation may start), and never runs.
    /// Either way its task is cancelled and throws ``QueueSafeValueError/cancelled``, and from now
    /// on ``state`` is ``QueuedOperationState/cancelled`` and ``setPriority(_:)`` changes nothing.
    /// This holds whether or not its task has started. While it **runs**, its task is cancelled (it
    /// sees `Task.isCancelled`, decides when to end, and its slot is given back when it does); once
    /// it has finished, nothing happens.
    /// - Returns: where the operation stood when it was cancelled (``QueuedOperationState/waiting``
    ///   for one that had not begun).
    @discardableResult
    public func cancel() -> State {
        switch engine.cancelOperation(waiter) {
        case .left, .gaveBack: return .waiting
        case .holding: return .running
        default: return state
        }
    }

    /// The address of `task`, as the concurrency runtime knows it (to escalate it).
    // Unsafe: a `Task` is one reference to the runtime's task object, kept alive by the caller.
    private static func address(of task: Task<Success, any Error>) -> Int {
        unsafeBitCast(task, to: Int.self)
    }
}

// MARK: - QueuedOperationState

/// Where an operation of a ``CommandQueue`` stands (see ``QueuedOperation``).
public enum QueuedOperationState: Sendable, Hashable {
    /// It has not begun: it waits for a slot of its queue, or its slot was granted and its task
    /// has not begun its body yet (``QueuedOperation/cancel()`` still stops it from running).
    case waiting
    /// Its body runs (holding a slot of its queue, or, on a
    /// ``CommandQueue/Ordering/startsInOrder`` queue, having started).
    case running
    /// It ran to its end: it returned or threw.
    case finished
    /// It will never run: it was cancelled (``QueuedOperation/cancel()``, its task, or
    /// ``CommandQueue/cancelAll()``), discarded (``CommandQueue/Policy/discardable``) or refused
    /// (a timeout, a deadlock) before it started. Its task throws.
    case cancelled
}

// MARK: - OperationProgress

/// Where a submitted operation stands, for its ``QueuedOperation``, beside what the queue's machine
/// knows of it (whether it still waits or holds its turn).
// @unchecked Sendable: every field is guarded by the operation's queue's engine lock
@usableFromInline
final class OperationProgress: @unchecked Sendable {
    // Unchecked exclusivity: every access is inside the engine lock, which already excludes.
    /// Its body has begun (decided with its machine record, under the engine lock).
    @exclusivity(unchecked) var hasBegun = false
    /// Its body has ended.
    @exclusivity(unchecked) var hasFinished = false
    /// Its priority: as submitted, moved, or raised while it held its turn.
    @exclusivity(unchecked) var priority: CommandPriority

    @usableFromInline
    init(priority: CommandPriority) {
        self.priority = priority
    }

    /// Its state, given whether the machine still has it waiting or holding (`live`) and whether
    /// its task was cancelled: one that has not begun and is no longer live, or whose task was
    /// cancelled, never runs.
    func state(live: Bool, taskCancelled: Bool) -> QueuedOperationState {
        if hasFinished { return .finished }
        if hasBegun { return .running }
        return live && !taskCancelled ? .waiting : .cancelled
    }
}
