import Foundation
import Testing

@testable import QueueSafeValue

extension Explorers {
    /// Every interleaving of small concurrent programs over the real engine state machine: three
    /// actors with up to three actions each, drawn from every kind of command, a deadline passing,
    /// task cancellation, `cancelAll()`, discardable operations, container release and manual
    /// completion (called, dropped, inside the closure or later from another actor).
    ///
    /// After every step the world checks: at most one holder; a command that left (timed out,
    /// cancelled, refused) is never granted; grants follow priority, then arrival, among the commands
    /// waiting at that moment, and nothing takes a free section while commands wait; a release with a
    /// live waiter grants one; every command ends exactly once (and a dispatch command delivers once);
    /// no task is resumed twice; `cancelAll()` never reaches an operation that had ended; a
    /// discardable operation never begins once a later operation was enqueued; the value is
    /// freed exactly once, only after its container was released, never while in use, and always once
    /// the queue drained. A world with no enabled step must have ended: anything else is a hang.
    @Suite struct EngineExplorerTests {
        typealias Command = ModelCommand

        static let scenarios: [ModelScenario] = [
            ModelScenario(
                name: "blocking, timed, dispatch and awaiting commands of mixed priorities",
                commands: [
                    Command(kind: .blocking, priority: .low),
                    Command(kind: .dispatch, priority: .high),
                    Command(kind: .timedBlocking, priority: .high),
                    Command(kind: .awaiting, priority: .low),
                    Command(kind: .blocking, priority: .highest),
                    Command(kind: .dispatch, priority: .medium),
                ],
                actors: [[.issue(0), .issue(1), .issue(5)], [.issue(2), .issue(3)], [.issue(4)]]),
            ModelScenario(
                name: "equal priorities keep their arrival order",
                commands: [
                    Command(kind: .dispatch, priority: .medium),
                    Command(kind: .dispatch, priority: .medium),
                    Command(kind: .blocking, priority: .medium),
                    Command(kind: .dispatch, priority: .medium),
                    Command(kind: .awaiting, priority: .medium),
                    Command(kind: .dispatch, priority: .medium),
                ],
                actors: [[.issue(0), .issue(1), .issue(5)], [.issue(2), .issue(3)], [.issue(4)]]),
            ModelScenario(
                name: "deadlines pass while the grant races them",
                commands: [
                    Command(kind: .timedBlocking, priority: .low),
                    Command(kind: .timedBlocking, priority: .high),
                    Command(kind: .blocking, priority: .medium),
                    Command(kind: .timedBlocking, priority: .medium),
                    Command(kind: .dispatch, priority: .low),
                ],
                actors: [[.issue(0), .issue(4)], [.issue(1), .issue(3)], [.issue(2)]]),
            ModelScenario(
                name: "tasks cancelled before, while and after they wait",
                commands: [
                    Command(kind: .blocking, priority: .high),
                    Command(kind: .awaiting, priority: .medium),
                    Command(kind: .awaiting, priority: .low),
                    Command(kind: .awaiting, priority: .high),
                ],
                actors: [
                    [.issue(0), .cancelTask(3)], [.issue(1), .issue(3)], [.issue(2), .cancelTask(1), .cancelTask(2)],
                ]),
            ModelScenario(
                name: "manual completions: inside, dropped inside, called and dropped later",
                commands: [
                    Command(kind: .blocking, priority: .medium, manual: .doneLater),
                    Command(kind: .dispatch, priority: .high, manual: .droppedInside),
                    Command(kind: .dispatch, priority: .low, manual: .droppedLater),
                    Command(kind: .timedBlocking, priority: .medium, manual: .doneInside),
                    Command(kind: .awaiting, priority: .high),
                ],
                actors: [[.issue(0), .issue(3)], [.issue(1), .issue(2)], [.issue(4)]]),
            ModelScenario(
                name: "the container is released while commands hold, wait and arrive",
                commands: [
                    Command(kind: .dispatch, priority: .low),
                    Command(kind: .blocking, priority: .high),
                    Command(kind: .awaiting, priority: .medium),
                    Command(kind: .dispatch, priority: .medium, manual: .droppedLater),
                    Command(kind: .timedBlocking, priority: .low),
                ],
                actors: [[.issue(0), .issue(3)], [.issue(1), .close, .issue(4)], [.issue(2)]]),
            ModelScenario(
                name: "command queue: cancelAll against running, waiting and finished operations",
                commands: [
                    Command(kind: .operation, priority: .medium),
                    Command(kind: .operation, priority: .high),
                    Command(kind: .operation, priority: .medium),
                ],
                actors: [[.issue(0), .issue(2)], [.issue(1), .cancelAll], [.cancelAll]]),
            ModelScenario(
                name: "command queue: task cancellation and cancelAll around attach",
                commands: [
                    Command(kind: .operation, priority: .low),
                    Command(kind: .operation, priority: .medium),
                    Command(kind: .operation, priority: .medium),
                ],
                actors: [[.issue(0), .issue(1)], [.issue(2), .cancelTask(1), .cancelTask(0)], [.cancelAll]]),
            ModelScenario(
                name: "command queue: discardable operations, granted or waiting, replaced by later ones",
                commands: [
                    Command(kind: .operation, priority: .medium, discardable: true),
                    Command(kind: .operation, priority: .high, discardable: true),
                    Command(kind: .operation, priority: .low),
                ],
                actors: [[.issue(0)], [.issue(1)], [.issue(2)]]),
            ModelScenario(
                name: "command queue: discardable operations against task cancellation and cancelAll",
                commands: [
                    Command(kind: .operation, priority: .medium, discardable: true),
                    Command(kind: .operation, priority: .medium),
                    Command(kind: .operation, priority: .high, discardable: true),
                ],
                actors: [[.issue(0), .issue(1)], [.issue(2), .cancelTask(0), .cancelAll]]),
            ModelScenario(
                name: "a bound of one overtake: a low command among later high ones",
                commands: [
                    Command(kind: .blocking, priority: .medium),
                    Command(kind: .blocking, priority: .lowest),
                    Command(kind: .dispatch, priority: .highest),
                    Command(kind: .dispatch, priority: .highest),
                    Command(kind: .awaiting, priority: .highest),
                ],
                actors: [[.issue(0), .issue(4)], [.issue(1)], [.issue(2), .issue(3)]],
                maxOvertakes: 1),
            ModelScenario(
                name: "a bound of zero (first come, first served) with deadlines and cancellation",
                commands: [
                    Command(kind: .blocking, priority: .high),
                    Command(kind: .timedBlocking, priority: .lowest),
                    Command(kind: .awaiting, priority: .highest),
                    Command(kind: .dispatch, priority: .medium),
                ],
                actors: [[.issue(0), .issue(3)], [.issue(1)], [.issue(2), .cancelTask(2)]],
                maxOvertakes: 0),
        ]

        // Single-threaded and deterministic, so ThreadSanitizer has nothing to find here and would only
        // make it ten times slower.
        @Test(
            .enabled(if: !TestEnvironment.isThreadSanitizerActive, "the explorer runs without ThreadSanitizer"),
            arguments: scenarios.indices)
        func everyInterleaving_keepsTheEnginesPromises(scenario index: Int) async {
            let scenario = Self.scenarios[index]
            await InterleavingExplorer.expectEveryInterleavingHolds(EngineWorld(scenario), scenario: scenario.name)
        }
    }
}
