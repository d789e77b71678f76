import Dispatch
import Foundation
import XCTest

@testable import QueueSafeValue

/// Blocking (`wait`), dispatch (`async(performIn:)`) and awaiting (`async`) commands share one
/// queue and one priority order: highest priority first, first-come-first-served within a priority.
final class MixedScheduleOrderTests: XCTestCase {
    private enum Kind: CaseIterable {
        case blocking
        case dispatched
        case awaiting
    }

    /// The commands issued while the value is held: kind and priority, in issue order.
    private static let plan: [(Kind, CommandPriority)] = [
        (.blocking, .medium), (.dispatched, .low), (.awaiting, .high), (.awaiting, .medium),
        (.dispatched, .highest), (.blocking, .low), (.blocking, .highest), (.awaiting, .lowest),
        (.dispatched, .medium), (.awaiting, .highest), (.blocking, .high), (.dispatched, .lowest),
        (.awaiting, .low), (.blocking, .lowest), (.dispatched, .high), (.awaiting, CommandPriority(rawValue: 200)),
        (.blocking, CommandPriority(rawValue: 200)), (.dispatched, .medium),
    ]

    /// The order the plan must run in: priority descending, then issue order.
    private static var expectedOrder: [Int] {
        plan.indices.sorted { lhs, rhs in
            plan[lhs].1 != plan[rhs].1 ? plan[lhs].1 > plan[rhs].1 : lhs < rhs
        }
    }

    /// Issues the plan one command at a time, waiting after each until the engine counts it as
    /// pending, so the issue order is exactly the plan's order. Each command's closure logs its
    /// index (inside the critical section) and adds one to the value.
    private func issuePlan(
        on value: QueueSafeValue<Int>,
        log: ConcurrencyRecorder<Int>,
        finished: ConcurrencyCounter
    ) async throws -> [Task<Int, any Error>] {
        let engine = value.storage.engine
        let dispatchQueue = DispatchQueue(label: "mixed.dispatch")
        var tasks: [Task<Int, any Error>] = []
        for (index, (kind, priority)) in Self.plan.enumerated() {
            let pendingBefore = engine.pendingCount
            switch kind {
            case .blocking:
                concurrencyStartThread {
                    let result = value.wait.priority(priority).set { value in
                        log.append(index)
                        value += 1
                    }
                    if case .success = result { finished.increment() }
                }
            case .dispatched:
                value.async(performIn: dispatchQueue).priority(priority).set(
                    accessClosure: { value in
                        log.append(index)
                        value += 1
                    },
                    completion: { result in
                        if case .success = result { finished.increment() }
                    })
            case .awaiting:
                tasks.append(
                    Task {
                        let result = try await value.async.priority(priority).set { value in
                            log.append(index)
                            await Task.yield()
                            value += 1
                        }
                        finished.increment()
                        return result
                    })
            }
            try await concurrencyWaitUntil("command \(index) (\(kind), \(priority)) is queued") {
                engine.pendingCount == pendingBefore + 1
            }
        }
        return tasks
    }

    private func waitForPlan(
        _ tasks: [Task<Int, any Error>],
        finished: ConcurrencyCounter,
        value: QueueSafeValue<Int>
    ) async throws {
        try await concurrencyWithTimeout {
            for task in tasks { _ = try await task.value }
        }
        try await concurrencyWaitUntil("every command finished") { finished.value == Self.plan.count }
    }

    func test_mixedCommands_whileAnAwaitingCommandHoldsTheValue_runInOnePriorityOrder() async throws {
        let value = QueueSafeValue(value: 0)
        let log = ConcurrencyRecorder<Int>()
        let finished = ConcurrencyCounter()
        let gate = ConcurrencyGate()
        let entered = ConcurrencyCounter()
        let holder = Task {
            try await value.async.lowestPriority.set { value in
                entered.increment()
                await gate.wait()
                value = 1_000
            }
        }
        try await concurrencyWaitUntil("the holder holds the value") { entered.value == 1 }

        let tasks = try await issuePlan(on: value, log: log, finished: finished)
        XCTAssertEqual(log.events, [], "a command ran while the value was held")
        gate.open()
        _ = try await holder.value
        try await waitForPlan(tasks, finished: finished, value: value)

        XCTAssertEqual(log.events, Self.expectedOrder)
        let final = try await value.async.highestPriority.get()
        XCTAssertEqual(final, 1_000 + Self.plan.count)
    }

