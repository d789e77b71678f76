import Dispatch
import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

/// A blocking command issued from a block running on a queue, behind a dispatch command for that
/// same queue, does not hang: the waiting thread runs the dispatch command itself (it runs on the
/// queue), exactly once, and no `.deadlock` is reported — serial, concurrent or main queue.
@Suite(.runsAlongsideOthers) struct QueueCycleTests {
    // Every wait here is bounded (`waitBounded`): a queue cycle that hangs becomes `.timedOut`.

    /// Holds `value` on a thread of its own until `release()`.
    final class Holder: @unchecked Sendable {  // @unchecked Sendable: the semaphores are the synchronization
        private let holding = DispatchSemaphore(value: 0)
        private let letGo = DispatchSemaphore(value: 0)
        private let done = DispatchSemaphore(value: 0)

        init<Value: Sendable>(_ value: QueueSafeValue<Value>) {
            Thread { [holding, letGo, done] in
                value.wait.highestPriority.set { _ in
                    holding.signal()
                    letGo.wait()
                }
                done.signal()
            }.start()
            holding.wait()
        }

        /// Lets go once `condition` holds (bounded), from the holder's own thread.
        func release(when condition: @escaping @Sendable () -> Bool) {
            Thread { [letGo] in
                _ = waitUntil { condition() }
                letGo.signal()
            }.start()
        }

        func waitUntilDone() -> Bool { done.wait(timeout: .now() + 30) == .success }
    }

    /// A queue of the given kind that can tell whether code runs on it.
    private func makeQueue(concurrent: Bool) -> TaggedQueue {
        TaggedQueue(
            label: concurrent ? "QueueCycleTests.concurrent" : "QueueCycleTests.serial",
            attributes: concurrent ? .concurrent : [])
    }

    @Test(arguments: [false, true])
    func blockingCommandOnQueue_behindADispatchCommandForThatQueue_doesNotHang(concurrent: Bool) {
        let value = QueueSafeValue(value: 0, label: "shared")
        let queue = makeQueue(concurrent: concurrent)
        let holder = Holder(value)
        let dispatchRuns = Locked(0)
        let ranOnQueue = Locked(true)
        let delivered = DispatchSemaphore(value: 0)
        let blockResult = Locked<Result<Int, QueueSafeValueError>?>(nil)
        let blockDone = DispatchSemaphore(value: 0)
        queue.queue.async {
            // Queued behind the holder, for this very queue.
            value.async(performIn: queue.queue).priority(.high).set(
                accessClosure: { value in
                    dispatchRuns.withLock { $0 += 1 }
                    if !queue.isCurrent { ranOnQueue.set(false) }
                    value += 10
                },
                completion: { _ in delivered.signal() })
            // Behind the dispatch command: its block cannot run while this block waits.
            blockResult.set(value.waitBounded.lowestPriority.set { $0 += 1 })
            blockDone.signal()
        }
        holder.release { value.diagnostics.waitingCount == 2 }
        #expect(blockDone.wait(timeout: .now() + 30) == .success, "the blocking command on the queue hung")
        #expect(delivered.wait(timeout: .now() + 30) == .success, "the dispatch command's completion never came")
        #expect(holder.waitUntilDone())
        #expect(dispatchRuns.value == 1, "the dispatch command ran \(dispatchRuns.value) times")
        #expect(ranOnQueue.value, "the dispatch command ran off its queue")
        if case .success(let result) = blockResult.value {
            #expect(result == 11, "the blocking command ran before the dispatch command")
        } else {
            Issue.record("the blocking command failed: \(String(describing: blockResult.value))")
        }
    }

