import Dispatch

#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

// MARK: - BlockingWaiter

/// A thread that waits for its turn: it spins briefly, then parks on a semaphore until the engine
/// grants it the critical section or its deadline passes.
///
/// The hand-off word has three states: `waiting` (the thread is spinning), `granted` and `parked`.
/// ``start()`` swaps in `granted` and signals the semaphore only when it finds `parked`, so a thread
/// that is still spinning is handed the section with one cache-line transfer and no system call.
///
/// Each thread keeps one waiter and reuses it for every blocking command it waits on: by the time a
/// wait returns, nothing else refers to it (a timed-out waiter left the queue, or consumed the
/// grant's signal). The same semaphore blocks the thread of a manual-completion command until its
/// completion arrives.
// @unchecked Sendable: its word is atomic, its semaphore thread-safe
final class BlockingWaiter: Waiter, @unchecked Sendable {
    private static let waiting = 0
    private static let granted = 1
    private static let parked = 2

    /// How many times a waiter polls before it parks: a few microseconds, longer than a typical
    /// short critical section and shorter than a futex sleep and wake-up.
    static let spinLimit = 200
    /// Every this many polls the spinning waiter yields its CPU (`sched_yield`), so a holder that
    /// was descheduled on the same CPU gets to finish instead of waiting for the spin to run out.
    static let yieldEvery = 16

    private let word = AtomicWord(BlockingWaiter.waiting)
    private let semaphore = DispatchSemaphore(value: 0)

    private override init() {}

    /// The calling thread's waiter, ready for a new wait.
    static func forCurrentThread() -> BlockingWaiter {
        if let raw = pthread_getspecific(waiterKey) {
            let waiter = Unmanaged<BlockingWaiter>.fromOpaque(raw).takeUnretainedValue()
            waiter.word.storeRelaxed(waiting)
            return waiter
        }
        let waiter = BlockingWaiter()
        let status = pthread_setspecific(waiterKey, Unmanaged.passRetained(waiter).toOpaque())
        precondition(status == 0, "pthread_setspecific failed: \(status)")
        return waiter
    }

    override func start() {
        if word.exchange(Self.granted) == Self.parked {
            semaphore.signal()
        }
    }

    /// Blocks until the engine grants this waiter, or until `deadline`.
    ///
    /// Exactly one of "granted" and "timed out" wins: the state machine decides, under the engine
    /// lock, in ``CommandEngine/leaveAfterDeadline(_:)``.
    /// - Returns: `nil` when granted, `.timedOut` when the deadline passed first.
    func waitForGrant(
        engine: CommandEngine,
        ticket: CommandEngine.Ticket,
        deadline: DispatchTime?
    ) -> QueueSafeValueError? {
        for round in 1...Self.spinLimit {
            if word.loadAcquire() == Self.granted { return nil }
            if round % Self.yieldEvery == 0 {
                // The holder may be waiting for this CPU: let it run rather than burn the slice.
                sched_yield()
            } else {
                cpuRelax()
            }
        }
        guard word.compareExchange(expected: Self.waiting, desired: Self.parked) else {
            return nil  // granted while we were about to park
        }
        guard let deadline else {
            semaphore.wait()
            return nil
        }
        if semaphore.wait(timeout: deadline) == .success { return nil }
        if let diagnostics = engine.leaveAfterDeadline(ticket) { return .timedOut(diagnostics) }
        // Granted at the same instant: the grant's signal is on its way. Consume it.
        semaphore.wait()
        return nil
    }

    /// Blocks the holder's thread until ``finishManualCompletion()``.
    func waitForManualCompletion() {
        semaphore.wait()
    }

    override func finishManualCompletion() {
        semaphore.signal()
    }
}

/// The thread-specific slot that holds each thread's ``BlockingWaiter`` (retained; released when
/// the thread exits).
private let waiterKey: pthread_key_t = {
    var key = pthread_key_t()
    #if canImport(Darwin)
        let status = pthread_key_create(&key) { raw in
            Unmanaged<BlockingWaiter>.fromOpaque(raw).release()
        }
    #else
        let status = pthread_key_create(&key) { raw in
            if let raw { Unmanaged<BlockingWaiter>.fromOpaque(raw).release() }
        }
    #endif
    precondition(status == 0, "pthread_key_create failed: \(status)")
    return key
}()
