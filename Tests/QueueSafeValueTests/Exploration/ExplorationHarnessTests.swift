import Dispatch
import Foundation
import QueueSafeValue
import QueueSafeValueTesting
import Testing

// The harness's own promises, through the public API: virtual time, the failures it reports (and
// how), every kind of party, user points, and its refusals of bad input. The replay and the clock
// are also the targets of the harness's mutants (see `.ci/mutants/run`).
@Suite("Exploration: the harness")
struct ExplorationHarnessTests {
    // MARK: Virtual time

    @Test func sleeps_endOnTheVirtualClock_whichJumpsWhenEveryPartyWaits() throws {
        guard #available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *) else { return }
        let elapsed = Locked<[String: UInt64]>([:])
        let realStart = DispatchTime.now()
        try Exploration.explore(.exhaustive(preemptionBound: 1)) { scenario in
            elapsed.set([:])
            for (name, seconds) in [("half a minute", 30), ("an hour", 3_600)] {
                scenario.task(name) {
                    let start = Exploration.now
                    try await Exploration.sleep(nanoseconds: UInt64(seconds) * 1_000_000_000)
                    let slept = Exploration.now.uptimeNanoseconds - start.uptimeNanoseconds
                    elapsed.withLock { $0[name] = slept }
                }
            }
        }
        // Each sleep ended exactly at its deadline on the virtual clock, in no real time to speak of.
        #expect(elapsed.value == ["half a minute": 30_000_000_000, "an hour": 3_600_000_000_000])
        let real = DispatchTime.now().uptimeNanoseconds - realStart.uptimeNanoseconds
        #expect(real < 20_000_000_000, "the sleeps took real time: \(real) ns")
    }

    @Test func commandTimeouts_passOnTheVirtualClock() throws {
        guard #available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *) else { return }
        let outcome = Locked<String?>(nil)
        try Exploration.explore(.exhaustive(preemptionBound: 1)) { scenario in
            outcome.set(nil)
            let value = QueueSafeValue(value: 0)
            scenario.task("holder") {
                try await value.async.withLock { _ in try await Exploration.sleep(nanoseconds: 60_000_000_000) }
            }
            scenario.task("impatient") {
                try await Exploration.sleep(nanoseconds: 1_000_000_000)
                let start = Exploration.now
                do {
                    try await value.async(timeout: .seconds(5)).withLock { $0 += 1 }
                    outcome.set("ran")
                } catch QueueSafeValueError.timedOut {
                    let waited = Exploration.now.uptimeNanoseconds - start.uptimeNanoseconds
                    outcome.set("timed out after \(waited / 1_000_000_000) s")
                }
            }
        }
        #expect(outcome.value == "timed out after 5 s")
    }

    @Test func recurringExecutorIntervals_runOnTheVirtualClock() throws {
        guard #available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *) else { return }
        let runs = Locked<[UInt64]>([])
        try Exploration.explore(.exhaustive(preemptionBound: 0)) { scenario in
            runs.set([])
            scenario.task("owner") {
                let start = Exploration.now.uptimeNanoseconds
                let executor = RecurringExecutor(policy: try .interval(.seconds(30))) {
                    let at = Exploration.now.uptimeNanoseconds - start
                    runs.withLock { $0.append(at / 1_000_000_000) }
                }
                try await Exploration.sleep(nanoseconds: 100_000_000_000)
                await executor.stopAndWait()
            }
        }
        // The first run one interval after creation, then one per interval, in a 100-second test.
        #expect(runs.value == [30, 60, 90])
    }

    // MARK: Failures

