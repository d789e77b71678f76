import Dispatch

// MARK: - BlockingWaiter

/// A thread that waits for its turn: it spins briefly, then parks on a semaphore until the engine
/// grants it the critical section or its deadline passes.
///
/// The hand-off word has three states: `waiting` (the waiter is spinning), `granted` and `parked`.
/// The granting thread swaps in `granted` and signals the semaphore only when it finds `parked`, so a
/// waiter that is still spinning is handed the section with one cache-line transfer and no system
/// call.
final class BlockingWaiter: PendingCommand, @unchecked Sendable {
    private static let waiting = 0
    private static let granted = 1
    private static let parked = 2

    /// How many times a waiter polls before it parks. Roughly a microsecond or two on current CPUs:
    /// longer than a typical short critical section, much shorter than a futex sleep and wake.
    static let spinLimit = 2_000

    private let word = AtomicWord(BlockingWaiter.waiting)
    private let semaphore = DispatchSemaphore(value: 0)
    private let thread: Int

    init(thread: Int) {
        self.thread = thread
    }

    deinit {
        word.deallocate()
    }

    override var ownerThread: Int { thread }

    override func start() {
        if word.exchange(Self.granted) == Self.parked {
            semaphore.signal()
        }
    }

    /// Blocks until the engine grants this waiter, or until `deadline`.
    ///
    /// Exactly one of "granted" and "timed out" wins: the decision is made under the engine lock by
    /// ``CommandEngine/abandon(_:)``.
    /// - Returns: `nil` when granted, `.timedOut` when the deadline passed first.
    func waitForGrant(engine: CommandEngine, deadline: DispatchTime?) -> QueueSafeValueError? {
        for _ in 0..<Self.spinLimit {
            if word.loadAcquire() == Self.granted { return nil }
            cpuRelax()
        }
        guard word.compareExchange(expected: Self.waiting, desired: Self.parked) else {
            return nil  // granted while we were about to park
        }
        guard let deadline else {
            semaphore.wait()
            return nil
        }
        if semaphore.wait(timeout: deadline) == .success { return nil }
        if engine.abandon(self) { return .timedOut }
        // Granted at the same instant: the grant's signal is on its way. Consume it.
        semaphore.wait()
        return nil
    }
}
