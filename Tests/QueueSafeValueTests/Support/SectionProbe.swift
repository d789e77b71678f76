import Foundation

/// Counts how many closures are inside a critical section at once. Any value above 1 is a
/// violation of the one-command-at-a-time guarantee.
final class SectionProbe: @unchecked Sendable {  // @unchecked Sendable: every access takes the lock
    private let lock = NSLock()
    private var inside = 0
    private var maximum = 0
    private var entries = 0

    func enter() {
        lock.lock()
        inside += 1
        entries += 1
        maximum = max(maximum, inside)
        lock.unlock()
    }

    func leave() {
        lock.lock()
        inside -= 1
        lock.unlock()
    }

    /// Enters, gives other threads a chance to run (so an overlap would show), and leaves.
    func pass() {
        enter()
        sched_yield()
        leave()
    }

    /// The most closures ever seen inside at the same time.
    var maximumInside: Int {
        lock.lock()
        defer { lock.unlock() }
        return maximum
    }

    var entryCount: Int {
        lock.lock()
        defer { lock.unlock() }
        return entries
    }

    /// How many closures are inside right now.
    var insideCount: Int {
        lock.lock()
        defer { lock.unlock() }
        return inside
    }
}
