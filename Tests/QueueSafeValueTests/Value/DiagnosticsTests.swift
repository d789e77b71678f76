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

    // MARK: Call sites (issue 46)

    /// Starts a thread named `name` that runs `body`.
    private static func namedThread(_ name: String, _ body: @escaping @Sendable () -> Void) {
        Thread {
            _ = waitUntil("the thread's name") {
                Thread.current.name = name
                return DeadlockDetector.threadName(currentThreadID()) == name
            }
            body()
        }.start()
    }

    /// A holder that took a free value names the file and line of its `withLock`, its thread,
    /// and no priority (it never waited); the commands behind it come in grant order with their
    /// lines, priorities and parties; a timed-out command's error says the same.
    @Test func heldValue_namesItsHoldersLineAndItsWaiters() throws {
        let value = QueueSafeValue(value: 0, label: "checkout")
        let inside = DispatchSemaphore(value: 0)
        let letGo = DispatchSemaphore(value: 0)
        let holderLine = Locked(0)
        Self.namedThread("sync") {
            holderLine.withLock { $0 = #line + 1 }
            try? value.wait.lowestPriority.withLock { _ in
                inside.signal()
                letGo.wait()
            }
        }
        #expect(inside.wait(timeout: .now() + 30) == .success)
        let queue = DispatchQueue(label: "DiagnosticsTests.cart")
        let lowLine = #line + 1
        value.async(performIn: queue).priority(.low).set(accessClosure: { $0 += 1 })
        let highLine = Locked(0)
        let highDone = DispatchSemaphore(value: 0)
        Self.namedThread("ui") {
            highLine.withLock { $0 = #line + 1 }
            value.wait.priority(.high).set { $0 += 1 }
            highDone.signal()
        }
        #expect(waitUntil("both commands wait") { value.diagnostics.waitingCount == 2 })

        let diagnostics = value.diagnostics
        let holder = try #require(diagnostics.holder)
        #expect(holder.callSite == QueueDiagnostics.CallSite(fileID: #fileID, line: holderLine.value))
        #expect(holder.kind == .blocking)
        #expect(holder.party?.contains("thread 'sync'") == true, "\(diagnostics)")
        #expect(holder.priority == nil, "it took a free value: no priority is kept")
        #expect(holder.heldFor != nil)
        #expect(diagnostics.waiters.map(\.priority) == [.high, .low], "\(diagnostics)")
        #expect(diagnostics.waiters.map(\.callSite?.line) == [highLine.value, lowLine], "\(diagnostics)")
        #expect(diagnostics.waiters.map(\.kind) == [.blocking, .dispatch])
        #expect(diagnostics.waiters.first?.party.contains("thread 'ui'") == true, "\(diagnostics)")
        #expect(diagnostics.waiters.last?.party == "queue 'DiagnosticsTests.cart'", "\(diagnostics)")
        let text = diagnostics.description
        #expect(text.contains("issued at \(#fileID):\(holderLine.value)"), "\(text)")
        #expect(text.contains("first \(#fileID):\(highLine.value) (thread 'ui'"), "\(text)")

        let timeoutLine = #line + 1
        let refused = Result { () throws(QueueSafeValueError) in
            try value.wait(timeout: .milliseconds(20)).withLock { $0 }
        }
        guard case .failure(.timedOut(let snapshot)) = refused else {
            Issue.record("expected .timedOut, got \(refused)")
            letGo.signal()
            return
        }
        #expect(snapshot.holder?.callSite?.line == holderLine.value)
        #expect(snapshot.holder?.party?.contains("thread 'sync'") == true, "\(snapshot)")
        #expect(snapshot.waiters.map(\.callSite?.line) == [highLine.value, lowLine])
        #expect(timeoutLine != highLine.value)
        letGo.signal()
        #expect(highDone.wait(timeout: .now() + 30) == .success)
        #expect(waitUntil("the dispatch command ran") { (try? value.wait.read { $0 }) == 2 })
        #expect(value.diagnostics.holder == nil && value.diagnostics.waiters.isEmpty)
    }

    /// A holder that waited for its turn keeps the priority it was issued with, and its line.
    @Test func grantedHolder_keepsItsPriorityAndLine() async throws {
        let value = QueueSafeValue(value: 0, label: "granted")
        let inside = DispatchSemaphore(value: 0)
        let letGo = DispatchSemaphore(value: 0)
        Thread {
            try? value.wait.withLock { _ in
                inside.signal()
                letGo.wait()
            }
        }.start()
        #expect(inside.wait(timeout: .now() + 30) == .success)
        let line = #line + 1
        let task = Task { try await value.async.priority(.high).withLock { _ in value.diagnostics } }
        try await waitUntil("the task waits") { value.diagnostics.waitingCount == 1 }
        letGo.signal()
        let seen = try await withHangTimeout { try await task.value }
        #expect(seen.holder?.kind == .awaiting)
        #expect(seen.holder?.priority == .high)
        #expect(seen.holder?.callSite?.line == line, "\(seen)")
    }
}
