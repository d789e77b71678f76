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

/// What issues blocking commands without naming a priority: a blocking schedule (`value.wait`,
/// `value.wait(timeout:)`) and a ``QueueSafeSyncedValue``. Every command of ``WaitCommands`` is
/// here, at ``CommandPriority/default`` (`value.wait.set { $0 += 1 }`): it forwards to
/// ``defaultPriority``, so its ordering, the thread it runs on and how it fails are the explicit
/// form's.
public protocol BlockingCommandIssuer {
    /// The type of the guarded value.
    associatedtype Value
    /// Commands of ``CommandPriority/default`` priority.
    var defaultPriority: WaitCommands<Value> { get }
}

extension WaitSchedule: BlockingCommandIssuer {
    /// Commands of ``CommandPriority/default`` priority.
    @inlinable
    public var defaultPriority: WaitCommands<Value> { priority(.default) }
}

extension QueueSafeSyncedValue: BlockingCommandIssuer {
    /// Commands of ``CommandPriority/default`` priority, with the container's timeout, if it has one.
    @inlinable
    public var defaultPriority: WaitCommands<Value> { priority(.default) }
}

extension BlockingCommandIssuer {
    /// `withLock` at the default priority: runs `body` with in-place access to the value as the
    /// critical section, on the calling thread, and returns what it returns. Every change it makes
    /// stays.
    /// - Throws: ``QueueSafeValueError`` if the command did not run.
    @inlinable
    public func withLock<R>(_ body: (inout sending Value) -> sending R) throws(QueueSafeValueError) -> sending R {
        try defaultPriority.withLock(body)
    }

    /// `withLock` at the default priority, for a closure that throws. **Changes the closure made
    /// before it threw stay**; ``transaction(_:)`` keeps none unless the closure returns.
    /// - Throws: the closure's error, or a ``QueueSafeValueError`` if the command did not run.
    @inlinable
    public func withLock<R, E: Error>(_ body: (inout sending Value) throws(E) -> sending R) throws -> sending R {
        try defaultPriority.withLock(body)
    }
}

extension BlockingCommandIssuer where Value: Sendable {
    /// `transaction` at the default priority: `body` changes a draft that replaces the value only if
    /// `body` returns; if it throws, the value is unchanged. See ``WaitCommands/transaction(_:)``.
    /// - Throws: the closure's error, or a ``QueueSafeValueError`` if the command did not run.
    @inlinable
    public func transaction<R, E: Error>(_ body: (inout Value) throws(E) -> R) throws -> R {
        try defaultPriority.transaction(body)
    }
}

extension BlockingCommandIssuer where Value: Sendable {
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
    /// Replaced by `read`; see the `withValue(_:)` of ``WaitCommands``.
    /// - Throws: ``QueueSafeValueError`` if the command did not run.
    @inlinable
    @available(
        *, deprecated, renamed: "read",
        message: "read answers the same way and shares the value with other reads; withLock holds it alone"
    )
    public func withValue<R>(_ body: (Value) -> R) throws(QueueSafeValueError) -> R {
        try defaultPriority.withValue(body)
    }

    /// A shared read at the default priority, on the calling thread (`try value.wait.read { $0.count }`).
    /// See ``WaitCommands/read(_:)-((Value)->R)->R``.
    /// - Throws: ``QueueSafeValueError`` if the read did not run; `body` was then not called.
    @inlinable
    public func read<R>(_ body: (Value) -> R) throws(QueueSafeValueError) -> R {
        try defaultPriority.read(body)
    }

    /// A shared read at the default priority, for a closure that throws: its error is rethrown after
    /// the read released its share.
    /// - Throws: the closure's error, or a ``QueueSafeValueError`` if the read did not run.
    @inlinable
    public func read<R, E: Error>(_ body: (Value) throws(E) -> R) throws -> R {
        try defaultPriority.read(body)
    }

    /// The default-priority shared read in its earlier shape, answering with a `Result`; kept so code
    /// written against it compiles. Write `try value.wait.read { … }`.
    @inlinable
    @_disfavoredOverload  // the throwing read wins wherever both fit; this one only where a Result is asked for
    @available(*, deprecated, message: "read throws now, as withLock does: write 'try value.wait.read { … }'")
    public func read<R>(_ body: (Value) -> R) -> Result<R, QueueSafeValueError> {
        defaultPriority.read(body)
    }

