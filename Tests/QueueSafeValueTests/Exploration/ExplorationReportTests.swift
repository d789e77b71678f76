import Dispatch
import Foundation
import QueueSafeValue
import QueueSafeValueTesting
import Testing

/// Issue 42: what an exploration's failure says. Each decision of its trace names the command the
/// party reached (its kind and the value's label); a replay reports itself as a replay of the
/// strategy that found the schedule; and explorations run safely in parallel tests, each finding
/// exactly what it finds alone.
@Suite("Exploration: its reports")
struct ExplorationReportTests {
    /// Two withdrawals that read and write in two commands: the lost update.
    static func lostUpdate(_ scenario: Exploration.Scenario) {
        let balance = QueueSafeValue(value: 100, label: "balance")
        for name in ["A", "B"] {
            scenario.thread(name) {
                let current = try balance.wait.read { $0 }
                try balance.wait.withLock { $0 = current - 30 }
            }
        }
        scenario.check {
            try Exploration.require(try balance.wait.read { $0 } == 40, "a withdrawal was lost")
        }
    }

    @Test func eachDecision_namesTheCommandThePartyReached() throws {
        let failure = try #require(throws: ExplorationFailure.self) {
            try Exploration.explore(.exhaustive(preemptionBound: 2), Self.lostUpdate)
        }
        // "1: A: a blocking read arrives at 'balance'", "3: B (preempting): a blocking command
        // arrives at 'balance'", …
        #expect(failure.decisions.contains { $0.contains("a blocking read arrives at 'balance'") }, "\(failure)")
        #expect(failure.decisions.contains { $0.contains("a blocking command arrives at 'balance'") }, "\(failure)")
        #expect(failure.decisions.allSatisfy { $0.contains(": ") }, "\(failure.decisions)")
        #expect(failure.description.contains("arrives at 'balance'"))
    }

    /// Issue 55: two task parties race a read-then-write, one of them sleeping in between. The
    /// first schedule fails (B writes while A sleeps, then A writes over it); B's steps are forced
    /// moves (A sleeps, so only B can go on) and A's last steps run in jobs its task got after the
    /// sleep. The trace names a party in every step and shows B's write before A's.
    @Test func aTwoTaskRace_namesBothPartiesInEveryStep_andShowsTheWriteThatCameFirst() throws {
        guard #available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *) else { return }
        let failure = try #require(throws: ExplorationFailure.self) {
            try Exploration.explore(.exhaustive(preemptionBound: 2)) { scenario in
                let shared = QueueSafeValue(value: 0, label: "shared")
                scenario.task("A") {
                    let seen = try await shared.async.read { $0 }
                    try await Exploration.sleep(nanoseconds: 1_000_000_000)
                    try await shared.async.withLock { $0 = seen + 1 }
                }
                scenario.task("B") {
                    let seen = try await shared.async.read { $0 }
                    try await shared.async.withLock { $0 = seen + 1 }
                }
                scenario.check {
                    try Exploration.require(try shared.wait.read { $0 } == 2, "an increment was lost")
                }
            }
        }
        #expect(failure.message.contains("an increment was lost"), "\(failure)")
        // The trace's lines: those between the header and the replay string, each indented.
        let lines = failure.description.split(separator: "\n").map(String.init).filter { $0.hasPrefix("  ") }
        #expect(!lines.isEmpty, "\(failure)")
        for line in lines {
            #expect(line.contains("task 'A'") || line.contains("task 'B'"), "a step names no party: \(line)")
            #expect(!line.contains("a task"), "a step lost its party's name: \(line)")
        }
        // Both writes are in the trace, B's first (it came while A slept: a forced move).
        let writeOfB = lines.firstIndex { $0.contains("task 'B'") && $0.contains("command releases 'shared'") }
        let writeOfA = lines.firstIndex { $0.contains("task 'A'") && $0.contains("command arrives at 'shared'") }
        #expect(writeOfB != nil && writeOfA != nil, "\(failure)")
        if let writeOfB, let writeOfA { #expect(writeOfB < writeOfA, "\(failure)") }
    }

    /// The tasks the library starts for a party (here a `CommandQueue`'s operations) are numbered
    /// and named after the party they work for, in every step too.
    @Test func tasksTheLibraryStarts_areNamedAfterThePartyTheyWorkFor() throws {
        guard #available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *) else { return }
        let failure = try #require(throws: ExplorationFailure.self) {
            try Exploration.explore(.exhaustive(preemptionBound: 0)) { scenario in
                let loads = CommandQueue(label: "loads")
                let cache = QueueSafeValue(value: 0, label: "cache")
                scenario.task("loader") {
                    let first = loads.enqueue { try await cache.async.withLock { $0 += 1 } }
                    let second = loads.enqueue { try await cache.async.withLock { $0 += 1 } }
                    try await first.value
                    try await second.value
                }
                scenario.check { try Exploration.require(false, "shows the trace") }
            }
        }
        let operation = "library task 1 (for task 'loader'): an awaiting command arrives at 'cache'"
        #expect(failure.steps.contains { $0.hasSuffix(operation) }, "\(failure)")
        #expect(failure.steps.contains { $0.contains("library task 2 (for task 'loader')") }, "\(failure)")
        #expect(failure.steps.contains { $0.hasSuffix("task 'loader': resumes") }, "\(failure)")
        #expect(!failure.steps.contains { $0.contains("a task") }, "\(failure)")
    }

    /// A trace longer than the description shows keeps its last steps and says where the rest are.
    @Test func aLongTrace_showsItsLastSteps_andSaysWhereTheOthersAre() throws {
        let failure = try #require(throws: ExplorationFailure.self) {
            try Exploration.explore(.exhaustive(preemptionBound: 0)) { scenario in
                let value = QueueSafeValue(value: 0, label: "counter")
                scenario.thread("counter") { for _ in 0..<50 { try value.wait.withLock { $0 += 1 } } }
                scenario.check { try Exploration.require(false, "shows the trace") }
            }
        }
        // A lone party's every step is a forced move: 1 start and 2 points per command.
        #expect(failure.steps.count == 101, "\(failure.steps.count)")
        #expect(failure.decisions.isEmpty)
        #expect(failure.steps.allSatisfy { $0.hasPrefix("-: counter: ") }, "\(failure.steps)")
        let lines = failure.description.split(separator: "\n")
        #expect(lines.filter { $0.hasPrefix("  -: counter") }.count == 60, "\(failure)")
        #expect(failure.description.contains("the last 60 (41 before them are in `steps`)"), "\(failure)")
        #expect(lines.dropLast().last?.hasSuffix("a blocking command releases 'counter'") == true, "\(failure)")
    }

    @Test func aReplay_reportsItselfAsAReplayOfItsStrategy() throws {
        for strategy in [
            Exploration.Strategy.exhaustive(preemptionBound: 2), .random(seed: 5), .pct(depth: 2, seed: 7),
        ] {
            let failure = try #require(throws: ExplorationFailure.self) {
                try Exploration.explore(strategy, schedules: 500, Self.lostUpdate)
            }
            let replayed = try #require(throws: ExplorationFailure.self) {
                try Exploration.explore(replay: failure.replay, Self.lostUpdate)
            }
            #expect(replayed.strategy.description == "replay of \(strategy)", "\(replayed.strategy)")
            #expect(replayed.description.contains("(replay of \(strategy))"), "\(replayed)")
            #expect(replayed.replay == failure.replay, "a replay's own replay string is the one it came from")
            // A replay of the replay is still a replay of the strategy that found it.
            let again = try #require(throws: ExplorationFailure.self) {
                try Exploration.explore(replay: replayed.replay, Self.lostUpdate)
            }
            #expect(again.strategy.description == "replay of \(strategy)")
            #expect(again.decisions == failure.decisions)
        }
    }

    /// Explorations may run in parallel (Swift Testing runs tests in parallel by default): each
    /// world has its own threads, scheduler, deadlock detector and priority registry. Four at once
    /// find the same failure on the same schedule, and explore the same number of schedules of the
    /// fixed code, as one alone.
    @Test func explorationsInParallel_eachFindWhatTheyFindAlone() async throws {
        let alone = try #require(throws: ExplorationFailure.self) {
            try Exploration.explore(.exhaustive(preemptionBound: 2), Self.lostUpdate)
        }
        let fixedAlone = try Exploration.explore(.exhaustive(preemptionBound: 2)) { scenario in
            let balance = QueueSafeValue(value: 100, label: "balance")
            for name in ["A", "B"] { scenario.thread(name) { try balance.wait.withLock { $0 -= 30 } } }
        }
        let outcomes = await withTaskGroup(of: (ExplorationFailure?, Int).self) { group in
            for _ in 0..<4 {
                group.addTask {
                    await withCheckedContinuation { continuation in
                        Thread {
                            let failure = #expect(throws: ExplorationFailure.self) {
                                try Exploration.explore(.exhaustive(preemptionBound: 2), Self.lostUpdate)
                            }
                            let fixed = try? Exploration.explore(.exhaustive(preemptionBound: 2)) { scenario in
                                let balance = QueueSafeValue(value: 100, label: "balance")
                                for name in ["A", "B"] {
                                    scenario.thread(name) { try balance.wait.withLock { $0 -= 30 } }
                                }
                            }
                            continuation.resume(returning: (failure, fixed?.schedules ?? -1))
                        }.start()
                    }
                }
            }
            var all: [(ExplorationFailure?, Int)] = []
            for await outcome in group { all.append(outcome) }
            return all
        }
        for (failure, fixedSchedules) in outcomes {
            #expect(failure?.schedule == alone.schedule)
            #expect(failure?.decisions == alone.decisions)
            #expect(fixedSchedules == fixedAlone.schedules)
        }
    }
}
