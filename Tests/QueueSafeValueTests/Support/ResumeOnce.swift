import Foundation

/// Resumes a continuation exactly once, from whichever party comes first.
final class ResumeOnce<T: Sendable>: @unchecked Sendable {  // @unchecked Sendable: under the lock
    private let lock = NSLock()
    private var continuation: CheckedContinuation<T, any Error>?

    init(_ continuation: CheckedContinuation<T, any Error>) {
        self.continuation = continuation
    }

    func resume(with result: Result<T, any Error>) {
        lock.lock()
        let continuation = self.continuation
        self.continuation = nil
        lock.unlock()
        continuation?.resume(with: result)
    }
}
