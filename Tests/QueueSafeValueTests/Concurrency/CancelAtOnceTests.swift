import Dispatch
import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

/// `QueuedOperation.cancel()` takes effect before it returns, whether or not the operation's task
/// has started: from then on its state is `.cancelled`, `setPriority` changes nothing, and the body
/// never runs. A granted operation that has not begun gives its slot back at once.
@Suite(.runsAlone, .serialized) struct CancelAtOnceTests {
    /// Submits `body` from no actor, so that its task runs on the cooperative pool.
    private static func submitNonisolated(
        _ queue: CommandQueue, priority: CommandPriority = .medium, _ body: @escaping @Sendable () async -> Void
    ) -> QueuedOperation<Void> {
        queue.submit(priority: priority) { await body() }
    }

    /// Cancels `operation` and checks what a handle must say right after: it had not begun, it is
    /// cancelled now, and a new priority changes nothing.
    private static func cancelAndCheck(_ operation: QueuedOperation<Void>, _ who: String) {
        #expect(operation.cancel() == .waiting, "\(who): cancel() should find it waiting")
        #expect(operation.state == .cancelled, "\(who): its state right after cancel()")
        #expect(operation.setPriority(.highest) == .cancelled, "\(who): setPriority right after cancel()")
        #expect(operation.state == .cancelled)
        #expect(operation.priority == .medium, "\(who): a cancelled operation's priority changed")
    }

    @Test func aWaitingOperationWhoseTaskHasNotStarted_isCancelledAtOnce_fromANonisolatedCaller() async throws {
        let queue = CommandQueue(label: "cancel at once")
        let gate = Gate()
        let first = queue.submit { await gate.wait() }
        try await waitUntil("the first runs") { first.state == .running }
        let ran = Locked(false)
        let pool = PoolBlocker()
        pool.block()
        let second = Self.submitNonisolated(queue) { ran.set(true) }
        Self.cancelAndCheck(second, "nonisolated")
        #expect(queue.diagnostics.waitingCount == 0, "the cancelled operation still waits in the queue")
        pool.release()
        gate.open()
        #expect(await thrownError { try await second.value } == .cancelled)
        try await first.value
        #expect(!ran.value, "a cancelled operation ran")
    }

    @Test @MainActor func aWaitingOperationWhoseTaskHasNotStarted_isCancelledAtOnce_fromTheMainActor() async throws {
        let queue = CommandQueue(label: "cancel at once, main actor")
        let gate = Gate()
        let first = queue.submit { await gate.wait() }
        try await waitUntil("the first runs") { first.state == .running }
        let ran = Locked(false)
        let pool = PoolBlocker()
        pool.block()
        let second = Self.submitNonisolated(queue) { ran.set(true) }
        Self.cancelAndCheck(second, "main actor")
        pool.release()
        gate.open()
        #expect(await thrownError { try await second.value } == .cancelled)
        try await first.value
        #expect(!ran.value, "a cancelled operation ran")
    }

    @Test func aWaitingOperationWhoseTaskIsSuspended_isCancelledAtOnce() async throws {
        let queue = CommandQueue(label: "cancel a suspended one")
        let gate = Gate()
        let first = queue.submit { await gate.wait() }
        try await waitUntil("the first runs") { first.state == .running }
        let ran = Locked(false)
        let second = Self.submitNonisolated(queue) { ran.set(true) }
        try await waitUntil("the second's task to suspend for its turn") {
            queue.engine.machine.withLock { _ in second.waiter.continuation != nil }
        }
        Self.cancelAndCheck(second, "suspended")
        gate.open()
        #expect(await thrownError { try await second.value } == .cancelled)
        try await first.value
        #expect(!ran.value, "a cancelled operation ran")
    }

    @Test func aGrantedOperationThatHasNotBegun_givesItsSlotBackAtOnce() async throws {
        let queue = CommandQueue(label: "give the slot back")
        let ran = Locked<[String]>([])
        let pool = PoolBlocker()
        pool.block()
        // Granted at once on the free queue, but its task cannot start: the pool is busy.
        let first = Self.submitNonisolated(queue) { ran.withLock { $0.append("first") } }
        let second = Self.submitNonisolated(queue) { ran.withLock { $0.append("second") } }
        #expect(queue.diagnostics.waitingCount == 1)
        Self.cancelAndCheck(first, "granted")
        #expect(queue.diagnostics.waitingCount == 0, "the slot it gave back did not go to the next operation")
        #expect(second.state == .waiting, "the next operation is granted, and has not begun")
        pool.release()
        try await second.value
        #expect(await thrownError { try await first.value } == .cancelled)
        #expect(ran.value == ["second"])
    }

    @Test func cancellingTheTaskOfAnOperationThatHasNotStarted_isSeenAtOnce() async throws {
        let queue = CommandQueue(label: "cancel the task")
        let gate = Gate()
        let first = queue.submit { await gate.wait() }
        try await waitUntil("the first runs") { first.state == .running }
        let ran = Locked(false)
        let pool = PoolBlocker()
        pool.block()
        let second = Self.submitNonisolated(queue) { ran.set(true) }
        second.task.cancel()
        #expect(second.state == .cancelled)
        #expect(second.setPriority(.highest) == .cancelled)
        #expect(second.cancel() == .cancelled, "it was cancelled with its task, not now")
        pool.release()
        gate.open()
        #expect(await thrownError { try await second.value } == .cancelled)
        try await first.value
        #expect(!ran.value, "an operation whose task was cancelled ran")
    }

    @Test func cancellingARunningOperation_cancelsItsTask_andLetsItFinish() async throws {
        let queue = CommandQueue(label: "cancel a running one")
        let gate = Gate()
        let sawCancellation = Locked(false)
        let running = queue.submit {
            await gate.wait()
            sawCancellation.set(Task.isCancelled)
        }
        try await waitUntil("it runs") { running.state == .running }
        #expect(running.cancel() == .running)
        #expect(running.state == .running)
        gate.open()
        try await running.value
        #expect(sawCancellation.value)
        #expect(running.state == .finished)
        #expect(running.cancel() == .finished)
    }
}
