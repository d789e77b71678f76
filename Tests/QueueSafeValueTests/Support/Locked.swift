import Foundation

/// A value guarded by an `NSLock`, shareable across threads, queues and tasks. (An `NSLock`, not
/// `Synchronization.Mutex`: ThreadSanitizer does not see the latter and would report false races.)
final class Locked<Wrapped>: @unchecked Sendable {  // @unchecked Sendable: every access takes the lock
    private let lock = NSLock()
    private var wrapped: Wrapped

    init(_ value: Wrapped) {
        wrapped = value
    }

    /// A copy of the current value.
    var value: Wrapped {
        lock.lock()
        defer { lock.unlock() }
        return wrapped
    }

    /// Runs `body` with exclusive access to the value.
    @discardableResult
    func withLock<R>(_ body: (inout Wrapped) throws -> R) rethrows -> R {
        lock.lock()
        defer { lock.unlock() }
        return try body(&wrapped)
    }

    func set(_ newValue: Wrapped) {
        withLock { $0 = newValue }
    }
}

extension Locked where Wrapped == Int {
    /// Adds `delta` and returns the new value.
    @discardableResult
    func add(_ delta: Int) -> Int {
        withLock {
            $0 += delta
            return $0
        }
    }

    /// Adds one and returns the new value.
    @discardableResult
    func increment() -> Int { add(1) }
}
