import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue
@testable import QueueSafeValueTesting

extension Explorers {
    /// The real storage under the controlled scheduler: every schedule of each scenario, within its
    /// preemption bound (see `ScheduleExplorer`).
    @Suite struct StorageCheckerTests {
        static let scenarios: [CheckerScenario] = onLinux + CheckerScenarios.onApplePlatforms
        static let withoutTasks = scenarios.filter { !$0.needsTaskExecutors }
        static let withTasks = scenarios.filter(\.needsTaskExecutors)

        /// The scenarios as written: priority inheritance runs Linux's policy (the world's default)
        /// unless a scenario chooses another.
        static let onLinux: [CheckerScenario] =
            [
                CheckerScenarios.mixedCommands, CheckerScenarios.arrivalOrder, CheckerScenarios.deadlines,
                CheckerScenarios.monitorWatchdog,
                CheckerScenarios.cancellation, CheckerScenarios.manualCompletions, CheckerScenarios.containerRelease,
                CheckerScenarios.cancelAllOperations, CheckerScenarios.attachRaces, CheckerScenarios.discardable,
                CheckerScenarios.standardOperations, CheckerScenarios.widthSlots, CheckerScenarios.widthLowered,
                CheckerScenarios.widthReprioritized, CheckerScenarios.widthCancelRunning,
                CheckerScenarios.cancelRacingTheGrant, CheckerScenarios.releaseRacingADeadline,
                CheckerScenarios.boundedOvertaking, CheckerScenarios.eventualFairness,
                CheckerScenarios.eventualMixedCommands, CheckerScenarios.eventualIssuerOrder,
                CheckerScenarios.waiterBehindItsQueue,
                CheckerScenarios.twoDispatchAndTwoWaiters, CheckerScenarios.dispatchArrivingFromOffTheQueue,
                CheckerScenarios.timedWaiterOnTheQueue, CheckerScenarios.silentSuccessorsInline,
                CheckerScenarios.silentCommandsOfTwoQueues, CheckerScenarios.dispatchBehindAThread,
                CheckerScenarios.waiterOnAnotherQueue, CheckerScenarios.queueTaggedAfterTheWaiterParked,
                CheckerScenarios.boostAndCancellation, CheckerScenarios.inheritanceChain,
                CheckerScenarios.inheritanceChainTimedWaiter, CheckerScenarios.inheritanceChainThroughATask,
                CheckerScenarios.inheritanceChainOfThreads, CheckerScenarios.appleHolderThatReachesItsWaiter,
                CheckerScenarios.engineLockOrder,
                CheckerScenarios.lockOrderCycle, CheckerScenarios.lockOrderCycleWithATask,
                CheckerScenarios.lockOrderCycleThroughATaskRead,
                CheckerScenarios.lockOrderChain,
                CheckerScenarios.sharedReads, CheckerScenarios.readsAndTheWaitingOrder,
                CheckerScenarios.idleReadersAndAWriter,
                CheckerScenarios.idleAndListedReaders, CheckerScenarios.readersAndADeadline,
                CheckerScenarios.readsForTheWaitersQueue,
                CheckerScenarios.readersAndContainerRelease, CheckerScenarios.lockOrderCycleThroughReads,
            ] + CheckerScenarios.lockSections

        @Test(
            .enabled(if: !TestEnvironment.isThreadSanitizerActive, "the checker runs without ThreadSanitizer"),
            arguments: withoutTasks.indices)
        func everySchedule_keepsTheEnginesPromises(scenario index: Int) async {
            await StorageChecker.expectEveryScheduleHolds(Self.withoutTasks[index])
        }

        /// The scenarios that start tasks of the world, which need task executors: skipped on an
        /// older Apple system (a test destination of iOS 17, watchOS 10, …), run everywhere else.
        @Test(
            .enabled(if: !TestEnvironment.isThreadSanitizerActive, "the checker runs without ThreadSanitizer"),
            .enabled(
                if: StorageChecker.hasTaskExecutors,
                "tasks of the world need task executors: macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2"),
            arguments: withTasks.indices)
        func everySchedule_withTasks_keepsTheEnginesPromises(scenario index: Int) async {
            await StorageChecker.expectEveryScheduleHolds(Self.withTasks[index])
        }
    }
}

enum StorageChecker {
    /// `CHECKER_STOP_AT_FIRST_FAILURE=1` (the mutant runs): skip the scenarios after a failing one.
    static let stopsAtFirstFailure = ProcessInfo.processInfo.environment["CHECKER_STOP_AT_FIRST_FAILURE"] == "1"
    static let failed = Locked(false)
    /// `CHECKER_SCENARIOS="part of a name;another"` (a mutant's row in `.ci/mutants/run`): only the
    /// scenarios whose names contain one of the parts run.
    static let selected: [Substring]? = ProcessInfo.processInfo.environment["CHECKER_SCENARIOS"].flatMap {
        $0.isEmpty ? nil : $0.split(separator: ";")
    }

