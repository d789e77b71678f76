import Dispatch
import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

/// Records, under one lock, which operations ended before `cancelAll()` was called.
private final class CancelAllProbe: @unchecked Sendable {
    private let lock = NSLock()
    private var cancelled = false
    private var started = 0
    private var ended: Set<Int> = []
    private var lateStartsSawCancellation = true

    /// Call from the operation: `isCancelled` is read under the lock, so a start recorded after
    /// `cancelAll()` reads the cancellation state after it too.
    func operationStarted(_ index: Int, isCancelled: () -> Bool) {
        lock.lock()
        started += 1
        if cancelled && !isCancelled() { lateStartsSawCancellation = false }
        lock.unlock()
    }

    func operationEnded(_ index: Int) {
        lock.lock()
        if !cancelled { ended.insert(index) }
        lock.unlock()
    }

    func cancelAll(_ queue: CommandQueue) {
        lock.lock()
        cancelled = true
        queue.cancelAll()
        lock.unlock()
    }

    var startedCount: Int {
        lock.lock()
        defer { lock.unlock() }
        return started
    }

    var endedBeforeCancelAll: Set<Int> {
        lock.lock()
        defer { lock.unlock() }
        return ended
    }

    var startedAfterCancelAllSawCancellation: Bool {
        lock.lock()
        defer { lock.unlock() }
        return lateStartsSawCancellation
    }
}

/// `CommandQueue`: ordered asynchronous work with priorities, cancellation and reentrancy checks.
@Suite(.runsAlongsideOthers) struct CommandQueueTests {

    /// Enqueues `count` operations from synchronous code. Operation `i` records `2i` when it begins
    /// and `2i + 1` when it ends, and suspends in between.
    private func enqueueRecordingOperations(
        on queue: CommandQueue,
        count: Int,
        recorder: Recorder<Int>,
        probe: SectionProbe
    ) -> [Task<Int, any Error>] {
        (0..<count).map { index in
            queue.enqueue {
                probe.enter()
                recorder.append(2 * index)
                await Task.yield()
                if index.isMultiple(of: 50) { try await Task.sleep(nanoseconds: 200_000) }
                recorder.append(2 * index + 1)
                probe.leave()
                return index
            }
        }
    }

    // MARK: Order

    @Test func enqueue_1000FromSynchronousCode_beginAndEndInEnqueueOrder_withoutOverlap() async throws {
        let queue = CommandQueue()
        let recorder = Recorder<Int>()
        let probe = SectionProbe()
        let count = 1_000
        let tasks = enqueueRecordingOperations(on: queue, count: count, recorder: recorder, probe: probe)
        let results = try await withHangTimeout {
            var results: [Int] = []
            for task in tasks { results.append(try await task.value) }
            return results
        }
        #expect(results == Array(0..<count))
        let events = recorder.snapshot
        #expect(events.count == (2 * count))
        #expect(events == Array(0..<2 * count), "operations did not begin and end in enqueue order")
        #expect(probe.maximumInside == 1, "two operations overlapped")
    }

    @Test func enqueue_fromSeveralThreads_eachThreadsOperationsKeepTheirOrder() async throws {
        let queue = CommandQueue()
        let recorder = Recorder<Int>()
        let probe = SectionProbe()
        let threads = 4
        let perThread = 100
        let done = Locked(0)
        let tasks = Recorder<Task<Void, any Error>>()
        let spawned = ThreadGroup()
        for thread in 0..<threads {
            spawned.spawn {
                for index in 0..<perThread {
                    tasks.append(
                        queue.enqueue {
                            probe.enter()
                            await Task.yield()
                            recorder.append(thread * 1_000 + index)
                            probe.leave()
                        })
                }
                done.increment()
            }
        }
        try await waitUntil("every thread enqueued") { done.value == threads }
        try await spawned.join()
        let all = tasks.snapshot
        try await withHangTimeout {
            for task in all { try await task.value }
        }
        let events = recorder.snapshot
        #expect(events.count == (threads * perThread))
        for thread in 0..<threads {
            let mine = events.filter { $0 / 1_000 == thread }
            #expect(mine == ((0..<perThread).map { thread * 1_000 + $0 }), "thread \(thread)'s order broke")
        }
        #expect(probe.maximumInside == 1)
    }

