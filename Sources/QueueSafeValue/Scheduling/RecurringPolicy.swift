import Dispatch

// MARK: - RecurringPolicy

/// When a ``RecurringExecutor`` runs its operation by itself.
///
/// A policy is either ``onDemand`` (the operation runs only when ``RecurringExecutor/runNow()`` is
/// called) or an interval (it also runs, by itself, every time the executor has been idle for that
/// long). `runNow()` works under every policy.
///
/// The interval is a **delay between runs**, not a rate: it is counted from the end of the previous
/// run (or from the moment the executor started waiting), so runs never overlap and never bunch up
/// after a slow run. An interval policy is checked when it is made (see each factory's errors).
///
/// ```swift
/// let every5Seconds = try RecurringPolicy.interval(seconds: 5)
/// let every250ms = try RecurringPolicy.interval(.milliseconds(250))
/// ```
public struct RecurringPolicy: Sendable, Hashable, CustomStringConvertible {
    /// The interval in nanoseconds, or `nil` for ``onDemand``.
    public let intervalNanoseconds: UInt64?

    /// The interval in seconds, or `nil` for ``onDemand``.
    public var intervalSeconds: Double? {
        intervalNanoseconds.map { Double($0) / 1_000_000_000 }
    }

    /// Runs only on ``RecurringExecutor/runNow()``; the executor never runs the operation by itself.
    public static let onDemand = RecurringPolicy(intervalNanoseconds: nil)

    /// Runs after every `seconds` of idleness, and on ``RecurringExecutor/runNow()``.
    ///
    /// - Throws: ``QueueSafeValueError/invalidArgument(_:)`` when `seconds` is not a finite number
    ///   greater than zero, rounds to less than one nanosecond, or exceeds about 584 years.
    public static func interval(seconds: Double) throws(QueueSafeValueError) -> RecurringPolicy {
        guard seconds.isFinite, seconds > 0 else {
            throw .invalidArgument(
                "RecurringPolicy interval must be a finite number of seconds above zero, got \(seconds)")
        }
        let nanoseconds = (seconds * 1_000_000_000).rounded()
        guard nanoseconds >= 1 else {
            throw .invalidArgument("RecurringPolicy interval must be at least one nanosecond, got \(seconds) s")
        }
        guard nanoseconds < Double(UInt64.max) else {
            throw .invalidArgument("RecurringPolicy interval is too large: \(seconds) s")
        }
        return RecurringPolicy(intervalNanoseconds: UInt64(nanoseconds))
    }

    /// Runs after every `interval` of idleness, and on ``RecurringExecutor/runNow()``.
    ///
    /// - Throws: ``QueueSafeValueError/invalidArgument(_:)`` when `interval` is zero, negative or
    ///   `.never` (use ``onDemand`` for "never by itself").
    public static func interval(_ interval: DispatchTimeInterval) throws(QueueSafeValueError) -> RecurringPolicy {
        guard let nanoseconds = interval.saturatedNanoseconds else {
            throw .invalidArgument("RecurringPolicy interval cannot be .never; use RecurringPolicy.onDemand")
        }
        guard nanoseconds > 0 else {
            throw .invalidArgument("RecurringPolicy interval must be above zero, got \(interval)")
        }
        // Saturated: past 64 bits of nanoseconds.
        guard nanoseconds < .max else {
            throw .invalidArgument("RecurringPolicy interval is too large: \(interval)")
        }
        return RecurringPolicy(intervalNanoseconds: UInt64(nanoseconds))
    }

    /// Runs after every `interval` of idleness, and on ``RecurringExecutor/runNow()``
    /// (`try .interval(Duration.seconds(30))`; `.interval(.seconds(30))` keeps meaning a
    /// `DispatchTimeInterval`). Kept to the nanosecond.
    ///
    /// - Throws: ``QueueSafeValueError/invalidArgument(_:)`` when `interval` is zero or negative, or
    ///   longer than about 584 years.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @_disfavoredOverload  // `.seconds(2)` names both types: it keeps meaning a DispatchTimeInterval
    public static func interval(_ interval: Duration) throws(QueueSafeValueError) -> RecurringPolicy {
        let (seconds, attoseconds) = interval.components
        guard seconds > 0 || (seconds == 0 && attoseconds >= 1_000_000_000) else {
            throw .invalidArgument("RecurringPolicy interval must be at least one nanosecond, got \(interval)")
        }
        let (whole, overflow) = UInt64(seconds).multipliedReportingOverflow(by: 1_000_000_000)
        let (nanoseconds, overflowAgain) = whole.addingReportingOverflow(UInt64(attoseconds / 1_000_000_000))
        guard !overflow && !overflowAgain else {
            throw .invalidArgument("RecurringPolicy interval is too large: \(interval)")
        }
        return RecurringPolicy(intervalNanoseconds: nanoseconds)
    }

    /// `"onDemand"` or `"interval(5.0 s)"`.
    public var description: String {
        guard let seconds = intervalSeconds else { return "onDemand" }
        return "interval(\(seconds) s)"
    }
}

// MARK: - RecurringTrigger

/// Why a run of a ``RecurringExecutor`` started.
public enum RecurringTrigger: Sendable, Hashable, CustomStringConvertible {
    /// The policy's interval elapsed while the executor was idle.
    case interval
    /// ``RecurringExecutor/runNow()`` was called. `request` is the number of the latest call served
    /// by this run (calls are numbered from 1); earlier calls that collapsed into it are not
    /// listed.
    case runNow(request: UInt64)

    /// `"interval"` or `"runNow(#3)"`.
    public var description: String {
        switch self {
        case .interval: return "interval"
        case .runNow(let request): return "runNow(#\(request))"
        }
    }
}
