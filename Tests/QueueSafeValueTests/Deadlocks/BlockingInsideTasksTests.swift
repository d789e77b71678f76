import Dispatch
import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

/// Blocking commands inside tasks: a short or uncontended one works as it does anywhere, but the
/// one that would park the last free thread of the cooperative pool while a task holds the value
/// (and needs a pool thread to resume) is refused with `.deadlock` instead of hanging the process.
///
/// Runs alone: the deadlock detector counts the cooperative pool's threads parked in blocking
/// commands across the whole process, so another test's parked thread would change how many of
/// these commands are refused; and the test needs both pool threads free to run its blockers.
@Suite(.runsAlone) struct BlockingInsideTasksTests {
    @Test func uncontendedBlockingCommandInsideATask_works() async throws {
        let value = QueueSafeValue(value: 1)
        let result = await Task.detached { value.wait.highestPriority.set { $0 += 1 } }.value
        #expect(result.valueOrZero == 2)
    }

    @Test func blockingCommandInsideATask_whileAThreadHoldsTheValue_waits() async throws {
        // The holder is a thread: it needs no pool thread to let go, so waiting is fine.
        let value = QueueSafeValue(value: 0)
        let holding = DispatchSemaphore(value: 0)
        let letGo = DispatchSemaphore(value: 0)
        Thread {
            value.wait.highestPriority.set { _ in
                holding.signal()
                letGo.wait()
            }
        }.start()
        holding.wait()
        let waiter = Task.detached { value.waitBounded.highestPriority.set { $0 += 1 } }
        try await waitUntil("the task's command waits") { value.diagnostics.waitingCount == 1 }
        letGo.signal()
        #expect(await waiter.value.valueOrZero == 1)
    }

    @Test func blockingCommandsInsideTasks_thatWouldParkEveryPoolThread_whileATaskHolds_areRefused() async throws {
        let value = QueueSafeValue(value: 0, label: "token")
        let holderInside = Gate()
        let resume = Gate()
        // A task holds the value across an await: it needs a pool thread to resume and let go.
        let holder = Task.detached {
            try await value.async.highestPriority.set { value in
                holderInside.open()
                await resume.wait()
                value += 100
            }
        }
        await holderInside.wait()
        // As many blocking commands from tasks as the pool has threads: all but the last may park;
        // the last would leave the holder no thread to resume on.
        let width = DeadlockDetector.shared.poolWidth
        let results = Locked<[Result<Int, QueueSafeValueError>]>([])
        let blockers = (0..<width).map { _ in
            Task.detached {
                let result = value.waitBounded.lowestPriority.set { $0 += 1 }
                results.withLock { $0.append(result) }
            }
        }
        // The refusal comes back while the others still wait.
        try await waitUntil("a blocking command is refused") {
            results.value.contains { if case .failure(.deadlock) = $0 { true } else { false } }
        }
        resume.open()
        _ = try await holder.value
        for blocker in blockers { await blocker.value }
        let deadlocks = results.value.compactMap { result -> DeadlockReport? in
            if case .failure(.deadlock(let report)) = result { return report }
            return nil
        }
        #expect(deadlocks.count == 1, "\(results.value)")
        #expect(deadlocks.first?.kind == .cooperativePoolExhausted)
        #expect(String(describing: deadlocks.first.map(QueueSafeValueError.deadlock)).contains("value.async"))
        #expect(results.value.filter(\.isSuccess).count == width - 1)
        #expect(value.wait.lowestPriority.get().valueOrZero == 100 + width - 1)
    }
}
