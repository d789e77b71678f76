import Dispatch

// MARK: - CommandQueue

/// Ordered asynchronous work without a value: a priority command queue for tasks, usable from
/// synchronous code.
///
/// Higher priorities go first; within a priority, operations are taken in the order of the
/// `enqueue` calls that created them (the place is taken synchronously, inside `enqueue`, so calls
/// made one after another from one thread or actor keep their order). What "in order" covers
/// depends on the queue's ``Ordering``:
///
/// - ``Ordering/oneAtATime`` (the default): operations run one at a time, **across their
///   suspension points**. An operation begins only after the previous one has ended.
/// - ``Ordering/startsInOrder``: operations only *start* in order. An operation gives up its turn
///   as it starts, on its own actor, so the next one starts as soon as it suspends (or at once, if
///   it is not isolated to an actor). This is the guarantee of an actor's queue of tasks, with
///   priorities.
///
/// Like `Task {}`, an operation inherits the isolation of the code that enqueues it: enqueued from
/// the main actor, it runs on the main actor and may use its state; enqueued from an actor method
/// that captures `self`, it runs on that actor; enqueued from nonisolated code, it runs on the
/// global concurrent executor. Operations are `sending` closures: they may capture values that are
/// not `Sendable`, as long as the caller does not use them afterwards.
///
/// ```swift
/// actor Log { var lines: [String] = []; func write(_ line: String) { lines.append(line) } }
/// let log = Log()
/// let queue = CommandQueue()
/// queue.enqueue { await log.write("A") }                   // from synchronous code; A starts at once
/// queue.enqueue { await log.write("B") }                   // waits behind A
/// queue.enqueue(priority: .high) { await log.write("C") }  // jumps the line: runs after A, before B
/// let lines = try await queue.perform { await log.lines }  // after B: ["A", "C", "B"]
/// ```
///
/// Cancellation follows Swift's rules: cancelling an operation's task while it waits makes it leave
/// the queue at once and throw ``QueueSafeValueError/cancelled`` without running; an operation that
/// has started sees `Task.isCancelled` and decides for itself. ``cancelAll()`` does both for every
/// operation enqueued so far. An operation enqueued with ``Policy/discardable`` is dropped the same
/// way when a later operation is enqueued before it has begun ("latest wins").
///
/// **Width.** A queue made with ``init(label:width:ordering:fairness:)`` runs up to `width`
/// operations at once (1 by default). Each free slot goes to the most urgent waiting operation,
/// first come first served within a priority: operations *start* in the order above and each holds
/// its slot until it ends, so several run side by side and may end in any order. The width can
/// change while the queue runs (``setWidth(_:)``). ``submit(priority:policy:_:file:line:)`` returns a
/// ``QueuedOperation``, a handle that re-prioritizes or cancels an operation while it waits.
///
/// On a ``Ordering/oneAtATime`` queue, awaiting the queue from inside one of its own operations
/// would wait forever; ``perform(priority:policy:_:file:line:)`` detects it and throws
/// ``QueueSafeValueError/reentrantAccess`` at once, and awaiting the ``QueuedOperation/value`` of
/// an operation that waits behind the awaiting one (on a queue of width 1), or of the awaiting
/// operation itself, throws ``QueueSafeValueError/deadlock(_:)`` at once. (Awaiting the `Task`
/// that `enqueue` returned cannot be detected: do not await, from inside an operation, a task
/// enqueued on the same queue; submit it and await its handle's `value`.) On a
/// ``Ordering/startsInOrder`` queue all of these work: the operation no longer holds the turn.
public final class CommandQueue: Sendable {
    /// What the queue keeps in order.
    public enum Ordering: Sendable, Hashable {
        /// One operation at a time: each begins after the previous one has ended, even when it
        /// suspends in between. With a ``CommandQueue/width`` above 1, one operation per slot: each
        /// holds its slot until it ends. ``CommandQueue/perform(priority:policy:_:file:line:)`` from inside an
        /// operation of the same queue throws ``QueueSafeValueError/reentrantAccess``.
        case oneAtATime
        /// Operations start in order and no two start at once, but an operation gives up its turn
        /// as it starts: the next one starts when it suspends (operations isolated to the same
        /// actor), or right away (operations isolated to nothing, which then run in parallel).
        /// Awaiting the queue from inside an operation works. ``CommandQueue/cancelAll()`` and
        /// ``CommandQueue/isInsideOperation`` only see operations that have not started.
        case startsInOrder
    }

