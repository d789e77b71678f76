import Dispatch
import Foundation
import XCTest

@testable import QueueSafeValue

/// State owned by an actor, changed synchronously by operations isolated to it.
private actor ConcurrencyLogActor {
    var log: [Int] = []

    func record(_ entry: Int) { log.append(entry) }
}

/// Main-actor state, changed synchronously by main-actor operations.
@MainActor
private final class ConcurrencyMainLog {
    static let shared = ConcurrencyMainLog()
    var log: [Int] = []
}

/// Records, under one lock, which operations ended before `cancelAll()` was called.
private final class ConcurrencyCancelAllProbe: @unchecked Sendable {
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
final class CommandQueueTests: XCTestCase {

    /// Enqueues `count` operations from synchronous code. Operation `i` records `2i` when it begins
    /// and `2i + 1` when it ends, and suspends in between.
    private func enqueueRecordingOperations(
        on queue: CommandQueue,
        count: Int,
        recorder: ConcurrencyRecorder<Int>
    ) -> [Task<Int, any Error>] {
        (0..<count).map { index in
            queue.enqueue {
                recorder.enter()
                recorder.append(2 * index)
                await Task.yield()
                if index.isMultiple(of: 50) { try await Task.sleep(nanoseconds: 200_000) }
                recorder.append(2 * index + 1)
                recorder.leave()
                return index
            }
        }
    }

    /// Enqueues an operation that waits on `gate`, holding the queue; returns once it runs.
    private func block(_ queue: CommandQueue, until gate: ConcurrencyGate) async throws -> Task<Bool, any Error> {
        let entered = ConcurrencyCounter()
        let blocker = queue.enqueue(priority: .lowest) { () -> Bool in
            entered.increment()
            await gate.wait()
            return Task.isCancelled
        }
        try await concurrencyWaitUntil("the blocking operation started") { entered.value == 1 }
        return blocker
    }

    // MARK: Order

    func test_enqueue_1000FromSynchronousCode_beginAndEndInEnqueueOrder_withoutOverlap() async throws {
        let queue = CommandQueue()
        let recorder = ConcurrencyRecorder<Int>()
        let count = 1_000
        let tasks = enqueueRecordingOperations(on: queue, count: count, recorder: recorder)
        let results = try await concurrencyWithTimeout {
            var results: [Int] = []
            for task in tasks { results.append(try await task.value) }
            return results
        }
        XCTAssertEqual(results, Array(0..<count))
        let events = recorder.events
        XCTAssertEqual(events.count, 2 * count)
        XCTAssertEqual(events, Array(0..<2 * count), "operations did not begin and end in enqueue order")
        XCTAssertEqual(recorder.maxInside, 1, "two operations overlapped")
    }

    func test_enqueue_fromSeveralThreads_eachThreadsOperationsKeepTheirOrder() async throws {
        let queue = CommandQueue()
        let recorder = ConcurrencyRecorder<Int>()
        let threads = 4
        let perThread = 100
        let done = ConcurrencyCounter()
        let tasks = ConcurrencyRecorder<Task<Void, any Error>>()
        for thread in 0..<threads {
            concurrencyStartThread {
                for index in 0..<perThread {
                    tasks.append(
                        queue.enqueue {
                            recorder.enter()
                            await Task.yield()
                            recorder.append(thread * 1_000 + index)
                            recorder.leave()
                        })
                }
                done.increment()
            }
        }
        try await concurrencyWaitUntil("every thread enqueued") { done.value == threads }
        let all = tasks.events
        try await concurrencyWithTimeout {
            for task in all { try await task.value }
        }
        let events = recorder.events
        XCTAssertEqual(events.count, threads * perThread)
        for thread in 0..<threads {
            let mine = events.filter { $0 / 1_000 == thread }
            XCTAssertEqual(mine, (0..<perThread).map { thread * 1_000 + $0 }, "thread \(thread)'s order broke")
        }
        XCTAssertEqual(recorder.maxInside, 1)
    }

