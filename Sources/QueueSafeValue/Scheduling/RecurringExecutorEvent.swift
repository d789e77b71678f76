import Dispatch

// MARK: - RecurringExecutorEvent

/// A step in the life of a ``RecurringExecutor``, delivered to its event handler and to every
/// stream from ``RecurringExecutor/events(bufferingPolicy:)``: what happened (``kind``) and when
/// (``timestamp``).
///
/// Events are emitted at the state transition they describe, under the executor's lock, so their
/// order is the order in which things happened, and their timestamps never decrease in that order;
/// both channels receive the same events in that order. Runs are numbered from 1 and every
/// ``Kind/started(run:trigger:)`` is followed, in time, by exactly one of ``Kind/finished(run:)``,
/// ``Kind/cancelled(run:)`` or ``Kind/failed(run:error:)`` for the same run. The last event of
/// every executor is ``Kind/stopped``.
///
/// ```swift
/// let executor = RecurringExecutor(eventHandler: { event in
///     if case .finished(let run) = event.kind {
///         print("run \(run) finished at \(event.timestamp.uptimeNanoseconds) ns of uptime")
///     }
/// }) {
///     // the work of one run
/// }
/// ```
public struct RecurringExecutorEvent: Sendable, Equatable, CustomStringConvertible {
    /// What happened.
    public let kind: Kind
    /// When it happened: `DispatchTime.now()` read at the transition, under the executor's lock.
    ///
    /// A monotonic instant (system uptime; it does not jump with the wall clock and, on Apple
    /// platforms, does not advance while the device sleeps): compare two events' `uptimeNanoseconds`
    /// to measure how long a run took. It is the real clock even when the executor's
    /// ``RecurringSleeper`` is a test clock.
    public let timestamp: DispatchTime

    /// An event of `kind` at `timestamp` (for tests and for code that forwards events).
    public init(_ kind: Kind, at timestamp: DispatchTime) {
        self.kind = kind
        self.timestamp = timestamp
    }

    /// The kind's description and the timestamp, e.g. `"finished(run: 3) @ 81234567 ns"`.
    public var description: String {
        "\(kind) @ \(timestamp.uptimeNanoseconds) ns"
    }

    // MARK: Kind

    /// What a ``RecurringExecutorEvent`` reports.
    public enum Kind: Sendable, Equatable, CustomStringConvertible {
        /// ``RecurringExecutor/runNow()`` or ``RecurringExecutor/runNowAndWait()`` was called;
        /// `request` numbers the calls from 1.
        case requested(request: UInt64)
        /// Run number `run` began: the operation was handed to its target (a task of its own, or its
        /// place in a ``CommandQueue`` or ``QueueSafeValue``, where it may still wait for its turn).
        case started(run: UInt64, trigger: RecurringTrigger)
        /// The run's operation returned normally (even if it had been asked to stop and ignored it).
        case finished(run: UInt64)
        /// The run's operation ended by throwing after the executor asked it to stop, or it threw
        /// `CancellationError` or ``QueueSafeValueError/cancelled`` (for instance because it was
        /// cancelled while it waited for its turn in a queue).
        case cancelled(run: UInt64)
        /// The run's operation threw any other error. The executor carries on as if the run had
        /// finished.
        case failed(run: UInt64, error: RecurringExecutorFailure)
        /// The executor is idle: the next run starts after `nextRunIn` seconds unless something else
        /// happens first, or, when `nextRunIn` is `nil`, only on ``RecurringExecutor/runNow()``.
        case waiting(nextRunIn: Double?)
        /// The interval elapsed while the executor waited; a ``started(run:trigger:)`` with trigger
        /// ``RecurringTrigger/interval`` follows unless a policy change, a `runNow()` or a stop came
        /// first.
        case intervalElapsed
        /// ``RecurringExecutor/setPolicy(_:)`` changed the policy from `from` to `to`.
        case policyChanged(from: RecurringPolicy, to: RecurringPolicy)
        /// The ``RecurringSleeper`` threw while the executor waited on it (a sleep it did not cancel,
        /// whatever the error): the executor stops, and ``stopped`` follows once the loop has ended.
        case sleeperFailed(RecurringExecutorFailure)
        /// The executor stopped: its loop ended and no operation of it is running. The event streams
        /// finish right after it.
        case stopped

        /// A short text such as `"started(run: 3, trigger: runNow(#5))"`.
        public var description: String {
            switch self {
            case .requested(let request): return "requested(#\(request))"
            case .started(let run, let trigger): return "started(run: \(run), trigger: \(trigger))"
            case .finished(let run): return "finished(run: \(run))"
            case .cancelled(let run): return "cancelled(run: \(run))"
            case .failed(let run, let error): return "failed(run: \(run), error: \(error))"
            case .waiting(let seconds):
                guard let seconds else { return "waiting(onDemand)" }
                return "waiting(nextRunIn: \(seconds) s)"
            case .intervalElapsed: return "intervalElapsed"
            case .policyChanged(let from, let to): return "policyChanged(from: \(from), to: \(to))"
            case .sleeperFailed(let error): return "sleeperFailed(\(error))"
            case .stopped: return "stopped"
            }
        }
    }
}

// MARK: - RecurringExecutorFailure

/// The error a run's operation (or the sleeper) threw, in an `Equatable` wrapper so that events can
/// be compared.
///
/// Two failures are equal when their errors are equal: by `==` when the error type is `Equatable`,
/// otherwise when both have the same type and the same `String(describing:)`.
public struct RecurringExecutorFailure: Sendable, Equatable, CustomStringConvertible {
    /// The error that was thrown.
    public let error: any Error

    /// Wraps `error`.
    public init(_ error: any Error) {
        self.error = error
    }

    /// Compares the wrapped errors (see the type's documentation).
    public static func == (lhs: RecurringExecutorFailure, rhs: RecurringExecutorFailure) -> Bool {
        if let equatable = lhs.error as? any Equatable {
            return Self.isEqual(equatable, rhs.error)
        }
        return type(of: lhs.error) == type(of: rhs.error)
            && String(describing: lhs.error) == String(describing: rhs.error)
    }

    private static func isEqual<E: Equatable>(_ lhs: E, _ rhs: Any) -> Bool {
        (rhs as? E) == lhs
    }

    /// The error's `String(describing:)`.
    public var description: String {
        String(describing: error)
    }
}
