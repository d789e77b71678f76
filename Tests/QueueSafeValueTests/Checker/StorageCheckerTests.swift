import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue
@testable import QueueSafeValueTesting

extension Explorers {
    /// The real storage under the controlled scheduler: every schedule of each scenario, within its
    /// preemption bound (see `ScheduleExplorer`).
    @Suite struct StorageCheckerTests {
        static let scenarios: [CheckerScenario] = onLinux + CheckerScenarios.onApplePlatforms

        /// The scenarios as written: priority inheritance runs Linux's policy (the world's default)
        /// unless a scenario chooses another.
        static let onLinux: [CheckerScenario] = [
            CheckerScenarios.mixedCommands, CheckerScenarios.arrivalOrder, CheckerScenarios.deadlines,
            CheckerScenarios.monitorWatchdog,
            CheckerScenarios.cancellation, CheckerScenarios.manualCompletions, CheckerScenarios.containerRelease,
            CheckerScenarios.cancelAllOperations, CheckerScenarios.attachRaces, CheckerScenarios.discardable,
            CheckerScenarios.standardOperations, CheckerScenarios.widthSlots, CheckerScenarios.widthLowered,
            CheckerScenarios.widthReprioritized, CheckerScenarios.widthCancelRunning,
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
            CheckerScenarios.lockOrderCycle, CheckerScenarios.lockOrderCycleWithATask, CheckerScenarios.lockOrderChain,
            CheckerScenarios.sharedReads, CheckerScenarios.readsAndTheWaitingOrder,
            CheckerScenarios.idleReadersAndAWriter,
            CheckerScenarios.idleAndListedReaders, CheckerScenarios.readersAndADeadline,
            CheckerScenarios.readsForTheWaitersQueue,
            CheckerScenarios.readersAndContainerRelease, CheckerScenarios.lockOrderCycleThroughReads,
        ]

        @Test(
            .enabled(if: !TestEnvironment.isThreadSanitizerActive, "the checker runs without ThreadSanitizer"),
            arguments: scenarios.indices)
        func everySchedule_keepsTheEnginesPromises(scenario index: Int) async {
            let scenario = Self.scenarios[index]
            await StorageChecker.expectEveryScheduleHolds(scenario)
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
        let report = await withCheckedContinuation {
            (continuation: CheckedContinuation<ScheduleExplorer.Report, Never>) in
            Thread {
                let explorer = ScheduleExplorer(preemptionBound: bound)
                continuation.resume(returning: explorer.explore(scenario.build))
            }.start()
        }
        let seconds = Date().timeIntervalSince(started)
        print(
            "Checker: \(scenario.name): \(report.runs) schedules (at most \(bound) preemptions"
                + "\(report.isComplete ? "" : ", cut by the budget")), \(report.steps) steps, "
                + String(format: "%.1f s", seconds))
        if report.violation != nil { failed.set(true) }
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