    /// `withValue` at the default priority, for a closure that throws. Replaced by `read`.
    /// - Throws: the closure's error, or a ``QueueSafeValueError`` if the command did not run.
    @inlinable
    @available(
        *, deprecated, renamed: "read",
        message: "read answers the same way and shares the value with other reads; withLock holds it alone"
    )
    public func withValue<R, E: Error>(_ body: (Value) throws(E) -> R) throws -> R {
        try defaultPriority.withValue(body)
    }

    /// A shared read with a manual completion at the default priority: the read holds its share
    /// until both `body` returned and `done()` was called. See ``WaitCommands/read(manualCompletion:)``.
    /// - Returns: `.success` once the read ended, or why it did not run (then `body` was not called).
    @inlinable
    @discardableResult
    public func read(
        manualCompletion body: (Value, @escaping CommandCompletionClosure) -> Void
    ) -> Result<Void, QueueSafeValueError> {
        defaultPriority.read(manualCompletion: body)
    }

    /// Runs `commandClosure` with the value as the critical section at the default priority, on the
    /// calling thread; on failure it is called with the error. See ``WaitCommands/get(completion:)``.
    @inlinable
    public func get(completion commandClosure: ((Result<Value, QueueSafeValueError>) -> Void)?) {
        defaultPriority.get(completion: commandClosure)
    }

    /// `get` with a manual completion at the default priority: the value stays exclusively held, and
    /// the caller blocked, until both the closure returned and `done()` was called.
    /// See ``WaitCommands/get(manualCompletion:)``.
    @inlinable
    public func get(
        manualCompletion commandClosure: (
            (Result<Value, QueueSafeValueError>, @escaping CommandCompletionClosure) -> Void
        )?
    ) {
        defaultPriority.get(manualCompletion: commandClosure)
    }

    /// Gives `accessClosure` in-place access to the value as the critical section at the default
    /// priority, on the calling thread (`value.wait.set { $0 += 1 }`). The closure does not run if
    /// the command fails; a discarded failure that would lose the update is reported to
    /// ``LostUpdates/handler``. See ``WaitCommands/set(completion:)``.
    /// - Returns: the value after the closure, or why the command did not run.
    @inlinable
    @discardableResult
    public func set(completion accessClosure: ((inout Value) -> Void)?) -> Result<Value, QueueSafeValueError> {
        defaultPriority.set(completion: accessClosure)
    }

    /// `set` with a manual completion at the default priority: the value stays exclusively held, and
    /// the caller blocked, until both the closure returned and `done()` was called.
    /// See ``WaitCommands/set(manualCompletion:)``.
    /// - Returns: the value when the command ended, or why it did not run.
    @inlinable
    @discardableResult
    public func set(
        manualCompletion accessClosure: ((inout Value, @escaping CommandCompletionClosure) -> Void)?
    ) -> Result<Value, QueueSafeValueError> {
        defaultPriority.set(manualCompletion: accessClosure)
    }

    /// Transforms the value inside the critical section at the default priority, on the calling
    /// thread. See ``WaitCommands/map(completion:)``.
    /// - Returns: the transformed value, or why the command did not run.
    @inlinable
    public func map<MappedValue>(
        completion commandClosure: ((Value) -> MappedValue)?
    ) -> Result<MappedValue, QueueSafeValueError> {
        defaultPriority.map(completion: commandClosure)
    }
}

extension AwaitSchedule {
    /// Commands of ``CommandPriority/default`` priority.
    @inlinable
    public var defaultPriority: AwaitCommands<Value> { priority(.default) }

    /// `withLock` at the default priority: in-place access across the closure's suspension points.
    /// Every change it makes stays.
    /// - Throws: ``QueueSafeValueError`` if the command did not run.
    @inlinable
    public func withLock<R>(
        isolation: isolated (any Actor)? = #isolation,
        _ body: nonisolated(nonsending) (inout sending Value) async -> sending R
    ) async throws(QueueSafeValueError) -> R {
        try await defaultPriority.withLock(isolation: isolation, body)
    }

