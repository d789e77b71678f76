import Dispatch
import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue
@testable import QueueSafeValueTesting  // SplitMix64, the explorer's seeded generator

/// Randomized, seeded contention tests: several threads issue random sequences of blocking and
/// dispatch commands of random priorities against one value, and the outcome is checked against a
/// model. Set `QSV_TEST_SEED` (decimal or 0x-hex) to replay a printed seed.
@Suite(.runsAlongsideOthers) struct RandomizedStressTests {
    /// One command a thread issued: who, its place in that thread's sequence, its priority.
    struct Operation: Hashable, Sendable, CustomStringConvertible {
        let thread: Int
        let sequence: Int
        let priority: UInt8
        let mutates: Bool

        var description: String { "t\(thread)#\(sequence)@\(priority)" }
    }

    private static let defaultSeed: UInt64 = 0x51AB_1E5E_ED00_2024

    private static var seed: UInt64 {
        guard let text = ProcessInfo.processInfo.environment["QSV_TEST_SEED"] else { return defaultSeed }
        if text.hasPrefix("0x") { return UInt64(text.dropFirst(2), radix: 16) ?? defaultSeed }
        return UInt64(text) ?? defaultSeed
    }

    // MARK: Random sequences against a model

    @Test func randomBlockingAndDispatchCommands_matchModel_andKeepEachThreadsOrderWithinPriority() throws {
        let seed = Self.seed
        print("RandomizedStressTests seed: 0x\(String(seed, radix: 16)) (set QSV_TEST_SEED to replay)")
        let threadCount = 4
        let perThread = TestEnvironment.iterations(4_000, sanitized: 1_500)

        let value = QueueSafeValue(value: [Operation]())
        let trace = Recorder<Operation>()
        let probe = SectionProbe()
        let dispatched = DispatchGroup()
        let queues = [
            DispatchQueue(label: "stress-a"), DispatchQueue(label: "stress-b"), .global(), .global(qos: .utility),
        ]
        let issued = Locked<[[Operation]]>(Array(repeating: [], count: threadCount))
        let threads = ThreadGroup()

        for thread in 0..<threadCount {
            threads.spawn {
                var random = SplitMix64(seed: seed &+ UInt64(thread) &* 0x9E37_79B9)
                var mine: [Operation] = []
                for sequence in 0..<perThread {
                    let priority = CommandPriority.testPriorities.randomElement(using: &random)!
                    let kind = Int.random(in: 0..<10, using: &random)
                    let operation = Operation(
                        thread: thread, sequence: sequence, priority: priority.rawValue, mutates: kind % 2 == 0)
                    mine.append(operation)
                    let queue = queues.randomElement(using: &random)!
                    let asyncDone = Bool.random(using: &random)
                    Self.issue(
                        kind: kind, operation: operation, priority: priority, asyncDone: asyncDone, value: value,
                        queue: queue, trace: trace, probe: probe, group: dispatched)
                }
                issued.withLock { $0[thread] = mine }
            }
        }
        threads.join()
        waitOrFail(dispatched, "every dispatch command to finish")

        let ran = trace.snapshot
        let all = issued.value.flatMap { $0 }
        #expect(probe.maximumInside == 1, "two closures ran inside the critical section at once")
        #expect(ran.count == all.count, "commands were lost or ran twice")
        #expect(Set(ran) == Set(all), "the commands that ran are not the commands issued")
        // No lost update: the value holds exactly the mutating commands, in the order they ran.
        #expect(value.waitBounded.lowestPriority.get() == .success(ran.filter(\.mutates)))
        #expect(value.engine.pendingCount == 0)

        // Per thread: every earlier command of the same or a higher priority ran before.
        let position = Dictionary(ran.enumerated().map { ($1, $0) }, uniquingKeysWith: { first, _ in first })
        var violations: [String] = []
        for commands in issued.value {
            // The latest-running earlier command of each priority, so far in this thread's sequence.
            var latestByPriority: [UInt8: (position: Int, operation: Operation)] = [:]
            for later in commands {
                guard let laterPosition = position[later] else { continue }
                for (priority, earlier) in latestByPriority
                where priority >= later.priority && earlier.position > laterPosition {
                    violations.append("\(earlier.operation) ran after \(later)")
                }
                if laterPosition > latestByPriority[later.priority]?.position ?? -1 {
                    latestByPriority[later.priority] = (laterPosition, later)
                }
            }
        }
        #expect(violations.count == 0, "order violations (first 10): \(violations.prefix(10))")
    }

