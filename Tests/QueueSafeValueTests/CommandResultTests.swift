import Testing

@_spi(Testing) @testable import QueueSafeValue

/// What each command returns and leaves behind, through every schedule at every priority: the same
/// body for `wait`, `wait(timeout:)`, `async(performIn:)` and `async`. (What only one schedule does,
/// such as the queue a dispatch command runs on or a closure that awaits, is tested with it.)
@Suite(.runsAlongsideOthers) struct CommandResultTests {
    @Test(arguments: Schedule.allCases, CommandPriority.testPriorities)
    func get_returnsTheCurrentValue(schedule: Schedule, priority: CommandPriority) async {
        let value = QueueSafeValue(value: 42)
        #expect(await schedule.get(value, priority: priority) == .success(42))
        #expect(await schedule.get(value, priority: priority) == .success(42), "a get changed the value")
    }

    @Test(arguments: Schedule.allCases, CommandPriority.testPriorities)
    func setNewValue_replacesTheValue_andReturnsIt(schedule: Schedule, priority: CommandPriority) async {
        let value = QueueSafeValue(value: "old")
        #expect(await schedule.set(value, priority: priority, newValue: "new") == .success("new"))
        for reader in Schedule.allCases {
            #expect(await reader.get(value, priority: .lowest) == .success("new"), "read through \(reader)")
        }
    }

    @Test(arguments: Schedule.allCases, CommandPriority.testPriorities)
    func setWithAccessClosure_mutatesInPlace_andReturnsTheUpdatedValue(
        schedule: Schedule,
        priority: CommandPriority
    ) async {
        let value = QueueSafeValue(value: [1, 2])
        #expect(await schedule.set(value, priority: priority) { $0.append(3) } == .success([1, 2, 3]))
        #expect(await schedule.set(value, priority: priority) { $0.removeFirst() } == .success([2, 3]))
        for reader in Schedule.allCases {
            #expect(await reader.get(value, priority: .lowest) == .success([2, 3]), "read through \(reader)")
        }
    }

    @Test(arguments: Schedule.allCases, CommandPriority.testPriorities)
    func map_returnsTheTransformedValue_andLeavesTheValueUnchanged(
        schedule: Schedule,
        priority: CommandPriority
    ) async {
        let value = QueueSafeValue(value: 21)
        #expect(await schedule.map(value, priority: priority) { $0 * 2 } == .success(42))
        #expect(await schedule.map(value, priority: priority) { "\($0)" } == .success("21"))
        #expect(await schedule.map(value, priority: priority) { Optional($0) } == .success(21))
        for reader in Schedule.allCases {
            #expect(await reader.get(value, priority: .lowest) == .success(21), "map changed the value (\(reader))")
        }
    }
}
