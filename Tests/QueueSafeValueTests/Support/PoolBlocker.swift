import Dispatch
import Foundation
import Testing

/// Keeps every thread of the cooperative pool busy (one blocked task per processor), so that a task
/// created meanwhile does not start until ``release()``: how a test reproduces a busy pool, where a
/// new task may start much later than the code that created it goes on.
final class PoolBlocker: Sendable {
    private let started = DispatchSemaphore(value: 0)
    private let gate = DispatchSemaphore(value: 0)
    private let count = ProcessInfo.processInfo.activeProcessorCount

    /// Blocks the pool; returns once every pool thread but the caller's is blocked (false on a
    /// hang). Called from a task on the pool, the caller's thread is the last one: its blocking
    /// task starts when the caller suspends, so the caller must ``release()`` before it awaits.
    @discardableResult
    func block() -> Bool {
        for _ in 0..<count {
            Task.detached { [started, gate] in
                started.signal()
                gate.wait()
            }
        }
        let others = Thread.isMainThread ? count : count - 1
        for _ in 0..<others where !waitOrFail(started, "a pool thread to block") { return false }
        return true
    }

    /// Lets the pool go.
    func release() {
        for _ in 0..<count { gate.signal() }
    }
}
