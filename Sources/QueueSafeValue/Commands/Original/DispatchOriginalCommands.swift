import Dispatch

// The original library's grammar on the dispatch schedule: `get`, `set`, `map` and their manual
// completions, each delivering a `Result`. The modern pair (`withLock`, `read`) is in Modern/.

/// The original library's commands, which hand the value (or a copy of it) to the caller's closures
/// and return it: they need a `Sendable` value. For any value, use `withLock`.
extension DispatchSchedule where Value: Sendable {
    // The dispatch commands' one way in, on the schedule itself, so that a command issued through
    // `DispatchScheduling` reads the schedule once and runs concrete code from there.
    func submit(
        site: CallSite,
        _ operation: DispatchedCommand<Value>.Operation,
        completion: (@Sendable (Result<Value, QueueSafeValueError>) -> Void)? = nil
    ) {
        // Through the stored metatype: see `ValueEngine.dispatchedCommandType`.
        engine.dispatchedCommandType.submit(
            engine: engine, queue: queue, priority: commandPriority, site: site, operation: operation,
            completion: completion)
    }

    func reportMissingClosure(_ completion: (@Sendable (Result<Value, QueueSafeValueError>) -> Void)?) {
        guard let completion else { return }
        SyncPoints.async(queue) { completion(.failure(.commandClosureDeallocated)) }
    }
}

extension DispatchScheduling where Value: Sendable {
    /// Runs `commandClosure` on the queue with the value, as the critical section: no other command
    /// touches the value until it returns. On failure it is called with the error.
    public func get(
        completion commandClosure: (@Sendable (Result<Value, QueueSafeValueError>) -> Void)?,
        file: StaticString = #fileID, line: UInt = #line
    ) {
        guard let commandClosure else { return }
        schedule.submit(site: CallSite(file: file, line: line), .read(commandClosure))
    }

    /// Runs `commandClosure` on the queue with the value and a completion closure; the value stays
    /// exclusively held until **both** the closure has returned and `done()` was called (from any
    /// queue, in either order). On failure it is called with the error and a no-op `done`.
    ///
    /// If `done` is released without being called the command still ends, and the container's
    /// `abandonedCompletionCount` records it.
    public func get(
        manualCompletion commandClosure: (
            @Sendable (Result<Value, QueueSafeValueError>, @escaping CommandCompletionClosure) -> Void
        )?,
        file: StaticString = #fileID, line: UInt = #line
    ) {
        guard let commandClosure else { return }
        schedule.submit(site: CallSite(file: file, line: line), .readManual(commandClosure))
    }

    /// Replaces the value in its turn; `commandClosure`, if given, then receives the stored value
    /// (or the failure) on the queue.
    public func set(
        newValue: Value,
        completion commandClosure: (@Sendable (Result<Value, QueueSafeValueError>) -> Void)? = nil,
        file: StaticString = #fileID, line: UInt = #line
    ) {
        // An access closure, so that no case of `Operation` holds a `Value`: see `Operation`.
        // The command hands the value to the queue's thread once, like the closures it holds.
        let newValue = UncheckedSendable(newValue)
        schedule.submit(
            site: CallSite(file: file, line: line), .access({ $0 = newValue.value }), completion: commandClosure)
    }

    /// Gives `accessClosure` in-place access to the value on the queue, as the critical section;
    /// `commandClosure`, if given, then receives the updated value (or the failure) on the queue.
    /// The access closure does not run if the command fails.
    public func set(
        accessClosure: (@Sendable (inout Value) -> Void)?,
        completion commandClosure: (@Sendable (Result<Value, QueueSafeValueError>) -> Void)? = nil,
        file: StaticString = #fileID, line: UInt = #line
    ) {
        guard let accessClosure else { return schedule.reportMissingClosure(commandClosure) }
        schedule.submit(site: CallSite(file: file, line: line), .access(accessClosure), completion: commandClosure)
    }

    /// Gives `accessClosure` in-place access and a completion closure on the queue; the value stays
    /// exclusively held until **both** the closure has returned and `done()` was called (from any
    /// queue, in either order). Then `commandClosure`, if given, receives the value on the queue.
    /// The access closure does not run if the command fails.
    ///
    /// If `done` is released without being called the command still ends, and the container's
    /// `abandonedCompletionCount` records it.
    public func set(
        manualCompletion accessClosure: (@Sendable (inout Value, @escaping CommandCompletionClosure) -> Void)?,
        completion commandClosure: (@Sendable (Result<Value, QueueSafeValueError>) -> Void)? = nil,
        file: StaticString = #fileID, line: UInt = #line
    ) {
        guard let accessClosure else { return schedule.reportMissingClosure(commandClosure) }
        schedule.submit(
            site: CallSite(file: file, line: line), .accessManual(accessClosure), completion: commandClosure)
    }

    /// Transforms the value on the queue inside the critical section; `commandClosure` then receives
    /// the result on the queue, after the value has been released. The transform does not run if
    /// the command fails.
    public func map<MappedValue>(
        _ transform: @escaping @Sendable (Value) -> MappedValue,
        completion commandClosure: @escaping @Sendable (Result<MappedValue, QueueSafeValueError>) -> Void,
        file: StaticString = #fileID, line: UInt = #line
    ) {
        schedule.submit(
            site: CallSite(file: file, line: line),
            .map { result in
                let mapped = UncheckedSendable(result.map(transform))
                return { commandClosure(mapped.value) }
            })
    }
}
