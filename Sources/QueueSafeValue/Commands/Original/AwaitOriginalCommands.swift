import Dispatch

// The original library's grammar on the awaiting schedule: `get`, `set`, `map`, which throw (this
// schedule came after the original library). The modern pair (`withLock`, `read`) is in Modern/.

/// The original library's commands, which hand the value (or a copy of it) to the caller's closures
/// and return it: they need a `Sendable` value. For any value, use `withLock`.
extension AwaitSchedule where Value: Sendable {
    /// Returns a copy of the value, read in its turn.
    @inlinable
    public func get(isolation: isolated (any Actor)? = #isolation, file: StaticString = #fileID, line: UInt = #line)
        async throws(QueueSafeValueError) -> Value
    {
        try await engine.withAwaitingAccess(
            priority: commandPriority, site: CallSite(file: file, line: line), timeout: timeout, mutates: false,
            cancellable: cancellable, isolation: isolation
        ) { $0 }
    }

    /// Replaces the value in its turn and returns the value now stored.
    @inlinable
    @discardableResult
    public func set(
        newValue: Value,
        isolation: isolated (any Actor)? = #isolation,
        file: StaticString = #fileID, line: UInt = #line
    ) async throws(QueueSafeValueError) -> Value {
        try await engine.withAwaitingAccess(
            priority: commandPriority, site: CallSite(file: file, line: line), timeout: timeout,
            cancellable: cancellable, isolation: isolation
        ) { value in
            value = newValue
            return value
        }
    }

    /// Gives `accessClosure` in-place access to the value as a critical section that lasts across
    /// the closure's suspension points, and returns the value after it.
    @inlinable
    @discardableResult
    public func set(
        isolation: isolated (any Actor)? = #isolation,
        _ accessClosure: nonisolated(nonsending) (inout Value) async -> Void,
        file: StaticString = #fileID, line: UInt = #line
    ) async throws(QueueSafeValueError) -> Value {
        try await engine.withAwaitingAccess(
            priority: commandPriority, site: CallSite(file: file, line: line), timeout: timeout,
            cancellable: cancellable, isolation: isolation
        ) { value in
            await accessClosure(&value)
            return value
        }
    }

    /// Transforms the value inside a critical section that lasts across the transform's suspension
    /// points, and returns the result.
    @inlinable
    public func map<MappedValue>(
        isolation: isolated (any Actor)? = #isolation,
        _ transform: nonisolated(nonsending) (Value) async -> MappedValue,
        file: StaticString = #fileID, line: UInt = #line
    ) async throws(QueueSafeValueError) -> MappedValue {
        try await engine.withAwaitingAccess(
            priority: commandPriority, site: CallSite(file: file, line: line), timeout: timeout, mutates: false,
            cancellable: cancellable, isolation: isolation
        ) { value in
            return await transform(value)
        }
    }
}
