import Dispatch
import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

// Bounded waits on things that signal (semaphores, groups, tasks, an engine's queue): each one turns
// a hang into a failure after `hangTimeout`.

/// Waits on `semaphore`, recording an issue on a hang.
/// - Returns: whether the semaphore was signalled in time.
@discardableResult
func waitOrFail(
    _ semaphore: DispatchSemaphore,
    _ what: @autoclosure () -> String = "semaphore",
    timeout: TimeInterval = hangTimeout,
    sourceLocation: SourceLocation = #_sourceLocation
) -> Bool {
    failOnTimeout(semaphore.wait(timeout: .now() + timeout), timeout, what(), sourceLocation)
}

/// Waits for `group`, recording an issue on a hang.
/// - Returns: whether the group emptied in time.
@discardableResult
func waitOrFail(
    _ group: DispatchGroup,
    _ what: @autoclosure () -> String = "dispatch group",
    timeout: TimeInterval = hangTimeout,
    sourceLocation: SourceLocation = #_sourceLocation
) -> Bool {
    failOnTimeout(group.wait(timeout: .now() + timeout), timeout, what(), sourceLocation)
}

private func failOnTimeout(
    _ result: DispatchTimeoutResult,
    _ timeout: TimeInterval,
    _ what: @autoclosure () -> String,
    _ sourceLocation: SourceLocation
) -> Bool {
    guard result == .timedOut else { return true }
    Issue.record("Timed out after \(timeout) s waiting for: \(what())", sourceLocation: sourceLocation)
    return false
}

/// Waits until `engine` has exactly `count` live pending commands, recording an issue on a hang.
/// - Returns: whether it got there in time (loops stop at the first hang).
@discardableResult
func waitForPending(
    _ engine: CommandEngine,
    count: Int,
    sourceLocation: SourceLocation = #_sourceLocation
) -> Bool {
    waitUntil("\(count) pending commands (now \(engine.pendingCount))", sourceLocation: sourceLocation) {
        engine.pendingCount == count
    }
}

/// Sleeps the calling thread briefly, giving other threads a chance to do something they must not
/// do (used only before asserting that something did *not* happen, never to time anything).
func sleepBriefly(milliseconds: Int = 50) {
    usleep(useconds_t(milliseconds * 1000))
}

/// Runs `operation` in a new task and returns its result, or throws `TestError.hang` if it has not
/// finished after `timeout`: a hang becomes a failure instead of a stuck suite. Unlike a task group,
/// this does not wait for a stuck operation (it is cancelled and left behind, which only happens in
/// a test that already failed).
func withHangTimeout<T: Sendable>(
    _ what: String = #function,
    timeout: TimeInterval = hangTimeout,
    sourceLocation: SourceLocation = #_sourceLocation,
    _ operation: @escaping @Sendable () async throws -> T
) async throws -> T {
    try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
        let once = ResumeOnce(continuation)
        let work = Task {
            do {
                once.resume(with: .success(try await operation()))
            } catch {
                once.resume(with: .failure(error))
            }
        }
        let timer = Task {
            try? await Task.sleep(nanoseconds: UInt64(timeout * 1_000_000_000))
            once.resume(
                with: .failure(TestError.hang("timed out after \(timeout) s: \(what) (\(sourceLocation))")))
            work.cancel()
        }
        Task {
            _ = await work.result
            timer.cancel()
        }
    }
}

extension QueueSafeValue {
    /// Blocking commands that give up with `.timedOut` after the hang timeout, so a value that is
    /// never freed fails the test instead of hanging it.
    var waitBounded: WaitSchedule<Value> {
        wait(timeout: .seconds(Int(hangTimeout)))
    }
}
