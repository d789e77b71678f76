import Dispatch
import Foundation  // String.contains(_:) with a String at the package's floor (the standard library's needs macOS 13)
import QueueSafeValue
import QueueSafeValueTesting
import Testing

// The worked examples of the "Testing your code" article, through the public API alone (no
// @testable import): each bug is found, its replay string reproduces it, and the fixed code passes
// every explored schedule.
@Suite("Exploration: the article's examples")
struct ExplorationExampleTests {
    // MARK: (a) check-then-act across two commands

    /// A withdrawal that reads the balance in one command and writes it in another.
    static func withdrawInTwoCommands(_ balance: QueueSafeValue<Int>, _ amount: Int) throws {
        let current = try balance.wait.read { $0 }
        guard current >= amount else { return }
        try balance.wait.withLock { $0 = current - amount }
    }

    /// The same withdrawal in one command.
    static func withdrawInOneCommand(_ balance: QueueSafeValue<Int>, _ amount: Int) throws {
        try balance.wait.withLock { value in
            if value >= amount { value -= amount }
        }
    }

    static func twoWithdrawals(
        _ withdraw: @escaping @Sendable (QueueSafeValue<Int>, Int) throws -> Void
    ) -> (Exploration.Scenario) -> Void {
        { scenario in
            let balance = QueueSafeValue(value: 100)
            scenario.thread("A") { try withdraw(balance, 30) }
            scenario.thread("B") { try withdraw(balance, 30) }
            scenario.check {
                try Exploration.require(try balance.wait.read { $0 } == 40, "a withdrawal was lost")
            }
        }
    }

    @Test func checkThenAct_isFound_replays_andOneWithLockFixesIt() throws {
        let failure = try #require(throws: ExplorationFailure.self) {
            try Exploration.explore(.exhaustive(preemptionBound: 2), Self.twoWithdrawals(Self.withdrawInTwoCommands))
        }
        #expect(failure.message.contains("a withdrawal was lost"))
        // The default schedule (A, then B) passes; it takes one preemption, found within a few.
        #expect(failure.schedule > 1 && failure.schedule <= 10, "found on schedule \(failure.schedule)")

