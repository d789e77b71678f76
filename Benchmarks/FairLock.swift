import QueueSafeValueShims
import Synchronization

#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

// MARK: - The fair floor

/// A strict first-come-first-served ticket lock whose waiters park: what any fair lock costs at the
/// least when there are more threads than processors. A thread takes a ticket and waits until the
/// lock serves it, polling the "now serving" word the way `QueueSafeValue`'s own blocking waiters did
/// before issue 44 (200 polls, a CPU pause between them, `sched_yield` every 16th; they now yield at
/// the 16th and every 4th after it), then parks on the condition
/// variable of its ticket's slot. `unlock` serves the next ticket and wakes its slot only if someone
/// parked. Nothing else: no priorities, no timeouts, no queue of records, no reentrancy check.
@available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *)
final class FairTicketLock: @unchecked Sendable {  // Sendable: the atomics and the pthread objects synchronize.
    private let nextTicket = Atomic<Int>(0)
    private let nowServing = Atomic<Int>(0)
    /// Threads between deciding to park and being woken (read by `unlock` to skip the mutex).
    private let parked = Atomic<Int>(0)
    private static let slots = 16
    // Unsafe: pthread objects must not move, so they live in allocations of their own.
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let conditions = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: FairTicketLock.slots)

    init() {
        pthread_mutex_init(mutex, nil)
        for slot in 0..<Self.slots { pthread_cond_init(conditions + slot, nil) }
    }

    deinit {
        for slot in 0..<Self.slots { pthread_cond_destroy(conditions + slot) }
        pthread_mutex_destroy(mutex)
        conditions.deallocate()
        mutex.deallocate()
    }

    func lock() {
        let ticket = nextTicket.wrappingAdd(1, ordering: .relaxed).oldValue
        for poll in 1...200 {
            if nowServing.load(ordering: .acquiring) == ticket { return }
            if poll % 16 == 0 { sched_yield() } else { qsv_cpu_relax() }
        }
        pthread_mutex_lock(mutex)
        // Sequentially consistent with `unlock`'s increment and load: either this load sees the
        // ticket served, or `unlock` sees `parked` and signals after this thread waits.
        parked.wrappingAdd(1, ordering: .sequentiallyConsistent)
        while nowServing.load(ordering: .sequentiallyConsistent) != ticket {
            pthread_cond_wait(conditions + ticket % Self.slots, mutex)
        }
        parked.wrappingSubtract(1, ordering: .relaxed)
        pthread_mutex_unlock(mutex)
    }

    func unlock() {
        let next = nowServing.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue
        if parked.load(ordering: .sequentiallyConsistent) > 0 {
            pthread_mutex_lock(mutex)
            pthread_cond_broadcast(conditions + next % Self.slots)
            pthread_mutex_unlock(mutex)
        }
    }
}
