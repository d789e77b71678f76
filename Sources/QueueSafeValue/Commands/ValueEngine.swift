import Dispatch

// MARK: - ValueEngine

/// The value and the engine that guards it, shared by a container and every scheduler and command
/// made from it.
///
/// Schedulers hold the engine, not the container, so they never keep the container alive. When
/// the container is released it closes the engine: later commands fail with
/// `.valueContainerDeinited`, and the value itself is freed as soon as no command holds or waits
/// for it (commands queued before the release still run first). What a user may keep — a schedule,
/// a commands value, a completion closure — keeps this engine alive, but never the value.
// @unchecked Sendable: the value is touched only by the section's holder
@usableFromInline
final class ValueEngine<Value>: CommandEngine, @unchecked Sendable {
    /// The value's own memory. Initialized from `init` until the engine frees the value.
    @usableFromInline let pointer: UnsafeMutablePointer<Value>
    /// `DispatchedCommand<Value>`, looked up once: unspecialized code that names the generic class
    /// asks the runtime for its metadata on every use (a hash-table lookup per dispatch command),
    /// while creating it through this metatype does not.
    let dispatchedCommandType = DispatchedCommand<Value>.self
    /// `DispatchedSharedRead<Value>`, looked up once, for the same reason.
    let sharedReadCommandType = DispatchedSharedRead<Value>.self
    /// `Result<Value, QueueSafeValueError>`, looked up once, for the same reason: a dispatched
    /// command hands its closures their result through it (``Succeeding``).
    let resultType = Succeeding<Result<Value, QueueSafeValueError>>.self
    /// How many changes were committed while observers existed: the number of the newest
    /// (``captureChange()``). Touched only inside the critical section (or, when the value is
    /// freed, by the last party to touch it).
    @usableFromInline var changeSequence: UInt64 = 0

    @usableFromInline
    init(value: Value, label: String?, fairness: CommandFairness = .strictPriority) {
        pointer = .allocate(capacity: 1)
        pointer.initialize(to: value)
        super.init(label: label, fairness: fairness)
    }

    deinit {
        // A container closes the engine before it lets go of the engine, so the value is normally
        // freed by now; an engine dropped without its container (never, today) frees it here.
        if !isValueFreed { pointer.deinitialize(count: 1) }
        pointer.deallocate()
    }

    override var traceName: String {
        label.map { "'\($0)'" } ?? "a QueueSafeValue<\(Value.self)>"
    }

    override var displayName: String {
        label.map { "'\($0)'" } ?? "QueueSafeValue<\(Value.self)> #\(shortIdentity)"
    }

    override func freeValue() {
        finishObservers()
        pointer.deinitialize(count: 1)
    }

    /// A task section that may have changed the value ends while observers exist: the change is
    /// captured before the release and offered after it (see `Observation.swift`).
    override func releaseObservedChange(_ kind: CommandKind) {
        let change = captureChange()
        release(kind)
        deliverChange(change)
    }

    // MARK: Blocking access

    /// The blocking commands' way through the section: waits for it on the calling thread, at most
    /// `timeout` (`nil`: as long as it takes), runs `body` there and releases; returns what `body`
    /// returned, or why the command did not run (then `body` was not called). An error `body` throws
    /// is thrown after the release.
    /// - Parameters:
    ///   - mutates: whether `body` may change the value: observers are told of it then.
    ///   - undoneIfThrown: whether a `body` that throws leaves the value as it was (a transaction's
    ///     draft): observers then have nothing to see.
    @inlinable
    func withBlockingAccess<R, E: Error>(
        priority: CommandPriority,
        site: CallSite,
        timeout: DispatchTimeInterval?,
        mutates: Bool = true,
        undoneIfThrown: Bool = false,
        _ body: (inout Value) throws(E) -> R
    ) throws(E) -> Result<R, QueueSafeValueError> {
        if let error = acquireBlocking(priority: priority, timeout: timeout, site: site) { return .failure(error) }
        do {
            let result = try body(&pointer.pointee)
            releaseBlocking(changed: mutates)
            return .success(result)
        } catch {
            releaseBlocking(changed: mutates && !undoneIfThrown)
            throw error
        }
    }

    /// ``withBlockingAccess(priority:site:timeout:mutates:undoneIfThrown:_:)`` for `withLock`: `body`
    /// gets the value as `inout sending`, so it cannot merge the value with state the caller keeps,
    /// and returns a `sending` result, disconnected from the value: what makes a non-Sendable value
    /// safe to share (the shape of `Mutex.withLock`).
    @inlinable
    func withLockedAccess<R>(
        priority: CommandPriority,
        site: CallSite,
        timeout: DispatchTimeInterval?,
        _ body: (inout sending Value) -> sending R
    ) throws(QueueSafeValueError) -> sending R {
        if let error = acquireBlocking(priority: priority, timeout: timeout, site: site) { throw error }
        let result = body(&pointer.pointee)
        releaseBlocking()
        return result
    }

