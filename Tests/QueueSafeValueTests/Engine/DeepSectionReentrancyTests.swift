import Testing

@testable import QueueSafeValue

/// A task keeps the first three sections it is inside in its task-local stack and the deeper ones
/// in a second task-local: reentrancy is refused at every depth, from the task and from its child
/// tasks, and nothing of a section is left once it ended.
@Suite("Reentrancy of deeply nested sections")
struct DeepSectionReentrancyTests {
    /// Enters `values[index...]` one inside the other, then runs `innermost` inside all of them.
    private static func nest(
        _ values: [QueueSafeValue<Int>],
        from index: Int = 0,
        _ innermost: @escaping @Sendable () async -> [QueueSafeValueError?]
    ) async -> [QueueSafeValueError?] {
        guard index < values.count else { return await innermost() }
        do {
            return try await values[index].async.highestPriority.map { _ in
                await nest(values, from: index + 1, innermost)
            }
        } catch {
            Issue.record("entering section \(index) failed: \(error)")
            return []
        }
    }

    private static func error(_ body: () async throws -> Void) async -> QueueSafeValueError? {
        do {
            try await body()
            return nil
        } catch {
            return error as? QueueSafeValueError
        }
    }

    @Test("inside up to six sections at once, each refuses the task and its child tasks", arguments: [1, 3, 4, 6])
    func everyDepthRefusesReentry(depth: Int) async throws {
        let values = (0..<depth).map { QueueSafeValue(value: $0) }
        let errors = try await withThrowingTaskGroup(of: [QueueSafeValueError?]?.self) { group in
            group.addTask {
                await Self.nest(values) {
                    var errors: [QueueSafeValueError?] = []
                    for value in values {
                        errors.append(await Self.error { _ = try await value.async.lowestPriority.get() })
                        async let fromChild = Self.error { _ = try await value.async.lowestPriority.get() }
                        errors.append(await fromChild)
                    }
                    return errors
                }
            }
            // A bounded wait: a missed refusal would wait for its own task forever.
            group.addTask {
                try await Task.sleep(nanoseconds: 10_000_000_000)
                return nil
            }
            let first = try await group.next()!
            group.cancelAll()
            return try #require(first, "a reentrant command waited instead of failing")
        }
        #expect(errors == Array(repeating: QueueSafeValueError.reentrantAccess, count: 2 * depth))
        // After the sections ended, the same task gets every value.
        for (index, value) in values.enumerated() {
            #expect(try await value.async.highestPriority.get() == index)
        }
    }
}
