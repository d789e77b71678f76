import Dispatch

// Throwing, value-returning commands in the shape of `Synchronization.Mutex.withLock`, on every
// schedule: `try value.wait.highestPriority.withLock { $0.popLast() }`.
//
// They run in the same order and critical section as every other command (priority, then arrival;
// one command at a time); what differs is how they answer: the closure's result comes back as the
// return value, and a failure is thrown — the closure's own error, or a `QueueSafeValueError` when
// the command could not run — instead of returned as a `Result` that can be dropped unseen.

extension WaitScheduling {
    /// Runs `body` with in-place access to the value, as the critical section, on the calling
    /// thread, and returns what it returns.
    ///
    /// Waits its turn like every command (higher priority first, FIFO within a priority). The closure
    /// is not escaping: it may capture `inout` state and other non-escaping closures. Every change it
    /// makes stays (the closure cannot throw; a throwing one keeps the changes it made before it
    /// threw, and ``transaction(_:file:line:)`` keeps none of them).
    /// - Returns: what `body` returned.
    /// - Throws: ``QueueSafeValueError`` if the command did not run (`.valueContainerDeinited`,
    ///   `.reentrantAccess`, `.timedOut(_:)` through `wait(timeout:)`, `.deadlock(_:)`,
    ///   `.invalidArgument` for a negative timeout); `body` was then not called.
    @inlinable
    public func withLock<R>(
        _ body: (inout sending Value) -> sending R, file: StaticString = #fileID, line: UInt = #line
    ) throws(QueueSafeValueError) -> sending R {
        try engine.withLockedAccess(
            priority: commandPriority, site: CallSite(file: file, line: line), timeout: timeout, body)
    }

    /// Like `withLock(_:)`, for a closure that throws: its error is rethrown after the value
    /// was released. **Changes the closure made before it threw stay**: a transfer that subtracted
    /// from the ledger and then failed to log (a refused wait, say) leaves the subtraction in place.
    /// Use ``transaction(_:file:line:)`` to keep the value as it was unless the closure returns.
    /// - Throws: the closure's error, or a ``QueueSafeValueError`` if the command did not run.
    @inlinable
    public func withLock<R, E: Error>(
        _ body: (inout sending Value) throws(E) -> sending R, file: StaticString = #fileID, line: UInt = #line
    ) throws -> sending R {
        try engine.withLockedAccess(
            priority: commandPriority, site: CallSite(file: file, line: line), timeout: timeout
        ) { value -> sending Result<R, E> in
            do throws(E) { return .success(try body(&value)) } catch { return .failure(error) }
        }.get()
    }
}

extension WaitScheduling where Value: Sendable {
    /// Like ``withLock(_:file:line:)-((Value)->R,_,_)``, all or nothing: `body` changes a copy of the value (a
    /// draft), which replaces the value only if `body` returns. If `body` throws, the value is left
    /// exactly as it was, and the error is thrown after the release.
    ///
    /// ```swift
    /// let ledger = QueueSafeValue(value: [String: Int](), label: "ledger")
    /// let audit = QueueSafeValue(value: [String](), label: "audit")
    /// try ledger.wait.transaction { balances in
    ///     balances["alice", default: 0] -= 10
    ///     try audit.wait.withLock { $0.append("alice -10") }  // a refusal here undoes the -10
    /// }
    /// ```
    ///
    /// The draft is the cost: a copy-on-write value (an array, a dictionary) shares its storage with
    /// the draft until `body` first changes it, and that change copies the storage once, where
    /// `withLock` changes it in place (the benchmark's `wait.transaction` rows measure it). A class
    /// instance the value refers to is not copied: only the value itself is put back. Ordering,
    /// the thread it runs on and the failures are `withLock`'s.
    /// - Returns: what `body` returned.
    /// - Throws: the closure's error (the value is unchanged), or a ``QueueSafeValueError`` if the
    ///   command did not run.
    @inlinable
    public func transaction<R, E: Error>(
        _ body: (inout Value) throws(E) -> R, file: StaticString = #fileID, line: UInt = #line
    ) throws -> R {
        try engine.withBlockingAccess(
            priority: commandPriority, site: CallSite(file: file, line: line), timeout: timeout, undoneIfThrown: true
        ) { value throws(E) in
            var draft = value
            let result = try body(&draft)
            value = draft
            return result
        }.get()
    }
}

