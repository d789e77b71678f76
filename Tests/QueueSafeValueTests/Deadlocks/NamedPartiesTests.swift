import Dispatch
import Foundation
import QueueSafeValueTesting
import Testing

@_spi(Testing) @testable import QueueSafeValue

/// Issue 42: reports name the parties by the names they were given, then their ids: threads named
/// with Foundation's `Thread.name`, tasks named with `Task(name:)` (where the runtime keeps task
/// names), and an exploration's task parties by their party names.
@Suite(.runsAlongsideOthers) struct NamedPartiesTests {
    /// Two threads, named through Foundation from inside (`Thread.current.name`), take two values in
    /// opposite orders: the `.deadlock` report names both, each followed by its id.
    @Test func aDeadlockReport_namesThreadsNamedWithFoundation() throws {
        let (a, b) = (QueueSafeValue(value: 0, label: "A"), QueueSafeValue(value: 0, label: "B"))
        let holding = DispatchGroup()
        let go = DispatchSemaphore(value: 0)
        let finished = DispatchGroup()
        let reports = Locked<[String]>([])
        for (name, first, second) in [("alpha-thread", a, b), ("beta-thread", b, a)] {
            holding.enter()
            finished.enter()
            startNamedThread(name) {
                _ = first.wait.set { _ in
                    holding.leave()
                    go.wait()
                    go.signal()
                    if case .failure(.deadlock(let report)) = second.wait.get() {
                        reports.withLock { $0.append(report.description) }
                    }
                }
                finished.leave()
            }
        }
        waitOrFail(holding, "both threads to hold a value")
        go.signal()
        waitOrFail(finished, "both threads to finish")
        let report = try #require(reports.value.first, "no command was refused")
        #expect(report.contains("thread 'alpha-thread' (0x"), "\(report)")
        #expect(report.contains("thread 'beta-thread' (0x"), "\(report)")
    }

    /// Issue 55: two threads named with `QueueDiagnostics.nameCurrentThread(_:)` at the first line of
    /// their bodies (no wait for `start()` to return, which Foundation's `Thread.name` needs on
    /// Linux) take two values in opposite orders: the `.deadlock` report names both, the longer name
    /// cut to what the platform keeps (15 bytes on Linux).
    @Test func aDeadlockReport_namesThreadsNamedWithTheLibrarysHelper() throws {
        let (a, b) = (QueueSafeValue(value: 0, label: "A"), QueueSafeValue(value: 0, label: "B"))
        let holding = DispatchGroup()
        let go = DispatchSemaphore(value: 0)
        let finished = DispatchGroup()
        let reports = Locked<[String]>([])
        for (name, first, second) in [("ledger", a, b), ("payments-worker-7", b, a)] {
            holding.enter()
            finished.enter()
            Thread {
                QueueDiagnostics.nameCurrentThread(name)
                _ = first.wait.set { _ in
                    holding.leave()
                    go.wait()
                    go.signal()
                    if case .failure(.deadlock(let report)) = second.wait.get() {
                        reports.withLock { $0.append(report.description) }
                    }
                }
                finished.leave()
            }.start()
        }
        waitOrFail(holding, "both threads to hold a value")
        go.signal()
        waitOrFail(finished, "both threads to finish")
        let report = try #require(reports.value.first, "no command was refused")
        #expect(report.contains("thread 'ledger' (0x"), "\(report)")
        #if canImport(Darwin)
            #expect(report.contains("thread 'payments-worker-7' (0x"), "\(report)")
        #else
            #expect(report.contains("thread 'payments-worker' (0x"), "\(report)")
        #endif
    }