        // The replay string runs exactly that schedule again: the same failure, the same decisions.
        let replayed = try #require(throws: ExplorationFailure.self) {
            try Exploration.explore(replay: failure.replay, Self.twoWithdrawals(Self.withdrawInTwoCommands))
        }
        #expect(replayed.message == failure.message)
        #expect(replayed.decisions == failure.decisions)

        let report = try Exploration.explore(
            .exhaustive(preemptionBound: 2), Self.twoWithdrawals(Self.withdrawInOneCommand))
        #expect(report.isComplete)
        #expect(report.schedules > 1)
    }

    @Test func checkThenAct_isFoundByRandomAndPCT_withTheirBudgets() throws {
        for strategy in [Exploration.Strategy.random(seed: 1), .pct(depth: 2, seed: 1)] {
            let failure = try #require(throws: ExplorationFailure.self) {
                try Exploration.explore(strategy, schedules: 200, Self.twoWithdrawals(Self.withdrawInTwoCommands))
            }
            #expect(failure.message.contains("a withdrawal was lost"), "\(strategy)")
            let replayed = try #require(throws: ExplorationFailure.self) {
                try Exploration.explore(replay: failure.replay, Self.twoWithdrawals(Self.withdrawInTwoCommands))
            }
            #expect(replayed.decisions == failure.decisions, "\(strategy)")
            let report = try Exploration.explore(
                strategy, schedules: 200, Self.twoWithdrawals(Self.withdrawInOneCommand))
            #expect(report.schedules == 200 && report.isComplete, "\(strategy)")
        }
    }

    // MARK: (b) a lock-order deadlock between two values

    static func ledgerAndAudit(consistentOrder: Bool) -> (Exploration.Scenario) -> Void {
        { scenario in
            let ledger = QueueSafeValue(value: [Int]())
            let audit = QueueSafeValue(value: [String]())
            scenario.thread("transfer") {
                try ledger.wait.withLock { entries in
                    entries.append(30)
                    try audit.wait.withLock { $0.append("transfer of 30") }
                }
            }
            scenario.thread("report") {
                if consistentOrder {
                    try ledger.wait.withLock { entries in
                        let total = entries.reduce(0, +)
                        try audit.wait.withLock { $0.append("report: \(total)") }
                    }
                } else {
                    try audit.wait.withLock { log in
                        let total = try ledger.wait.read { $0.reduce(0, +) }
                        log.append("report: \(total)")
                    }
                }
            }
            scenario.check {
                try Exploration.require(try audit.wait.read { $0.count } == 2, "an audit line is missing")
            }
        }
    }

    @Test func lockOrderDeadlock_isFound_replays_andOneOrderFixesIt() throws {
        let failure = try #require(throws: ExplorationFailure.self) {
            try Exploration.explore(.exhaustive(preemptionBound: 2), Self.ledgerAndAudit(consistentOrder: false))
        }
        #expect(failure.message.contains("deadlock"), "\(failure)")
        #expect(failure.schedule <= 10, "found on schedule \(failure.schedule)")
        let replayed = try #require(throws: ExplorationFailure.self) {
            try Exploration.explore(replay: failure.replay, Self.ledgerAndAudit(consistentOrder: false))
        }
        #expect(replayed.message.contains("deadlock"))
        #expect(replayed.decisions == failure.decisions)

        let report = try Exploration.explore(
            .exhaustive(preemptionBound: 2), Self.ledgerAndAudit(consistentOrder: true))
        #expect(report.isComplete)
    }

    // MARK: (c) a token refresh racing a logout, under virtual time

    enum Session: Sendable, Equatable {
        case signedIn(token: String, expiresAt: DispatchTime)
        case signedOut
    }

    /// The refresh endpoint: a second on the network.
    static func refreshToken() async throws -> Session {
        try await Exploration.sleep(nanoseconds: 1_000_000_000)
        return .signedIn(token: "fresh", expiresAt: Exploration.now + .seconds(30))
    }

    /// Refreshes by reading the session in one command, calling the endpoint, then writing it in
    /// another: a logout in between is overwritten.
    @available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *)
    static func refreshRacingLogout(_ scenario: Exploration.Scenario) {
        let session = QueueSafeValue<Session>(value: .signedIn(token: "first", expiresAt: .now() + .seconds(30)))
        scenario.task("refresher") {
            try await Exploration.sleep(nanoseconds: 30_000_000_000)
            guard case .signedIn = try await session.async.read({ $0 }) else { return }
            let fresh = try await refreshToken()
            try await session.async.withLock { $0 = fresh }
        }
        scenario.task("logout") {
            try await Exploration.sleep(nanoseconds: 30_000_000_000)
            try await session.async.withLock { $0 = .signedOut }
        }
        scenario.check {
            try Exploration.require(try session.wait.read { $0 } == .signedOut, "signed in again after the logout")
        }
    }

    /// The same with a `RefreshingValue`: the refresh runs inside the session's critical section, so
    /// the logout waits for it and comes after, and a signed-out session needs no refresh.
    @available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *)
    static func refreshInsideTheSection(_ scenario: Exploration.Scenario) {
        let tokens = RefreshingValue(
            value: Session.signedIn(token: "first", expiresAt: .now() + .seconds(30)),
            needsRefresh: { session in
                guard case .signedIn(_, let expiresAt) = session else { return false }
                return expiresAt <= Exploration.now
            },
            refresh: { _ in try await refreshToken() }
        )
        scenario.task("refresher") {
            try await Exploration.sleep(nanoseconds: 30_000_000_000)
            _ = try await tokens.get()
        }
        scenario.task("logout") {
            try await Exploration.sleep(nanoseconds: 30_000_000_000)
            try await tokens.store.async.withLock { $0 = .signedOut }
        }
        scenario.check {
            try Exploration.require(try tokens.store.wait.read { $0 } == .signedOut, "signed in again after the logout")
        }
    }

    @Test func refreshRacingLogout_isFoundUnderVirtualTime_andRefreshingValueFixesIt() throws {
        guard #available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *) else { return }
        let started = DispatchTime.now()
        let failure = try #require(throws: ExplorationFailure.self) {
            try Exploration.explore(.exhaustive(preemptionBound: 2), Self.refreshRacingLogout)
        }
        #expect(failure.message.contains("signed in again after the logout"), "\(failure)")
        let replayed = try #require(throws: ExplorationFailure.self) {
            try Exploration.explore(replay: failure.replay, Self.refreshRacingLogout)
        }
        #expect(replayed.decisions == failure.decisions)

        let report = try Exploration.explore(.exhaustive(preemptionBound: 2), Self.refreshInsideTheSection)
        #expect(report.isComplete)
        // Each schedule waited 31 virtual seconds; the whole test, a bounded real time.
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1e9
        #expect(seconds < 30 * Double(report.schedules), "ran in real time: \(seconds) s")
    }
}
