import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

/// Main-actor state that operations change synchronously: only code isolated to the main actor can
/// touch it, so these tests compile only because operations inherit the caller's isolation.
@MainActor
private final class Counter {
    var count = 0
    var log: [Int] = []
    let queue = CommandQueue()

    /// Enqueues from the main actor; each operation records `2i` and `2i + 1` around a suspension.
    func enqueueIncrements(_ count: Int) -> [Task<Int, any Error>] {
        (0..<count).map { index in
            queue.enqueue {
                MainActor.assertIsolated()
                log.append(2 * index)
                await Task.yield()
                MainActor.assertIsolated()
                log.append(2 * index + 1)
                self.count += 1
                return self.count
            }
        }
    }
}

/// An actor whose methods enqueue operations that capture `self`: they run isolated to it.
private actor Account {
    var balance = 0
    var log: [Int] = []

    func deposit(_ amounts: [Int], on queue: CommandQueue) -> [Task<Void, any Error>] {
        amounts.map { amount in
            queue.enqueue {
                self.assertIsolated()
                self.log.append(amount)
                await Task.yield()
                self.assertIsolated()
                self.balance += amount
            }
        }
    }

    func performReadingBalance(on queue: CommandQueue) async throws -> Int {
        try await queue.perform {
            self.assertIsolated()
            return self.balance
        }
    }
}

/// Not `Sendable`: operations may capture it because they are `sending` closures.
private final class Box {
    var value = 0
}

/// `CommandQueue` operations inherit the caller's isolation, like `Task {}`, and may capture
/// non-`Sendable` state; the queue's order holds whatever the isolation.
@Suite(.runsAlongsideOthers) struct CommandQueueIsolationTests {

    @Test @MainActor func enqueueFromTheMainActor_runsOnTheMainActor_andKeepsBeginAndEndOrder() async throws {
        let counter = Counter()
        let tasks = counter.enqueueIncrements(100)
        let results = try await withHangTimeout {
            var results: [Int] = []
            for task in tasks { results.append(try await task.value) }
            return results
        }
        #expect(results == Array(1...100))
        #expect(counter.log == Array(0..<200), "operations interleaved at their suspension points")
    }

    @Test @MainActor func performFromTheMainActor_inheritsIt_andReturnsTheResult() async throws {
        let counter = Counter()
        _ = counter.enqueueIncrements(3)
        let seen = try await withHangTimeout { @MainActor in
            try await counter.queue.perform { () -> Int in
                MainActor.assertIsolated()
                return counter.count
            }
        }
        #expect(seen == 3, "perform ran before the operations enqueued ahead of it")
    }

    @Test @MainActor func enqueueWithATimeout_fromTheMainActor_inheritsIt() async throws {
        let counter = Counter()
        let task = counter.queue.enqueue(timeout: .seconds(30)) { () -> Int in
            MainActor.assertIsolated()
            counter.count += 5
            return counter.count
        }
        #expect(try await withHangTimeout { try await task.value } == 5)
    }

    @Test func enqueueFromAnActorMethod_capturingSelf_runsIsolatedToTheActor() async throws {
        let queue = CommandQueue()
        let account = Account()
        let amounts = Array(1...50)
        let tasks = await account.deposit(amounts, on: queue)
        try await withHangTimeout {
            for task in tasks { try await task.value }
        }
        #expect(await account.balance == amounts.reduce(0, +))
        #expect(await account.log == amounts)
        #expect(try await account.performReadingBalance(on: queue) == amounts.reduce(0, +))
    }

    @Test func enqueueFromNonisolatedCode_mayCaptureNonSendableState() async throws {
        let queue = CommandQueue()
        let box = Box()
        let task = queue.enqueue { () -> Int in
            box.value += 41
            await Task.yield()
            box.value += 1
            return box.value
        }
        #expect(try await withHangTimeout { try await task.value } == 42)
        let other = Box()
        let performed = try await queue.perform { () -> Int in
            other.value = 7
            return other.value
        }
        #expect(performed == 7)
    }

    /// Operations of every isolation share one order: the queue's, not their actors'.
    @Test @MainActor func operationsOfDifferentIsolations_keepTheQueuesOrder() async throws {
        let queue = CommandQueue()
        let recorder = Recorder<Int>()
        let probe = SectionProbe()
        let account = Account()
        var tasks: [Task<Void, any Error>] = []
        for index in 0..<60 {
            let record: @Sendable () async -> Void = {
                probe.enter()
                recorder.append(2 * index)
                await Task.yield()
                recorder.append(2 * index + 1)
                probe.leave()
            }
            switch index % 3 {
            case 0:
                // Inherits the main actor.
                tasks.append(
                    queue.enqueue {
                        MainActor.assertIsolated()
                        await record()
                    })
            case 1:
                tasks.append(
                    queue.enqueue(isolatedTo: account) { account in
                        account.assertIsolated()
                        await record()
                    })
            default:
                tasks.append(Self.enqueueNonisolated(on: queue, record))
            }
        }
        try await withHangTimeout { [tasks] in
            for task in tasks { try await task.value }
        }
        #expect(recorder.snapshot == Array(0..<120))
        #expect(probe.maximumInside == 1)
    }

    private nonisolated static func enqueueNonisolated(
        on queue: CommandQueue,
        _ record: @escaping @Sendable () async -> Void
    ) -> Task<Void, any Error> {
        queue.enqueue { await record() }
    }
}
