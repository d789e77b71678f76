import Dispatch
import Foundation
import Testing

// The one polling wait of the tests, for threads and for tasks. Both are bounded by `hangTimeout`
// and turn a hang into a failure: the blocking one records an issue and returns `false` (so loops
// can stop at the first hang), the async one throws `TestError.hang`, which ends the test there.

/// Polls `condition` on the calling thread until it holds, or records an issue after `timeout`.
/// - Returns: whether the condition held in time.
@discardableResult
func waitUntil(
    _ what: @autoclosure () -> String = "a condition",
    timeout: TimeInterval = hangTimeout,
    sourceLocation: SourceLocation = #_sourceLocation,
    _ condition: () -> Bool
) -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while !condition() {
        if Date() >= deadline {
            Issue.record("Timed out after \(timeout) s waiting for: \(what())", sourceLocation: sourceLocation)
            return false
        }
        if Thread.isMainThread {
            // Keeps work dispatched to the main queue going while the main thread waits.
            RunLoop.main.run(until: Date().addingTimeInterval(0.001))
        } else {
            usleep(500)
        }
    }
    return true
}

/// Polls `condition` every millisecond, suspending in between, until it holds; throws
/// `TestError.hang` after `timeout`. Works in a cancelled task too (its pause ignores cancellation).
func waitUntil(
    isolation: isolated (any Actor)? = #isolation,
    _ what: @autoclosure () -> String = "a condition",
    timeout: TimeInterval = hangTimeout,
    sourceLocation: SourceLocation = #_sourceLocation,
    _ condition: () -> Bool
) async throws {
    let deadline = Date().addingTimeInterval(timeout)
    while !condition() {
        if Date() >= deadline {
            throw TestError.hang("timed out after \(timeout) s waiting for: \(what()) (\(sourceLocation))")
        }
        await pauseOneMillisecond()
    }
}

/// Suspends for about a millisecond, even in a cancelled task (`Task.sleep` would throw at once and
/// turn a polling loop into a spin).
private func pauseOneMillisecond() async {
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(1)) { continuation.resume() }
    }
}