    /// Releases the section held by a blocking command: if it may have `changed` the value while
    /// observers exist, the change is captured first and offered to them after the release.
    @inlinable
    @inline(__always)
    func releaseBlocking(changed: Bool = true) {
        if changed && observing.loadRelaxed() != 0 {
            let change = captureChange()
            releaseInline(.blocking)
            deliverChange(change)
        } else {
            releaseInline(.blocking)
        }
    }

    /// Returns `result`, the outcome of a blocking `set`, after reporting a failure that would lose
    /// the update silently if the caller discarded it (see ``LostUpdates``).
    @inlinable
    @inline(__always)
    func reportingLostUpdate(_ result: Result<Value, QueueSafeValueError>) -> Result<Value, QueueSafeValueError> {
        if case .failure(let error) = result { reportLostUpdate(error) }
        return result
    }

    @usableFromInline
    func reportLostUpdate(_ error: QueueSafeValueError) {
        LostUpdates.report(error, value: displayName)
    }

    // MARK: Awaiting access

    /// The awaiting commands' one way in: fails at once in a cancelled task (unless not
    /// `cancellable`) or on a bad timeout, takes a free section on the idle path, and otherwise
    /// waits for its turn in the caller's isolation.
    @inlinable
    @inline(__always)
    func acquireAwaiting(
        priority: CommandPriority,
        site: CallSite,
        timeout: DispatchTimeInterval?,
        cancellable: Bool,
        isolation: isolated (any Actor)?
    ) async throws(QueueSafeValueError) {
        if cancellable && Task.isCancelled { throw .cancelled }
        let deadline = try commandDeadline(after: timeout)
        if !tryAcquireIdleAwaiting(site: site) {
            try await acquireAwaitingSlow(
                priority: priority, site: site, deadline: deadline, cancellable: cancellable, isolation: isolation)
        }
    }

    /// Waits (suspending, never blocking a thread) for the critical section, runs `body` in the
    /// caller's isolation while holding it across every suspension point of `body`, and releases.
    /// - Parameter cancellable: whether the task's cancellation takes the command out of the queue
    ///   (`false`: it waits for its turn and runs even in a cancelled task, see
    ///   `AwaitSchedule.evenIfCancelled`).
    @inlinable
    func withAwaitingAccess<R>(
        priority: CommandPriority,
        site: CallSite,
        timeout: DispatchTimeInterval? = nil,
        mutates: Bool = true,
        cancellable: Bool = true,
        isolation: isolated (any Actor)?,
        _ body: nonisolated(nonsending) (inout Value) async -> R
    ) async throws(QueueSafeValueError) -> R {
        try await acquireAwaiting(
            priority: priority, site: site, timeout: timeout, cancellable: cancellable, isolation: isolation)
        // Checked once the section is held (an observer registering now reads the value after this
        // command); the observed path is out of line, so the common one costs a load and a branch.
        if mutates && observing.loadRelaxed() != 0 {
            return await runHeldObservedTaskSection(.awaiting, isolation: isolation) { await body(&pointer.pointee) }
        }
        return await runHeldTaskSection(.awaiting, isolation: isolation) {
            await body(&pointer.pointee)
        }
    }

    /// `withLock` on the awaiting schedule (see ``withLockedAccess(priority:site:timeout:_:)``): the
    /// section is held across `body`'s suspension points. `body`'s result is `sending` (disconnected
    /// from the value); it comes back to the caller in the caller's own isolation, where `body` ran,
    /// so it needs no `sending` on the way out.
    @inlinable
    func withAwaitingLockedAccess<R>(
        priority: CommandPriority,
        site: CallSite,
        timeout: DispatchTimeInterval?,
        cancellable: Bool = true,
        isolation: isolated (any Actor)?,
        _ body: nonisolated(nonsending) (inout sending Value) async -> sending R
    ) async throws(QueueSafeValueError) -> R {
        try await acquireAwaiting(
            priority: priority, site: site, timeout: timeout, cancellable: cancellable, isolation: isolation)
        return await runHeldObservedTaskSection(.awaiting, isolation: isolation) {
            await body(&pointer.pointee)
        }
    }
}

// MARK: - Shared reads

