import Dispatch
import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

/// What `diagnostics` and deadlock reports tell a person: the queue a stuck dispatch command waits
/// to run on, threads by their names and queues, and grammar that reads right.
@Suite(.runsAlongsideOthers) struct DiagnosticsTests {
    /// A dispatch command granted the value while its serial queue is busy cannot run: the
    /// diagnostics name that queue and say the command waits for it.
    @Test func stuckDispatchCommand_namesTheQueueItWaitsToRunOn() {
        let value = QueueSafeValue(value: 0, label: "settings")
        let queue = DispatchQueue(label: "DiagnosticsTests.busy")
        let letGo = DispatchSemaphore(value: 0)
        let busy = DispatchSemaphore(value: 0)
        queue.async {
            busy.signal()
            letGo.wait()
        }
        busy.wait()
        let ran = DispatchSemaphore(value: 0)
        value.async(performIn: queue).highestPriority.set(accessClosure: { $0 += 1 }, completion: { _ in ran.signal() })
        let stuck = value.diagnostics.holder
        #expect(stuck?.kind == .dispatch)
        #expect(stuck?.queue == "DiagnosticsTests.busy")
        #expect(stuck?.isWaitingForItsQueue == true)
        #expect(
            value.diagnostics.description.contains(
                "a dispatch command waiting to run on queue 'DiagnosticsTests.busy'"),
            "\(value.diagnostics)")
        letGo.signal()
        #expect(ran.wait(timeout: .now() + 30) == .success)
        #expect(value.diagnostics.holder == nil)
    }

    /// A dispatch command that holds the value while it runs names its queue too, without "waiting".
    @Test func runningDispatchCommand_namesItsQueue() {
        let value = QueueSafeValue(value: 0, label: "running")
        let queue = DispatchQueue(label: "DiagnosticsTests.running")
        let inside = DispatchSemaphore(value: 0)
        let letGo = DispatchSemaphore(value: 0)
        value.async(performIn: queue).highestPriority.set(accessClosure: { _ in
            inside.signal()
            letGo.wait()
        })
        #expect(inside.wait(timeout: .now() + 30) == .success)
        let holder = value.diagnostics.holder
        #expect(
            holder?.queue == "DiagnosticsTests.running" && holder?.isWaitingForItsQueue == false, "\(value.diagnostics)"
        )
        #expect(value.diagnostics.description.contains("a dispatch command on queue 'DiagnosticsTests.running'"))
        letGo.signal()
    }

    /// "a CommandQueue operation", "an awaiting command", "a blocking command".
    @Test func holderDescriptions_useTheRightArticle() async throws {
        let queue = CommandQueue(label: "articles")
        let gate = Gate()
        let blocker = try await holdQueue(queue, until: gate)
        #expect(queue.diagnostics.description.contains("held by a CommandQueue operation"), "\(queue.diagnostics)")
        gate.open()
        _ = try await withHangTimeout { try await blocker.value }
        let value = QueueSafeValue(value: 0, label: "awaited")
        let description = try await value.async.highestPriority.map { _ in value.diagnostics.description }
        #expect(description.contains("held by an awaiting command"), "\(description)")
    }

    /// Deadlock reports name threads by the names they were given, and say which queue a thread
    /// was running on.
    @Test func deadlockReport_namesThreadsAndTheirQueues() throws {
        let first = QueueSafeValue(value: 0, label: "first")
        let second = QueueSafeValue(value: 0, label: "second")
        let bothHold = DispatchGroup()
        let done = DispatchGroup()
        let results = Locked<[Result<Int, QueueSafeValueError>]>([])
        let queue = DispatchQueue(label: "DiagnosticsTests.ledger queue")
        @Sendable func take(_ mine: QueueSafeValue<Int>, then theirs: QueueSafeValue<Int>) {
            mine.wait.highestPriority.set { _ in
                bothHold.leave()
                _ = bothHold.wait(timeout: .now() + 30)
                let result = theirs.wait.highestPriority.set { $0 += 1 }
                results.withLock { $0.append(result) }
            }
            done.leave()
        }
        bothHold.enter()
        bothHold.enter()
        done.enter()
        done.enter()
        Thread {
            // Named from inside: on Linux, Foundation gives the thread a name it had before it
            // started only to `Thread.name`, not to the system.
            // Foundation on Linux names the system thread only once `start()` has recorded it,
            // which may be after the thread began: name it until the system has the name.
            _ = waitUntil("the thread's name") {
                Thread.current.name = "ledger writer"
                return DeadlockDetector.threadName(currentThreadID()) == "ledger writer"
            }
            take(first, then: second)
        }.start()
        queue.async { take(second, then: first) }
        #expect(done.wait(timeout: .now() + 30) == .success, "the cycle hung")
        let report = try #require(
            results.value.compactMap { result -> DeadlockReport? in
                if case .failure(.deadlock(let report)) = result { return report }
                return nil
            }.first)
        let text = report.description
        #expect(text.contains("thread 'ledger writer' (0x"), "\(text)")
        #expect(text.contains("on queue 'DiagnosticsTests.ledger queue'"), "\(text)")
    }
}
