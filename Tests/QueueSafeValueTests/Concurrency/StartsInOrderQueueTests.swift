import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

/// `CommandQueue(ordering: .startsInOrder)`: the guarantee of swift-async-queue's `ActorQueue`
/// (operations start in order; one that suspends lets the next start; awaiting the own queue from
/// inside an operation works), plus priorities. The tests restate `ActorQueue`'s own.
@Suite(.runsAlongsideOthers) struct StartsInOrderQueueTests {

    /// Twenty rounds: a queue that gave up the turn before reaching the operation's actor would let
    /// a later operation get there first now and then, and some round would show it.
    @Test func operationsIsolatedToAnActor_startInEnqueueOrder() async throws {
        for _ in 0..<20 {
            let queue = CommandQueue(ordering: .startsInOrder)
            #expect(queue.ordering == .startsInOrder)
            let journal = Journal<String>()
            let tasks = (0..<1_000).map { index in
                queue.enqueue(isolatedTo: journal) { journal in
                    journal.write("\(index)")
                }
            }
            try await withHangTimeout {
                for task in tasks { try await task.value }
            }
            let entries = await journal.entries
            #expect(entries == (0..<1_000).map { "\($0)" })
            if entries != (0..<1_000).map({ "\($0)" }) { break }
        }
    }

    /// The first operation suspends until the second one has run: on an actor's queue of tasks
    /// that works, because a suspended operation lets the next one start.
    @Test func anOperationThatSuspends_letsTheNextOneStart() async throws {
        let queue = CommandQueue(ordering: .startsInOrder)
        let journal = Journal<String>()
        let secondRan = Gate()
        let first = queue.enqueue(isolatedTo: journal) { journal in
            journal.write("first starts")
            await secondRan.wait()
            journal.write("first ends")
        }
        let second = queue.enqueue(isolatedTo: journal) { journal in
            journal.write("second")
            secondRan.open()
        }
        try await withHangTimeout {
            try await first.value
            try await second.value
        }
        #expect(await journal.entries == ["first starts", "second", "first ends"])
    }

    /// The same two operations on a one-at-a-time queue: the second waits for the first to end.
    @Test func onAOneAtATimeQueue_theNextOneWaits_forTheSuspendedOneToEnd() async throws {
        let queue = CommandQueue()
        #expect(queue.ordering == .oneAtATime)
        let journal = Journal<String>()
        let release = Gate()
        let firstStarted = Locked(false)
        let first = queue.enqueue(isolatedTo: journal) { journal in
            journal.write("first starts")
            firstStarted.set(true)
            await release.wait()
            journal.write("first ends")
        }
        let second = queue.enqueue(isolatedTo: journal) { journal in journal.write("second") }
        try await waitUntil("the first operation started") { firstStarted.value }
        try await waitUntil("the second operation is queued") { queue.engine.pendingCount == 1 }
        #expect(await journal.entries == ["first starts"])
        release.open()
        try await withHangTimeout {
            try await first.value
            try await second.value
        }
        #expect(await journal.entries == ["first starts", "first ends", "second"])
    }

    @Test func awaitingTheOwnQueue_fromInsideAnOperation_works() async throws {
        let queue = CommandQueue(ordering: .startsInOrder)
        let journal = Journal<String>()
        let result = try await withHangTimeout {
            try await queue.perform(isolatedTo: journal) { journal -> Int in
                journal.write("outer")
                let inner = try await queue.perform(isolatedTo: journal) { journal -> Int in
                    journal.write("inner")
                    return 1
                }
                let enqueued = try await queue.enqueue { 2 }.value
                return inner + enqueued
            }
        }
        #expect(result == 3)
        #expect(await journal.entries == ["outer", "inner"])
        #expect(queue.isInsideOperation == false)
    }

