import Dispatch

// The original library's grammar on the blocking schedule: `get`, `set`, `map` and their manual
// completions, each answering with a `Result`. The modern pair (`withLock`, `read`) is in Modern/.

/// The original library's commands, which hand the value (or a copy of it) to the caller's closures
/// and return it: they need a `Sendable` value. For any value, use `withLock`.
extension WaitScheduling where Value: Sendable {
    /// Returns a copy of the value, read in its turn.
    @inlinable
    public func get(file: StaticString = #fileID, line: UInt = #line) -> Result<Value, QueueSafeValueError> {
        engine.withBlockingAccess(
            priority: commandPriority, site: CallSite(file: file, line: line), timeout: timeout, mutates: false
        ) { $0 }
    }

    /// Runs `commandClosure` with the value as the critical section: no other command touches the
    /// value until the closure returns. The closure runs on the calling thread; on failure it is
    /// called with the error.
    @inlinable
    public func get(
        completion commandClosure: ((Result<Value, QueueSafeValueError>) -> Void)?, file: StaticString = #fileID,
        line: UInt = #line
    ) {
        guard let commandClosure else { return }
        let result = engine.withBlockingAccess(
            priority: commandPriority, site: CallSite(file: file, line: line), timeout: timeout, mutates: false
        ) { value in
            commandClosure(.success(value))
        }
        if case .failure(let error) = result { commandClosure(.failure(error)) }
    }

    /// Runs `commandClosure` with the value and a completion closure, and keeps the value exclusively
    /// held until **both** the closure has returned and `done()` was called (from any thread, in
    /// either order). The caller stays blocked until then. On failure the closure is called with the
    /// error and a no-op `done`.
    ///
    /// If `done` is released without being called the command still ends, and the container's
    /// `abandonedCompletionCount` records it.
    @inlinable
    public func get(
        manualCompletion commandClosure: (
            (Result<Value, QueueSafeValueError>, @escaping CommandCompletionClosure) -> Void
        )?,
        file: StaticString = #fileID, line: UInt = #line
    ) {
        guard let commandClosure else { return }
        let result = engine.withBlockingAccess(
            priority: commandPriority, site: CallSite(file: file, line: line), timeout: timeout, mutates: false
        ) { value in
            engine.holdUntilCompleted { done in commandClosure(.success(value), done) }
        }
        if case .failure(let error) = result { commandClosure(.failure(error), {}) }
    }

    /// Replaces the value in its turn.
    ///
    /// The result may be discarded; a failure that would then lose the update silently
    /// (`.reentrantAccess`, `.deadlock`) is also reported to ``LostUpdates/handler``.
    /// - Returns: the value now stored, or why the command did not run.
    @inlinable
    @discardableResult
    public func set(newValue: Value, file: StaticString = #fileID, line: UInt = #line) -> Result<
        Value, QueueSafeValueError
    > {
        engine.reportingLostUpdate(
            engine.withBlockingAccess(
                priority: commandPriority, site: CallSite(file: file, line: line), timeout: timeout
            ) { value in
                value = newValue
                return value
            })
    }

    /// Gives `accessClosure` in-place (`inout`) access to the value as the critical section, on the
    /// calling thread. The closure does not run if the command fails.
    ///
    /// The result may be discarded; a failure that would then lose the update silently
    /// (`.reentrantAccess`, `.deadlock`) is also reported to ``LostUpdates/handler``.
    /// - Returns: the value after the closure, or why the command did not run
    ///   (`.commandClosureDeallocated` for a `nil` closure).
    @inlinable
    @discardableResult
    public func set(
        completion accessClosure: ((inout Value) -> Void)?, file: StaticString = #fileID, line: UInt = #line
    ) -> Result<Value, QueueSafeValueError> {
        guard let accessClosure else { return .failure(.commandClosureDeallocated) }
        return engine.reportingLostUpdate(
            engine.withBlockingAccess(
                priority: commandPriority, site: CallSite(file: file, line: line), timeout: timeout
            ) { value in
                accessClosure(&value)
                return value
            })
    }

    /// Gives `accessClosure` in-place access and a completion closure; the value stays exclusively
    /// held, and the caller blocked, until **both** the closure has returned and `done()` was called
    /// (from any thread, in either order). The closure does not run if the command fails.
    ///
    /// If `done` is released without being called the command still ends, and the container's
    /// `abandonedCompletionCount` records it. The result may be discarded; a failure that would
    /// then lose the update silently (`.reentrantAccess`, `.deadlock`) is also reported to
    /// ``LostUpdates/handler``.
    /// - Returns: the value when the command ended, or why it did not run.
    @inlinable
    @discardableResult
    public func set(
        manualCompletion accessClosure: ((inout Value, @escaping CommandCompletionClosure) -> Void)?,
        file: StaticString = #fileID, line: UInt = #line
    ) -> Result<Value, QueueSafeValueError> {
        guard let accessClosure else { return .failure(.commandClosureDeallocated) }
        return engine.reportingLostUpdate(
            engine.withBlockingAccess(
                priority: commandPriority, site: CallSite(file: file, line: line), timeout: timeout
            ) { value in
                engine.holdUntilCompleted { done in accessClosure(&value, done) }
                return value
            })
    }

    /// Transforms the value inside the critical section, on the calling thread.
    /// - Returns: the transformed value, or why the command did not run
    ///   (`.commandClosureDeallocated` for a `nil` closure).
    @inlinable
    public func map<MappedValue>(
        completion commandClosure: ((Value) -> MappedValue)?,
        file: StaticString = #fileID, line: UInt = #line
    ) -> Result<MappedValue, QueueSafeValueError> {
        guard let commandClosure else { return .failure(.commandClosureDeallocated) }
        return engine.withBlockingAccess(
            priority: commandPriority, site: CallSite(file: file, line: line), timeout: timeout, mutates: false
        ) {
            commandClosure($0)
        }
    }
}
