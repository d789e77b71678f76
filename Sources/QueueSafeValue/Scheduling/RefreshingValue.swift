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
/// ``get()`` is one awaiting `set` command on ``store``: it checks the value and, if it needs a
/// refresh, awaits `refresh` **inside the same critical section**, which lasts across that `await`.
/// Every other caller (and every other command on ``store``) queues behind it and, in its turn,
/// finds the fresh value. So 100 concurrent callers that all find the value expired cause exactly one
/// refresh, and all 100 get the new value.
///
/// A failed refresh is reported to every caller that was already waiting when it failed (they throw
/// the same error, without a refresh storm); the next caller to arrive after the failure tries again.
/// A refresh that throws because its own caller's task was cancelled is not shared: that caller gets
/// the error and the next waiter refreshes.
///
/// The value can also be read and written through ``store`` directly (for instance by a
/// ``RecurringExecutor`` that refreshes it ahead of expiry); those commands take their turn in the
/// same queue.
public final class RefreshingValue<Value: Sendable>: @unchecked Sendable {  // `section`: in `store`'s section only
    /// The container of the value. Every command on it, including the ones of this type, runs one at
    /// a time in the container's priority order.
    public let store: QueueSafeValue<Value>
    /// The priority of the commands ``get()`` and ``invalidate()`` issue on ``store``.
    public let priority: CommandPriority

    private let needsRefresh: @Sendable (Value) -> Bool
    private let refresh: @Sendable (Value) async throws -> Value
    /// Numbers the calls to `get()` in arrival order.
    private let arrivals = AtomicWord(0)
    /// Touched only inside `store`'s critical section.
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
    ///   - refresh: makes a fresh value from the stale one. Called inside the critical section, at
    ///     most once at a time; it may `await` (nothing else touches the value meanwhile) and may
    ///     throw.
    public init(
        store: QueueSafeValue<Value>,
        priority: CommandPriority = .medium,
        needsRefresh: @escaping @Sendable (Value) -> Bool,
        refresh: @escaping @Sendable (Value) async throws -> Value
    ) {
        self.store = store
        self.priority = priority
        self.needsRefresh = needsRefresh
        self.refresh = refresh
    }

    /// Shares `value`, in a new ``QueueSafeValue``, through ``get()``. The parameters are those of
    /// ``init(store:priority:needsRefresh:refresh:)``.
    public convenience init(
        value: Value,
        priority: CommandPriority = .medium,
        needsRefresh: @escaping @Sendable (Value) -> Bool,
        refresh: @escaping @Sendable (Value) async throws -> Value
    ) {
        self.init(store: QueueSafeValue(value: value), priority: priority, needsRefresh: needsRefresh, refresh: refresh)
    }

    /// Returns a value that does not need a refresh, refreshing it first if needed.
    ///
    /// Runs as one command on ``store`` at ``priority``: callers are served one at a time, and at most
    /// one refresh runs at a time, with every other caller queued behind it.
    /// - Throws: the refresh's error when the refresh run by this call failed, or when one failed
    ///   while this call was waiting for its turn; ``QueueSafeValueError/cancelled`` when the calling
    ///   task was cancelled before its turn; ``QueueSafeValueError/reentrantAccess`` when called from
    ///   inside a critical section of ``store`` (including from `refresh`).
    public func get() async throws -> Value {
        let ticket = arrivals.fetchAdd(1)
        var outcome: Result<Value, any Error> = .failure(QueueSafeValueError.cancelled)
        try await store.async.priority(priority).set { value in
            outcome = await self.resolve(&value, ticket: ticket)
        }
        return try outcome.get()
    }

    /// Calls ``get()`` from a new task and hands its result to `completion`, for code that uses
    /// completion handlers. `completion` runs on that task (not on the caller's thread or queue).
    /// Calls made one after another may be served in either order.
    public func get(completion: @escaping @Sendable (Result<Value, any Error>) -> Void) {
        Task {
            do {
                completion(.success(try await get()))
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
            if !Task.isCancelled {
                section.failure = (error, arrivals.loadAcquire())
            }
            return .failure(error)
        }
    }
}

extension RefreshingValue where Value: Equatable {
    /// Marks the stored value as needing a refresh only if it still equals `rejected`: when many
    /// requests are rejected with the same token, the first call marks it, the refresh replaces it,
    /// and the later calls leave the fresh value alone (one refresh, not one per rejected request).
    /// - Returns: whether the value was marked.
    /// - Throws: as ``invalidate()``.
    @discardableResult
    public func invalidate(ifStillEqualTo rejected: Value) async throws(QueueSafeValueError) -> Bool {
        var marked = false
        try await store.async.priority(priority).set { value in
            if value == rejected {
                self.section.isInvalidated = true
                marked = true
            }
        }
        return marked
    }
}
