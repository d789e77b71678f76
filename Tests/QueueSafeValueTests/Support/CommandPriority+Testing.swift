@_spi(Testing) @testable import QueueSafeValue

extension CommandPriority {
    /// The priorities the tests draw from: the five named levels and two unnamed ones.
    static let testPriorities: [CommandPriority] = [
        .lowest, .low, .medium, .high, .highest, CommandPriority(rawValue: 1), CommandPriority(rawValue: 200),
    ]

    /// The order the engine promises for commands issued in index order with these priorities:
    /// priority descending, issue order within a priority.
    static func expectedRunOrder(_ priorities: [CommandPriority]) -> [Int] {
        priorities.indices.sorted { lhs, rhs in
            priorities[lhs] != priorities[rhs] ? priorities[lhs] > priorities[rhs] : lhs < rhs
        }
    }
}