extension WaitScheduling where Value: Sendable {
    /// Runs `body` with the value (read-only) as the critical section, on the calling thread, and
    /// returns what it returns. Exclusive, like every command but ``read(_:file:line:)-((Value)->R,_,_)->R``.
    ///
    /// Replaced by ``read(_:file:line:)-((Value)->R,_,_)->R``, which answers the same way (returns the closure's result, throws
    /// when the command did not run) but shares the value with other reads: a closure that only
    /// reads a `Sendable` value has no need to hold it alone, and `withValue` means "change in place"
    /// in other libraries (`LockIsolated.withValue`), which here is ``withLock(_:file:line:)-((Value)->R,_,_)``. Existing calls
    /// keep working, in the same order, exclusively.
    /// - Throws: ``QueueSafeValueError`` if the command did not run, as `withLock(_:)`.
    @inlinable
    @available(
        *, deprecated, renamed: "read",
        message: "read answers the same way and shares the value with other reads; withLock holds it alone"
    )
    public func withValue<R>(_ body: (Value) -> R, file: StaticString = #fileID, line: UInt = #line)
        throws(QueueSafeValueError) -> R
    {
        try engine.withBlockingAccess(
            priority: commandPriority, site: CallSite(file: file, line: line), timeout: timeout, mutates: false
        ) { body($0) }.get()
    }

    /// Like `withValue(_:)`, for a closure that throws. Replaced by the throwing `read(_:)`.
    /// - Throws: the closure's error, or a ``QueueSafeValueError`` if the command did not run.
    @inlinable
    @available(
        *, deprecated, renamed: "read",
        message: "read answers the same way and shares the value with other reads; withLock holds it alone"
    )
    public func withValue<R, E: Error>(_ body: (Value) throws(E) -> R, file: StaticString = #fileID, line: UInt = #line)
        throws -> R
    {
        try engine.withBlockingAccess(
            priority: commandPriority, site: CallSite(file: file, line: line), timeout: timeout, mutates: false
        ) { value throws(E) in try body(value) }.get()
    }
}

extension AwaitSchedule {
    /// Runs `body` with in-place access to the value in the caller's isolation, holding the value
    /// across every suspension point of `body`, and returns what it returns. Every change it makes
    /// stays (``transaction(isolation:_:file:line:)`` keeps none unless its closure returns).
    /// - Throws: ``QueueSafeValueError`` if the command did not run (`.cancelled`,
    ///   `.reentrantAccess`, `.deadlock(_:)`, `.valueContainerDeinited`, `.timedOut(_:)`).
    @inlinable
    public func withLock<R>(
        isolation: isolated (any Actor)? = #isolation,
        _ body: nonisolated(nonsending) (inout sending Value) async -> sending R,
        file: StaticString = #fileID, line: UInt = #line
    ) async throws(QueueSafeValueError) -> R {
        try await engine.withAwaitingLockedAccess(
            priority: commandPriority, site: CallSite(file: file, line: line), timeout: timeout,
            cancellable: cancellable, isolation: isolation, body)
    }

    /// Like `withLock(isolation:_:)`, for a closure that throws: its error is rethrown after
    /// the value was released. **Changes the closure made before it threw stay**; use
    /// ``transaction(isolation:_:file:line:)`` to keep the value as it was unless the closure returns.
    /// - Throws: the closure's error, or a ``QueueSafeValueError`` if the command did not run.
    @inlinable
    public func withLock<R, E: Error>(
        isolation: isolated (any Actor)? = #isolation,
        _ body: nonisolated(nonsending) (inout sending Value) async throws(E) -> sending R,
        file: StaticString = #fileID, line: UInt = #line
    ) async throws -> R {
        try await engine.withAwaitingLockedAccess(
            priority: commandPriority, site: CallSite(file: file, line: line), timeout: timeout,
            cancellable: cancellable, isolation: isolation
        ) { value async -> sending Result<R, E> in
            do throws(E) { return .success(try await body(&value)) } catch { return .failure(error) }
        }.get()
    }
}

extension AwaitSchedule where Value: Sendable {
    /// Like the throwing `withLock(isolation:_:)`, all or nothing: `body` changes a copy of the value (a draft) while the value stays held across its
    /// suspension points, and the draft replaces the value only if `body` returns; if it throws, the
    /// value is left as it was. The cost is the draft's, as for ``WaitScheduling/transaction(_:file:line:)``.
    /// - Throws: the closure's error (the value is unchanged), or a ``QueueSafeValueError`` if the
    ///   command did not run.
    @inlinable
    public func transaction<R, E: Error>(
        isolation: isolated (any Actor)? = #isolation,
        _ body: nonisolated(nonsending) (inout Value) async throws(E) -> R,
        file: StaticString = #fileID, line: UInt = #line
    ) async throws -> R {
        try await engine.withAwaitingAccess(
            priority: commandPriority, site: CallSite(file: file, line: line), timeout: timeout,
            cancellable: cancellable, isolation: isolation
        ) { value async -> Result<R, E> in
            var draft = value
            do throws(E) {
                let result = try await body(&draft)
                value = draft
                return .success(result)
            } catch { return .failure(error) }
        }.get()
    }
}

extension DispatchScheduling where Value: Sendable {
    /// Runs `body` on the queue with in-place access to the value, as the critical section, then
    /// delivers what it returned to `completion`, if given, on the same queue, after the value was
    /// released (`value.async(performIn: queue).withLock { $0.append(entry) }`).
    ///
    /// The command takes its place in the value's order when this method is called. If it cannot
    /// run (`.valueContainerDeinited`), `body` is not called and `completion` receives the
    /// ``QueueSafeValueError``: the closure cannot throw, so the `Result` is typed. Every change it
    /// makes stays.
    public func withLock<R: Sendable>(
        _ body: @escaping @Sendable (inout Value) -> R,
        completion: (@Sendable (Result<R, QueueSafeValueError>) -> Void)? = nil,
        file: StaticString = #fileID, line: UInt = #line
    ) {
        guard let completion else {
            return schedule.submit(site: CallSite(file: file, line: line), .access { value in _ = body(&value) })
        }
        schedule.submitAccess(site: CallSite(file: file, line: line), { value in body(&value) }, deliver: completion)
    }

    /// Runs `body` on the queue with in-place access to the value, as the critical section, then
    /// delivers what it returned — or threw — to `completion`, on the same queue, after the value
    /// was released. **Changes `body` made before throwing stay**; ``transaction(_:completion:file:line:)``
    /// keeps none of them unless `body` returns.
    ///
    /// The command takes its place in the value's order when this method is called. If it cannot
    /// run (`.valueContainerDeinited`), `body` is not called and `completion` receives the
    /// ``QueueSafeValueError``. The completion is required: without it a thrown error would be lost.
    public func withLock<R: Sendable>(
        _ body: @escaping @Sendable (inout Value) throws -> R,
        completion: @escaping @Sendable (Result<R, any Error>) -> Void,
        file: StaticString = #fileID, line: UInt = #line
    ) {
        schedule.submitAccess(
            site: CallSite(file: file, line: line),
            { value in Result { try body(&value) } },
            deliver: { outcome in completion(outcome.mapError { $0 as any Error }.flatMap { $0 }) })
    }

    /// Like the throwing `withLock(_:completion:)`, all or nothing: `body`
    /// changes a copy of the value (a draft), which replaces the value only if `body` returns; if it
    /// throws, the value is left as it was and `completion` receives the error. The cost is the
    /// draft's, as for ``WaitScheduling/transaction(_:file:line:)``.
    public func transaction<R: Sendable>(
        _ body: @escaping @Sendable (inout Value) throws -> R,
        completion: @escaping @Sendable (Result<R, any Error>) -> Void,
        file: StaticString = #fileID, line: UInt = #line
    ) {
        schedule.submitAccess(
            site: CallSite(file: file, line: line),
            { value in
                var draft = value
                return Result {
                    let result = try body(&draft)
                    value = draft
                    return result
                }
            },
            deliver: { outcome in completion(outcome.mapError { $0 as any Error }.flatMap { $0 }) })
    }
}

extension DispatchSchedule where Value: Sendable {
    /// Submits an exclusive command that runs `run` on the queue with in-place access, and hands
    /// what it returned to `deliver` on the same queue after the release; or, if the command did not
    /// run, why.
    func submitAccess<Outcome: Sendable>(
        site: CallSite,
        _ run: @escaping @Sendable (inout Value) -> Outcome,
        deliver: @escaping @Sendable (Result<Outcome, QueueSafeValueError>) -> Void
    ) {
        let box = OutcomeBox<Outcome>()
        engine.dispatchedCommandType.submit(
            engine: engine, queue: queue, priority: commandPriority, site: site,
            operation: .access { value in box.outcome = run(&value) },
            completion: { command in
                // The access closure ran in the section before this delivery: the engine's release
                // orders its write before this read.
                deliver(
                    command.flatMap { _ in box.outcome.map { .success($0) } ?? .failure(.commandClosureDeallocated) })
            })
    }
}

/// Carries a dispatched `withLock`'s outcome from its closure to its completion.
// @unchecked Sendable: written once in the critical section, read once after the release that ends it
final class OutcomeBox<Outcome: Sendable>: @unchecked Sendable {
    var outcome: Outcome?
}