    /// What happens to an operation that still waits when a later one is enqueued.
    public enum Policy: Sendable, Hashable {
        /// It keeps its place and runs in its turn.
        case standard
        /// It is dropped: once any later operation is enqueued on the same queue (of any priority
        /// or policy) before this one has begun, this one never begins and its task throws
        /// ``QueueSafeValueError/cancelled``. Once it has begun, later operations leave it alone.
        /// For work where only the latest request matters: refreshes, saves of the newest state.
        case discardable
    }

    @usableFromInline let engine: CommandEngine
    /// What this queue keeps in order.
    public let ordering: Ordering

    /// Creates an empty queue.
    /// - Parameters:
    ///   - label: a name for diagnostics and deadlock reports.
    ///   - ordering: what the queue keeps in order; ``Ordering/oneAtATime`` unless you port code
    ///     that relies on operations interleaving at their suspension points.
    ///   - fairness: how priority is weighed against waiting time: ``CommandFairness/strictPriority``
    ///     (the default) or a bound on how often a waiting command is overtaken.
    public init(label: String? = nil, ordering: Ordering = .oneAtATime, fairness: CommandFairness = .strictPriority) {
        engine = CommandEngine(label: label, fairness: fairness)
        self.ordering = ordering
    }

    /// Creates an empty queue that runs up to `width` operations at once.
    ///
    /// Each free slot goes to the most urgent waiting operation, first come first served within a
    /// priority (see "Width" in ``CommandQueue``). A width of 1 is the queue that
    /// ``init(label:ordering:fairness:)`` makes.
    /// - Parameters:
    ///   - label: a name for diagnostics and deadlock reports.
    ///   - width: how many operations may run at once: 1 or more.
    ///   - ordering: what the queue keeps in order (see ``Ordering``).
    ///   - fairness: how priority is weighed against waiting time, as for the other initializer.
    /// - Throws: ``QueueSafeValueError/invalidArgument(_:)`` if `width` is below 1.
    public convenience init(
        label: String? = nil, width: Int, ordering: Ordering = .oneAtATime, fairness: CommandFairness = .strictPriority
    ) throws(QueueSafeValueError) {
        try Self.checkWidth(width)
        self.init(label: label, ordering: ordering, fairness: fairness)
        if width > 1 { engine.setWidth(width) }
    }

    // MARK: Width

    /// How many operations may run at once: 1 unless the queue was made with
    /// ``init(label:width:ordering:fairness:)`` or changed with ``setWidth(_:)``.
    public var width: Int { engine.width }

    /// Changes how many operations may run at once, while the queue runs.
    ///
    /// A larger width starts the most urgent waiting operations at once, as many as it frees slots
    /// for. A smaller one stops nothing: the running operations finish, and no more start until
    /// fewer than `width` run. Operations keep their places either way.
    ///
    /// An operation keeps the promise it started with: one that started on a queue of width 1 runs
    /// alone until it ends, so a width raised from 1 starts the waiting operations when it ends;
    /// and operations that started side by side go on side by side when the width drops to 1.
    /// - Throws: ``QueueSafeValueError/invalidArgument(_:)`` if `width` is below 1; the width then
    ///   stays as it was.
    public func setWidth(_ width: Int) throws(QueueSafeValueError) {
        try Self.checkWidth(width)
        engine.setWidth(width)
    }

    /// Refuses a width below 1.
    private static func checkWidth(_ width: Int) throws(QueueSafeValueError) {
        guard width >= 1 else { throw .invalidArgument("a CommandQueue's width must be 1 or more, not \(width)") }
    }