extension ValueEngine {
    /// Waits for a share of the critical section on the calling thread (beside other shared
    /// reads), at most `timeout`, runs `body` there with the value, and gives the share back.
    ///
    /// Without a timeout, on a value that no exclusive command holds or waits for, this is the
    /// idle path: one compare-and-swap to join the readers and one to leave (see
    /// ``CommandEngine/tryJoinReadersIdleOnThread()``); everything else is in
    /// ``withSharedBlockingAccessSlow(priority:timeout:_:)``.
    @inlinable
    @inline(__always)
    func withSharedBlockingAccess<R>(
        priority: CommandPriority,
        site: CallSite,
        timeout: DispatchTimeInterval?,
        _ body: (Value) -> R
    ) -> Result<R, QueueSafeValueError> {
        if timeout == nil, let read = tryJoinReadersIdleOnThread() { return runIdleRead(read, body) }
        return withSharedBlockingAccessSlow(priority: priority, site: site, timeout: timeout, body)
    }

    /// ``withSharedBlockingAccess(priority:timeout:_:)`` with a timeout, or on a value that an
    /// exclusive command holds or waits for: the idle path once more (with a timeout), then the
    /// lock's.
    @inlinable
    @inline(never)
    func withSharedBlockingAccessSlow<R>(
        priority: CommandPriority,
        site: CallSite,
        timeout: DispatchTimeInterval?,
        _ body: (Value) -> R
    ) -> Result<R, QueueSafeValueError> {
        let deadline: DispatchTime?
        do { deadline = try commandDeadline(after: timeout) } catch { return .failure(error) }
        if timeout != nil, let read = tryJoinReadersIdleOnThread() { return runIdleRead(read, body) }
        return acquireReaderBlocking(priority: priority, site: site, deadline: deadline).map { token in
            defer { releaseReaderBlocking(token) }
            return body(pointer.pointee)
        }
    }

    /// Runs `body` as the shared read that joined on the idle path at `read`, then ends it.
    @inlinable
    @inline(__always)
    func runIdleRead<R>(_ read: IdleRead, _ body: (Value) -> R) -> Result<R, QueueSafeValueError> {
        let result = body(pointer.pointee)
        leaveIdleRead(read)
        return .success(result)
    }

    /// Like ``withSharedBlockingAccess(priority:timeout:_:)``, but the share stays held after `body`
    /// returns until its completion closure is called (or dropped).
    @inlinable
    func withSharedBlockingManualAccess(
        priority: CommandPriority,
        site: CallSite,
        timeout: DispatchTimeInterval?,
        _ body: (Value, @escaping CommandCompletionClosure) -> Void
    ) -> Result<Void, QueueSafeValueError> {
        let deadline: DispatchTime?
        do { deadline = try commandDeadline(after: timeout) } catch { return .failure(error) }
        // A read with a manual completion keeps a record in the machine: it goes through the lock.
        return acquireReaderBlocking(priority: priority, site: site, deadline: deadline).map { token in
            defer { releaseReaderBlocking(token) }
            holdReaderUntilCompleted(token) { done in body(pointer.pointee, done) }
        }
    }

    /// Waits (suspending) for a share of the critical section, runs `body` in the caller's
    /// isolation while holding it across every suspension point of `body`, and gives it back.
    ///
    /// On a value that no exclusive command holds or waits for, one task at a time reads on the
    /// idle path (``CommandEngine/tryJoinReadersIdle(outside:)``); others go through the lock.
    @inlinable
    func withSharedAwaitingAccess<R>(
        priority: CommandPriority,
        site: CallSite,
        timeout: DispatchTimeInterval?,
        cancellable: Bool = true,
        isolation: isolated (any Actor)?,
        _ body: nonisolated(nonsending) (Value) async -> R
    ) async throws(QueueSafeValueError) -> R {
        if cancellable && Task.isCancelled { throw .cancelled }
        let deadline = try commandDeadline(after: timeout)
        let sections = CriticalSectionContext.sections.get()
        if let entry = tryJoinReadersIdle(outside: sections) {
            defer { leaveIdleTaskRead() }
            return await withSections(sections.pushing(entry), entry, isolation: isolation) {
                await body(pointer.pointee)
            }
        }
        let token = try await acquireReaderAwaiting(
            priority: priority, site: site, deadline: deadline, cancellable: cancellable, isolation: isolation)
        return await runHeldReaderSection(token, isolation: isolation) {
            await body(pointer.pointee)
        }
    }
}

// MARK: - ContainerOwnership

/// What makes a container the owner of its value: the one place where a released container closes
/// its engine (every later command fails with `.valueContainerDeinited`; the value is freed once
/// nothing holds or waits for it). `QueueSafeValue`, `QueueSafeSyncedValue` and
/// `QueueSafeAsyncedValue` each keep one; its `deinit` runs with theirs.
@usableFromInline
struct ContainerOwnership<Value>: ~Copyable {
    @usableFromInline let engine: ValueEngine<Value>

    @usableFromInline
    init(_ engine: ValueEngine<Value>) {
        self.engine = engine
    }

    deinit {
        engine.close()
    }
}
