import Foundation

/// The process-wide reader-writer lock behind ``ProcessSharing``: any number of shared holders, or
/// one exclusive holder. Requests are served in arrival order, so a waiting exclusive request holds
/// back later shared ones and is never starved.
final class ProcessSharingLock: @unchecked Sendable {  // @unchecked Sendable: every access takes the lock
    static let shared = ProcessSharingLock()

    private let lock = NSLock()
    private var sharedHolders = 0
    private var exclusiveHeld = false
    private var waiting: [(exclusive: Bool, continuation: CheckedContinuation<Void, Never>)] = []

    func acquire(exclusive: Bool) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            lock.lock()
            if waiting.isEmpty && canEnter(exclusive: exclusive) {
                enter(exclusive: exclusive)
                lock.unlock()
                continuation.resume()
            } else {
                waiting.append((exclusive, continuation))
                lock.unlock()
            }
        }
    }

    func release(exclusive: Bool) {
        lock.lock()
        if exclusive { exclusiveHeld = false } else { sharedHolders -= 1 }
        var admitted: [CheckedContinuation<Void, Never>] = []
        while let first = waiting.first, canEnter(exclusive: first.exclusive) {
            waiting.removeFirst()
            enter(exclusive: first.exclusive)
            admitted.append(first.continuation)
        }
        lock.unlock()
        for continuation in admitted { continuation.resume() }
    }

    private func canEnter(exclusive: Bool) -> Bool {
        exclusive ? !exclusiveHeld && sharedHolders == 0 : !exclusiveHeld
    }

    private func enter(exclusive: Bool) {
        if exclusive { exclusiveHeld = true } else { sharedHolders += 1 }
    }
}
