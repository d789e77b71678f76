import Dispatch

// One-line mistakes a user makes with the `value.{schedule}.{priority}.{command}` grammar, each
// turned into a compile error that names the real problem instead of a type mismatch somewhere
// else. Every declaration here is unavailable: it is never called, it only steers the diagnostic.
// The list of mistakes and the diagnostic each must get is checked by `.ci/mistakes`.
//
// The overload solver ranks an unavailable declaration below every available one, so none of these
// can take a call that the real commands accept. Each is declared once per schedule: on
// `WaitScheduling` (the blocking schedule and the synced container), `AwaitSchedule` and
// `DispatchScheduling` (the dispatch schedule and the asynced container).

private let unreachable = "an unavailable declaration is never called"

extension QueueSafeValue {
    /// Unavailable: a command is issued on a schedule, which says how the caller waits for its turn.
    @available(
        *, unavailable,
        message:
            "choose a schedule first: 'try value.wait.withLock { … }' blocks the calling thread, 'try await value.async.withLock { … }' suspends the task, 'value.async(performIn: queue).withLock { … }' runs on the queue"
    )
    public func withLock<R>(_ body: (inout Value) throws -> R) -> R { fatalError(unreachable) }

    /// Unavailable: a command is issued on a schedule, which says how the caller waits for its turn.
    @available(
        *, unavailable,
        message:
            "choose a schedule first: 'try value.wait.read { … }' blocks the calling thread, 'try await value.async.read { … }' suspends the task, 'value.async(performIn: queue).read { … }' runs on the queue"
    )
    public func read<R>(_ body: (Value) throws -> R) -> R { fatalError(unreachable) }

    /// Unavailable: a command is issued on a schedule, which says how the caller waits for its turn.
    @available(
        *, unavailable,
        message:
            "choose a schedule first: 'value.wait.get()' blocks the calling thread, 'try await value.async.get()' suspends the task, 'value.async(performIn: queue).get { … }' runs on the queue"
    )
    public func get() -> Value { fatalError(unreachable) }

    /// Unavailable: a command is issued on a schedule, which says how the caller waits for its turn.
    @available(
        *, unavailable,
        message:
            "choose a schedule first: 'value.wait.set { … }' blocks the calling thread, 'try await value.async.set { … }' suspends the task, 'value.async(performIn: queue).set { … }' runs on the queue"
    )
    public func set(_ body: (inout Value) throws -> Void) { fatalError(unreachable) }

    /// Unavailable: a command is issued on a schedule, which says how the caller waits for its turn.
    @available(
        *, unavailable,
        message:
            "choose a schedule first: 'value.wait.set(newValue: x)' blocks the calling thread, 'try await value.async.set(newValue: x)' suspends the task, 'value.async(performIn: queue).set(newValue: x)' runs on the queue"
    )
    public func set(newValue: Value) { fatalError(unreachable) }

    /// Unavailable: the schedule comes first, then the priority.
    @available(
        *, unavailable,
        message:
            "choose the schedule first, then the priority: 'value.wait.highestPriority.set { … }', 'value.async.highestPriority…', 'value.async(performIn: queue).highestPriority…'"
    )
    public var highestPriority: QueueSafeValue<Value> { fatalError(unreachable) }

    /// Unavailable: the schedule comes first, then the priority.
    @available(
        *, unavailable,
        message:
            "choose the schedule first, then the priority: 'value.wait.lowestPriority.get()', 'value.async.lowestPriority…', 'value.async(performIn: queue).lowestPriority…'"
    )
    public var lowestPriority: QueueSafeValue<Value> { fatalError(unreachable) }

    /// Unavailable: the schedule comes first, then the priority.
    @available(
        *, unavailable,
        message:
            "choose the schedule first, then the priority: 'value.wait.priority(.high).set { … }', 'value.async.priority(.high)…', 'value.async(performIn: queue).priority(.high)…'"
    )
    public func priority(_ priority: CommandPriority) -> QueueSafeValue<Value> { fatalError(unreachable) }

    /// Unavailable: the dispatch schedule has no timeout, whatever its type.
    @available(
        *, unavailable,
        message:
            "the dispatch schedule has no timeout: its commands wait without holding a thread or a task; use 'value.async(timeout:)' (awaiting) or 'value.wait(timeout:)' (blocking) to bound a wait"
    )
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @_disfavoredOverload  // `.seconds(1)` keeps meaning a DispatchTimeInterval, as everywhere
    public func async(performIn queue: DispatchQueue, timeout: Duration) -> DispatchSchedule<Value> {
        fatalError(unreachable)
    }

    /// Unavailable: a timeout is a `DispatchTimeInterval` or a `Duration`.
    @available(
        *, unavailable,
        message:
            "a timeout is a DispatchTimeInterval or a Duration, not a number: write 'wait(timeout: .seconds(2))' or '.milliseconds(500)'"
    )
    public func wait(timeout seconds: Double) -> WaitSchedule<Value> { fatalError(unreachable) }

    /// Unavailable: a timeout is a `DispatchTimeInterval` or a `Duration`.
    @available(
        *, unavailable,
        message:
            "a timeout is a DispatchTimeInterval or a Duration, not a number: write 'async(timeout: .seconds(2))' or '.milliseconds(500)'"
    )
    public func async(timeout seconds: Double) -> AwaitSchedule<Value> { fatalError(unreachable) }

