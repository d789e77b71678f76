import Dispatch

// MARK: - CommandFairness

/// How a value (or a ``CommandQueue``) weighs priority against waiting time.
///
/// ``strictPriority``, the default, always grants the waiting command of highest priority (first
/// come, first served within a priority). It is the order the grammar promises, and it can starve:
/// while commands of a higher priority keep arriving, one of a lower priority waits, without bound.
///
/// ``bounded(maxOvertakes:)`` bounds that wait: a waiting command is passed over by at most
/// `maxOvertakes` commands that arrived after it. Until then the order is strict priority; once
/// that many later commands were granted the value while it waited, the oldest waiting command goes
/// next, whatever its priority (and the next oldest may follow it at once, if it was passed over as
/// often). A command that arrived earlier is never counted: commands that were already waiting when
/// it arrived may still go first, in their order.
///
/// ```swift
/// let jobs = QueueSafeValue(value: [String](), label: "jobs", fairness: try .bounded(maxOvertakes: 8))
/// jobs.wait.lowestPriority.set { $0.append("report") }   // waits behind at most 8 later commands
/// ```
public struct CommandFairness: Sendable, Hashable, CustomStringConvertible {
    /// How many later commands may be granted before a waiting one; `nil` for strict priority.
    public let maxOvertakes: Int?
    /// The eventually fair mode's bound, in nanoseconds; `nil` for the other modes.
    let bargingBound: UInt64?

    /// Highest priority first, always; first come, first served within a priority. A steady stream
    /// of higher-priority commands can starve a lower-priority one. The default.
    public static let strictPriority = CommandFairness(maxOvertakes: nil, bargingBound: nil)

    /// Strict priority, except that no waiting command is passed over by more than `maxOvertakes`
    /// commands that arrived after it. `0` is first come, first served, whatever the priorities.
    /// - Throws: ``QueueSafeValueError/invalidArgument(_:)`` for a negative `maxOvertakes`.
    public static func bounded(maxOvertakes: Int) throws(QueueSafeValueError) -> CommandFairness {
        guard maxOvertakes >= 0 else {
            throw .invalidArgument("maxOvertakes must not be negative, got \(maxOvertakes)")
        }
        return CommandFairness(maxOvertakes: maxOvertakes, bargingBound: nil)
    }

    /// Eventually fair, with the default bound of 1 millisecond: ``eventual(starvationBound:)``.
    public static let eventual = CommandFairness(maxOvertakes: nil, bargingBound: 1_000_000)

    /// Eventually fair: priorities stay strict, but within one priority a command that arrives
    /// while the value is free may take it ahead of waiting commands, and a waiting command that
    /// has waited `starvationBound` or longer is handed the value directly at the next release.
    ///
    /// Under strict priority every release hands the value to the next waiting thread, which may
    /// not be running: when threads outnumber cores, each hand-off waits for the scheduler. Here a
    /// release of a `wait` command frees the value and wakes the first waiting thread to claim it,
    /// and a running thread that asks meanwhile takes it at once: more commands per second, and a
    /// wait of at most about `starvationBound` plus one command's hold.
    ///
    /// What stays as under strict priority: nobody takes the value ahead of a waiting command of
    /// higher priority; a waiting thread that asks its holder for urgency (priority inheritance)
    /// stops the barging until it is served; timeouts, cancellation and deadlock detection behave
    /// the same. A waiting dispatch, awaiting or ``CommandQueue`` command is always handed the value
    /// directly (nothing of it runs until it is started, so there is no one to claim), though a
    /// command of any kind may take a free value ahead of a waiting `wait` command; and while a
    /// dispatch command or an operation waits, nobody takes the value ahead of the queue, so that
    /// one issuer's commands still run in the order it issued them. So the order of
    /// side effects within one priority is not the order of arrival: pick this mode for counters,
    /// caches and statistics, where throughput matters more than order. It does not combine with
    /// ``bounded(maxOvertakes:)``: that mode keeps first-come-first-served hand-offs and lets a
    /// lower priority through; this one keeps priorities strict and relaxes the order within one.
    ///
    /// - Parameter starvationBound: how long a waiting command may be passed over, from its arrival;
    ///   zero hands every release to the first waiting command, as strict priority does.
    /// - Throws: ``QueueSafeValueError/invalidArgument(_:)`` for a negative bound or `.never`.
    public static func eventual(starvationBound: DispatchTimeInterval) throws(QueueSafeValueError)
        -> CommandFairness
    {
        // A bound beyond 292 years (saturated) is as good as none.
        guard let nanoseconds = starvationBound.saturatedNanoseconds else {
            throw .invalidArgument("starvationBound must be finite, got \(starvationBound)")
        }
        guard nanoseconds >= 0 else {
            throw .invalidArgument("starvationBound must not be negative, got \(starvationBound)")
        }
        return CommandFairness(maxOvertakes: nil, bargingBound: UInt64(nanoseconds))
    }

    /// The eventually fair mode's bound, or `nil` for the other modes.
    public var starvationBound: DispatchTimeInterval? {
        // In nanoseconds where they fit an `Int` (32 bits on watchOS: up to 2.1 s), else in the
        // finest unit that holds the bound (at most Int64.max nanoseconds, see `eventual`).
        bargingBound.map { DispatchTimeInterval(finestFitting: Int64(clamping: $0)) }
    }

    /// "strict priority", "at most 8 overtakes", "eventually fair within 1000 µs".
    public var description: String {
        if let bargingBound { return "eventually fair within \(bargingBound / 1_000) µs" }
        return maxOvertakes.map { "at most \($0) overtakes" } ?? "strict priority"
    }
}