    /// `withLock` at the default priority, for a closure that throws. **Changes the closure made
    /// before it threw stay**; `transaction(isolation:_:)` keeps none unless the closure returns.
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
    /// `transaction` at the default priority: `body` changes a draft, across its suspension points,
    /// that replaces the value only if `body` returns. See ``AwaitCommands/transaction(isolation:_:)``.
    /// - Throws: the closure's error (the value is unchanged), or a ``QueueSafeValueError`` if the
    ///   command did not run.
    @inlinable
    public func transaction<R, E: Error>(
        isolation: isolated (any Actor)? = #isolation,
        _ body: nonisolated(nonsending) (inout Value) async throws(E) -> R
    ) async throws -> R {
        try await defaultPriority.transaction(isolation: isolation, body)
    }

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

    /// A shared read at the default priority. See ``AwaitCommands/read(isolation:_:)-ndua``.
    @inlinable
    public func read<R>(
        isolation: isolated (any Actor)? = #isolation,
        _ body: nonisolated(nonsending) (Value) async -> R
    ) async throws(QueueSafeValueError) -> R {
        try await defaultPriority.read(isolation: isolation, body)
    }

    /// A shared read at the default priority, for a closure that throws: its error is rethrown after
    /// the read released its share. See ``AwaitCommands/read(isolation:_:)-ndua``.
    /// - Throws: the closure's error, or a ``QueueSafeValueError`` if the read did not run.
    @inlinable
    public func read<R, E: Error>(
        isolation: isolated (any Actor)? = #isolation,
        _ body: nonisolated(nonsending) (Value) async throws(E) -> R
    ) async throws -> R {
        try await defaultPriority.read(isolation: isolation, body)
    }

    /// Gives `accessClosure` in-place access to the value at the default priority, as a critical
    /// section that lasts across the closure's suspension points (`try await value.async.set { $0 += 1 }`),
    /// and returns the value after it. See ``AwaitCommands/set(isolation:_:)``.
    /// - Throws: ``QueueSafeValueError`` if the command did not run (then the closure did not run).
    @inlinable
    @discardableResult
    public func set(
        isolation: isolated (any Actor)? = #isolation,
        _ accessClosure: nonisolated(nonsending) (inout Value) async -> Void
    ) async throws(QueueSafeValueError) -> Value {
        try await defaultPriority.set(isolation: isolation, accessClosure)
    }

    /// Transforms the value at the default priority, inside a critical section that lasts across the
    /// transform's suspension points, and returns the result. See ``AwaitCommands/map(isolation:_:)``.
    /// - Throws: ``QueueSafeValueError`` if the command did not run.
    @inlinable
    public func map<MappedValue>(
        isolation: isolated (any Actor)? = #isolation,
        _ transform: nonisolated(nonsending) (Value) async -> MappedValue
    ) async throws(QueueSafeValueError) -> MappedValue {
        try await defaultPriority.map(isolation: isolation, transform)
    }
}

/// What issues dispatch commands without naming a priority: a dispatch schedule
/// (`value.async(performIn: queue)`) and a ``QueueSafeAsyncedValue``. Every command of
/// ``DispatchCommands`` is here, at ``CommandPriority/default``: it forwards to ``defaultPriority``,
/// so its ordering, the queue its closures run on and how it fails are the explicit form's.
public protocol DispatchCommandIssuer {
    /// The type of the guarded value.
    associatedtype Value
    /// Commands of ``CommandPriority/default`` priority.
    var defaultPriority: DispatchCommands<Value> { get }
}

extension DispatchSchedule: DispatchCommandIssuer {
    /// Commands of ``CommandPriority/default`` priority.
    @inlinable
    public var defaultPriority: DispatchCommands<Value> { priority(.default) }
}

extension QueueSafeAsyncedValue: DispatchCommandIssuer {
    /// Commands of ``CommandPriority/default`` priority, on the container's queue.
    @inlinable
    public var defaultPriority: DispatchCommands<Value> { priority(.default) }
}

extension DispatchCommandIssuer where Value: Sendable {
    /// `withLock` at the default priority: runs `body` on the queue with in-place access, then
    /// delivers its result to `completion`, if given, on the same queue
    /// (`value.async(performIn: queue).withLock { $0 += 1 }`). Every change it makes stays. See
    /// ``DispatchCommands``.
    public func withLock<R: Sendable>(
        _ body: @escaping @Sendable (inout Value) -> R,
        completion: (@Sendable (Result<R, QueueSafeValueError>) -> Void)? = nil
    ) {
        defaultPriority.withLock(body, completion: completion)
    }

