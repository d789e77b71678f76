import Testing

@_spi(Testing) @testable import QueueSafeValue

/// A task keeps the first three sections it is inside in its task-local stack and the deeper ones
/// in a second task-local: reentrancy is refused at every depth, from the task and from its child
/// tasks, and nothing of a section is left once it ended.
@Suite(.runsAlongsideOthers) struct DeepSectionReentrancyTests {
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

    @Test("inside up to six sections at once, each refuses the task and its child tasks", arguments: [1, 3, 4, 6])
    func everyDepthRefusesReentry(depth: Int) async throws {
        let values = (0..<depth).map { QueueSafeValue(value: $0) }
        // A missed refusal would wait for its own task forever: the hang timeout turns it into a failure.
        let errors = try await withHangTimeout {
            await Self.nest(values) {
                var errors: [QueueSafeValueError?] = []
                for value in values {
                    errors.append(await thrownError { try await value.async.lowestPriority.get() })
                    async let fromChild = thrownError { try await value.async.lowestPriority.get() }
                    errors.append(await fromChild)
                }
                return errors
            }
        }
        #expect(errors == Array(repeating: QueueSafeValueError.reentrantAccess, count: 2 * depth))
        // After the sections ended, the same task gets every value.
        for (index, value) in values.enumerated() {
            #expect(try await value.async.highestPriority.get() == index)
        }
    }
}
