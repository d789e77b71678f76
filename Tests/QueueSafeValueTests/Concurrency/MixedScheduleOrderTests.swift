import Dispatch
import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

/// Blocking (`wait`), dispatch (`async(performIn:)`) and awaiting (`async`) commands share one
/// queue and one priority order: highest priority first, first-come-first-served within a priority.
@Suite(.runsAlongsideOthers) struct MixedScheduleOrderTests {
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
        log: Recorder<Int>,
        finished: Locked<Int>,
        threads: ThreadGroup
    ) async throws -> [Task<Int, any Error>] {
        let engine = value.engine
        let dispatchQueue = DispatchQueue(label: "mixed.dispatch")
        var tasks: [Task<Int, any Error>] = []
        for (index, (kind, priority)) in Self.plan.enumerated() {
            let pendingBefore = engine.pendingCount
            switch kind {
            case .blocking:
                threads.spawn {
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
            try await waitUntil("command \(index) (\(kind), \(priority)) is queued") {
                engine.pendingCount == pendingBefore + 1
            }
        }
        return tasks
    }

    /// The schedule of the command that holds the value while the plan is issued.
    enum Holder: String, CaseIterable, Sendable {
        /// `value.async`, whose closure waits on a gate.
        case awaiting
        /// `value.wait` with manual completion, from a thread.
        case blockingManualCompletion
        /// `value.async(performIn:)` with manual completion.
        case dispatchManualCompletion
    }

    /// Holds `value` with a command of the given schedule (setting it to 1 000) and returns what
    /// lets it go, once it holds the value.
    private func hold(
        _ value: QueueSafeValue<Int>,
        with holder: Holder,
        threads: ThreadGroup
    ) async throws -> @Sendable () async throws -> Void {
        switch holder {
        case .awaiting:
            let gate = Gate()
            let entered = Locked(0)
            let task = Task {
                try await value.async.lowestPriority.set { value in
                    entered.increment()
                    await gate.wait()
                    value = 1_000
                }
            }
            try await waitUntil("the holder holds the value") { entered.value == 1 }
            return {
                gate.open()
                _ = try await task.value
            }
        case .blockingManualCompletion:
            let completion = Recorder<CommandCompletionClosure>()
            threads.spawn {
                value.wait.lowestPriority.set(manualCompletion: { value, done in
                    value = 1_000
                    completion.append(done)
                })
            }
            try await waitUntil("the holder holds the value") { completion.count == 1 }
            return { completion.snapshot[0]() }
        case .dispatchManualCompletion:
            let completion = Recorder<CommandCompletionClosure>()
            value.async(performIn: DispatchQueue(label: "mixed.holder")).lowestPriority.set(
                manualCompletion: { value, done in
                    value = 1_000
                    completion.append(done)
                })
            try await waitUntil("the holder holds the value") { completion.count == 1 }
            return { completion.snapshot[0]() }
        }
    }

    @Test(arguments: Holder.allCases)
    func mixedCommands_whileAValueIsHeld_runInOnePriorityOrder(holder: Holder) async throws {
        let value = QueueSafeValue(value: 0)
        let log = Recorder<Int>()
        let finished = Locked(0)
        let threads = ThreadGroup()
        let release = try await hold(value, with: holder, threads: threads)

        let tasks = try await issuePlan(on: value, log: log, finished: finished, threads: threads)
        #expect(log.snapshot == [], "a command ran while the value was held")
        try await release()
        try await withHangTimeout {
            for task in tasks { _ = try await task.value }
        }
        try await waitUntil("every command finished") { finished.value == Self.plan.count }
        try await threads.join()

        #expect(log.snapshot == Self.expectedOrder)
        let final = try await value.async.highestPriority.get()
        #expect(final == 1_000 + Self.plan.count)
    }

    /// Hand-offs between the three kinds under load: no update is lost and no command is stranded.
    @Test func mixedCommands_underContention_loseNoUpdate_andNeverOverlap() async throws {
        let value = QueueSafeValue(value: 0)
        let probe = SectionProbe()
        let perKind = 150
        let threads = 3
        let dispatchQueue = DispatchQueue(label: "mixed.contention", attributes: .concurrent)
        let finished = Locked(0)

        let spawned = ThreadGroup()
        for thread in 0..<threads {
            spawned.spawn {
                for index in 0..<perKind / threads {
                    _ = value.wait.priority(CommandPriority(rawValue: UInt8((index + thread) % 4 * 64))).set {
                        probe.enter()
                        $0 += 1
                        probe.leave()
                    }
                }
                finished.increment()
            }
        }
        for index in 0..<perKind {
            value.async(performIn: dispatchQueue).priority(CommandPriority(rawValue: UInt8(index % 4 * 64))).set(
                accessClosure: {
                    probe.enter()
                    $0 += 1
                    probe.leave()
                },
                completion: { _ in finished.increment() })
        }
        try await withHangTimeout {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in 0..<perKind {
                    group.addTask {
                        try await value.async.priority(CommandPriority(rawValue: UInt8(index % 4 * 64))).set {
                            probe.enter()
                            if index.isMultiple(of: 2) { await Task.yield() }
                            $0 += 1
                            probe.leave()
                        }
                    }
                }
                try await group.waitForAll()
            }
        }
        try await waitUntil("blocking and dispatch commands finished") {
            finished.value == threads + perKind
        }
        try await spawned.join()
        #expect(probe.maximumInside == 1)
        let final = try await value.async.highestPriority.get()
        #expect(final == (3 * perKind))
        #expect(value.engine.pendingCount == 0)
    }
}