    @Test(arguments: [false, true])
    func dispatchCommandOnAFreeValue_thenABlockingCommandFromTheSameBlock_doesNotHang(concurrent: Bool) {
        // The dispatch command takes the free section at once; its block is queued behind this one.
        let value = QueueSafeValue(value: 0)
        let queue = makeQueue(concurrent: concurrent)
        let dispatchRuns = Locked(0)
        let blockResult = Locked<Result<Int, QueueSafeValueError>?>(nil)
        let blockDone = DispatchSemaphore(value: 0)
        let delivered = DispatchSemaphore(value: 0)
        queue.queue.async {
            value.async(performIn: queue.queue).lowestPriority.set(
                accessClosure: { value in
                    dispatchRuns.withLock { $0 += 1 }
                    value += 10
                },
                completion: { _ in delivered.signal() })
            blockResult.set(value.waitBounded.highestPriority.set { $0 += 1 })
            blockDone.signal()
        }
        #expect(blockDone.wait(timeout: .now() + 30) == .success, "the blocking command on the queue hung")
        #expect(delivered.wait(timeout: .now() + 30) == .success)
        #expect(dispatchRuns.value == 1, "the dispatch command ran \(dispatchRuns.value) times")
        #expect(
            blockResult.value.map { if case .success(11) = $0 { true } else { false } } == true,
            "\(String(describing: blockResult.value))")
        // Both blocks are done and nothing ran twice: the taken-over block found nothing to do.
        usleep(20_000)
        #expect(dispatchRuns.value == 1)
    }

    /// A queue nothing has targeted yet when a block on it begins to wait: the waiter cannot know
    /// it runs on that queue when it parks. The dispatch command that tags the queue afterwards
    /// tells it to look again, and it runs the command. (This hung before: whether a waiter knew
    /// its queue depended on whether a command had targeted it before the wait began.)
    @Test func queueTaggedOnlyAfterTheWaiterParked_doesNotHang() {
        let value = QueueSafeValue(value: [String](), label: "late tag")
        let holder = Holder(value)
        let queue = DispatchQueue(label: "QueueCycleTests.untagged")
        let blockResult = Locked<Result<[String], QueueSafeValueError>?>(nil)
        let blockDone = DispatchSemaphore(value: 0)
        queue.async {
            blockResult.set(value.waitBounded.lowestPriority.set { $0.append("wait") })
            blockDone.signal()
        }
        // The waiter has joined the queue; let it spin out and park before the queue is tagged.
        _ = waitUntil { value.diagnostics.waitingCount == 1 }
        sleepBriefly()
        let delivered = DispatchSemaphore(value: 0)
        value.async(performIn: queue).highestPriority.set(
            accessClosure: { $0.append("dispatch") }, completion: { _ in delivered.signal() })
        holder.release { value.diagnostics.waitingCount == 2 }
        #expect(blockDone.wait(timeout: .now() + 30) == .success, "the blocking command on the queue hung")
        #expect(delivered.wait(timeout: .now() + 30) == .success, "the dispatch command's completion never came")
        #expect(holder.waitUntilDone())
        #expect(
            blockResult.value.map { if case .success(["dispatch", "wait"]) = $0 { true } else { false } } == true,
            "\(String(describing: blockResult.value))")
    }

    /// The main queue goes by one identity, however it is reached: on Linux every
    /// `DispatchQueue.main` is a new wrapper object, and the first command for `.main` used to tag
    /// it with that wrapper's address, which the main thread's own identity never matched.
    @Test func mainQueue_hasOneIdentity_fromEveryWrapper() {
        #expect(QueueTag.identity(of: DispatchQueue.main) == QueueTag.mainQueue)
        #expect(QueueTag.identity(of: DispatchQueue.main) == QueueTag.mainQueue)
        let other = DispatchQueue(label: "QueueCycleTests.identity")
        let id = QueueTag.identity(of: other)
        #expect(id != QueueTag.mainQueue && QueueTag.identity(of: other) == id)
        #expect(QueueTag.identity(of: DispatchQueue(label: "QueueCycleTests.identity")) != id)
    }

    /// Marks the main queue, to tell that code runs on it (after `dispatchMain()`, as under the test
    /// runner on Linux, a worker thread drains the main queue, so `Thread.isMainThread` cannot tell).
    private static let mainQueueMark: DispatchSpecificKey<Bool> = {
        let key = DispatchSpecificKey<Bool>()
        DispatchQueue.main.setSpecific(key: key, value: true)
        return key
    }()

    @Test @MainActor func mainQueue_blockingCommandBehindADispatchCommandForMain_doesNotHang() async throws {
        let mark = Self.mainQueueMark
        #expect(DispatchQueue.getSpecific(key: mark) == true, "the main actor does not run on the main queue here")
        let value = QueueSafeValue(value: 0, label: "ui state")
        let holder = Holder(value)
        let dispatchRuns = Locked(0)
        let ranOnMain = Locked(true)
        value.async(performIn: .main).priority(.high).set(accessClosure: { value in
            dispatchRuns.withLock { $0 += 1 }
            if DispatchQueue.getSpecific(key: mark) != true { ranOnMain.set(false) }
            value += 10
        })
        holder.release { value.diagnostics.waitingCount == 2 }
        // On the main thread, behind a dispatch command for the main queue.
        let result = value.waitBounded.lowestPriority.set { $0 += 1 }
        #expect(holder.waitUntilDone())
        #expect(dispatchRuns.value == 1)
        #expect(ranOnMain.value, "the dispatch command ran off the main queue")
        #expect(result.isSuccess && result.valueOrZero == 11, "\(result)")
    }
}
