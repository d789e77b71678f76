import Dispatch
import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

/// The engine's one-entry queue identity cache gives every queue its own identity, the one its tag
/// carries, whichever queue the previous command targeted and whichever thread asks: a wrong one
/// would let a waiter running on one queue run another queue's command (see `QueueTag`).
@Suite(.runsAlongsideOthers) struct QueueIdentityCacheTests {
    /// Four threads ask at once, each alternating between a queue of its own, a shared queue and a
    /// queue made (and let go) for the call, so that readers meet writers of the entry, and freed
    /// queues' addresses come back for new ones.
    @Test func everyQueue_getsTheIdentityOfItsTag_fromAnyThread() {
        let value = QueueSafeValue(value: 0)
        let engine = value.engine
        let shared = DispatchQueue(label: "identity.shared")
        let mismatches = Locked(0)
        let threads = ThreadGroup()
        for index in 0..<4 {
            threads.spawn {
                let own = DispatchQueue(label: "identity.own.\(index)")
                for round in 0..<2_000 {
                    let queue: DispatchQueue
                    switch round % 3 {
                    case 0: queue = own
                    case 1: queue = shared
                    default: queue = DispatchQueue(label: "identity.fresh.\(index).\(round)")
                    }
                    if engine.queueIdentity(of: queue) != QueueTag.identity(of: queue) {
                        _ = mismatches.increment()
                    }
                }
            }
        }
        #expect(threads.join())
        #expect(mismatches.withLock { $0 } == 0)
    }

    /// The cache keeps the last queue alive, so no new queue can take its address while the entry
    /// names it; the engine lets it go when the container is freed.
    @Test func theCachedQueue_isReleased_withTheEngine() {
        weak var weakQueue: DispatchQueue?
        do {
            let value = QueueSafeValue(value: 0)
            let queue = DispatchQueue(label: "identity.lifetime")
            weakQueue = queue
            let done = DispatchSemaphore(value: 0)
            value.async(performIn: queue).highestPriority.set(
                accessClosure: { $0 += 1 }, completion: { _ in done.signal() })
            #expect(done.wait(timeout: .now() + 30) == .success)
        }
        #expect(waitUntil { weakQueue == nil })
    }
}