    // MARK: Enqueue from anywhere

    /// Adds `operation` to the queue and returns the task that runs it.
    ///
    /// The operation's place is taken before this method returns. It starts once every operation of
    /// higher priority and every earlier one of the same priority has ended (``Ordering/oneAtATime``)
    /// or started (``Ordering/startsInOrder``); on a queue of ``width`` n, once it is first in that
    /// order and one of the n slots is free. Like `Task {}`, it runs isolated to the caller's
    /// actor, if the caller has one (see ``CommandQueue``).
    /// - Returns: a task whose value is the operation's result. It throws what the operation throws,
    ///   or ``QueueSafeValueError/cancelled`` if it was cancelled (the task, or by ``cancelAll()``)
    ///   or discarded (``Policy/discardable``) before the operation started — then the operation
    ///   never runs.
    @inlinable
    @discardableResult
    public func enqueue<T: Sendable>(
        priority: CommandPriority = .medium,
        policy: Policy = .standard,
        @_inheritActorContext @_implicitSelfCapture _ operation: sending @escaping @isolated(any) () async throws -> T,
        file: StaticString = #fileID, line: UInt = #line
    ) -> Task<T, any Error> {
        schedule(priority: priority, policy: policy, site: CallSite(file: file, line: line), operation).task
    }

    /// Adds `operation` to the queue; when its turn comes it runs isolated to `actor`. On a
    /// ``Ordering/oneAtATime`` queue the turn is held for the whole operation, so unlike an actor's
    /// own mailbox, operations begin **and end** in order even when they suspend.
    /// - Returns: a task as for ``enqueue(priority:policy:_:file:line:)``.
    @inlinable
    @discardableResult
    public func enqueue<A: Actor, T: Sendable>(
        isolatedTo actor: A,
        priority: CommandPriority = .medium,
        policy: Policy = .standard,
        _ operation: @escaping @Sendable (isolated A) async throws -> T,
        file: StaticString = #fileID, line: UInt = #line
    ) -> Task<T, any Error> {
        schedule(priority: priority, policy: policy, site: CallSite(file: file, line: line), isolation: actor) {
            try await operation(actor)
        }.task
    }

    /// Adds `operation` to the queue; when its turn comes it runs on the main actor.
    /// - Returns: a task as for ``enqueue(priority:policy:_:file:line:)``.
    @inlinable
    @discardableResult
    public func enqueueOnMainActor<T: Sendable>(
        priority: CommandPriority = .medium,
        policy: Policy = .standard,
        _ operation: sending @escaping @MainActor () async throws -> T,
        file: StaticString = #fileID, line: UInt = #line
    ) -> Task<T, any Error> {
        schedule(
            priority: priority, policy: policy, site: CallSite(file: file, line: line), isolation: MainActor.shared
        ) { try await operation() }.task
    }

    /// Adds `operation` to the queue, as ``enqueue(priority:policy:_:file:line:)`` does, and returns a handle
    /// to it: its task, where it stands, and a way to change its priority or cancel it while it
    /// waits (see ``QueuedOperation``).
    /// - Returns: the operation's handle. Its `value` (and its `task`'s) is the operation's result,
    ///   or throws as the task ``enqueue(priority:policy:_:file:line:)`` returns does.
    @inlinable
    @discardableResult
    public func submit<T: Sendable>(
        priority: CommandPriority = .medium,
        policy: Policy = .standard,
        @_inheritActorContext @_implicitSelfCapture _ operation: sending @escaping @isolated(any) () async throws -> T,
        file: StaticString = #fileID, line: UInt = #line
    ) -> QueuedOperation<T> {
        let progress = OperationProgress(priority: priority)
        let (task, waiter) = schedule(
            priority: priority, policy: policy, site: CallSite(file: file, line: line), progress: progress, operation)
        return QueuedOperation(task: task, engine: engine, waiter: waiter, progress: progress)
    }

