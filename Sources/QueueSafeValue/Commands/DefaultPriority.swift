import Dispatch

// The default priority: `value.wait.get()`, `try value.wait.withLock { … }`, `try await
// value.async.get()` — a command issued on a schedule without naming a priority runs at
// `CommandPriority.default` (`.medium`), in the same order as every other command. The explicit
// forms (`value.wait.highestPriority.get()`, `.priority(_:)`) are unchanged.

extension CommandPriority {
    /// The priority of a command issued without one (`value.wait.get()`): `.medium`, so that
    /// explicit priorities can go either side of it.
    @inlinable public static var `default`: CommandPriority { .medium }
}

extension WaitSchedule {
    /// Commands of ``CommandPriority/default`` priority.
    @inlinable
    public var defaultPriority: WaitCommands<Value> { priority(.default) }

    /// `withLock` at the default priority: runs `body` with in-place access to the value as the
    /// critical section, on the calling thread, and returns what it returns.
    /// - Throws: ``QueueSafeValueError`` if the command did not run.
    @inlinable
    public func withLock<R>(_ body: (inout sending Value) -> sending R) throws(QueueSafeValueError) -> sending R {
        try defaultPriority.withLock(body)
    }

    /// `withLock` at the default priority, for a closure that throws.
    /// - Throws: the closure's error, or a ``QueueSafeValueError`` if the command did not run.
    @inlinable
    public func withLock<R, E: Error>(_ body: (inout sending Value) throws(E) -> sending R) throws -> sending R {
        try defaultPriority.withLock(body)
    }
}

extension WaitSchedule where Value: Sendable {
    /// Returns a copy of the value, read in its turn at the default priority. See ``WaitCommands/get()``.
    @inlinable
    public func get() -> Result<Value, QueueSafeValueError> {
        defaultPriority.get()
    }

    /// Replaces the value in its turn at the default priority. See ``WaitCommands/set(newValue:)``.
    @inlinable
    @discardableResult
    public func set(newValue: Value) -> Result<Value, QueueSafeValueError> {
        defaultPriority.set(newValue: newValue)
    }

    /// `withValue` at the default priority: runs `body` with the value (read-only, exclusive).
    /// - Throws: ``QueueSafeValueError`` if the command did not run.
    @inlinable
    public func withValue<R>(_ body: (Value) -> R) throws(QueueSafeValueError) -> R {
        try defaultPriority.withValue(body)
    }

    /// A shared read at the default priority. See ``WaitCommands/read(_:)``.
    @inlinable
    public func read<R>(_ body: (Value) -> R) -> Result<R, QueueSafeValueError> {
        defaultPriority.read(body)
    }
}

extension AwaitSchedule {
    /// Commands of ``CommandPriority/default`` priority.
    @inlinable
    public var defaultPriority: AwaitCommands<Value> { priority(.default) }

    /// `withLock` at the default priority: in-place access across the closure's suspension points.
    /// - Throws: ``QueueSafeValueError`` if the command did not run.
    @inlinable
    public func withLock<R>(
        isolation: isolated (any Actor)? = #isolation,
        _ body: nonisolated(nonsending) (inout sending Value) async -> sending R
    ) async throws(QueueSafeValueError) -> R {
        try await defaultPriority.withLock(isolation: isolation, body)
    }

    /// `withLock` at the default priority, for a closure that throws.
    /// - Throws: the closure's error, or a ``QueueSafeValueError`` if the command did not run.
    @inlinable
    public func withLock<R, E: Error>(
        isolation: isolated (any Actor)? = #isolation,
        _ body: nonisolated(nonsending) (inout sending Value) async throws(E) -> sending R
    ) async throws -> R {
        try await defaultPriority.withLock(isolation: isolation, body)
    }
}

extension AwaitSchedule where Value: Sendable {
    /// Returns a copy of the value, read in its turn at the default priority.
    /// - Throws: as ``AwaitCommands/get(isolation:)``.
    @inlinable
    public func get(isolation: isolated (any Actor)? = #isolation) async throws(QueueSafeValueError) -> Value {
        try await defaultPriority.get(isolation: isolation)
    }

    /// Replaces the value in its turn at the default priority and returns the value now stored.
    @inlinable
    @discardableResult
    public func set(
        newValue: Value,
        isolation: isolated (any Actor)? = #isolation
    ) async throws(QueueSafeValueError) -> Value {
        try await defaultPriority.set(newValue: newValue, isolation: isolation)
    }

    /// A shared read at the default priority. See ``AwaitCommands/read(isolation:_:)``.
    @inlinable
    public func read<R>(
        isolation: isolated (any Actor)? = #isolation,
        _ body: nonisolated(nonsending) (Value) async -> R
    ) async throws(QueueSafeValueError) -> R {
        try await defaultPriority.read(isolation: isolation, body)
    }
}

extension DispatchSchedule where Value: Sendable {
    /// Commands of ``CommandPriority/default`` priority.
    @inlinable
    public var defaultPriority: DispatchCommands<Value> { priority(.default) }

    /// `withLock` at the default priority: runs `body` on the queue with in-place access, then
    /// delivers its outcome to `completion` on the same queue.
    public func withLock<R: Sendable>(
        _ body: @escaping @Sendable (inout Value) throws -> R,
        completion: @escaping @Sendable (Result<R, any Error>) -> Void
    ) {
        defaultPriority.withLock(body, completion: completion)
    }
}