    /// Issues command form `kind` (even kinds mutate the value, odd kinds only read it); every form
    /// records `operation` in `trace` from inside the critical section.
    private static func issue(
        kind: Int,
        operation: Operation,
        priority: CommandPriority,
        asyncDone: Bool,
        value: QueueSafeValue<[Operation]>,
        queue: DispatchQueue,
        trace: Recorder<Operation>,
        probe: SectionProbe,
        group: DispatchGroup
    ) {
        @Sendable func enter() {
            probe.enter()
            trace.append(operation)
        }
        let blocking = value.wait.priority(priority)
        let dispatch = value.async(performIn: queue).priority(priority)
        switch kind {
        case 0:
            blocking.set { operations in
                enter()
                operations.append(operation)
                probe.leave()
            }
        case 1:
            blocking.get { _ in
                enter()
                probe.leave()
            }
        case 2:
            blocking.set { operations, done in
                enter()
                operations.append(operation)
                probe.leave()
                if asyncDone { DispatchQueue.global().async { done() } } else { done() }
            }
        case 3:
            _ = blocking.map { _ in
                enter()
                probe.leave()
            }
        case 4:
            group.enter()
            dispatch.set { operations in
                enter()
                operations.append(operation)
                probe.leave()
            } completion: { _ in
                group.leave()
            }
        case 5:
            group.enter()
            dispatch.get { _ in
                enter()
                probe.leave()
                group.leave()
            }
        case 6:
            group.enter()
            dispatch.set { operations, done in
                enter()
                if asyncDone {
                    operations.append(operation)
                    probe.leave()
                    DispatchQueue.global().async { done() }
                } else {
                    // done() first: the section must stay held until the closure returns.
                    done()
                    operations.append(operation)
                    probe.leave()
                }
            } completion: { _ in
                group.leave()
            }
        case 7:
            group.enter()
            dispatch.get { _, done in
                enter()
                probe.leave()
                if asyncDone { DispatchQueue.global().async { done() } } else { done() }
                group.leave()
            }
        case 8:
            blocking.set { operations, done in
                enter()
                // done() first: the section must stay held until the closure returns.
                done()
                operations.append(operation)
                probe.leave()
            }
        default:
            group.enter()
            dispatch.map { _ in
                enter()
                probe.leave()
            } completion: { _ in
                group.leave()
            }
        }
    }

    // MARK: All schedules together

    @Test func allSchedulesUnderContention_neverOverlap_andLoseNoUpdate() async throws {
        let perWorker = TestEnvironment.iterations(1_000, sanitized: 500)
        let value = QueueSafeValue(value: 0)
        let probe = SectionProbe()
        let dispatched = DispatchGroup()
        let threads = ThreadGroup()
        // Blocking commands from threads.
        for worker in 0..<3 {
            threads.spawn {
                for step in 0..<perWorker {
                    value.wait.priority(
                        CommandPriority.testPriorities[(worker + step) % CommandPriority.testPriorities.count]
                    ).set { counter in
                        probe.enter()
                        counter += 1
                        probe.leave()
                    }
                }
            }
        }
        // Dispatch commands issued from threads.
        for worker in 0..<2 {
            threads.spawn {
                for step in 0..<perWorker {
                    dispatched.enter()
                    value.async(performIn: .global()).priority(CommandPriority.testPriorities[(worker * 3 + step) % 7])
                        .set {
                            counter in
                            probe.enter()
                            counter += 1
                            probe.leave()
                        } completion: { _ in
                            dispatched.leave()
                        }
                }
            }
        }
        // Awaiting commands from tasks.
        var tasks: [Task<Void, Never>] = []
        for worker in 0..<2 {
            tasks.append(
                Task.detached {
                    for step in 0..<perWorker {
                        _ = try? await value.async.priority(CommandPriority.testPriorities[(worker + step) % 7]).set {
                            counter in
                            probe.enter()
                            counter += 1
                            probe.leave()
                        }
                    }
                })
        }
        try await threads.join()
        let awaited = tasks
        try await withHangTimeout { for task in awaited { await task.value } }
        waitOrFail(dispatched, "the dispatch commands")
        #expect(probe.maximumInside == 1, "two closures ran inside the critical section at once")
        #expect(value.waitBounded.lowestPriority.get() == .success(7 * perWorker))
        #expect(value.engine.pendingCount == 0)
    }
}