    /// `withLock` at the default priority, for a closure that throws: runs `body` on the queue with
    /// in-place access, then delivers what it returned or threw to `completion` on the same queue.
    /// **Changes the closure made before it threw stay**; `transaction(_:completion:)` keeps none
    /// unless the closure returns.
    public func withLock<R: Sendable>(
        _ body: @escaping @Sendable (inout Value) throws -> R,
        completion: @escaping @Sendable (Result<R, any Error>) -> Void
    ) {
        defaultPriority.withLock(body, completion: completion)
    }

    /// `transaction` at the default priority: `body` changes a draft that replaces the value only if
    /// `body` returns; `completion` gets what it returned or threw. See
    /// ``DispatchCommands/transaction(_:completion:)``.
    public func transaction<R: Sendable>(
        _ body: @escaping @Sendable (inout Value) throws -> R,
        completion: @escaping @Sendable (Result<R, any Error>) -> Void
    ) {
        defaultPriority.transaction(body, completion: completion)
    }

    /// Runs `commandClosure` on the queue with the value, as the critical section, at the default
    /// priority; on failure it is called with the error. See ``DispatchCommands/get(completion:)``.
    public func get(completion commandClosure: (@Sendable (Result<Value, QueueSafeValueError>) -> Void)?) {
        defaultPriority.get(completion: commandClosure)
    }

    /// `get` with a manual completion at the default priority: the value stays exclusively held until
    /// both the closure returned and `done()` was called. See ``DispatchCommands/get(manualCompletion:)``.
    public func get(
        manualCompletion commandClosure: (
            @Sendable (Result<Value, QueueSafeValueError>, @escaping CommandCompletionClosure) -> Void
        )?
    ) {
        defaultPriority.get(manualCompletion: commandClosure)
    }

    /// Replaces the value in its turn at the default priority; `commandClosure`, if given, then
    /// receives the stored value (or the failure) on the queue.
    /// See ``DispatchCommands/set(newValue:completion:)``.
    public func set(
        newValue: Value,
        completion commandClosure: (@Sendable (Result<Value, QueueSafeValueError>) -> Void)? = nil
    ) {
        defaultPriority.set(newValue: newValue, completion: commandClosure)
    }

    /// Gives `accessClosure` in-place access to the value on the queue at the default priority;
    /// `commandClosure`, if given, then receives the updated value (or the failure) on the queue.
    /// See ``DispatchCommands/set(accessClosure:completion:)``.
    public func set(
        accessClosure: (@Sendable (inout Value) -> Void)?,
        completion commandClosure: (@Sendable (Result<Value, QueueSafeValueError>) -> Void)? = nil
    ) {
        defaultPriority.set(accessClosure: accessClosure, completion: commandClosure)
    }

    /// `set` with a manual completion at the default priority: the value stays exclusively held until
    /// both the closure returned and `done()` was called; then `commandClosure`, if given, receives
    /// the value on the queue. See ``DispatchCommands/set(manualCompletion:completion:)``.
    public func set(
        manualCompletion accessClosure: (@Sendable (inout Value, @escaping CommandCompletionClosure) -> Void)?,
        completion commandClosure: (@Sendable (Result<Value, QueueSafeValueError>) -> Void)? = nil
    ) {
        defaultPriority.set(manualCompletion: accessClosure, completion: commandClosure)
    }

    /// Transforms the value on the queue inside the critical section at the default priority;
    /// `commandClosure` then receives the result on the queue, after the value was released.
    /// See ``DispatchCommands/map(_:completion:)``.
    public func map<MappedValue>(
        _ transform: @escaping @Sendable (Value) -> MappedValue,
        completion commandClosure: @escaping @Sendable (Result<MappedValue, QueueSafeValueError>) -> Void
    ) {
        defaultPriority.map(transform, completion: commandClosure)
    }

    /// A shared read on the queue at the default priority. See ``DispatchCommands/read(_:)``.
    public func read(_ body: @escaping @Sendable (Result<Value, QueueSafeValueError>) -> Void) {
        defaultPriority.read(body)
    }

    /// A shared read with a manual completion at the default priority: the share is held until both
    /// `body` returned and `done()` was called. See ``DispatchCommands/read(manualCompletion:)``.
    public func read(
        manualCompletion body:
            @escaping @Sendable (Result<Value, QueueSafeValueError>, @escaping CommandCompletionClosure)
            -> Void
    ) {
        defaultPriority.read(manualCompletion: body)
    }
}