    func test_pendingOperations_runHighestPriorityFirst_FIFOWithinAPriority() async throws {
        let queue = CommandQueue()
        let gate = ConcurrencyGate()
        let blocker = try await block(queue, until: gate)
        let log = ConcurrencyRecorder<Int>()
        let priorities: [CommandPriority] = [
            .low, .highest, .medium, .lowest, .high, .medium, .highest, .low, CommandPriority(rawValue: 200), .lowest,
            .high, .medium,
        ]
        var tasks: [Task<Void, any Error>] = []
        for (index, priority) in priorities.enumerated() {
            tasks.append(queue.enqueue(priority: priority) { log.append(index) })
        }
        XCTAssertEqual(queue.engine.pendingCount, priorities.count)
        gate.open()
        _ = try await blocker.value
        let all = tasks
        try await concurrencyWithTimeout {
            for task in all { try await task.value }
        }
        let expected = priorities.indices.sorted { lhs, rhs in
            priorities[lhs] != priorities[rhs] ? priorities[lhs] > priorities[rhs] : lhs < rhs
        }
        XCTAssertEqual(log.events, expected)
    }

    func test_runningOperation_isNeverPreempted_byHigherPriorityWork() async throws {
        let queue = CommandQueue()
        let log = ConcurrencyRecorder<String>()
        let gate = ConcurrencyGate()
        let entered = ConcurrencyCounter()
        let low = queue.enqueue(priority: .lowest) {
            entered.increment()
            log.append("low begins")
            await gate.wait()
            log.append("low ends")
        }
        try await concurrencyWaitUntil("the low operation started") { entered.value == 1 }
        let high = queue.enqueue(priority: .highest) { log.append("high") }
        gate.open()
        try await concurrencyWithTimeout {
            try await low.value
            try await high.value
        }
        XCTAssertEqual(log.events, ["low begins", "low ends", "high"])
    }

    // MARK: Results and errors

    func test_perform_returnsTheOperationsResult() async throws {
        let queue = CommandQueue()
        let result = try await queue.perform(priority: .high) { () -> String in
            await Task.yield()
            return "result"
        }
        XCTAssertEqual(result, "result")
    }

    func test_perform_rethrowsTheOperationsError() async {
        let queue = CommandQueue()
        do {
            _ = try await queue.perform { () -> Int in
                await Task.yield()
                throw ConcurrencyTestError(code: 7)
            }
            XCTFail("perform did not throw")
        } catch {
            XCTAssertEqual(error as? ConcurrencyTestError, ConcurrencyTestError(code: 7))
        }
        // The queue is usable after a throwing operation.
        let after = try? await queue.perform { 1 }
        XCTAssertEqual(after, 1)
    }

    func test_enqueuedTask_throwsTheOperationsError_andTheQueueMovesOn() async throws {
        let queue = CommandQueue()
        let failing = queue.enqueue { () -> Int in throw ConcurrencyTestError(code: 3) }
        let next = queue.enqueue { 4 }
        let failure = await failing.result
        XCTAssertThrowsError(try failure.get()) { XCTAssertEqual($0 as? ConcurrencyTestError, .init(code: 3)) }
        let value = try await concurrencyWithTimeout { try await next.value }
        XCTAssertEqual(value, 4)
    }

    func test_perform_cancellingTheCaller_removesItsPendingOperation_whichNeverRuns() async throws {
        let queue = CommandQueue()
        let gate = ConcurrencyGate()
        let blocker = try await block(queue, until: gate)
        let ran = ConcurrencyCounter()
        let caller = Task { try await queue.perform { ran.increment() } }
        try await concurrencyWaitUntil("the operation is queued") { queue.engine.pendingCount == 1 }
        caller.cancel()
        let result = try await concurrencyWithTimeout { await caller.result }
        XCTAssertThrowsError(try result.get()) { XCTAssertEqual($0 as? QueueSafeValueError, .cancelled) }
        XCTAssertEqual(queue.engine.pendingCount, 0)
        gate.open()
        _ = try await blocker.value
        _ = try await queue.perform { 0 }
        XCTAssertEqual(ran.value, 0)
    }

    // MARK: Cancellation

