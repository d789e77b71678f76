import Dispatch
import Foundation
import Testing

@testable import QueueSafeValue

/// `value.async(timeout:)` and `CommandQueue.enqueue/perform(timeout:)`: a command that has not
/// started within its timeout throws `.timedOut` with a snapshot of the queue, leaves the queue and
/// never runs; one that starts in time runs normally.
@Suite("Timeouts of awaiting commands and queue operations")
struct AwaitingTimeoutTests {
    /// Holds `value` with a manual-completion dispatch command; the returned closure releases it.
    private static func hold(_ value: QueueSafeValue<Int>) -> @Sendable () -> Void {
        let box = DoneBox()
        let held = DispatchSemaphore(value: 0)
        value.async(performIn: DispatchQueue(label: "AwaitingTimeoutTests.holder")).highestPriority.set(
            manualCompletion: { _, done in
                box.set(done)
                held.signal()
            })
        _ = held.wait(timeout: .now() + 10)
        return { box.take()?() }
    }

    /// Runs `body`, failing the test instead of hanging if it takes more than 10 s.
    private static func bounded<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T {
        try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { try await body() }
            group.addTask {
                try await Task.sleep(nanoseconds: 10_000_000_000)
                return nil
            }
            let first = try await group.next()!
            group.cancelAll()
            return try #require(first, "the command neither ran nor timed out")
        }
    }

    private static func outcome(_ body: @escaping @Sendable () async throws -> Void) async throws
        -> QueueSafeValueError?
    {
        try await bounded {
            do {
                try await body()
                return QueueSafeValueError?.none
            } catch let error as QueueSafeValueError {
                return error
            }
        }
    }

    private static func isTimedOut(_ error: QueueSafeValueError?) -> Bool {
        if case .timedOut? = error { return true }
        return false
    }

    @Test func heldValue_timesOut_withASnapshot_andTheCommandNeverRuns() async throws {
        let value = QueueSafeValue(value: 0, label: "held")
        let release = Self.hold(value)
        let error = try await Self.outcome {
            try await value.async(timeout: .milliseconds(30)).highestPriority.set { $0 = 99 }
        }
        guard case .timedOut(let diagnostics)? = error else {
            Issue.record("expected .timedOut, got \(String(describing: error))")
            release()
            return
        }
        #expect(diagnostics.description.contains("'held'"))
        #expect(value.diagnostics.waitingCount == 0, "the timed-out command is still queued")
        release()
        #expect(try await value.async.highestPriority.get() == 0, "a timed-out command ran")
    }

    @Test func commandGrantedInTime_runs() async throws {
        let value = QueueSafeValue(value: 0)
        let release = Self.hold(value)
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(20)) { release() }
        let error = try await Self.outcome {
            try await value.async(timeout: .seconds(10)).lowestPriority.set { $0 += 1 }
        }
        #expect(error == nil)
        #expect(try await value.async.highestPriority.get() == 1)
    }

    @Test func zeroTimeout_succeedsOnlyOnAFreeValue() async throws {
        let value = QueueSafeValue(value: 0)
        #expect(try await value.async(timeout: .seconds(0)).highestPriority.set { $0 += 1 } == 1)
        let release = Self.hold(value)
        let error = try await Self.outcome { _ = try await value.async(timeout: .seconds(0)).highestPriority.get() }
        #expect(Self.isTimedOut(error))
        release()
        #expect(try await value.async(timeout: .never).highestPriority.get() == 1)
    }

    /// A release racing the deadline: each command either timed out and never ran, or ran.
    @Test func raceWithTheRelease_eachCommandRunsExactlyWhenItDidNotTimeOut() async throws {
        let value = QueueSafeValue(value: 0)
        var succeeded = 0
        for round in 0..<200 {
            let release = Self.hold(value)
            let delay = DispatchTimeInterval.microseconds(round % 7 * 150)
            DispatchQueue.global().asyncAfter(deadline: .now() + delay) { release() }
            let error = try await Self.outcome {
                try await value.async(timeout: .microseconds(500)).priority(.medium).set { $0 += 1 }
            }
            if error == nil { succeeded += 1 } else { #expect(Self.isTimedOut(error)) }
            _ = try await value.async.lowestPriority.get()  // the holder has released
        }
        #expect(try await value.async.highestPriority.get() == succeeded)
    }

    @Test func queueOperation_timesOutWhileAnotherRuns_andNeverStarts() async throws {
        let queue = CommandQueue(label: "uploads")
        let gate = AsyncGate()
        let running = queue.enqueue { await gate.wait() }
        let ran = RanFlag()
        let late = queue.enqueue(timeout: .milliseconds(30)) { ran.set() }
        // Awaited cancellably, so that the bounded wait can end it if it never times out.
        let error = try await Self.outcome {
            try await withTaskCancellationHandler {
                try await late.value
            } onCancel: {
                late.cancel()
            }
        }
        guard case .timedOut(let diagnostics)? = error else {
            Issue.record("expected .timedOut, got \(String(describing: error))")
            await gate.open()
            return
        }
        #expect(diagnostics.description.contains("'uploads'"))
        let performError = try await Self.outcome {
            _ = try await queue.perform(timeout: .milliseconds(30)) { ran.set() }
        }
        #expect(Self.isTimedOut(performError))
        await gate.open()
        try await running.value
        let inTime = try await Self.bounded { try await queue.perform(timeout: .seconds(10)) { 7 } }
        #expect(inTime == 7)
        #expect(!ran.value, "a timed-out operation ran")
    }
}

private final class DoneBox: @unchecked Sendable {  // Sendable: `lock` guards `done`
    private let lock = NSLock()
    private var done: CommandCompletionClosure?
    func set(_ closure: @escaping CommandCompletionClosure) { lock.withLock { done = closure } }
    func take() -> CommandCompletionClosure? {
        lock.withLock {
            defer { done = nil }
            return done
        }
    }
}

private final class RanFlag: @unchecked Sendable {  // Sendable: `lock` guards `ran`
    private let lock = NSLock()
    private var ran = false
    func set() { lock.withLock { ran = true } }
    var value: Bool { lock.withLock { ran } }
}

/// A one-shot gate for tasks.
private actor AsyncGate {
    private var isOpen = false
    private var waiters: [CheckedContinuation<Void, Never>] = []

    func wait() async {
        if isOpen { return }
        await withCheckedContinuation { waiters.append($0) }
    }

    func open() {
        isOpen = true
        for waiter in waiters { waiter.resume() }
        waiters.removeAll()
    }
}
