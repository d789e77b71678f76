// MARK: - RecurringSleeper

/// The clock of a ``RecurringExecutor``: how it waits for an interval to elapse. The default,
/// ``TaskRecurringSleeper``, uses `Task.sleep(nanoseconds:)`; tests inject their own to control time.
///
/// The executor calls ``sleep(nanoseconds:)`` from a task of its own, once per wait, and cancels that
/// task when the wait is cut short (`runNow()`, a policy change, a stop). Whatever a cancelled
/// sleep does then is ignored: returning normally after being cancelled cannot cause a run.
///
/// A sleep that throws while the executor still waits on it (one it did not cancel) is a broken
/// clock, whatever the error, `CancellationError` included: the executor emits
/// ``RecurringExecutorEvent/Kind/sleeperFailed(_:)`` and stops (``RecurringExecutor/stop()``), so
/// the failure is seen instead of leaving the executor idle forever. It does not retry, since a
/// sleeper that fails at once would make a retry loop spin.
public protocol RecurringSleeper: Sendable {
    /// Suspends for `nanoseconds`, then returns.
    /// - Throws: any error once the calling task is cancelled (ignored, see above); a throw without
    ///   a cancellation stops the executor.
    func sleep(nanoseconds: UInt64) async throws
}

// MARK: - TaskRecurringSleeper

/// The default ``RecurringSleeper``: `Task.sleep(nanoseconds:)`, or inside a `QueueSafeValueTesting`
/// exploration (debug builds) the exploration's virtual clock (see <doc:TestingYourCode>).
public struct TaskRecurringSleeper: RecurringSleeper {
    /// Creates the sleeper.
    public init() {}

    /// Suspends the calling task for `nanoseconds` with `Task.sleep(nanoseconds:)`.
    /// - Throws: `CancellationError` when the task is cancelled first.
    public func sleep(nanoseconds: UInt64) async throws {
        try await SyncPoints.sleep(nanoseconds: nanoseconds)
    }
}
