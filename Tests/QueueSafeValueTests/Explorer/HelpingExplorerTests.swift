import Foundation
import Testing

@testable import QueueSafeValue

extension Explorers {
    /// Every interleaving of blocking commands issued from a block of a serial queue, behind dispatch
    /// commands for that queue: the waiting thread runs them (it runs on the queue), so nothing hangs,
    /// and each dispatch command runs exactly once, on its queue, and delivers once.
    @Suite struct HelpingExplorerTests {
        typealias Command = HelpingCommand

        static let scenarios: [HelpingScenario] = [
            HelpingScenario(
                name: "a waiter on the queue behind a dispatch command for it",
                commands: [
                    Command(kind: .blocking, priority: .highest), Command(kind: .dispatch, priority: .high),
                    Command(kind: .blocking, priority: .low),
                ],
                actors: [(onQueue: false, commands: [0]), (onQueue: true, commands: [1, 2])]),
            HelpingScenario(
                name: "two dispatch commands, a waiter on the queue and one off it",
                commands: [
                    Command(kind: .dispatch, priority: .medium), Command(kind: .dispatch, priority: .high),
                    Command(kind: .blocking, priority: .low), Command(kind: .blocking, priority: .medium),
                ],
                actors: [(onQueue: true, commands: [0, 1, 2]), (onQueue: false, commands: [3])]),
            HelpingScenario(
                name: "dispatch commands arriving from off the queue while a waiter on it waits",
                commands: [
                    Command(kind: .blocking, priority: .low), Command(kind: .dispatch, priority: .high),
                    Command(kind: .blocking, priority: .medium), Command(kind: .dispatch, priority: .highest),
                ],
                actors: [
                    (onQueue: true, commands: [0]), (onQueue: false, commands: [1, 2]), (onQueue: false, commands: [3]),
                ]),
            HelpingScenario(
                name: "a timed waiter on the queue gives up around a command handed to it",
                commands: [
                    Command(kind: .blocking, priority: .highest), Command(kind: .timedBlocking, priority: .low),
                    Command(kind: .dispatch, priority: .high),
                ],
                actors: [
                    (onQueue: false, commands: [0]), (onQueue: true, commands: [1]), (onQueue: false, commands: [2]),
                ]),
            HelpingScenario(
                name: "silent dispatch commands run their successors inline while a waiter on the queue takes over",
                commands: [
                    Command(kind: .blocking, priority: .highest), Command(kind: .dispatchSilent, priority: .high),
                    Command(kind: .dispatchSilent, priority: .high), Command(kind: .blocking, priority: .low),
                ],
                actors: [
                    (onQueue: false, commands: [0]), (onQueue: false, commands: [1, 2]), (onQueue: true, commands: [3]),
                ]),
            HelpingScenario(
                name: "a waiter on another queue takes over the command while a waiter on its queue registers",
                commands: [
                    Command(kind: .blocking, priority: .highest), Command(kind: .dispatch, priority: .high),
                    Command(kind: .blocking, priority: .low), Command(kind: .blocking, priority: .medium),
                ],
                actors: [
                    (onQueue: false, commands: [0, 1]), (onQueue: true, commands: [2]), (onQueue: false, commands: [3]),
                ],
                onOtherQueue: [2]),
        ]

        @Test(
            .enabled(if: !TestEnvironment.isThreadSanitizerActive, "the explorer runs without ThreadSanitizer"),
            arguments: scenarios.indices)
        func everyInterleaving_runsEachDispatchCommandOnce_andNeverHangs(scenario index: Int) async {
            let scenario = Self.scenarios[index]
            await InterleavingExplorer.expectEveryInterleavingHolds(HelpingWorld(scenario), scenario: scenario.name)
        }
    }
}