    @Test func pendingOperations_runHighestPriorityFirst_FIFOWithinAPriority() async throws {
        let queue = CommandQueue()
        let gate = Gate()
        let blocker = try await holdQueue(queue, until: gate)
        let log = Recorder<Int>()
        let priorities: [CommandPriority] = [
            .low, .highest, .medium, .lowest, .high, .medium, .highest, .low, CommandPriority(rawValue: 200), .lowest,
            .high, .medium,
        ]
        var tasks: [Task<Void, any Error>] = []
        for (index, priority) in priorities.enumerated() {
            tasks.append(queue.enqueue(priority: priority) { log.append(index) })
        }
        #expect(queue.engine.pendingCount == priorities.count)
        gate.open()
        _ = try await blocker.value
        let all = tasks
        try await withHangTimeout {
            for task in all { try await task.value }
        }
        let expected = priorities.indices.sorted { lhs, rhs in
            priorities[lhs] != priorities[rhs] ? priorities[lhs] > priorities[rhs] : lhs < rhs
        }
        #expect(log.snapshot == expected)
    }

    @Test func runningOperation_isNeverPreempted_byHigherPriorityWork() async throws {
        let queue = CommandQueue()
        let log = Recorder<String>()
        let gate = Gate()
        let entered = Locked(0)
        let low = queue.enqueue(priority: .lowest) {
            entered.increment()
            log.append("low begins")
            await gate.wait()
            log.append("low ends")
        }
        try await waitUntil("the low operation started") { entered.value == 1 }
        let high = queue.enqueue(priority: .highest) { log.append("high") }
        gate.open()
        try await withHangTimeout {
            try await low.value
            try await high.value
        }
        #expect(log.snapshot == ["low begins", "low ends", "high"])
    }

    // MARK: Results and errors

    @Test func perform_returnsTheOperationsResult() async throws {
        let queue = CommandQueue()
        let result = try await queue.perform(priority: .high) { () -> String in
            await Task.yield()
            return "result"
        }
        #expect(result == "result")
    }

    @Test func perform_rethrowsTheOperationsError() async throws {
        let queue = CommandQueue()
        do {
            _ = try await queue.perform { () -> Int in
                await Task.yield()
                throw TestError.thrown(id: 7)
            }
            Issue.record("perform did not throw")
        } catch {
            #expect((error as? TestError) == TestError.thrown(id: 7))
        }
        // The queue is usable after a throwing operation.
        let after = try? await queue.perform { 1 }
        #expect(after == 1)
    }

    @Test func enqueuedTask_throwsTheOperationsError_andTheQueueMovesOn() async throws {
        let queue = CommandQueue()
        let failing = queue.enqueue { () -> Int in throw TestError.thrown(id: 3) }
        let next = queue.enqueue { 4 }
        let failure = await failing.result
        #expect(throws: TestError.thrown(id: 3)) { try failure.get() }
        let value = try await withHangTimeout { try await next.value }
        #expect(value == 4)
    }

    @Test func perform_cancellingTheCaller_removesItsPendingOperation_whichNeverRuns() async throws {
        let queue = CommandQueue()
        let gate = Gate()
        let blocker = try await holdQueue(queue, until: gate)
        let ran = Locked(0)
        let caller = Task { try await queue.perform { ran.increment() } }
        try await waitUntil("the operation is queued") { queue.engine.pendingCount == 1 }
        caller.cancel()
        let result = try await withHangTimeout { await caller.result }
        #expect(throws: QueueSafeValueError.cancelled) { try result.get() }
        #expect(queue.engine.pendingCount == 0)
        gate.open()
        _ = try await blocker.value
        _ = try await queue.perform { 0 }
        #expect(ran.value == 0)
    }

    // MARK: Cancellation

