import Dispatch

// MARK: - Timeouts

/// How long a command issued now may wait for its turn, as a deadline: `nil` waits forever (no
/// timeout, or `.never`); zero only takes a free section (a command issued with no time to wait
/// still runs if nothing holds or waits for the value).
///
/// A negative interval is a mistake in the caller's arithmetic, not "try once": like every other
/// interval of the library, it is refused with ``QueueSafeValueError/invalidArgument(_:)``, and the
/// command never runs.
@inlinable
func commandDeadline(after timeout: DispatchTimeInterval?) throws(QueueSafeValueError) -> DispatchTime? {
    guard let timeout else { return nil }
    if timeout.isNegative { throw negativeTimeout(timeout) }
    if case .never = timeout { return nil }
    return SyncPoints.now() + timeout
}

/// The error for a negative timeout (out of line: it builds a string).
@usableFromInline
func negativeTimeout(_ timeout: DispatchTimeInterval) -> QueueSafeValueError {
    .invalidArgument("timeout must not be negative, got \(timeout)")
}

extension DispatchTimeInterval {
    /// Whether the interval is below zero.
    @inlinable
    var isNegative: Bool {
        switch self {
        case .seconds(let amount), .milliseconds(let amount), .microseconds(let amount), .nanoseconds(let amount):
            return amount < 0
        case .never:
            return false
        @unknown default:
            return false
        }
    }
}
