import Dispatch

// MARK: - CommandQueue

/// Ordered asynchronous work without a value: a priority command queue for tasks, usable from
/// synchronous code.
///
/// Operations run one at a time, **across their suspension points**: an operation begins only after
/// the previous one has ended. Higher priorities go first; within a priority, operations begin and
/// end in the order of the `enqueue` calls that created them (the place is taken synchronously,
/// inside `enqueue`, so calls made one after another from one thread or actor keep their order).
///
/// ```swift
/// let queue = CommandQueue()
/// queue.enqueue { await log.write("A") }                   // from synchronous code; A starts at once
/// queue.enqueue { await log.write("B") }                   // waits behind A
/// queue.enqueue(priority: .high) { await log.write("C") }  // jumps the line: runs after A, before B
/// let rows = try await queue.perform { try await database.fetchRows() }  // after B; awaits the result
/// ```
///
/// Cancellation follows Swift's rules: cancelling an operation's task while it waits makes it leave
/// the queue at once and throw ``QueueSafeValueError/cancelled`` without running; an operation that
/// has started sees `Task.isCancelled` and decides for itself. ``cancelAll()`` does both for every
/// operation enqueued so far.
///
/// Awaiting the queue from inside one of its own operations would wait forever; ``perform(priority:_:)``
/// detects it and throws ``QueueSafeValueError/reentrantAccess`` at once. (Awaiting the `Task` that
/// `enqueue` returned cannot be detected: do not await, from inside an operation, a task enqueued on
/// the same queue.)
public final class CommandQueue: Sendable {
    @usableFromInline let engine: CommandEngine

    /// Creates an empty queue.
    /// - Parameter label: a name for diagnostics and deadlock reports.
    public init(label: String? = nil) {
        engine = CommandEngine(label: label)
    }

    // MARK: Enqueue from anywhere

    /// Adds `operation` to the queue and returns the task that runs it.
    ///
    /// The operation's place is taken before this method returns. It runs, off any actor, once every
    /// operation of higher priority and every earlier one of the same priority has ended.
    /// - Returns: a task whose value is the operation's result. It throws what the operation throws,
    ///   or ``QueueSafeValueError/cancelled`` if it was cancelled (the task, or by ``cancelAll()``)
    ///   before the operation started — then the operation never runs.
    @inlinable
    @discardableResult
    public func enqueue<T: Sendable>(
        priority: CommandPriority = .medium,
        _ operation: @escaping @Sendable () async throws -> T
    ) -> Task<T, any Error> {
        schedule(priority: priority, operation)
    }

    /// Adds `operation` to the queue; when its turn comes it runs isolated to `actor`. The queue
    /// holds its turn for the whole operation, so unlike an actor's own mailbox, operations begin
    /// **and end** in order even when they suspend.
    /// - Returns: a task as for ``enqueue(priority:_:)``.
    @inlinable
    @discardableResult
    public func enqueue<A: Actor, T: Sendable>(
        isolatedTo actor: A,
        priority: CommandPriority = .medium,
        _ operation: @escaping @Sendable (isolated A) async throws -> T
    ) -> Task<T, any Error> {
        schedule(priority: priority) { try await operation(actor) }
    }

    /// Adds `operation` to the queue; when its turn comes it runs on the main actor.
    /// - Returns: a task as for ``enqueue(priority:_:)``.
    @inlinable
    @discardableResult
    public func enqueueOnMainActor<T: Sendable>(
        priority: CommandPriority = .medium,
        _ operation: @escaping @MainActor @Sendable () async throws -> T
    ) -> Task<T, any Error> {
        schedule(priority: priority) { try await operation() }
    }

    /// Like ``enqueue(priority:_:)``, but the operation gives up if it has not started within
    /// `timeout` (counted from this call): its task then throws
    /// ``QueueSafeValueError/timedOut(_:)`` with a snapshot of the queue, and the operation never
    /// runs. Once it has started, the timeout no longer applies. `.never` waits forever.
    @inlinable
    @discardableResult
    public func enqueue<T: Sendable>(
        priority: CommandPriority = .medium,
        timeout: DispatchTimeInterval,
        _ operation: @escaping @Sendable () async throws -> T
    ) -> Task<T, any Error> {
        schedule(priority: priority, deadline: Self.deadline(after: timeout), operation)
    }

    // MARK: Await the result