    func test_cancelAll_cancelsTheRunningOperation_andPendingOnesNeverStart_laterWorkRunsNormally() async throws {
        let queue = CommandQueue()
        let gate = ConcurrencyGate()
        let started = ConcurrencyRecorder<Int>()
        let blocker = try await block(queue, until: gate)
        let pending = (0..<5).map { index in
            queue.enqueue(priority: CommandPriority(rawValue: UInt8(index * 50))) { started.append(index) }
        }
        XCTAssertEqual(queue.engine.pendingCount, pending.count)

        queue.cancelAll()

        XCTAssertTrue(blocker.isCancelled, "the running operation's task was not cancelled")
        for task in pending {
            XCTAssertTrue(task.isCancelled, "a pending operation's task was not cancelled")
        }
        XCTAssertEqual(queue.engine.pendingCount, 0, "pending operations are still queued")
        for task in pending {
            let result = try await concurrencyWithTimeout { await task.result }
            XCTAssertThrowsError(try result.get()) { XCTAssertEqual($0 as? QueueSafeValueError, .cancelled) }
        }
        XCTAssertEqual(gate.waiterCount, 1, "the running operation should still be running")

        // Work enqueued afterwards runs normally, after the running operation has ended.
        let log = ConcurrencyRecorder<String>()
        let later = queue.enqueue { () -> Bool in
            log.append("later")
            return Task.isCancelled
        }
        XCTAssertFalse(later.isCancelled)
        try await Task.sleep(nanoseconds: 5_000_000)
        XCTAssertEqual(log.events, [], "later work started while the cancelled operation still ran")
        gate.open()
        let blockerSawCancellation = try await concurrencyWithTimeout { try await blocker.value }
        XCTAssertTrue(blockerSawCancellation, "the running operation did not see Task.isCancelled")
        let laterSawCancellation = try await concurrencyWithTimeout { try await later.value }
        XCTAssertFalse(laterSawCancellation)
        XCTAssertEqual(log.events, ["later"])
        XCTAssertEqual(started.events, [], "a cancelled pending operation started")
    }

    func test_cancelAll_onAnIdleQueue_leavesLaterWorkAlone() async throws {
        let queue = CommandQueue()
        queue.cancelAll()
        let task = queue.enqueue { Task.isCancelled }
        let sawCancellation = try await concurrencyWithTimeout { try await task.value }
        XCTAssertFalse(sawCancellation)
        XCTAssertFalse(task.isCancelled)
    }

    /// `cancelAll()` races with operations that run as soon as they are enqueued: every operation
    /// either ended before `cancelAll()` was called or has its task cancelled; one that had not
    /// started never starts, except the one the queue had already handed the turn to, which then
    /// sees the cancellation.
    func test_cancelAll_racingWithRunningWork_cancelsEveryOperationThatHadNotEnded() async throws {
        for _ in 0..<20 {
            let queue = CommandQueue()
            let probe = ConcurrencyCancelAllProbe()
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
                let result = try await concurrencyWithTimeout { await task.result }
                XCTAssertTrue(
                    probe.endedBeforeCancelAll.contains(index) || task.isCancelled,
                    "task \(index) was neither finished nor cancelled")
                switch result {
                case .success: succeeded += 1
                case .failure(let error): XCTAssertEqual(error as? QueueSafeValueError, .cancelled)
                }
            }
            XCTAssertEqual(probe.startedCount, succeeded, "an operation ran but its task reported cancelled")
            XCTAssertLessThanOrEqual(
                probe.startedCount - probe.endedBeforeCancelAll.count, 1,
                "more than one operation was running or started around cancelAll()")
            XCTAssertTrue(
                probe.startedAfterCancelAllSawCancellation,
                "an operation that started after cancelAll() did not see Task.isCancelled")
            let after = try await concurrencyWithTimeout { try await queue.perform { 5 } }
            XCTAssertEqual(after, 5)
        }
    }