    func test_mixedCommands_whileABlockingManualCompletionCommandHoldsTheValue_runInOnePriorityOrder() async throws {
        let value = QueueSafeValue(value: 0)
        let log = ConcurrencyRecorder<Int>()
        let finished = ConcurrencyCounter()
        let completion = ConcurrencyRecorder<CommandCompletionClosure>()
        let holderDone = ConcurrencyCounter()
        concurrencyStartThread {
            value.wait.lowestPriority.set(manualCompletion: { value, done in
                value = 1_000
                completion.append(done)
            })
            holderDone.increment()
        }
        try await concurrencyWaitUntil("the holder holds the value") { completion.count == 1 }

        let tasks = try await issuePlan(on: value, log: log, finished: finished)
        XCTAssertEqual(log.events, [], "a command ran while the value was held")
        completion.events[0]()
        try await waitForPlan(tasks, finished: finished, value: value)
        try await concurrencyWaitUntil("the holder's thread returned") { holderDone.value == 1 }

        XCTAssertEqual(log.events, Self.expectedOrder)
        let final = try await value.async.highestPriority.get()
        XCTAssertEqual(final, 1_000 + Self.plan.count)
    }

    func test_mixedCommands_whileADispatchManualCompletionCommandHoldsTheValue_runInOnePriorityOrder() async throws {
        let value = QueueSafeValue(value: 0)
        let log = ConcurrencyRecorder<Int>()
        let finished = ConcurrencyCounter()
        let completion = ConcurrencyRecorder<CommandCompletionClosure>()
        value.async(performIn: DispatchQueue(label: "mixed.holder")).lowestPriority.set(
            manualCompletion: { value, done in
                value = 1_000
                completion.append(done)
            })
        try await concurrencyWaitUntil("the holder holds the value") { completion.count == 1 }

        let tasks = try await issuePlan(on: value, log: log, finished: finished)
        XCTAssertEqual(log.events, [], "a command ran while the value was held")
        completion.events[0]()
        try await waitForPlan(tasks, finished: finished, value: value)

        XCTAssertEqual(log.events, Self.expectedOrder)
        let final = try await value.async.highestPriority.get()
        XCTAssertEqual(final, 1_000 + Self.plan.count)
    }

    /// Hand-offs between the three kinds under load: no update is lost and no command is stranded.
    func test_mixedCommands_underContention_loseNoUpdate_andNeverOverlap() async throws {
        let value = QueueSafeValue(value: 0)
        let recorder = ConcurrencyRecorder<Int>()
        let perKind = 150
        let threads = 3
        let dispatchQueue = DispatchQueue(label: "mixed.contention", attributes: .concurrent)
        let finished = ConcurrencyCounter()

        for thread in 0..<threads {
            concurrencyStartThread {
                for index in 0..<perKind / threads {
                    _ = value.wait.priority(CommandPriority(rawValue: UInt8((index + thread) % 4 * 64))).set {
                        recorder.enter()
                        $0 += 1
                        recorder.leave()
                    }
                }
                finished.increment()
            }
        }
        for index in 0..<perKind {
            value.async(performIn: dispatchQueue).priority(CommandPriority(rawValue: UInt8(index % 4 * 64))).set(
                accessClosure: {
                    recorder.enter()
                    $0 += 1
                    recorder.leave()
                },
                completion: { _ in finished.increment() })
        }
        try await concurrencyWithTimeout {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in 0..<perKind {
                    group.addTask {
                        try await value.async.priority(CommandPriority(rawValue: UInt8(index % 4 * 64))).set {
                            recorder.enter()
                            if index.isMultiple(of: 2) { await Task.yield() }
                            $0 += 1
                            recorder.leave()
                        }
                    }
                }
                try await group.waitForAll()
            }
        }
        try await concurrencyWaitUntil("blocking and dispatch commands finished") {
            finished.value == threads + perKind
        }
        XCTAssertEqual(recorder.maxInside, 1)
        let final = try await value.async.highestPriority.get()
        XCTAssertEqual(final, 3 * perKind)
        XCTAssertEqual(value.storage.engine.pendingCount, 0)
    }
}