    /// Like ``enqueue(priority:policy:_:file:line:)``, but the operation gives up if it has not started within
    /// `timeout` (counted from this call): its task then throws
    /// ``QueueSafeValueError/timedOut(_:)`` with a snapshot of the queue, and the operation never
    /// runs. Once it has started, the timeout no longer applies. `.never` waits forever; a negative
    /// interval is refused: the task throws ``QueueSafeValueError/invalidArgument(_:)`` and the
    /// operation never runs.
    @inlinable
    @discardableResult
    public func enqueue<T: Sendable>(
        priority: CommandPriority = .medium,
        policy: Policy = .standard,
        timeout: DispatchTimeInterval,
        @_inheritActorContext @_implicitSelfCapture _ operation: sending @escaping @isolated(any) () async throws -> T,
        file: StaticString = #fileID, line: UInt = #line
    ) -> Task<T, any Error> {
        let deadline: DispatchTime?
        do { deadline = try commandDeadline(after: timeout) } catch { return Task { throw error } }
        return schedule(
            priority: priority, policy: policy, site: CallSite(file: file, line: line), deadline: deadline, operation
        ).task
    }

    /// ``enqueue(priority:policy:timeout:_:file:line:)-(_,_,DispatchTimeInterval,_,_,_)`` with a `Duration`, kept to
    /// the nanosecond; one beyond what a `DispatchTimeInterval` holds waits as long as the largest one.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @_disfavoredOverload  // `.seconds(2)` names both types: it keeps meaning a DispatchTimeInterval
    @inlinable
    @discardableResult
    public func enqueue<T: Sendable>(
        priority: CommandPriority = .medium,
        policy: Policy = .standard,
        timeout: Duration,
        @_inheritActorContext @_implicitSelfCapture _ operation: sending @escaping @isolated(any) () async throws -> T,
        file: StaticString = #fileID, line: UInt = #line
    ) -> Task<T, any Error> {
        enqueue(
            priority: priority, policy: policy, timeout: DispatchTimeInterval(timeout: timeout), operation, file: file,
            line: line)
    }

    // MARK: Await the result

    /// Adds `operation` to the queue and waits for its result. Like
    /// ``enqueue(priority:policy:_:file:line:)``, the operation inherits the caller's isolation.
    ///
    /// Cancelling the calling task cancels the operation's task (it leaves the queue if it has not
    /// started).
    /// - Throws: what the operation throws; ``QueueSafeValueError/cancelled`` if it was cancelled or
    ///   discarded before it started, and at once, without enqueuing, if the calling task was
    ///   cancelled before the call (the operation never runs); ``QueueSafeValueError/reentrantAccess``
    ///   at once, without enqueuing, when called from inside an operation of this same
    ///   ``Ordering/oneAtATime`` queue (it would wait for itself); ``QueueSafeValueError/deadlock(_:)``
    ///   if the operation, while it waits for its turn or for a value, would close a wait cycle
    ///   through the calling task (which waits for it): for example, the caller holds a value
    ///   that the queue's running operation waits for.
    @inlinable
    public func perform<T: Sendable>(
        priority: CommandPriority = .medium,
        policy: Policy = .standard,
        @_inheritActorContext @_implicitSelfCapture _ operation: sending @escaping @isolated(any) () async throws -> T,
        file: StaticString = #fileID, line: UInt = #line
    ) async throws -> T {
        try await awaitOperation { _, awaiters in
            schedule(
                priority: priority, policy: policy, site: CallSite(file: file, line: line), awaiters: awaiters,
                operation)
        }
    }