    func test_cancellingOnePendingTask_removesItFromTheQueue_andTheOthersRunInOrder() async throws {
        let queue = CommandQueue()
        let gate = ConcurrencyGate()
        let blocker = try await block(queue, until: gate)
        let log = ConcurrencyRecorder<Int>()
        let tasks = (0..<4).map { index in queue.enqueue { log.append(index) } }
        XCTAssertEqual(queue.engine.pendingCount, 4)
        tasks[2].cancel()
        try await concurrencyWaitUntil("the cancelled operation left the queue") { queue.engine.pendingCount == 3 }
        let cancelled = try await concurrencyWithTimeout { await tasks[2].result }
        XCTAssertThrowsError(try cancelled.get()) { XCTAssertEqual($0 as? QueueSafeValueError, .cancelled) }
        XCTAssertEqual(gate.waiterCount, 1, "the blocker should still hold the queue")
        gate.open()
        _ = try await blocker.value
        try await concurrencyWithTimeout {
            for index in [0, 1, 3] { try await tasks[index].value }
        }
        XCTAssertEqual(log.events, [0, 1, 3])
    }

    /// Rounds of enqueues and `cancelAll()` racing with the running work: every task either ran its
    /// operation or threw `.cancelled` without running it, operations never overlap and the queue
    /// keeps working.
    func test_cancelAll_racingWithWork_everyTaskRunsOrThrowsCancelled_andTheQueueKeepsWorking() async throws {
        let queue = CommandQueue()
        let recorder = ConcurrencyRecorder<Int>()
        let ran = ConcurrencyCounter()
        var tasks: [Task<Int, any Error>] = []
        for round in 0..<30 {
            for index in 0..<10 {
                tasks.append(
                    queue.enqueue(priority: CommandPriority(rawValue: UInt8(index * 20))) {
                        recorder.enter()
                        ran.increment()
                        if index.isMultiple(of: 2) { await Task.yield() }
                        recorder.leave()
                        return index
                    })
            }
            if round.isMultiple(of: 2) { await Task.yield() }
            queue.cancelAll()
        }
        var succeeded = 0
        for task in tasks {
            let result = try await concurrencyWithTimeout { await task.result }
            switch result {
            case .success: succeeded += 1
            case .failure(let error): XCTAssertEqual(error as? QueueSafeValueError, .cancelled)
            }
        }
        XCTAssertEqual(ran.value, succeeded, "an operation ran but its task reported cancelled")
        XCTAssertEqual(recorder.maxInside, 1)
        XCTAssertEqual(queue.engine.pendingCount, 0)
        let after = try await concurrencyWithTimeout { try await queue.perform { 1 } }
        XCTAssertEqual(after, 1)
    }

    // MARK: Isolation

    func test_enqueueIsolatedToAnActor_runsIsolatedToIt_andKeepsTheOrderAcrossSuspensions() async throws {
        let queue = CommandQueue()
        let actor = ConcurrencyLogActor()
        let count = 100
        let tasks = (0..<count).map { index in
            queue.enqueue(isolatedTo: actor) { actor in
                actor.assertIsolated()
                actor.log.append(2 * index)
                await Task.yield()
                actor.assertIsolated()
                actor.log.append(2 * index + 1)
            }
        }
        // Other calls to the actor may interleave at the suspension points; they do not break the
        // queue's order.
        let other = Task {
            for _ in 0..<20 {
                await actor.record(-1)
                await Task.yield()
            }
        }
        try await concurrencyWithTimeout {
            for task in tasks { try await task.value }
            await other.value
        }
        let log = await actor.log.filter { $0 >= 0 }
        XCTAssertEqual(log, Array(0..<2 * count))
    }

    func test_performIsolatedToAnActor_returnsTheResult() async throws {
        let queue = CommandQueue()
        let actor = ConcurrencyLogActor()
        let count = try await queue.perform(isolatedTo: actor) { actor -> Int in
            actor.assertIsolated()
            actor.log.append(1)
            return actor.log.count
        }
        XCTAssertEqual(count, 1)
    }

    func test_enqueueOnMainActor_fromANonisolatedTest_runsOnTheMainActor_inOrder() async throws {
        let queue = CommandQueue()
        await MainActor.run { ConcurrencyMainLog.shared.log = [] }
        let tasks = (0..<50).map { index in
            queue.enqueueOnMainActor {
                MainActor.assertIsolated()
                ConcurrencyMainLog.shared.log.append(2 * index)
                await Task.yield()
                MainActor.assertIsolated()
                ConcurrencyMainLog.shared.log.append(2 * index + 1)
            }
        }
        try await concurrencyWithTimeout {
            for task in tasks { try await task.value }
        }
        let log = await MainActor.run { ConcurrencyMainLog.shared.log }
        XCTAssertEqual(log, Array(0..<100))
    }

