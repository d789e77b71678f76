// MARK: - RefreshingValue

/// A value kept in a ``QueueSafeValue`` that is refreshed **once** for all the callers that find it
/// stale at the same time: an access token shared by concurrent requests is the classic case.
///
/// ```swift
/// let tokens = RefreshingValue(
///     value: Token.expired,
///     needsRefresh: { $0.isExpired },
///     refresh: { stale in try await authAPI.refresh(using: stale.refreshToken) }
/// )
/// let token = try await tokens.get()   // in every request, concurrently
/// ```
///
/// ``get()`` is one awaiting `withLock` command on ``store``: it checks the value and, if it needs a
/// refresh, awaits `refresh` **inside the same critical section**, which lasts across that `await`.
/// Every other caller (and every other command on ``store``) queues behind it and, in its turn,
/// finds the fresh value. So 100 concurrent callers that all find the value expired cause exactly one
/// refresh, and all 100 get the new value.
///
/// A failed refresh is reported to every caller that was already waiting when it failed (they throw
/// the same error, without a refresh storm); the next caller to arrive after the failure tries again.
///
/// **Cancelling the caller that is refreshing**: by default the refresh in flight finishes, still
/// inside the critical section, for the callers waiting behind it; see ``RefreshCancellation``.
///
/// The value can also be read and written through ``store`` directly, for instance by a
/// ``RecurringExecutor`` that refreshes it ahead of expiry.
public final class RefreshingValue<Value: Sendable>: @unchecked Sendable {  // `section`: in `store`'s section only
    /// The container of the value. Every command on it, including the ones of this type, runs one at
    /// a time in the container's priority order.
    public let store: QueueSafeValue<Value>
    /// The priority of the commands ``get()`` and ``invalidate()`` issue on ``store``.
    public let priority: CommandPriority
    /// What happens to the refresh in flight when the caller that started it is cancelled.
    public let cancellation: RefreshCancellation

    private let needsRefresh: @Sendable (Value) -> Bool
    private let refresh: @Sendable (Value) async throws -> Value
    /// Numbers the calls to `get()` in arrival order.
    private let arrivals = AtomicWord(0)
    private let section = SectionState()

    // @unchecked Sendable: touched only by the holder of `store`'s critical section
    private final class SectionState: @unchecked Sendable {
        var failure: (error: any Error, arrivalsBefore: Int)?
        var isInvalidated = false
    }

    /// Shares `store`'s value through ``get()``.
    ///
    /// - Parameters:
    ///   - store: the container; it may be used directly as well.
    ///   - priority: the priority of this type's commands on `store` (default `.medium`).
    ///   - needsRefresh: whether a stored value must be refreshed before use. Called inside the
    ///     critical section; keep it fast and free of side effects.
    ///   - cancellation: see ``RefreshCancellation``; the default lets the refresh finish.
    ///   - refresh: makes a fresh value from the stale one. Called inside the critical section, at
    ///     most once at a time (in the task ``get()`` names); it may `await` (nothing else touches
    ///     the value meanwhile) and may throw.
    public init(
        store: QueueSafeValue<Value>,
        priority: CommandPriority = .medium,
        cancellation: RefreshCancellation = .letRefreshFinish,
        needsRefresh: @escaping @Sendable (Value) -> Bool,
        refresh: @escaping @Sendable (Value) async throws -> Value
    ) {
        self.store = store
        self.priority = priority
        self.cancellation = cancellation
        self.needsRefresh = needsRefresh
        self.refresh = refresh
    }

    /// Shares `value`, in a new ``QueueSafeValue``, through ``get()``. The parameters are those of
    /// ``init(store:priority:cancellation:needsRefresh:refresh:)``.
    public convenience init(
        value: Value,
        priority: CommandPriority = .medium,
        cancellation: RefreshCancellation = .letRefreshFinish,
        needsRefresh: @escaping @Sendable (Value) -> Bool,
        refresh: @escaping @Sendable (Value) async throws -> Value
    ) {
        self.init(
            store: QueueSafeValue(value: value), priority: priority, cancellation: cancellation,
            needsRefresh: needsRefresh, refresh: refresh)
    }

