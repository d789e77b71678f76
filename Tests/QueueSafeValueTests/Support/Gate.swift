import Foundation

/// A one-shot async gate: tasks that `wait()` suspend until `open()` is called, and pass at once
/// afterwards. Waiting ignores cancellation, so the test decides exactly when work proceeds; a test
/// must open every gate it waits on, or the waiting task stays suspended (and leaks) at exit.
final class Gate: @unchecked Sendable {  // @unchecked Sendable: every access takes the lock
    private let lock = NSLock()
    private var isOpen = false
    private var waiters: [CheckedContinuation<Void, Never>] = []

    init() {}

    /// How many tasks are suspended in `wait()` now.
    var waiterCount: Int {
        lock.lock()
        defer { lock.unlock() }
        return waiters.count
    }

    func wait() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            lock.lock()
            if isOpen {
                lock.unlock()
                continuation.resume()
            } else {
                waiters.append(continuation)
                lock.unlock()
            }
        }
    }

    func open() {
        lock.lock()
        isOpen = true
        let waiters = self.waiters
        self.waiters = []
        lock.unlock()
        for waiter in waiters { waiter.resume() }
    }
}