    @MainActor
    func test_enqueueOnMainActor_fromTheMainActor_runsOnceTheCallerSuspends() async throws {
        let queue = CommandQueue()
        ConcurrencyMainLog.shared.log = []
        let tasks = (0..<10).map { index in
            queue.enqueueOnMainActor { ConcurrencyMainLog.shared.log.append(index) }
        }
        let performed = try await queue.performOnMainActor { () -> Int in
            MainActor.assertIsolated()
            return ConcurrencyMainLog.shared.log.count
        }
        XCTAssertEqual(performed, 10)
        for task in tasks { try await task.value }
        XCTAssertEqual(ConcurrencyMainLog.shared.log, Array(0..<10))
    }

    // MARK: Reentrancy

    func test_perform_fromInsideAnOperation_throwsReentrantAccessAtOnce() async throws {
        let queue = CommandQueue()
        let actor = ConcurrencyLogActor()
        let errors = try await concurrencyWithTimeout {
            try await queue.perform { () -> [QueueSafeValueError?] in
                var errors: [QueueSafeValueError?] = []
                errors.append(await concurrencyError { try await queue.perform { 1 } })
                errors.append(await concurrencyError { try await queue.perform(isolatedTo: actor) { _ in 1 } })
                errors.append(await concurrencyError { try await queue.performOnMainActor { 1 } })
                return errors
            }
        }
        XCTAssertEqual(errors, [.reentrantAccess, .reentrantAccess, .reentrantAccess])
        XCTAssertEqual(queue.engine.pendingCount, 0, "a reentrant perform left an entry in the queue")
    }

    func test_perform_fromAChildTaskOfAnOperation_throwsReentrantAccess() async throws {
        let queue = CommandQueue()
        let error = try await concurrencyWithTimeout {
            try await queue.perform { () -> QueueSafeValueError? in
                await withTaskGroup(of: QueueSafeValueError?.self) { group in
                    group.addTask { await concurrencyError { try await queue.perform { 1 } } }
                    return await group.next()!
                }
            }
        }
        XCTAssertEqual(error, .reentrantAccess)
    }

    func test_perform_onAnotherQueue_fromInsideAnOperation_runsNormally() async throws {
        let outer = CommandQueue()
        let inner = CommandQueue()
        let result = try await concurrencyWithTimeout {
            try await outer.perform { try await inner.perform { 42 } }
        }
        XCTAssertEqual(result, 42)
    }

    func test_enqueue_fromInsideAnOperation_isAllowed_andRunsAfterIt() async throws {
        let queue = CommandQueue()
        let log = ConcurrencyRecorder<String>()
        let outer = queue.enqueue { () -> Task<Void, any Error> in
            log.append("outer begins")
            let inner = queue.enqueue { log.append("inner") }
            await Task.yield()
            try await Task.sleep(nanoseconds: 1_000_000)
            log.append("outer ends")
            return inner
        }
        try await concurrencyWithTimeout {
            let inner = try await outer.value
            try await inner.value
        }
        XCTAssertEqual(log.events, ["outer begins", "outer ends", "inner"])
    }

    /// A task started inside an operation inherits its task locals, but once the operation has
    /// ended its `perform` is not reentrant: it simply waits for its turn.
    func test_unstructuredTaskStartedInsideAnOperation_performsNormallyAfterTheOperationEnded() async throws {
        let queue = CommandQueue()
        let gate = ConcurrencyGate()
        let outer = queue.enqueue { () -> Task<Int, any Error> in
            Task {
                await gate.wait()
                return try await queue.perform { 7 }
            }
        }
        let started = try await concurrencyWithTimeout { try await outer.value }
        // Another operation holds the queue when the task's `perform` arrives.
        let holderGate = ConcurrencyGate()
        let holder = try await block(queue, until: holderGate)
        gate.open()
        try await concurrencyWaitUntil("the task's operation is queued") { queue.engine.pendingCount == 1 }
        holderGate.open()
        _ = try await holder.value
        let result = try await concurrencyWithTimeout { try await started.value }
        XCTAssertEqual(result, 7)
    }
}