    @Test func cancelAll_cancelsTheRunningOperation_andPendingOnesNeverStart_laterWorkRunsNormally() async throws {
        let queue = CommandQueue()
        let gate = Gate()
        let started = Recorder<Int>()
        let blocker = try await holdQueue(queue, until: gate)
        let pending = (0..<5).map { index in
            queue.enqueue(priority: CommandPriority(rawValue: UInt8(index * 50))) { started.append(index) }
        }
        #expect(queue.engine.pendingCount == pending.count)

        queue.cancelAll()

        #expect(blocker.isCancelled, "the running operation's task was not cancelled")
        for task in pending {
            #expect(task.isCancelled, "a pending operation's task was not cancelled")
        }
        #expect(queue.engine.pendingCount == 0, "pending operations are still queued")
        for task in pending {
            let result = try await withHangTimeout { await task.result }
            #expect(throws: QueueSafeValueError.cancelled) { try result.get() }
        }
        #expect(gate.waiterCount == 1, "the running operation should still be running")

        // Work enqueued afterwards runs normally, after the running operation has ended.
        let log = Recorder<String>()
        let later = queue.enqueue { () -> Bool in
            log.append("later")
            return Task.isCancelled
        }
        #expect(!later.isCancelled)
        try await Task.sleep(nanoseconds: 5_000_000)
        #expect(log.snapshot == [], "later work started while the cancelled operation still ran")
        gate.open()
        let blockerSawCancellation = try await withHangTimeout { try await blocker.value }
        #expect(blockerSawCancellation, "the running operation did not see Task.isCancelled")
        let laterSawCancellation = try await withHangTimeout { try await later.value }
        #expect(!laterSawCancellation)
        #expect(log.snapshot == ["later"])
        #expect(started.snapshot == [], "a cancelled pending operation started")
    }

    @Test func cancelAll_onAnIdleQueue_leavesLaterWorkAlone() async throws {
        let queue = CommandQueue()
        queue.cancelAll()
        let task = queue.enqueue { Task.isCancelled }
        let sawCancellation = try await withHangTimeout { try await task.value }
        #expect(!sawCancellation)
        #expect(!task.isCancelled)
    }