    /// Returns a value that does not need a refresh, refreshing it first if needed.
    ///
    /// Runs as one command on ``store`` at ``priority``: callers are served one at a time, and at most
    /// one refresh runs at a time, with every other caller queued behind it.
    ///
    /// With ``RefreshCancellation/letRefreshFinish`` (the default) the command runs in a task of its
    /// own, which inherits the caller's priority and task-locals, and a cancelled call returns at once
    /// (see there). With ``RefreshCancellation/cancelRefresh`` the command runs in the calling task.
    ///
    /// - Throws: the refresh's error when the refresh run by this call failed, or when one failed
    ///   while this call was waiting for its turn; ``QueueSafeValueError/cancelled`` when the calling
    ///   task was cancelled before its command started (it never runs), `CancellationError` when it
    ///   was cancelled after (the command finishes for the callers behind it; with
    ///   ``RefreshCancellation/cancelRefresh`` a refresh cancelled with the caller throws its own
    ///   error instead); ``QueueSafeValueError/reentrantAccess`` when called from inside a critical
    ///   section of ``store`` (including from `refresh`).
    public func get() async throws -> Value {
        let ticket = arrivals.fetchAdd(1)
        guard cancellation == .letRefreshFinish else {
            return try await command(ticket: ticket, call: nil).get()
        }
        // The command runs in a `Call`'s task.
        if Task.isCancelled { throw QueueSafeValueError.cancelled }
        let call = Call()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                guard call.attach(continuation) else { return }
                // Inherits the caller's priority and task-locals (so `get()` from inside `refresh` still
                // fails with `.reentrantAccess`), not its cancellation.
                call.setTask(SyncPoints.task { call.finish(await self.command(ticket: ticket, call: call)) })
            }
        } onCancel: {
            call.cancel()
        }
    }

    /// `get()`'s command: checks the value, and refreshes it if needed, in one critical section.
    /// `call`, when set, is the caller that may leave before the command ends.
    private func command(ticket: Int, call: Call?) async -> Result<Value, any Error> {
        do {
            return try await store.async.priority(priority).withLock { value in
                // Its caller left: touch nothing (the result goes to nobody).
                guard call?.enterSection() ?? true else { return .failure(QueueSafeValueError.cancelled) }
                return await self.resolve(&value, ticket: ticket)
            }
        } catch {
            return .failure(error)
        }
    }

    /// One `get()` call whose command runs in a task of its own, started once the caller's
    /// continuation is kept: the caller may leave before the command ends.
    // @unchecked Sendable: every stored property is guarded by `state`'s lock
    private final class Call: @unchecked Sendable {
        struct State {
            /// The caller, until the command's result or the caller's cancellation resumes it.
            var continuation: CheckedContinuation<Value, any Error>?
            var task: Task<Void, Never>?
            /// The command got the section: a cancellation lets it finish.
            var inSection = false
            /// The caller was cancelled: the command's result goes to nobody.
            var left = false
        }

        private let state = LockedState<State>.make(State())

        /// Keeps the caller's continuation. Returns `false`, having resumed it, if the caller left
        /// already: the command is then never started.
        func attach(_ continuation: CheckedContinuation<Value, any Error>) -> Bool {
            let left = state.withLock { state in
                if !state.left { state.continuation = continuation }
                return state.left
            }
            if left { continuation.resume(throwing: QueueSafeValueError.cancelled) }
            return !left
        }

        /// Keeps the command's task, or cancels it at once if its caller left before it started.
        func setTask(_ task: Task<Void, Never>) {
            let cancel = state.withLock { state in
                state.task = task
                return state.left && !state.inSection
            }
            if cancel { task.cancel() }
        }

        /// The command got the section: returns whether it should run (its caller did not leave).
        func enterSection() -> Bool {
            state.withLock { state in
                state.inSection = !state.left
                return state.inSection
            }
        }

        func finish(_ result: Result<Value, any Error>) {
            let continuation = state.withLock { state in
                defer { (state.continuation, state.task) = (nil, nil) }
                return state.continuation
            }
            continuation?.resumeFromAnotherThread(with: result)
        }

        /// The caller's task was cancelled: it leaves at once, and the command is cancelled only if it
        /// is still waiting for its turn (see `RefreshCancellation.letRefreshFinish`).
        func cancel() {
            let (continuation, task, inSection) = state.withLock { state in
                state.left = true
                defer { state.continuation = nil }
                return (state.continuation, state.inSection ? nil : state.task, state.inSection)
            }
            task?.cancel()
            let error: any Error = inSection ? CancellationError() : QueueSafeValueError.cancelled
            continuation?.resumeFromAnotherThread(with: .failure(error))
        }
    }

    /// Calls ``get()`` from a new task and hands its result to `completion`, for code that uses
    /// completion handlers. `completion` runs on that task (not on the caller's thread or queue).
    /// Calls made one after another may be served in either order.
    public func get(completion: @escaping @Sendable (Result<Value, any Error>) -> Void) {
        SyncPoints.task {
            do {
                completion(.success(try await self.get()))
            } catch {
                completion(.failure(error))
            }
        }
    }

    /// Marks the stored value as needing a refresh, whatever `needsRefresh` says: the next ``get()``
    /// refreshes it. Use it when the value was rejected (a `401` for a token).
    /// - Throws: ``QueueSafeValueError/cancelled`` or ``QueueSafeValueError/reentrantAccess`` as an
    ///   awaiting command on ``store`` does; the mark was then not set.
    public func invalidate() async throws(QueueSafeValueError) {
        try await store.async.priority(priority).set { _ in
            self.section.isInvalidated = true
        }
    }

    /// The body of `get()`, inside the critical section.
    private func resolve(_ value: inout Value, ticket: Int) async -> Result<Value, any Error> {
        if !section.isInvalidated && !needsRefresh(value) {
            return .success(value)
        }
        if let failure = section.failure, ticket < failure.arrivalsBefore {
            // This call was already waiting when the refresh failed: it shares the failure.
            return .failure(failure.error)
        }
        do {
            let fresh = try await refresh(value)
            value = fresh
            section.failure = nil
            section.isInvalidated = false
            return .success(fresh)
        } catch {
            // A refresh cancelled with its caller (`.cancelRefresh`) is not shared: the next waiter
            // refreshes. With `.letRefreshFinish` the command's task is never cancelled here.
            if !Task.isCancelled {
                section.failure = (error, arrivals.loadAcquire())
            }
            return .failure(error)
        }
    }
}