    /// Adds `operation` to the queue and waits for its result.
    ///
    /// Cancelling the calling task cancels the operation's task (it leaves the queue if it has not
    /// started).
    /// - Throws: what the operation throws; ``QueueSafeValueError/cancelled`` if it was cancelled
    ///   before it started; ``QueueSafeValueError/reentrantAccess`` at once, without enqueuing, when
    ///   called from inside an operation of this same queue (it would wait for itself).
    @inlinable
    public func perform<T: Sendable>(
        priority: CommandPriority = .medium,
        _ operation: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        if engine.isInsideRunningSection() { throw QueueSafeValueError.reentrantAccess }
        return try await awaitCancellably(enqueue(priority: priority, operation))
    }

    /// Like ``perform(priority:_:)``, but the operation gives up if it has not started within
    /// `timeout`: then this throws ``QueueSafeValueError/timedOut(_:)`` and the operation never runs.
    @inlinable
    public func perform<T: Sendable>(
        priority: CommandPriority = .medium,
        timeout: DispatchTimeInterval,
        _ operation: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        if engine.isInsideRunningSection() { throw QueueSafeValueError.reentrantAccess }
        return try await awaitCancellably(enqueue(priority: priority, timeout: timeout, operation))
    }

    /// Like ``perform(priority:_:)``, with the operation isolated to `actor`.
    @inlinable
    public func perform<A: Actor, T: Sendable>(
        isolatedTo actor: A,
        priority: CommandPriority = .medium,
        _ operation: @escaping @Sendable (isolated A) async throws -> T
    ) async throws -> T {
        if engine.isInsideRunningSection() { throw QueueSafeValueError.reentrantAccess }
        return try await awaitCancellably(enqueue(isolatedTo: actor, priority: priority, operation))
    }

    /// Like ``perform(priority:_:)``, with the operation on the main actor.
    @inlinable
    public func performOnMainActor<T: Sendable>(
        priority: CommandPriority = .medium,
        _ operation: @escaping @MainActor @Sendable () async throws -> T
    ) async throws -> T {
        if engine.isInsideRunningSection() { throw QueueSafeValueError.reentrantAccess }
        return try await awaitCancellably(enqueueOnMainActor(priority: priority, operation))
    }

    // MARK: Cancellation

    /// Cancels every operation enqueued so far: pending ones leave the queue and never start (their
    /// tasks are cancelled and throw ``QueueSafeValueError/cancelled``), and the running one's task
    /// is cancelled (it sees `Task.isCancelled` and ends when it chooses). Operations enqueued
    /// afterwards run normally, after the running one has ended.
    ///
    /// The pending operations are taken out of the queue before the running one is cancelled, so its
    /// end never hands the turn to work that was meant to be cancelled.
    public func cancelAll() {
        engine.cancelAll()
    }

    /// What holds the queue and what waits in it, right now: whether an operation runs, and how
    /// many wait per priority. Never waits for the running operation.
    public var diagnostics: QueueDiagnostics {
        engine.diagnostics
    }

    // MARK: Internals

    @inlinable
    func schedule<T: Sendable>(
        priority: CommandPriority,
        deadline: DispatchTime? = nil,
        _ operation: @escaping @Sendable () async throws -> T
    ) -> Task<T, any Error> {
        let engine = self.engine
        let (waiter, grantedAtOnce) = engine.enqueueOperation(priority: priority)
        let task = Task<T, any Error> {
            // Everything below runs inline in the task: no intermediate async frames or executor
            // switches, and no suspension at all when the turn has come by the time the task starts.
            if !grantedAtOnce {
                try await engine.waitForTurn(waiter, deadline: deadline, isolation: nil)
            }
            if Task.isCancelled {
                // Granted, but cancelled before the operation began: it never starts.
                engine.release(.operation)
                throw QueueSafeValueError.cancelled
            }
            return try await engine.runHeldTaskSection(.operation, isolation: nil) {
                try await operation()
            }
        }
        engine.attach(task, to: waiter)
        return task
    }

    @inlinable
    static func deadline(after timeout: DispatchTimeInterval) -> DispatchTime? {
        if case .never = timeout { return nil }
        return .now() + timeout
    }

    @inlinable
    func awaitCancellably<T: Sendable>(_ task: Task<T, any Error>) async throws -> T {
        try await withTaskCancellationHandler {
            try await task.value
        } onCancel: {
            task.cancel()
        }
    }
}
