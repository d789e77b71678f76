// MARK: - RecurringRunOutcome

/// How the run that served a ``RecurringExecutor/runNowAndWait()`` call ended, or that no run
/// served it.
///
/// The run that serves a request is the first run to start after it, unless that run ends
/// ``cancelled(run:)`` because a later request preempted it: then the request is served by the
/// run of that later request (it collapses into it, as the later request's callers do). The run
/// number is the one of the ``RecurringExecutorEvent/Kind/started(run:trigger:)`` event.
public enum RecurringRunOutcome: Sendable, Equatable, CustomStringConvertible {
    /// Run `run` served the request, and its operation returned normally.
    case finished(run: UInt64)
    /// Run `run` served the request, and its operation threw `error`.
    case failed(run: UInt64, error: RecurringExecutorFailure)
    /// Run `run` served the request, and it ended cancelled (``RecurringExecutor/stop()`` stopped it,
    /// or it threw a cancellation error: see ``RecurringExecutorEvent/Kind/cancelled(run:)``).
    case cancelled(run: UInt64)
    /// No run served the request: the executor was stopped (by ``RecurringExecutor/stop()``, its
    /// release, or a failed sleeper) before the run for it started, or had stopped already.
    case stopped

    /// The run that served the request, or `nil` for ``stopped``.
    public var run: UInt64? {
        switch self {
        case .finished(let run), .failed(let run, _), .cancelled(let run): return run
        case .stopped: return nil
        }
    }

    /// `"finished(run: 3)"`, `"failed(run: 3, error: …)"`, `"cancelled(run: 3)"` or `"stopped"`.
    public var description: String {
        event.description
    }

    /// The event that reports this outcome.
    var event: RecurringExecutorEvent.Kind {
        switch self {
        case .finished(let run): return .finished(run: run)
        case .failed(let run, let error): return .failed(run: run, error: error)
        case .cancelled(let run): return .cancelled(run: run)
        case .stopped: return .stopped
        }
    }
}
