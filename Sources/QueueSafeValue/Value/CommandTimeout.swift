import Dispatch

// MARK: - Timeouts

/// How long a command issued now may wait for its turn, as a deadline: `nil` waits forever (no
/// timeout, or `.never`); zero only takes a free section. A negative interval is a mistake in the
/// caller's arithmetic, not "try once": it is refused, as every interval of the library is.
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

extension DispatchTimeInterval {
    /// The interval in nanoseconds, in 64 bits on every platform (an `Int` of 32 bits holds 2.1 s
    /// of them), saturated to `Int64.min` or `Int64.max`; `nil` for `.never`.
    var saturatedNanoseconds: Int64? {
        let (amount, unit): (Int, Int64)
        switch self {
        case .seconds(let value): (amount, unit) = (value, 1_000_000_000)
        case .milliseconds(let value): (amount, unit) = (value, 1_000_000)
        case .microseconds(let value): (amount, unit) = (value, 1_000)
        case .nanoseconds(let value): (amount, unit) = (value, 1)
        case .never: return nil
        @unknown default: return nil
        }
        let (product, overflow) = Int64(amount).multipliedReportingOverflow(by: unit)
        return overflow ? (amount < 0 ? .min : .max) : product
    }

    /// `nanoseconds` in the finest unit whose count fits an `Int` here: where `Int` has 32 bits
    /// (watchOS), nanoseconds hold 2.1 s, microseconds 35 minutes, milliseconds 24 days, and
    /// seconds 68 years, which a longer interval is saturated to.
    @usableFromInline
    init(finestFitting nanoseconds: Int64) {
        if let count = Int(exactly: nanoseconds) {
            self = .nanoseconds(count)
        } else if let count = Int(exactly: nanoseconds / 1_000) {
            self = .microseconds(count)
        } else if let count = Int(exactly: nanoseconds / 1_000_000) {
            self = .milliseconds(count)
        } else {
            // 32-bit: reached only where Int has 32 bits, past 24 days; saturating at 68 years waits forever
            self = .seconds(Int(clamping: nanoseconds / 1_000_000_000))
        }
    }
}

// MARK: - Duration

@available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
extension DispatchTimeInterval {
    /// `duration` as an interval, the way every timeout of the library is kept: to the nanosecond
    /// (a finer fraction is dropped), saturated to 64 bits of them (292 years, either sign), in the
    /// unit `init(finestFitting:)` picks. Its sign is kept, so a negative duration is refused as a
    /// negative interval is.
    @usableFromInline
    init(timeout duration: Duration) {
        let (seconds, attoseconds) = duration.components
        let (whole, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        let (sum, overflowAgain) = whole.addingReportingOverflow(attoseconds / 1_000_000_000)
        self.init(finestFitting: overflow || overflowAgain ? (seconds < 0 ? .min : .max) : sum)
    }

    /// ``init(timeout:)`` for the testing library (its `timeLimit:` takes a `Duration` too).
    @_spi(Testing)
    public static func converting(_ duration: Duration) -> DispatchTimeInterval {
        DispatchTimeInterval(timeout: duration)
    }
}
