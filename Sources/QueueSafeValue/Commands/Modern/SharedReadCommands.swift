import Dispatch

// Shared reads on every schedule: `value.{schedule}.{priority}.read { … }`.
//
// A shared read takes its turn in the same order as every other command (priority, then arrival)
// but holds the value together with the other shared reads granted with it, instead of alone. The
// rules, in one place (see <doc:GettingStarted#Shared-reads>):
//
// - When a shared read's turn comes, every shared read standing directly behind it in the waiting
//   order, up to the first exclusive command, is granted with it.
// - A shared read issued while shared reads hold the value joins them at once only if it would
//   stand before every waiting exclusive command (its priority is higher than all of theirs);
//   otherwise it waits in order, so a stream of reads never starves a waiting writer.
// - Exclusive commands (`get`, `set`, `map`, …) keep their meaning: nothing else holds the value
//   while they run.
//
// Shared reads need `Value: Sendable`: several threads read the value at the same moment, which is
// safe only for a value that may be used from several threads at once.

extension WaitScheduling where Value: Sendable {
    /// Runs `body` with the value on the calling thread, holding the value **shared**: other shared
    /// reads may run at the same moment on other threads, exclusive commands may not.
    ///
    /// The read waits its turn like any command (higher priority first, FIFO within a priority). When
    /// shared reads already hold the value it joins them at once only if its priority is higher than
    /// that of every waiting exclusive command; otherwise it waits behind them, so writers are never
    /// starved by readers. A command on the same value issued from inside `body` fails with
    /// `.reentrantAccess`.
    /// - Returns: what `body` returned.
    /// - Throws: ``QueueSafeValueError`` if the read did not run (`.valueContainerDeinited`,
    ///   `.reentrantAccess`, `.timedOut(_:)` through `wait(timeout:)`, `.deadlock(_:)`, or
    ///   `.invalidArgument` for a negative timeout); `body` was then not called.
    @inlinable
    public func read<R>(_ body: (Value) -> R, file: StaticString = #fileID, line: UInt = #line)
        throws(QueueSafeValueError) -> R
    {
        try engine.withSharedBlockingAccess(
            priority: commandPriority, site: CallSite(file: file, line: line), timeout: timeout, body
        ).get()
    }

    /// Like `read(_:)`, for a closure that throws: its error is rethrown after the read released
    /// its share of the value.
    /// - Throws: the closure's error, or a ``QueueSafeValueError`` if the read did not run.
    @inlinable
    public func read<R, E: Error>(_ body: (Value) throws(E) -> R, file: StaticString = #fileID, line: UInt = #line)
        throws -> R
    {
        let outcome = try engine.withSharedBlockingAccess(
            priority: commandPriority, site: CallSite(file: file, line: line), timeout: timeout
        ) { value in
            Result<R, E> { () throws(E) -> R in try body(value) }
        }.get()
        return try outcome.get()
    }

    /// The shared read in its earlier shape, which answered with a `Result` instead of throwing.
    ///
    /// Same ordering and failures as the throwing `read(_:)`; kept so code written against that
    /// shape compiles. Write `try value.wait.read { … }`, or `Result { try value.wait.read { … } }`
    /// where a `Result` is wanted.
    @inlinable
    @_disfavoredOverload  // the throwing read wins wherever both fit; this one only where a Result is asked for
    @available(*, deprecated, message: "read throws now, as withLock does: write 'try value.wait.read { … }'")
    public func read<R>(_ body: (Value) -> R, file: StaticString = #fileID, line: UInt = #line) -> Result<
        R, QueueSafeValueError
    > {
        engine.withSharedBlockingAccess(
            priority: commandPriority, site: CallSite(file: file, line: line), timeout: timeout, body)
    }

    /// Runs `body` with the value and a completion closure on the calling thread, and keeps its
    /// **shared** hold of the value until both `body` has returned and `done()` was called (from any
    /// thread, in either order); the caller stays blocked until then. Ordering and failures as
    /// ``read(_:file:line:)-((Value)->R,_,_)->R``; if `done` is released without being called the read still ends, and the
    /// container's `abandonedCompletionCount` records it.
    /// - Returns: `.success` once the read ended, or why it did not run (then `body` was not called).
    @inlinable
    @discardableResult
    public func read(
        manualCompletion body: (Value, @escaping CommandCompletionClosure) -> Void,
        file: StaticString = #fileID, line: UInt = #line
    ) -> Result<Void, QueueSafeValueError> {
        engine.withSharedBlockingManualAccess(
            priority: commandPriority, site: CallSite(file: file, line: line), timeout: timeout, body)
    }
}

extension DispatchScheduling where Value: Sendable {
    /// Runs `body` on the queue with the value, holding it **shared**: other shared reads may run at
    /// the same moment (on this queue, if it is concurrent, or on others), exclusive commands may not.
    /// The read takes its place in the value's order when this method is called; ordering as
    /// ``WaitScheduling/read(_:file:line:)-((Value)->R,_,_)->R``. On failure (`.valueContainerDeinited`) `body` is called on the
    /// queue with the error.
    public func read(
        _ body: @escaping @Sendable (Result<Value, QueueSafeValueError>) -> Void, file: StaticString = #fileID,
        line: UInt = #line
    ) {
        schedule.submitShared(site: CallSite(file: file, line: line), .sharedRead(body))
    }

    /// Like ``read(_:file:line:)``, but the shared hold lasts until both `body` has returned and `done()` was
    /// called (from any thread, in either order). On failure `body` is called on the queue with the
    /// error and a no-op `done`.
    public func read(
        manualCompletion body:
            @escaping @Sendable (Result<Value, QueueSafeValueError>, @escaping CommandCompletionClosure)
            -> Void,
        file: StaticString = #fileID, line: UInt = #line
    ) {
        schedule.submitShared(site: CallSite(file: file, line: line), .sharedReadManual(body))
    }
}

extension DispatchSchedule where Value: Sendable {
    /// The dispatch shared reads' one way in (see `submit(site:_:completion:)`).
    func submitShared(site: CallSite, _ operation: DispatchedCommand<Value>.Operation) {
        engine.sharedReadCommandType.submitShared(
            engine: engine, queue: queue, priority: commandPriority, site: site, operation: operation)
    }
}

extension AwaitSchedule where Value: Sendable {
    /// Runs `body` with the value in the caller's isolation, holding the value **shared** across
    /// every suspension point of `body`: other shared reads may hold it at the same time, exclusive
    /// commands may not. Ordering as ``WaitScheduling/read(_:file:line:)-((Value)->R,_,_)->R``.
    /// - Returns: what `body` returned.
    /// - Throws: `.cancelled` (the task was cancelled before the read started, or while it waited),
    ///   `.reentrantAccess`, `.deadlock(_:)`, `.valueContainerDeinited`, `.timedOut(_:)` (through
    ///   `async(timeout:)`).
    @inlinable
    public func read<R>(
        isolation: isolated (any Actor)? = #isolation,
        _ body: nonisolated(nonsending) (Value) async -> R,
        file: StaticString = #fileID, line: UInt = #line
    ) async throws(QueueSafeValueError) -> R {
        try await engine.withSharedAwaitingAccess(
            priority: commandPriority, site: CallSite(file: file, line: line), timeout: timeout,
            cancellable: cancellable, isolation: isolation, body)
    }

    /// Like `read(isolation:_:)`, for a closure that throws: its error is rethrown after the read
    /// released its share of the value.
    /// - Throws: the closure's error, or a ``QueueSafeValueError`` if the read did not run.
    @inlinable
    public func read<R, E: Error>(
        isolation: isolated (any Actor)? = #isolation,
        _ body: nonisolated(nonsending) (Value) async throws(E) -> R,
        file: StaticString = #fileID, line: UInt = #line
    ) async throws -> R {
        let outcome = try await engine.withSharedAwaitingAccess(
            priority: commandPriority, site: CallSite(file: file, line: line), timeout: timeout,
            cancellable: cancellable, isolation: isolation
        ) { (value: Value) async -> Result<R, E> in
            do throws(E) { return .success(try await body(value)) } catch { return .failure(error) }
        }
        return try outcome.get()
    }
}