    /// Like ``perform(priority:policy:_:file:line:)``, but the operation gives up if it has not started within
    /// `timeout`: then this throws ``QueueSafeValueError/timedOut(_:)`` and the operation never runs.
    /// A negative `timeout` throws ``QueueSafeValueError/invalidArgument(_:)`` without enqueuing.
    @inlinable
    public func perform<T: Sendable>(
        priority: CommandPriority = .medium,
        policy: Policy = .standard,
        timeout: DispatchTimeInterval,
        @_inheritActorContext @_implicitSelfCapture _ operation: sending @escaping @isolated(any) () async throws -> T,
        file: StaticString = #fileID, line: UInt = #line
    ) async throws -> T {
        try await awaitOperation(timeout: timeout) { deadline, awaiters in
            schedule(
                priority: priority, policy: policy, site: CallSite(file: file, line: line), deadline: deadline,
                awaiters: awaiters, operation)
        }
    }

    /// ``perform(priority:policy:timeout:_:file:line:)-(_,_,DispatchTimeInterval,_,_,_)`` with a `Duration`, kept to
    /// the nanosecond; one beyond what a `DispatchTimeInterval` holds waits as long as the largest one.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @_disfavoredOverload  // `.seconds(2)` names both types: it keeps meaning a DispatchTimeInterval
    @inlinable
    public func perform<T: Sendable>(
        priority: CommandPriority = .medium,
        policy: Policy = .standard,
        timeout: Duration,
        @_inheritActorContext @_implicitSelfCapture _ operation: sending @escaping @isolated(any) () async throws -> T,
        file: StaticString = #fileID, line: UInt = #line
    ) async throws -> T {
        let interval = DispatchTimeInterval(timeout: timeout)
        return try await perform(
            priority: priority, policy: policy, timeout: interval, operation, file: file, line: line)
    }

    /// Like ``perform(priority:policy:_:file:line:)``, with the operation isolated to `actor`.
    @inlinable
    public func perform<A: Actor, T: Sendable>(
        isolatedTo actor: A,
        priority: CommandPriority = .medium,
        policy: Policy = .standard,
        _ operation: @escaping @Sendable (isolated A) async throws -> T,
        file: StaticString = #fileID, line: UInt = #line
    ) async throws -> T {
        try await awaitOperation { _, awaiters in
            schedule(
                priority: priority, policy: policy, site: CallSite(file: file, line: line), isolation: actor,
                awaiters: awaiters
            ) { try await operation(actor) }
        }
    }

    /// Like ``perform(priority:policy:_:file:line:)``, with the operation on the main actor.
    @inlinable
    public func performOnMainActor<T: Sendable>(
        priority: CommandPriority = .medium,
        policy: Policy = .standard,
        _ operation: sending @escaping @MainActor () async throws -> T,
        file: StaticString = #fileID, line: UInt = #line
    ) async throws -> T {
        try await awaitOperation { _, awaiters in
            schedule(
                priority: priority, policy: policy, site: CallSite(file: file, line: line), isolation: MainActor.shared,
                awaiters: awaiters
            ) { try await operation() }
        }
    }

    // MARK: Cancellation

    /// Cancels every operation enqueued so far: pending ones leave the queue and never start (their
    /// tasks are cancelled and throw ``QueueSafeValueError/cancelled``), and the running one's task
    /// is cancelled (it sees `Task.isCancelled` and ends when it chooses). Operations enqueued
    /// afterwards run normally, after the running one has ended.
    ///
    /// The pending operations are taken out of the queue before the running one is cancelled, so its
    /// end never hands the turn to work that was meant to be cancelled.
    ///
    /// On a ``Ordering/startsInOrder`` queue an operation leaves the queue as it starts: operations
    /// that have started are not cancelled (cancel their tasks yourself).
    public func cancelAll() {
        engine.cancelAll()
    }

    /// What holds the queue and what waits in it, right now: whether an operation runs, and how
    /// many wait per priority. Never waits for the running operation.
    public var diagnostics: QueueDiagnostics {
        engine.diagnostics
    }

    // MARK: Internals

    /// An operation's place in the queue, and what its task needs to know about it.
    @usableFromInline
    struct Placement: Sendable {
        @usableFromInline let engine: CommandEngine
        @usableFromInline let waiter: AwaitingWaiter
        @usableFromInline let grantedAtOnce: Bool
        @usableFromInline let discardable: Bool
        @usableFromInline let startsInOrder: Bool
        /// The tasks that await the operation's result (`perform`), for deadlock detection: see
        /// ``OperationAwaiters``. Empty for `enqueue`.
        @usableFromInline let awaiters: [Int]
        /// Where the operation stands, for its handle (`submit`); `nil` otherwise.
        @usableFromInline let progress: OperationProgress?

