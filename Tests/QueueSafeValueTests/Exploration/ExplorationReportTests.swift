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
