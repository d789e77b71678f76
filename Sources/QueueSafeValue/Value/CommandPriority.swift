// MARK: - CommandPriority

/// The order in which pending commands get the critical section: a higher priority always runs
/// before a lower one, and commands of equal priority run first-come-first-served.
///
/// Priority decides only the order of *waiting* commands. A running command is never preempted,
/// whatever arrives after it. It is not the priority a thread or task runs at: that decides who gets
/// the processor, and the command holding the value inherits the highest of its waiters' (see
/// <doc:GettingStarted>). Under the default ``CommandFairness/strictPriority`` a steady stream of
/// higher-priority commands can starve a lower-priority one; ``CommandFairness/bounded(maxOvertakes:)``
/// bounds that wait.
///
/// Five named levels cover most needs; any `UInt8` is a valid priority (`0` lowest, `255` highest).
///
/// ```swift
/// value.wait.priority(.high).set { $0 += 1 }
/// let current = value.wait.priority(CommandPriority(rawValue: 200)).get()
/// ```
public struct CommandPriority: RawRepresentable, Comparable, Hashable, Sendable, CustomStringConvertible {
    /// The numeric level: `0` is the lowest priority, `255` the highest.
    public let rawValue: UInt8

    /// Creates a priority from its numeric level (`0` lowest, `255` highest). Every value is valid.
    @inlinable
    public init(rawValue: UInt8) {
        self.rawValue = rawValue
    }

    /// Level `0`: runs after every other pending command, so under steady load it can wait without
    /// bound; a value created with `fairness: try .bounded(maxOvertakes: n)` serves it after at most
    /// `n` later arrivals (see ``CommandFairness``).
    @inlinable public static var lowest: CommandPriority { CommandPriority(rawValue: 0) }
    /// Level `64`.
    @inlinable public static var low: CommandPriority { CommandPriority(rawValue: 64) }
    /// Level `128`: the default of ``CommandQueue``.
    @inlinable public static var medium: CommandPriority { CommandPriority(rawValue: 128) }
    /// Level `192`.
    @inlinable public static var high: CommandPriority { CommandPriority(rawValue: 192) }
    /// Level `255`: runs before every other pending command.
    @inlinable public static var highest: CommandPriority { CommandPriority(rawValue: 255) }
    /// The priority of a command issued without one (`value.wait.get()`): `.medium`, so that
    /// explicit priorities can go either side of it.
    @inlinable public static var `default`: CommandPriority { .medium }

    /// `true` when `lhs` runs after `rhs` if both are pending.
    @inlinable
    public static func < (lhs: CommandPriority, rhs: CommandPriority) -> Bool {
        lhs.rawValue < rhs.rawValue
    }

    /// The level's name (`"highest"`) or its number.
    public var description: String {
        switch rawValue {
        case 0: return "lowest"
        case 64: return "low"
        case 128: return "medium"
        case 192: return "high"
        case 255: return "highest"
        default: return "priority(\(rawValue))"
        }
    }
}
