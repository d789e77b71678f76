import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

extension Explorers {
    /// Every interleaving of threads taking sections of several engines, nested, with the real wait-for
    /// graph deciding at each park: a cycle is never missed (no world ends with a thread stuck) and
    /// never invented (a refused wait closes a real cycle at that moment: each thread of it queued for
    /// a section the next one was granted).
    @Suite struct DeadlockExplorerTests {
        typealias Take = CycleAcquisition

        static let scenarios: [CycleScenario] = [
            CycleScenario(
                name: "two threads take two values in opposite orders",
                engines: 2, threads: [[Take(engine: 0), Take(engine: 1)], [Take(engine: 1), Take(engine: 0)]]),
            CycleScenario(
                name: "three threads close a cycle of three values",
                engines: 3,
                threads: [
                    [Take(engine: 0), Take(engine: 1)], [Take(engine: 1), Take(engine: 2)],
                    [Take(engine: 2), Take(engine: 0)],
                ]),
            CycleScenario(
                name: "a chain without a cycle",
                engines: 3,
                threads: [[Take(engine: 0), Take(engine: 1)], [Take(engine: 1), Take(engine: 2)], [Take(engine: 2)]]),
            CycleScenario(
                name: "three threads take two values in one order",
                engines: 2,
                threads: [
                    [Take(engine: 0), Take(engine: 1)], [Take(engine: 0), Take(engine: 1)],
                    [Take(engine: 0), Take(engine: 1)],
                ]),
            CycleScenario(
                name: "three nested takes against a cycle and a chain",
                engines: 3,
                threads: [
                    [Take(engine: 0), Take(engine: 1), Take(engine: 2)], [Take(engine: 1), Take(engine: 2)],
                    [Take(engine: 2), Take(engine: 0)],
                ]),
            CycleScenario(
                name: "two cycles through one value",
                engines: 3,
                threads: [
                    [Take(engine: 0), Take(engine: 1)], [Take(engine: 1), Take(engine: 0), Take(engine: 2)],
                    [Take(engine: 2), Take(engine: 1)],
                ]),
            CycleScenario(
                name: "a cycle of timed waits, and a bystander",
                engines: 2,
                threads: [
                    [Take(engine: 0), Take(engine: 1, timed: true)], [Take(engine: 1), Take(engine: 0, timed: true)],
                    [Take(engine: 0)],
                ]),
            // `perform`: a party awaits another (the task of its operation), which starts then.
            CycleScenario(
                name: "an operation waits for a value whose holder performs on the operation's queue",
                engines: 2,
                threads: [[Take(engine: 1), Take(engine: 0)], [Take(engine: 0), .await(2)], [Take(engine: 1)]]),
            CycleScenario(
                name: "an awaited operation waits for a value its awaiting party holds",
                engines: 1,
                threads: [[Take(engine: 0), .await(1)], [Take(engine: 0)]]),
            CycleScenario(
                name: "a chain through an awaited operation, without a cycle",
                engines: 3,
                threads: [[Take(engine: 2), .await(1)], [Take(engine: 1)], [Take(engine: 1), Take(engine: 0)]]),
            CycleScenario(
                name: "a cycle of four parties through an awaited operation",
                engines: 3,
                threads: [
                    [Take(engine: 2), .await(1)], [Take(engine: 1)], [Take(engine: 1), Take(engine: 0)],
                    [Take(engine: 0), Take(engine: 2)],
                ]),
        ]

        @Test(
            .enabled(if: !TestEnvironment.isThreadSanitizerActive, "the explorer runs without ThreadSanitizer"),
            arguments: scenarios.indices)
        func everyInterleaving_findsEveryCycle_andNoOther(scenario index: Int) async {
            let scenario = Self.scenarios[index]
            await InterleavingExplorer.expectEveryInterleavingHolds(CycleWorld(scenario), scenario: scenario.name)
        }
    }
}