        @inlinable
        init(
            engine: CommandEngine, waiter: AwaitingWaiter, grantedAtOnce: Bool, discardable: Bool,
            startsInOrder: Bool, awaiters: [Int], progress: OperationProgress?
        ) {
            (self.engine, self.waiter, self.grantedAtOnce) = (engine, waiter, grantedAtOnce)
            (self.discardable, self.startsInOrder, self.awaiters) = (discardable, startsInOrder, awaiters)
            self.progress = progress
        }
    }

    /// `perform`'s way in: refuses at once in a cancelled task (then the operation never runs, as
    /// for `value.async`), inside an operation of this same one-at-a-time queue (it would wait for
    /// itself) and on a negative `timeout`; otherwise has `schedule` place the operation, with its
    /// deadline and the tasks that await it, and waits for its result. Cancelling the calling task
    /// cancels the operation's.
    @inlinable
    func awaitOperation<T: Sendable>(
        timeout: DispatchTimeInterval? = nil,
        _ schedule: (_ deadline: DispatchTime?, _ awaiters: [Int]) -> (task: Task<T, any Error>, waiter: AwaitingWaiter)
    ) async throws -> T {
        if Task.isCancelled { throw QueueSafeValueError.cancelled }
        if engine.isInsideRunningSection() || engine.isInsideOperationSlot() {
            throw QueueSafeValueError.reentrantAccess
        }
        let task = schedule(try commandDeadline(after: timeout), OperationAwaiters.forOperationAwaitedByCurrentTask())
            .task
        return try await withTaskCancellationHandler {
            try await task.value
        } onCancel: {
            task.cancel()
        }
    }

    /// Takes the place of an operation that inherited its isolation, and starts the task that waits
    /// for the turn and runs it: returns the task and the operation's waiter (for its handle). The
    /// operation is called from a non-escaping closure, so apart from the task nothing is allocated
    /// for it.
    @inlinable
    func schedule<T: Sendable>(
        priority: CommandPriority,
        policy: Policy,
        site: CallSite,
        deadline: DispatchTime? = nil,
        awaiters: [Int] = [],
        progress: OperationProgress? = nil,
        _ operation: @escaping @isolated(any) () async throws -> T
    ) -> (task: Task<T, any Error>, waiter: AwaitingWaiter) {
        let isolation = operation.isolation
        // Unsafe: `operation` is the caller's `sending` closure; only this one task ever calls it,
        // once, which the compiler cannot see through the closure that captures it.
        nonisolated(unsafe) let operation = operation
        return place(
            priority: priority, policy: policy, site: site, deadline: deadline, awaiters: awaiters, progress: progress
        ) {
            placement in
            SyncPoints.throwingTask {
                try await Self.takeTurn(placement, deadline: deadline, isolation: isolation) { try await operation() }
            }
        }
    }

    /// Like the other `schedule`, for an operation whose isolation the caller names: `body` runs on
    /// `isolation` with no hop of its own.
    @inlinable
    func schedule<T: Sendable>(
        priority: CommandPriority,
        policy: Policy,
        site: CallSite,
        isolation: (any Actor)?,
        awaiters: [Int] = [],
        _ body: nonisolated(nonsending) @escaping () async throws -> T
    ) -> (task: Task<T, any Error>, waiter: AwaitingWaiter) {
        // Unsafe: `body` may hold the caller's `sending` operation; only this one task ever calls
        // it, once, which the compiler cannot see through the closure that captures it.
        nonisolated(unsafe) let body = body
        return place(priority: priority, policy: policy, site: site, awaiters: awaiters) { placement in
            SyncPoints.throwingTask { try await Self.takeTurn(placement, deadline: nil, isolation: isolation, body) }
        }
    }