// MARK: - RefreshCancellation

/// What a ``RefreshingValue`` does with the refresh in flight when the caller that started it is
/// cancelled. Either way the cancelled caller gets no value, and the other callers are served.
public enum RefreshCancellation: Sendable, Hashable {
    /// The refresh finishes (the default): the cancelled caller throws `CancellationError` at once
    /// (``QueueSafeValueError/cancelled`` if its command had not started yet, and then never runs),
    /// the refresh goes on inside the critical section in a task of its own, and its value is stored
    /// and returned to the callers waiting behind it. One refresh, whoever gives up: the safe choice
    /// when a refresh spends something, such as a single-use refresh token, which a second refresh
    /// would find spent. Costs one task per ``RefreshingValue/get()``.
    case letRefreshFinish
    /// The refresh runs in the caller's task and sees its cancellation (`Task.isCancelled`,
    /// `Task.sleep` and `URLSession` throwing): for refreshes that are cheap to redo and should not
    /// outlive their caller. A refresh that throws after its caller was cancelled is not shared:
    /// the caller gets that error and the next waiter refreshes again.
    case cancelRefresh
}

extension RefreshingValue where Value: Equatable {
    /// Marks the stored value as needing a refresh only if it still equals `rejected`: when many
    /// requests are rejected with the same token, the first call marks it, the refresh replaces it,
    /// and the later calls leave the fresh value alone (one refresh, not one per rejected request).
    /// - Returns: whether the value was marked.
    /// - Throws: as ``invalidate()``.
    @discardableResult
    public func invalidate(ifStillEqualTo rejected: Value) async throws(QueueSafeValueError) -> Bool {
        try await store.async.priority(priority).withLock { value in
            guard value == rejected else { return false }
            self.section.isInvalidated = true
            return true
        }
    }
}
