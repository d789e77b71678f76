import Dispatch

// MARK: - ValueStorage

/// The value and the engine that guards it, shared by a container and every scheduler and command
/// made from it.
///
/// Schedulers hold the storage, not the container, so they never keep the container alive; when the
/// container is released it closes the engine and later commands fail with
/// `.valueContainerDeinited`. The value lives in memory of its own and is touched only by the
/// command that holds the critical section.
@usableFromInline
final class ValueStorage<Value>: @unchecked Sendable {
    @usableFromInline let engine: CommandEngine
    @usableFromInline let pointer: UnsafeMutablePointer<Value>

    @usableFromInline
    init(value: Value) {
        engine = CommandEngine()
        pointer = .allocate(capacity: 1)
        pointer.initialize(to: value)
    }

    deinit {
        pointer.deinitialize(count: 1)
        pointer.deallocate()
    }

    // MARK: Blocking access

    /// Waits for the critical section on the calling thread, runs `body` there, and releases.
    @inlinable
    func withBlockingAccess<R>(
        priority: CommandPriority,
        deadline: DispatchTime?,
        _ body: (inout Value) -> R
    ) -> Result<R, QueueSafeValueError> {
        if let error = engine.acquireBlocking(priority: priority, deadline: deadline) {
            return .failure(error)
        }
        let result = body(&pointer.pointee)
        engine.release()
        return .success(result)
    }

    /// Like ``withBlockingAccess(priority:deadline:_:)``, but the section stays held after `body`
    /// returns until its completion closure is called (or released); then `result` reads the value
    /// and the section is released.
    @inlinable
    func withBlockingManualAccess<R>(
        priority: CommandPriority,
        deadline: DispatchTime?,
        _ body: (inout Value, @escaping CommandCompletionClosure) -> Void,
        result: (Value) -> R
    ) -> Result<R, QueueSafeValueError> {
        if let error = engine.acquireBlocking(priority: priority, deadline: deadline) {
            return .failure(error)
        }
        engine.holdUntilCompleted { done in body(&pointer.pointee, done) }
        let value = result(pointer.pointee)
        engine.release()
        return .success(value)
    }

    // MARK: Awaiting access

    /// Waits (suspending, never blocking a thread) for the critical section, runs `body` in the
    /// caller's isolation while holding it across every suspension point of `body`, and releases.
    @inlinable
    func withAwaitingAccess<R>(
        priority: CommandPriority,
        isolation: isolated (any Actor)?,
        _ body: nonisolated(nonsending) (inout Value) async -> R
    ) async throws(QueueSafeValueError) -> R {
        if Task.isCancelled { throw .cancelled }
        if !engine.tryAcquireIdle() {
            try await engine.acquireAwaitingSlow(priority: priority, isolation: isolation)
        }
        let sections = engine.enterTaskSection()
        let result = await CriticalSectionContext.sections.withValue(sections) {
            // Capturing the isolated parameter keeps this closure on the caller's executor
            // (a closure that does not capture it is nonisolated and would hop off).
            _ = isolation
            return await body(&pointer.pointee)
        }
        engine.leaveTaskSection()
        engine.release()
        return result
    }
}