    /// A name longer than the platform keeps is cut to whole characters, so the name the system
    /// keeps is still valid UTF-8 (a cut inside a character would show as a replacement mark or
    /// none at all).
    @Test func aLongThreadName_isCutToWholeCharacters() {
        #expect(QueueDiagnostics.threadName("payments-worker-7", keptIn: 15) == "payments-worker")
        #expect(QueueDiagnostics.threadName("ééééééééé", keptIn: 15) == "ééééééé")  // 2 bytes each
        #expect(QueueDiagnostics.threadName("🇫🇷🇫🇷", keptIn: 15) == "🇫🇷")  // 8 bytes each
        #expect(QueueDiagnostics.threadName("sync", keptIn: 15) == "sync")
        let named = Locked<String?>(nil)
        let done = DispatchSemaphore(value: 0)
        Thread {
            QueueDiagnostics.nameCurrentThread("ééééééééé")
            named.set(DeadlockDetector.threadName(currentThreadID()))
            done.signal()
        }.start()
        waitOrFail(done, "the thread to name itself")
        #if canImport(Darwin)
            #expect(named.value == "ééééééééé")
        #else
            #expect(named.value == "ééééééé")
        #endif
    }

    /// A task named with `Task(name:)` holds one value and waits for another that a thread holds;
    /// the thread's wait for the first closes the cycle, and its report names the task.
    @Test func aDeadlockReport_namesANamedTaskHolder() async throws {
        guard #available(macOS 26.0, iOS 26.0, watchOS 26.0, tvOS 26.0, visionOS 26.0, *) else { return }
        let (a, b) = (QueueSafeValue(value: 0, label: "A"), QueueSafeValue(value: 0, label: "B"))
        let threadHolds = DispatchSemaphore(value: 0)
        let askForA = DispatchSemaphore(value: 0)
        let report = Locked<String?>(nil)
        let threadDone = DispatchSemaphore(value: 0)
        startNamedThread("sync") {
            _ = b.wait.set { _ in
                threadHolds.signal()
                askForA.wait()
                if case .failure(.deadlock(let refused)) = a.wait.get() { report.set(refused.description) }
            }
            threadDone.signal()
        }
        waitOrFail(threadHolds, "the thread to hold B")
        let task = Task(name: "refresher") {
            try await a.async.withLock { _ in
                try await b.async.withLock { _ in }
            }
        }
        try await waitUntil("the task waits for B") { b.diagnostics.waitingCount == 1 }
        try await Task.sleep(nanoseconds: 20_000_000)  // suspended and registered
        askForA.signal()
        waitOrFail(threadDone, "the thread to finish")
        _ = try await withHangTimeout { await task.result }
        let text = try #require(report.value, "the thread's wait was not refused")
        #expect(text.contains("task 'refresher' (0x"), "\(text)")
        #expect(text.contains("thread 'sync' (0x"), "\(text)")
    }

    /// An exploration whose two task parties take two values in opposite orders fails with a
    /// `.deadlock` whose report names the task parties by their party names.
    @Test func anExplorationsReport_namesItsTaskParties() throws {
        guard #available(macOS 26.0, iOS 26.0, watchOS 26.0, tvOS 26.0, visionOS 26.0, *) else { return }
        let failure = #expect(throws: ExplorationFailure.self) {
            try Exploration.explore(.exhaustive(preemptionBound: 2)) { scenario in
                let (a, b) = (QueueSafeValue(value: 0, label: "A"), QueueSafeValue(value: 0, label: "B"))
                scenario.task("first") {
                    try await a.async.withLock { _ in try await b.async.withLock { _ in } }
                }
                scenario.task("second") {
                    try await b.async.withLock { _ in try await a.async.withLock { _ in } }
                }
            }
        }
        let message = try #require(failure?.message)
        #expect(message.contains("deadlock"), "\(message)")
        #expect(message.contains("task 'first' (0x") && message.contains("task 'second' (0x"), "\(message)")
    }

    /// Starts a thread that names itself through Foundation (`Thread.current.name`), as a user's
    /// thread would, but only once `start()` has returned: swift-corelibs-foundation applies the
    /// name to the running thread only when the `Thread` object already knows its pthread, which
    /// `start()` records after creating the thread, so a thread that names itself at once can lose
    /// the name (it often did under ThreadSanitizer's timing).
    private func startNamedThread(_ name: String, _ body: @escaping @Sendable () -> Void) {
        let started = DispatchSemaphore(value: 0)
        let thread = Thread {
            started.wait()
            Thread.current.name = name
            body()
        }
        thread.start()
        started.signal()
    }
}