    /// Unavailable: the dispatch schedule waits without holding a thread, so it has no timeout.
    @available(
        *, unavailable,
        message:
            "the dispatch schedule has no timeout: its commands wait without holding a thread or a task; use 'value.async(timeout:)' (awaiting) or 'value.wait(timeout:)' (blocking) to bound a wait"
    )
    public func async(performIn queue: DispatchQueue, timeout: DispatchTimeInterval) -> DispatchSchedule<Value> {
        fatalError(unreachable)
    }
}

extension WaitScheduling {
    /// Unavailable: a blocking `withLock` returns its result to the caller.
    @available(
        *, unavailable,
        message:
            "the blocking schedule returns the result: write 'let result = try value.wait.withLock { … }'; a completion is the dispatch schedule's, 'value.async(performIn: queue).withLock(_:completion:)'"
    )
    public func withLock<R>(_ body: (inout Value) throws -> R, completion: (Result<R, any Error>) -> Void) {
        fatalError(unreachable)
    }
}

extension AwaitSchedule {
    /// Unavailable: the awaiting schedule reads with `read` (shared) or `withLock` (exclusive).
    @available(
        *, unavailable,
        message:
            "the awaiting schedule has no withValue: write 'try await value.async.read { … }' to read (shared with other reads) or 'withLock { … }' to hold the value alone"
    )
    public func withValue<R>(_ body: (Value) throws -> R) async throws -> R { fatalError(unreachable) }
}

extension DispatchScheduling where Value: Sendable {
    /// Unavailable: a throwing closure's error needs a completion to go to.
    @available(
        *, unavailable,
        message:
            "a closure that throws needs a completion to receive its error: write 'withLock({ … }, completion: { result in … })'"
    )
    public func withLock<R: Sendable>(_ body: @escaping @Sendable (inout Value) throws -> R) {
        fatalError(unreachable)
    }
}

extension DispatchScheduling where Value: Sendable {
    /// Unavailable: on the dispatch schedule the access closure's label is `accessClosure:`.
    @available(
        *, unavailable,
        message:
            "on the dispatch schedule the access closure is 'set(accessClosure:)', as in the original library, or a trailing closure: 'set { $0 += 1 }'"
    )
    public func set(completion accessClosure: @escaping @Sendable (inout Value) -> Void) { fatalError(unreachable) }
}

extension WaitScheduling {
    /// Unavailable: a blocking command's closure runs on the blocked thread and cannot await.
    @available(
        *, unavailable,
        message:
            "a blocking command's closure cannot await: in async code write 'try await value.async.withLock { … }', whose closure may await while it holds the value"
    )
    public func withLock<R>(_ body: (inout Value) async throws -> R) throws -> R { fatalError(unreachable) }
}

extension WaitScheduling where Value: Sendable {
    /// Unavailable: a blocking command's closure runs on the blocked thread and cannot await.
    @available(
        *, unavailable,
        message:
            "a blocking command's closure cannot await: in async code write 'try await value.async.transaction { … }', whose closure may await while it holds the value"
    )
    public func transaction<R>(_ body: (inout Value) async throws -> R) throws -> R { fatalError(unreachable) }

    /// Unavailable: a blocking command's closure runs on the blocked thread and cannot await.
    @available(
        *, unavailable,
        message:
            "a blocking command's closure cannot await: in async code write 'try await value.async.read { … }', whose closure may await while it holds the value"
    )
    public func read<R>(_ body: (Value) async throws -> R) throws -> R { fatalError(unreachable) }

    /// Unavailable: a blocking command's closure runs on the blocked thread and cannot await.
    @available(
        *, unavailable,
        message:
            "a blocking command's closure cannot await: in async code write 'try await value.async.set { … }', whose closure may await while it holds the value"
    )
    public func set(completion body: (inout Value) async -> Void) -> Result<Value, QueueSafeValueError> {
        fatalError(unreachable)
    }

    /// Unavailable: a blocking command's closure runs on the blocked thread and cannot await.
    @available(
        *, unavailable,
        message:
            "a blocking command's closure cannot await: in async code write 'try await value.async.map { … }', whose closure may await while it holds the value"
    )
    public func map<M>(_ transform: (Value) async -> M) -> Result<M, QueueSafeValueError> { fatalError(unreachable) }
}

extension DispatchScheduling where Value: Sendable {
    /// Unavailable: a dispatch command's closure runs as a block on its queue and cannot await.
    @available(
        *, unavailable,
        message:
            "a dispatch command's closure runs on the queue and cannot await: in async code write 'try await value.async.withLock { … }', whose closure may await while it holds the value"
    )
    public func withLock<R>(_ body: @escaping @Sendable (inout Value) async throws -> R) { fatalError(unreachable) }

    /// Unavailable: a dispatch command's closure runs as a block on its queue and cannot await.
    @available(
        *, unavailable,
        message:
            "a dispatch command's closure runs on the queue and cannot await: in async code write 'try await value.async.withLock { … }', whose closure may await while it holds the value"
    )
    public func withLock<R>(
        _ body: @escaping @Sendable (inout Value) async throws -> R,
        completion: @escaping @Sendable (Result<R, any Error>) -> Void
    ) { fatalError(unreachable) }

    /// Unavailable: a dispatch command's closure runs as a block on its queue and cannot await.
    @available(
        *, unavailable,
        message:
            "a dispatch command's closure runs on the queue and cannot await: in async code write 'try await value.async.set { … }', whose closure may await while it holds the value"
    )
    public func set(accessClosure: @escaping @Sendable (inout Value) async -> Void) { fatalError(unreachable) }
}
