import Dispatch
import Foundation
import XCTest

@testable import QueueSafeValue

// Helpers for the scheduling tests: an event recorder, a clock the test drives by hand, gates that
// hold an operation until the test lets go, and bounded waits that turn a hang into a failure.

/// How long any single wait in the scheduling tests may take before it counts as a hang.
let schedulingHangTimeout: TimeInterval = 30

/// Polls `condition` every millisecond until it holds or `timeout` passes.
/// - Returns: whether the condition held in time.
func schedulingWait(
    timeout: TimeInterval = schedulingHangTimeout,
    until condition: () -> Bool
) async -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while !condition() {
        if Date() >= deadline { return false }
        try? await Task.sleep(nanoseconds: 1_000_000)
    }
    return true
}

/// A test error with an identity.
struct SchedulingTestError: Error, Equatable {
    let id: Int
}

// MARK: - SchedulingTestRecorder

/// Records the events of an executor in arrival order.
final class SchedulingTestRecorder: @unchecked Sendable {
    private let events = Locked<[RecurringExecutorEvent]>([])

    /// The handler to pass to an executor.
    var handler: @Sendable (RecurringExecutorEvent) -> Void {
        { [events] event in events.withLock { $0.append(event) } }
    }

    var snapshot: [RecurringExecutorEvent] { events.value }

    /// Waits until the recorded events satisfy `condition`.
    func wait(
        timeout: TimeInterval = schedulingHangTimeout,
        until condition: @escaping ([RecurringExecutorEvent]) -> Bool
    ) async -> Bool {
        await schedulingWait(timeout: timeout) { condition(snapshot) }
    }

    /// Waits until `event` has been recorded at least `count` times.
    func wait(for event: RecurringExecutorEvent, count: Int = 1) async -> Bool {
        await wait { events in events.filter { $0 == event }.count >= count }
    }

    /// The runs that started, in order.
    var starts: [RecurringTrigger] {
        snapshot.compactMap { event in
            if case .started(_, let trigger) = event { return trigger }
            return nil
        }
    }
}

// MARK: - SchedulingTestSleeper

/// A clock the test drives by hand: every `sleep(nanoseconds:)` stays suspended until the test fires
/// it. With `honorsCancellation`, a cancelled sleep throws at once, as `Task.sleep` does; without it,
/// a cancelled sleep keeps waiting for `fire`, then returns normally (a misbehaving clock).
final class SchedulingTestSleeper: RecurringSleeper, @unchecked Sendable {
    struct Sleep {
        let id: Int
        let nanoseconds: UInt64
        var isCancelled = false
        var hasEnded = false
        var continuation: CheckedContinuation<Void, any Error>?
    }

    private let honorsCancellation: Bool
    private let state = Locked<[Sleep]>([])

    init(honorsCancellation: Bool = true) {
        self.honorsCancellation = honorsCancellation
    }

    func sleep(nanoseconds: UInt64) async throws {
        let id = state.withLock { sleeps in
            sleeps.append(Sleep(id: sleeps.count, nanoseconds: nanoseconds))
            return sleeps.count - 1
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let cancelNow = state.withLock { sleeps -> Bool in
                    if sleeps[id].isCancelled && honorsCancellation {
                        sleeps[id].hasEnded = true
                        return true
                    }
                    sleeps[id].continuation = continuation
                    return false
                }
                if cancelNow { continuation.resume(throwing: CancellationError()) }
            }
        } onCancel: {
            let continuation = state.withLock { sleeps -> CheckedContinuation<Void, any Error>? in
                sleeps[id].isCancelled = true
                guard honorsCancellation, let continuation = sleeps[id].continuation else { return nil }
                sleeps[id].continuation = nil
                sleeps[id].hasEnded = true
                return continuation
            }
            continuation?.resume(throwing: CancellationError())
        }
    }

    /// Every sleep so far, in the order they began.
    var sleeps: [Sleep] { state.value }

    /// Waits until sleep number `index` (from 0) is suspended and can be fired.
    @discardableResult
    func waitForSleep(_ index: Int) async -> Sleep? {
        let ready = await schedulingWait {
            let sleeps = self.sleeps
            return sleeps.count > index && sleeps[index].continuation != nil
        }
        return ready ? sleeps[index] : nil
    }

    /// Waits until a sleep that was not cancelled is suspended, and returns its index.
    func waitForActiveSleep() async -> Int? {
        var found: Int?
        _ = await schedulingWait {
            found = sleeps.lastIndex { $0.continuation != nil && !$0.isCancelled }
            return found != nil
        }
        return found
    }

    /// Ends sleep number `index` normally, as if its time had elapsed.
    func fire(_ index: Int) {
        let continuation = state.withLock { sleeps -> CheckedContinuation<Void, any Error>? in
            let continuation = sleeps[index].continuation
            sleeps[index].continuation = nil
            sleeps[index].hasEnded = true
            return continuation
        }
        continuation?.resume()
    }
}

// MARK: - SchedulingTestGate

/// Holds the tasks that wait on it until the test opens it. Waiting does not respond to
/// cancellation, so an operation that waits here ignores cancellation.
final class SchedulingTestGate: @unchecked Sendable {
    private let state = Locked<(isOpen: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    func wait() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let passNow = state.withLock { state -> Bool in
                if state.isOpen { return true }
                state.waiters.append(continuation)
                return false
            }
            if passNow { continuation.resume() }
        }
    }

    func open() {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.isOpen = true
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    var waiterCount: Int { state.value.waiters.count }
}

/// Suspends until the current task is cancelled (or `timeout` passes, a hang turned into a return).
/// - Returns: whether the task was cancelled.
func schedulingWaitForCancellation(timeout: TimeInterval = schedulingHangTimeout) async -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while !Task.isCancelled {
        if Date() >= deadline { return false }
        try? await Task.sleep(nanoseconds: 1_000_000)
    }
    return true
}

/// Collects a stream to its end (or until `timeout`, a hang turned into a partial result).
func schedulingCollect(
    _ stream: AsyncStream<RecurringExecutorEvent>,
    timeout: TimeInterval = schedulingHangTimeout
) async -> (events: [RecurringExecutorEvent], finished: Bool) {
    let collected = Locked<([RecurringExecutorEvent], Bool)>(([], false))
    let task = Task {
        for await event in stream { collected.withLock { $0.0.append(event) } }
        collected.withLock { $0.1 = true }
    }
    _ = await schedulingWait(timeout: timeout) { collected.value.1 }
    task.cancel()
    return collected.value
}
