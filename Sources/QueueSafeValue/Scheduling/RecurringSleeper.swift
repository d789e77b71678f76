// MARK: - RecurringSleeper

/// The clock of a ``RecurringExecutor``: how it waits for an interval to elapse.
///
/// The default, ``TaskRecurringSleeper``, uses `Task.sleep(nanoseconds:)`. Tests inject their own
/// sleeper to make time a thing they control, so interval behaviour is tested without real waits.
///
/// The executor calls ``sleep(nanoseconds:)`` from a task of its own, once per wait, and cancels that
/// task when the wait is cut short (`runNow()`, a policy change, a stop). A sleeper that returns
/// normally after being cancelled cannot cause a run: the executor ignores a wait it has abandoned.
public protocol RecurringSleeper: Sendable {
    /// Suspends for `nanoseconds`, then returns.
    ///
    /// - Throws: `CancellationError` (or any error) when the calling task is cancelled; the executor
    ///   treats any throw as "the wait did not elapse".
    func sleep(nanoseconds: UInt64) async throws
}

// MARK: - TaskRecurringSleeper

/// The default ``RecurringSleeper``: `Task.sleep(nanoseconds:)`, which ends early with
/// `CancellationError` when its task is cancelled.
public struct TaskRecurringSleeper: RecurringSleeper {
    /// Creates the sleeper.
    public init() {}

    /// Suspends the calling task for `nanoseconds` with `Task.sleep(nanoseconds:)`.
    /// - Throws: `CancellationError` when the task is cancelled first.
    public func sleep(nanoseconds: UInt64) async throws {
        try await Task.sleep(nanoseconds: nanoseconds)
    }
}