    @Test func everyPartyWaiting_isReported_withWhoWaits() throws {
        let storedDone = Locked<CommandCompletionClosure?>(nil)
        let failure = try #require(throws: ExplorationFailure.self) {
            try Exploration.explore(.exhaustive(preemptionBound: 1)) { scenario in
                let value = QueueSafeValue(value: 0)
                scenario.thread("forgets done()") {
                    // Holds the value until `done` is called, which never happens.
                    value.wait.highestPriority.set { _, done in storedDone.set(done) }
                }
                scenario.thread("reader") { _ = try value.wait.read { $0 } }
            }
        }
        #expect(failure.message.contains("every party waits"), "\(failure)")
        #expect(failure.message.contains("reader waits for its turn"), "\(failure)")
        // And for whom: the value, held by the party that never called done().
        #expect(failure.message.contains("thread 'reader'"), "\(failure)")
        #expect(failure.message.contains("held by thread 'forgets done()'"), "\(failure)")
        storedDone.value?()
    }

    @Test func aPartyThatNeverFinishes_hitsTheStepLimit() throws {
        let failure = try #require(throws: ExplorationFailure.self) {
            try Exploration.explore(.exhaustive(preemptionBound: 0), stepLimit: 2_000) { scenario in
                let flag = QueueSafeValue(value: false)
                scenario.thread("poller") {
                    while try !flag.wait.read({ $0 }) {}  // nobody ever sets it
                }
            }
        }
        #expect(failure.message.contains("more than 2000 steps"), "\(failure)")
    }

    @Test func anErrorAPartyThrows_failsTheSchedule_namingTheParty() throws {
        struct Refused: Error {}
        let failure = try #require(throws: ExplorationFailure.self) {
            try Exploration.explore { scenario in
                scenario.thread("payments") { throw Refused() }
            }
        }
        #expect(failure.message.contains("payments threw: Refused()"), "\(failure)")
        #expect(failure.schedule == 1)
    }

    @Test func aTaskThatNeverFinishes_isReported() throws {
        guard #available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *) else { return }
        let gates = Locked<[Gate]>([])
        let failure = try #require(throws: ExplorationFailure.self) {
            try Exploration.explore { scenario in
                let gate = Gate()  // nobody opens it while the exploration runs
                gates.withLock { $0.append(gate) }
                scenario.task("waits forever") { await gate.wait() }
            }
        }
        #expect(failure.message.contains("task 'waits forever' never finished"), "\(failure)")
        // Let the task end (outside the exploration), or it would leak.
        for gate in gates.value { gate.open() }
    }

    /// Issue 55: `require`'s message may throw (`"\(try count())"` compiles); it is evaluated only
    /// when the requirement fails, and a message that throws still fails the requirement, saying
    /// what it threw.
    @Test func require_takesAMessageThatThrows() throws {
        struct Unreadable: Error {}
        func count(_ value: QueueSafeValue<Int>) throws -> Int { try value.wait.read { $0 } }
        func unreadable() throws -> String { throw Unreadable() }
        let failure = try #require(throws: ExplorationFailure.self) {
            try Exploration.explore { scenario in
                let value = QueueSafeValue(value: 1)
                scenario.thread("adder") { try value.wait.withLock { $0 += 1 } }
                scenario.check { try Exploration.require(try count(value) == 3, "the count is \(try count(value))") }
            }
        }
        #expect(failure.message.contains("the count is 2"), "\(failure)")
        try Exploration.require(true, "\(try unreadable())")  // not evaluated
        let error = #expect(throws: (any Error).self) { try Exploration.require(false, "\(try unreadable())") }
        let text = error.map { "\($0)" } ?? ""
        #expect(text.contains("a requirement failed (its message threw Unreadable())"), "\(text)")
    }

    // MARK: Parties of every kind

    @Test func completionHandlerCode_isExploredToo() throws {
        // Check-then-act through dispatch commands: read in one command, write in its completion.
        @Sendable func withdraw(_ balance: QueueSafeValue<Int>, on queue: DispatchQueue, fixed: Bool) {
            if fixed {
                balance.async(performIn: queue).withLock({ $0 -= 30 })
            } else {
                balance.async(performIn: queue).read { result in
                    guard case .success(let current) = result else { return }
                    balance.async(performIn: queue).withLock({ $0 = current - 30 })
                }
            }
        }
        func scenario(fixed: Bool) -> (Exploration.Scenario) -> Void {
            { scenario in
                let balance = QueueSafeValue(value: 100)
                for name in ["A", "B"] {
                    let queue = scenario.queue(name)
                    scenario.async(on: queue, name) { withdraw(balance, on: queue, fixed: fixed) }
                }
                scenario.check {
                    try Exploration.require(try balance.wait.read { $0 } == 40, "a withdrawal was lost")
                }
            }
        }
        let failure = try #require(throws: ExplorationFailure.self) {
            try Exploration.explore(.exhaustive(preemptionBound: 2), scenario(fixed: false))
        }
        #expect(failure.message.contains("a withdrawal was lost"), "\(failure)")
        let report = try Exploration.explore(.exhaustive(preemptionBound: 2), scenario(fixed: true))
        #expect(report.isComplete)
    }

    @Test func userPoints_addInterleavingsBetweenStepsOutsideCommands() throws {
        // A counter behind an NSLock, read and written in two steps: a race only a point exposes.
        func scenario(withPoint: Bool) -> (Exploration.Scenario) -> Void {
            { scenario in
                let counter = Locked(0)
                for name in ["A", "B"] {
                    scenario.thread(name) {
                        let seen = counter.value
                        if withPoint { Exploration.point() }
                        counter.set(seen + 1)
                    }
                }
                scenario.check { try Exploration.require(counter.value == 2, "an increment was lost") }
            }
        }
        // Without the point, only which party starts first is decided: both orders pass.
        let report = try Exploration.explore(.exhaustive(preemptionBound: 2), scenario(withPoint: false))
        #expect(report.isComplete && report.schedules == 2, "\(report)")
        let failure = try #require(throws: ExplorationFailure.self) {
            try Exploration.explore(.exhaustive(preemptionBound: 2), scenario(withPoint: true))
        }
        #expect(failure.message.contains("an increment was lost"))
    }

    // MARK: Budgets and bad input

    @Test func budgets_cutTheExploration_andSaySo() throws {
        let report = try Exploration.explore(.exhaustive(preemptionBound: 3), schedules: 3) { scenario in
            let value = QueueSafeValue(value: 0)
            for name in ["A", "B", "C"] {
                scenario.thread(name) { try value.wait.withLock { $0 += 1 } }
            }
        }
        #expect(report.schedules == 3)
        #expect(!report.isComplete)
    }

    @Test func badInput_isRefusedWithInvalidArgument() {
        let body: (Exploration.Scenario) -> Void = { _ in }
        for attempt in [
            { try Exploration.explore(.exhaustive(preemptionBound: -1), body) },
            { try Exploration.explore(.pct(depth: 0), body) },
            { try Exploration.explore(.exhaustive(), schedules: 0, body) },
            { try Exploration.explore(.exhaustive(), stepLimit: 0, body) },
            { try Exploration.explore(replay: "no colon", body) },
            { try Exploration.explore(replay: "exhaustive(preemptionBound: 2):0?1", body) },
        ] as [() throws -> Exploration.Report] {
            #expect {
                _ = try attempt()
            } throws: { error in
                if case QueueSafeValueError.invalidArgument = error { true } else { false }
            }
        }
    }

    @Test func replayStrings_roundTripLargeChoices() throws {
        // A choice of 36 or more is written in parentheses; a schedule with no decision is empty.
        let failure = try #require(throws: ExplorationFailure.self) {
            try Exploration.explore(.random(seed: 3), schedules: 50) { scenario in
                let value = QueueSafeValue(value: 0)
                for index in 0..<40 {
                    scenario.thread("\(index)") { try value.wait.withLock { $0 += 1 } }
                }
                scenario.check { try Exploration.require(false, "always fails") }
            }
        }
        let replayed = try #require(throws: ExplorationFailure.self) {
            try Exploration.explore(replay: failure.replay) { scenario in
                let value = QueueSafeValue(value: 0)
                for index in 0..<40 {
                    scenario.thread("\(index)") { try value.wait.withLock { $0 += 1 } }
                }
                scenario.check { try Exploration.require(false, "always fails") }
            }
        }
        #expect(failure.replay.contains("("), "\(failure.replay)")
        #expect(replayed.decisions == failure.decisions)
    }
}