    /// Takes the operation's place now, synchronously, then starts its task (`start`, given the
    /// placement) and attaches it to the operation's waiter.
    @inlinable
    func place<T: Sendable>(
        priority: CommandPriority, policy: Policy, site: CallSite, deadline: DispatchTime? = nil, awaiters: [Int],
        progress: OperationProgress? = nil, start: (Placement) -> Task<T, any Error>
    ) -> (task: Task<T, any Error>, waiter: AwaitingWaiter) {
        let discardable = policy == .discardable
        let (waiter, grantedAtOnce) = engine.enqueueOperation(
            priority: priority, site: site, discardable: discardable, handled: progress != nil, deadline: deadline)
        let task = start(
            Placement(
                engine: engine, waiter: waiter, grantedAtOnce: grantedAtOnce, discardable: discardable,
                startsInOrder: ordering == .startsInOrder, awaiters: awaiters, progress: progress))
        engine.attach(task, to: waiter)
        return (task, waiter)
    }

    /// The body of an operation's task, on `isolation` throughout: waits for the turn (unless it was
    /// granted at once), then runs `body`, holding the turn (one at a time) or giving it up as it
    /// starts — on the operation's actor, so the next operation can start only once `body` suspends
    /// or returns. Inlined into the task, so there is no intermediate async frame, and no
    /// suspension at all when the turn has come by the time the task starts, apart from the hop to
    /// the operation's actor, if it has one.
    @inlinable
    @inline(__always)
    static func takeTurn<T: Sendable>(
        _ placement: Placement,
        deadline: DispatchTime?,
        isolation: isolated (any Actor)?,
        _ body: nonisolated(nonsending) () async throws -> T
    ) async throws -> T {
        guard !placement.awaiters.isEmpty else {
            return try await waitAndRun(placement, deadline: deadline, isolation: isolation, body)
        }
        // Awaited by `perform`: the awaiting tasks wait for whatever this task waits for.
        let awaiters = OperationAwaiters(task: currentTaskID(), awaiters: placement.awaiters)
        return try await OperationAwaiters.current.withValue(awaiters) {
            _ = isolation  // keeps the closure on the operation's executor
            return try await waitAndRun(placement, deadline: deadline, isolation: isolation, body)
        }
    }

    /// ``takeTurn(_:deadline:isolation:_:)`` once the task-local of the operation's awaiters is set.
    @inlinable
    @inline(__always)
    static func waitAndRun<T: Sendable>(
        _ placement: Placement,
        deadline: DispatchTime?,
        isolation: isolated (any Actor)?,
        _ body: nonisolated(nonsending) () async throws -> T
    ) async throws -> T {
        let engine = placement.engine
        if !placement.grantedAtOnce {
            // This task has run nothing of its own yet: see `waitForTurn`.
            try await engine.waitForTurn(
                placement.waiter, deadline: deadline, holdsNothing: placement.awaiters.isEmpty, startedLater: true)
        }
        if let progress = placement.progress {
            // With a handle, it begins through the lock: a `cancel()` may have given its turn back.
            guard engine.beginOperation(placement.waiter, progress: progress) else {
                throw QueueSafeValueError.cancelled
            }
        } else if Task.isCancelled || (placement.discardable && !engine.beginDiscardable(placement.waiter)) {
            // Granted, but cancelled or discarded before the operation began: it never starts.
            engine.releaseOperation(placement.waiter)
            throw QueueSafeValueError.cancelled
        }
        defer { if let progress = placement.progress { engine.operationFinished(progress) } }
        if placement.startsInOrder {
            engine.releaseOperation(placement.waiter)
            return try await body()
        }
        if engine.holdsSlot(placement.waiter) {
            // A queue of width above 1: the operation holds one of its slots.
            return try await engine.runHeldOperationSlot(placement.waiter, isolation: isolation, body)
        }
        return try await engine.runHeldTaskSection(.operation, isolation: isolation, body)
    }
}