    /// A run's engine-lock sections per party against the scenario's limits; the most seen so far
    /// is kept in `most`.
    static func sectionsCheck(
        _ world: ControlledWorld, _ limits: [String: Int], most: Locked<[String: [LockSite]]>
    ) -> String? {
        guard !limits.isEmpty else { return nil }
        let taken = world.engineLockSections
        most.withLock { most in most.merge(taken) { $0.count >= $1.count ? $0 : $1 } }
        for (party, limit) in limits.sorted(by: { $0.key < $1.key }) where taken[party, default: []].count > limit {
            let sites = taken[party, default: []]
            return "\(party) took \(sites.count) sections of the engine's lock, more than its \(limit): at "
                + sites.map(\.description).joined(separator: ", ")
        }
        return nil
    }

    /// Whether this system has task executors, which the scenarios with tasks need.
    static var hasTaskExecutors: Bool {
        if #available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *) { return true }
        return false
    }

    /// For each world being explored, by identity (set as its run is built): whether a run of its
    /// scenario started a task of the world, one flag per scenario.
    private static let startedTasks = Locked<[ObjectIdentifier: Locked<Bool>]>([:])

    /// `CheckerRun.worldTask` starts a task in `world`.
    static func startedTask(in world: ControlledWorld) {
        startedTasks.withLock { $0[ObjectIdentifier(world)] }?.set(true)
    }

    /// Explores `scenario` on a thread of its own, prints what it explored, and records the first
    /// violation, with the decisions that led to it, as a test issue.
    static func expectEveryScheduleHolds(_ scenario: CheckerScenario, sourceLocation: SourceLocation = #_sourceLocation)
        async
    {
        if let selected, !selected.contains(where: { scenario.name.contains($0) }) {
            print("Checker: \(scenario.name): not selected (CHECKER_SCENARIOS)")
            return
        }
        // For the mutant runs: once one scenario has failed, the others need not run.
        if stopsAtFirstFailure && failed.value {
            print("Checker: \(scenario.name): skipped (an earlier scenario failed)")
            return
        }
        // Under AddressSanitizer (6x slower here) every scenario runs at one preemption: each one
        // still drives the storage through its shapes with the sanitizer watching memory, and the
        // plain run explores the second preemption (at two, this step took about 32 minutes on the
        // 2-core machine, a third of CI's limit).
        let bound =
            TestEnvironment.isAddressSanitizerActive ? min(1, scenario.preemptionBound) : scenario.preemptionBound
        let started = Date()
        let startedATask = Locked(false)
        let mostSections = Locked<[String: [LockSite]]>([:])
        let report = await withCheckedContinuation {
            (continuation: CheckedContinuation<ScheduleExplorer.Report, Never>) in
            Thread {
                let explorer = ScheduleExplorer(preemptionBound: bound)
                continuation.resume(
                    returning: explorer.explore { world in
                        let id = ObjectIdentifier(world)
                        startedTasks.withLock { $0[id] = startedATask }
                        let finalCheck = scenario.build(world)
                        return {
                            startedTasks.withLock { $0[id] = nil }
                            return finalCheck() ?? sectionsCheck(world, scenario.lockSectionLimits, most: mostSections)
                        }
                    })
            }.start()
        }
        let seconds = Date().timeIntervalSince(started)
        print(
            "Checker: \(scenario.name): \(report.runs) schedules (at most \(bound) preemptions"
                + "\(report.isComplete ? "" : ", cut by the budget")), \(report.steps) steps, "
                + String(format: "%.1f s", seconds))
        if !scenario.lockSectionLimits.isEmpty {
            for (party, sites) in mostSections.value.sorted(by: { $0.key < $1.key }) {
                print(
                    "Checker: \(scenario.name): \(party) took at most \(sites.count) engine-lock sections, as at "
                        + sites.map(\.description).joined(separator: ", "))
            }
        }
        if report.violation != nil { failed.set(true) }
        // What lets an older Apple system skip the scenario instead of crashing in `worldTask` (a
        // run cut short by a violation may not have reached its tasks).
        if report.violation == nil, startedATask.value != scenario.needsTaskExecutors {
            let what = startedATask.value ? "starts tasks of the world" : "starts no task"
            Issue.record(
                "\(scenario.name): \(what), but needsTaskExecutors is \(scenario.needsTaskExecutors)",
                sourceLocation: sourceLocation)
        }
        // Across every scenario run so far: the last one to end sees every nesting.
        if let cycle = LockOrder.add(report.nestings, scenario: scenario.name) {
            failed.set(true)
            Issue.record(Comment(rawValue: cycle), sourceLocation: sourceLocation)
        }
        if let (message, trace) = report.violation {
            Issue.record(
                "\(scenario.name): \(message)\n  decisions: \(trace.joined(separator: "\n             "))",
                sourceLocation: sourceLocation)
        }
        #expect(report.isComplete, "the exploration was cut by its budget", sourceLocation: sourceLocation)
    }
}