    /// While the main actor is busy, the first operation holds the turn without starting; the
    /// others wait in the queue and start by priority, then in enqueue order.
    @Test @MainActor func waitingOperations_startByPriority_thenInEnqueueOrder() async throws {
        let queue = CommandQueue(ordering: .startsInOrder)
        let journal = MainActorJournal<String>()
        var tasks: [Task<Void, any Error>] = []
        tasks.append(queue.enqueue { journal.entries.append("first") })
        for (name, priority) in [("low 1", .low), ("high 1", .high), ("low 2", .low), ("high 2", .high)]
            as [(String, CommandPriority)]
        {
            tasks.append(queue.enqueue(priority: priority) { journal.entries.append(name) })
        }
        try await withHangTimeout { [tasks] in
            for task in tasks { try await task.value }
        }
        #expect(journal.entries == ["first", "high 1", "high 2", "low 1", "low 2"])
    }

    /// Operations isolated to no actor start in order and then run side by side: the first waits
    /// for the second, which can only run because the first gave up its turn as it started.
    @Test func nonisolatedOperations_startInOrder_andThenRunInParallel() async throws {
        let queue = CommandQueue(ordering: .startsInOrder)
        let log = Recorder<String>()
        let secondRan = Gate()
        let first = queue.enqueue {
            log.append("first starts")
            await secondRan.wait()
            log.append("first ends")
        }
        let second = queue.enqueue {
            log.append("second")
            secondRan.open()
        }
        try await withHangTimeout {
            try await first.value
            try await second.value
        }
        // Isolated to nothing, the two run side by side once the first has started (given up its
        // turn): the second's line may come before the first's first line, as the ordering's
        // documentation says. What is certain is that the first could only end after the second ran.
        let entries = log.snapshot
        #expect(entries.count == 3)
        #expect(Set(entries.prefix(2)) == ["first starts", "second"])
        #expect(entries.last == "first ends")
    }

    @Test func cancelAll_cancelsOperationsThatHaveNotStarted_andLeavesStartedOnesAlone() async throws {
        let queue = CommandQueue(ordering: .startsInOrder)
        let journal = Journal<String>()
        let release = Gate()
        let didStart = Locked(false)
        let started = queue.enqueue(isolatedTo: journal) { journal -> Bool in
            journal.write("started")
            didStart.set(true)
            await release.wait()
            return Task.isCancelled
        }
        try await waitUntil("the first operation started") { didStart.value }
        try await waitUntil("the first operation gave up its turn") { queue.diagnostics.holder == nil }
        let pending = await MainActor.run { () -> [Task<Void, any Error>] in
            // The main actor is busy here: the first of these holds the turn without starting, the
            // others wait for it.
            let tasks = (0..<3).map { _ in
                queue.enqueueOnMainActor { () -> Void in Issue.record("a cancelled operation ran") }
            }
            queue.cancelAll()
            return tasks
        }
        for task in pending {
            let error = try await withHangTimeout { await thrownError { try await task.value } }
            #expect(error == .cancelled)
        }
        release.open()
        let wasCancelled = try await withHangTimeout { try await started.value }
        #expect(!wasCancelled, "cancelAll reached an operation that had started")
    }

    @Test func discardable_onAStartsInOrderQueue_isDroppedBeforeItStarts() async throws {
        let queue = CommandQueue(ordering: .startsInOrder)
        let ran = Recorder<String>()
        let tasks = await MainActor.run { () -> [Task<Void, any Error>] in
            // The main actor is busy here, so none of these starts before all are enqueued.
            [
                queue.enqueueOnMainActor { ran.append("holds the turn") },
                queue.enqueueOnMainActor(policy: .discardable) { ran.append("discarded") },
                queue.enqueueOnMainActor { ran.append("latest") },
            ]
        }
        let errors = try await withHangTimeout {
            var errors: [QueueSafeValueError?] = []
            for task in tasks { errors.append(await thrownError { try await task.value }) }
            return errors
        }
        #expect(errors == [nil, .cancelled, nil])
        #expect(ran.snapshot == ["holds the turn", "latest"])
    }
}
