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

    private init(maxOvertakes: Int?) {
        self.maxOvertakes = maxOvertakes
    }

    /// Highest priority first, always; first come, first served within a priority. A steady stream
    /// of higher-priority commands can starve a lower-priority one. The default.
    public static let strictPriority = CommandFairness(maxOvertakes: nil)

    /// Strict priority, except that no waiting command is passed over by more than `maxOvertakes`
    /// commands that arrived after it. `0` is first come, first served, whatever the priorities.
    /// - Throws: ``QueueSafeValueError/invalidArgument(_:)`` for a negative `maxOvertakes`.
    public static func bounded(maxOvertakes: Int) throws(QueueSafeValueError) -> CommandFairness {
        guard maxOvertakes >= 0 else {
            throw .invalidArgument("maxOvertakes must not be negative, got \(maxOvertakes)")
        }
        return CommandFairness(maxOvertakes: maxOvertakes)
    }

    /// "strict priority", "at most 8 overtakes".
    public var description: String {
        maxOvertakes.map { "at most \($0) overtakes" } ?? "strict priority"
    }
}