    /// `cancelAll()` races with operations that run as soon as they are enqueued: every operation
    /// either ended before `cancelAll()` was called or has its task cancelled; one that had not
    /// started never starts, except the one the queue had already handed the turn to, which then
    /// sees the cancellation.
    @Test func cancelAll_racingWithRunningWork_cancelsEveryOperationThatHadNotEnded() async throws {
        for _ in 0..<20 {
            let queue = CommandQueue()
            let probe = CancelAllProbe()
            let tasks = (0..<20).map { index in
                queue.enqueue { () -> Int in
                    probe.operationStarted(index) { Task.isCancelled }
                    if index.isMultiple(of: 3) { await Task.yield() }
                    probe.operationEnded(index)
                    return index
                }
            }
            probe.cancelAll(queue)
            var succeeded = 0
            for (index, task) in tasks.enumerated() {
                let result = try await withHangTimeout { await task.result }
                #expect(
                    probe.endedBeforeCancelAll.contains(index) || task.isCancelled,
                    "task \(index) was neither finished nor cancelled")
                switch result {
                case .success: succeeded += 1
                case .failure(let error): #expect((error as? QueueSafeValueError) == .cancelled)
                }
            }
            #expect(probe.startedCount == succeeded, "an operation ran but its task reported cancelled")
            #expect(
                (probe.startedCount - probe.endedBeforeCancelAll.count) <= 1,
                "more than one operation was running or started around cancelAll()")
            #expect(
                probe.startedAfterCancelAllSawCancellation,
                "an operation that started after cancelAll() did not see Task.isCancelled")
            let after = try await withHangTimeout { try await queue.perform { 5 } }
            #expect(after == 5)
        }
    }

    @Test func cancellingOnePendingTask_removesItFromTheQueue_andTheOthersRunInOrder() async throws {
        let queue = CommandQueue()
        let gate = Gate()
        let blocker = try await holdQueue(queue, until: gate)
        let log = Recorder<Int>()
        let tasks = (0..<4).map { index in queue.enqueue { log.append(index) } }
        #expect(queue.engine.pendingCount == 4)
        tasks[2].cancel()
        try await waitUntil("the cancelled operation left the queue") { queue.engine.pendingCount == 3 }
        let cancelled = try await withHangTimeout { await tasks[2].result }
        #expect(throws: QueueSafeValueError.cancelled) { try cancelled.get() }
        #expect(gate.waiterCount == 1, "the blocker should still hold the queue")
        gate.open()
        _ = try await blocker.value
        try await withHangTimeout {
            for index in [0, 1, 3] { try await tasks[index].value }
        }
        #expect(log.snapshot == [0, 1, 3])
    }

    /// Rounds of enqueues and `cancelAll()` racing with the running work: every task either ran its
    /// operation or threw `.cancelled` without running it, operations never overlap and the queue
    /// keeps working.
    @Test func cancelAll_racingWithWork_everyTaskRunsOrThrowsCancelled_andTheQueueKeepsWorking() async throws {
        let queue = CommandQueue()
        let probe = SectionProbe()
        let ran = Locked(0)
        var tasks: [Task<Int, any Error>] = []
        for round in 0..<30 {
            for index in 0..<10 {
                tasks.append(
                    queue.enqueue(priority: CommandPriority(rawValue: UInt8(index * 20))) {
                        probe.enter()
                        ran.increment()
                        if index.isMultiple(of: 2) { await Task.yield() }
                        probe.leave()
                        return index
                    })
            }
            if round.isMultiple(of: 2) { await Task.yield() }
            queue.cancelAll()
        }
        var succeeded = 0
        for task in tasks {
            let result = try await withHangTimeout { await task.result }
            switch result {
            case .success: succeeded += 1
            case .failure(let error): #expect((error as? QueueSafeValueError) == .cancelled)
            }
        }
        #expect(ran.value == succeeded, "an operation ran but its task reported cancelled")
        #expect(probe.maximumInside == 1)
        #expect(queue.engine.pendingCount == 0)
        let after = try await withHangTimeout { try await queue.perform { 1 } }
        #expect(after == 1)
    }

    // MARK: Isolation

    @Test func enqueueIsolatedToAnActor_runsIsolatedToIt_andKeepsTheOrderAcrossSuspensions() async throws {
        let queue = CommandQueue()
        let actor = Journal<Int>()
        let count = 100
        let tasks = (0..<count).map { index in
            queue.enqueue(isolatedTo: actor) { actor in
                actor.assertIsolated()
                actor.entries.append(2 * index)
                await Task.yield()
                actor.assertIsolated()
                actor.entries.append(2 * index + 1)
            }
        }
        // Other calls to the actor may interleave at the suspension points; they do not break the
        // queue's order.
        let other = Task {
            for _ in 0..<20 {
                await actor.write(-1)
                await Task.yield()
            }
        }
        try await withHangTimeout {
            for task in tasks { try await task.value }
            await other.value
        }
        let log = await actor.entries.filter { $0 >= 0 }
        #expect(log == Array(0..<2 * count))
    }

    @Test func performIsolatedToAnActor_returnsTheResult() async throws {
        let queue = CommandQueue()
        let actor = Journal<Int>()
        let count = try await queue.perform(isolatedTo: actor) { actor -> Int in
            actor.assertIsolated()
            actor.entries.append(1)
            return actor.entries.count
        }
        #expect(count == 1)
    }

    @Test func enqueueOnMainActor_fromANonisolatedTest_runsOnTheMainActor_inOrder() async throws {
        let queue = CommandQueue()
        let mainLog = await MainActor.run { MainActorJournal<Int>() }
        let tasks = (0..<50).map { index in
            queue.enqueueOnMainActor {
                MainActor.assertIsolated()
                mainLog.entries.append(2 * index)
                await Task.yield()
                MainActor.assertIsolated()
                mainLog.entries.append(2 * index + 1)
            }
        }
        try await withHangTimeout {
            for task in tasks { try await task.value }
        }
        let log = await mainLog.entries
        #expect(log == Array(0..<100))
    }

    @Test @MainActor func enqueueOnMainActor_fromTheMainActor_runsOnceTheCallerSuspends() async throws {
        let queue = CommandQueue()
        let mainLog = MainActorJournal<Int>()
        let tasks = (0..<10).map { index in
            queue.enqueueOnMainActor { mainLog.entries.append(index) }
        }
        let performed = try await queue.performOnMainActor { () -> Int in
            MainActor.assertIsolated()
            return mainLog.entries.count
        }
        #expect(performed == 10)
        for task in tasks { try await task.value }
        #expect(mainLog.entries == Array(0..<10))
    }

    // MARK: Reentrancy

    @Test func perform_fromInsideAnOperation_throwsReentrantAccessAtOnce() async throws {
        let queue = CommandQueue()
        let actor = Journal<Int>()
        let errors = try await withHangTimeout {
            try await queue.perform { () -> [QueueSafeValueError?] in
                var errors: [QueueSafeValueError?] = []
                errors.append(await thrownError { try await queue.perform { 1 } })
                errors.append(await thrownError { try await queue.perform(isolatedTo: actor) { _ in 1 } })
                errors.append(await thrownError { try await queue.performOnMainActor { 1 } })
                return errors
            }
        }
        #expect(errors == [.reentrantAccess, .reentrantAccess, .reentrantAccess])
        #expect(queue.engine.pendingCount == 0, "a reentrant perform left an entry in the queue")
    }

    @Test func perform_fromAChildTaskOfAnOperation_throwsReentrantAccess() async throws {
        let queue = CommandQueue()
        let error = try await withHangTimeout {
            try await queue.perform { () -> QueueSafeValueError? in
                await withTaskGroup(of: QueueSafeValueError?.self) { group in
                    group.addTask { await thrownError { try await queue.perform { 1 } } }
                    return await group.next()!
                }
            }
        }
        #expect(error == .reentrantAccess)
    }

    @Test func perform_onAnotherQueue_fromInsideAnOperation_runsNormally() async throws {
        let outer = CommandQueue()
        let inner = CommandQueue()
        let result = try await withHangTimeout {
            try await outer.perform { try await inner.perform { 42 } }
        }
        #expect(result == 42)
    }

    @Test func enqueue_fromInsideAnOperation_isAllowed_andRunsAfterIt() async throws {
        let queue = CommandQueue()
        let log = Recorder<String>()
        let outer = queue.enqueue { () -> Task<Void, any Error> in
            log.append("outer begins")
            let inner = queue.enqueue { log.append("inner") }
            await Task.yield()
            try await Task.sleep(nanoseconds: 1_000_000)
            log.append("outer ends")
            return inner
        }
        try await withHangTimeout {
            let inner = try await outer.value
            try await inner.value
        }
        #expect(log.snapshot == ["outer begins", "outer ends", "inner"])
    }

    /// A task started inside an operation inherits its task locals, but once the operation has
    /// ended its `perform` is not reentrant: it simply waits for its turn.
    @Test func unstructuredTaskStartedInsideAnOperation_performsNormallyAfterTheOperationEnded() async throws {
        let queue = CommandQueue()
        let gate = Gate()
        let outer = queue.enqueue { () -> Task<Int, any Error> in
            Task {
                await gate.wait()
                return try await queue.perform { 7 }
            }
        }
        let started = try await withHangTimeout { try await outer.value }
        // Another operation holds the queue when the task's `perform` arrives.
        let holderGate = Gate()
        let holder = try await holdQueue(queue, until: holderGate)
        gate.open()
        try await waitUntil("the task's operation is queued") { queue.engine.pendingCount == 1 }
        holderGate.open()
        _ = try await holder.value
        let result = try await withHangTimeout { try await started.value }
        #expect(result == 7)
    }
}
