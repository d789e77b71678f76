import Dispatch
import QueueSafeValue
import Testing

/// The original library's type names still compile and name the same types. The tests are marked
/// deprecated themselves: inside a deprecated declaration, using a deprecated name is not a
/// warning, while a name that did not exist (or named another type) would still fail to compile.
@Suite(.runsAlongsideOthers) struct DeprecatedNamesTests {
    @available(*, deprecated, message: "uses the original library's deprecated names on purpose")
    @Test func schedulerNames_nameTheSchedules() {
        #expect(SyncScheduler<Int>.self == WaitSchedule<Int>.self)
        #expect(AsyncScheduler<Int>.self == DispatchSchedule<Int>.self)

        let value = QueueSafeValue(value: 1)
        let wait: SyncScheduler<Int> = value.wait
        #expect(wait.highestPriority.set { $0 += 1 } == .success(2))
        let dispatch: AsyncScheduler<Int> = value.async(performIn: .global())
        let delivered = DispatchSemaphore(value: 0)
        dispatch.lowestPriority.set(newValue: 3) { _ in delivered.signal() }
        delivered.wait()
        #expect(value.wait.lowestPriority.get() == .success(3))
    }

    @available(*, deprecated, message: "uses the original library's deprecated names on purpose")
    @Test func syncedCommandNames_nameWaitCommands() {
        #expect(SyncedCommandsWithPriority<Int>.self == WaitCommands<Int>.self)
        #expect(HighestPrioritySyncedCommands<Int>.self == WaitCommands<Int>.self)
        #expect(LowestPrioritySyncedCommands<Int>.self == WaitCommands<Int>.self)

        // As the original's specs used them: per-priority properties, and the common type.
        let value = QueueSafeValue(value: "a")
        let highest: HighestPrioritySyncedCommands<String> = value.wait.highestPriority
        let lowest: LowestPrioritySyncedCommands<String> = value.wait.lowestPriority
        let either: [SyncedCommandsWithPriority<String>] = [highest, lowest]
        #expect(either[0].set(newValue: "b") == .success("b"))
        #expect(either[1].map { $0 + "!" } == .success("b!"))
    }

    @available(*, deprecated, message: "uses the original library's deprecated names on purpose")
    @Test func asyncedCommandNames_nameTheDispatchSchedule() {
        #expect(AsyncedCommandsWithPriority<Int>.self == DispatchSchedule<Int>.self)
        #expect(HighestPriorityAsyncedCommands<Int>.self == DispatchSchedule<Int>.self)
        #expect(LowestPriorityAsyncedCommands<Int>.self == DispatchSchedule<Int>.self)

        let value = QueueSafeValue(value: 0)
        let highest: HighestPriorityAsyncedCommands<Int> = value.async(performIn: .global()).highestPriority
        let lowest: LowestPriorityAsyncedCommands<Int> = value.async(performIn: .global()).lowestPriority
        let either: [AsyncedCommandsWithPriority<Int>] = [highest, lowest]
        let delivered = DispatchSemaphore(value: 0)
        for commands in either {
            commands.set(accessClosure: { $0 += 1 }, completion: { _ in delivered.signal() })
        }
        delivered.wait()
        delivered.wait()
        #expect(value.wait.lowestPriority.get() == .success(2))
    }
}
