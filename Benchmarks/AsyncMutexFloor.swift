import Foundation

// MARK: - The async hand-off floor

/// What handing a critical section from one suspended task to the next costs at the least: a
/// first-come-first-served async mutex in a few lines, an `NSLock` around a count of free permits
/// and a queue of continuations. A task that finds no permit suspends; the releasing task resumes the
/// first waiter, which then holds the permit. No priorities, no cancellation, no timeouts, no
/// reentrancy or deadlock checks: the floor for tasks that suspend, which `await … contended` rows
/// are read against. With `permits` above 1 it is a FIFO async semaphore (the width rows' baseline:
/// the shape of groue/Semaphore or tokio's `Semaphore`).
final class AsyncMutexFloor: @unchecked Sendable {  // Sendable: `lock` guards every field.
    private let lock = NSLock()
    private var permits: Int
    private var waiters: [UnsafeContinuation<Void, Never>] = []
    private var head = 0

    init(permits: Int = 1) {
        self.permits = permits
    }

    func acquire() async {
        if take(orQueue: nil) { return }
        await withUnsafeContinuation { continuation in
            // A permit freed meanwhile: it is this task's at once.
            if take(orQueue: continuation) { continuation.resume() }
        }
        // Resumed by `release()`, which handed a permit over: it is this task's now.
    }

    /// Takes a free permit, or, with `continuation`, queues it.
    /// - Returns: `true` if a permit was free (it is the caller's now).
    private func take(orQueue continuation: UnsafeContinuation<Void, Never>?) -> Bool {
        // `lock()` and `unlock()`, not `withLock`: Foundation's `NSLocking.withLock` is newer than the
        // deployment floor on Apple platforms.
        lock.lock()
        defer { lock.unlock() }
        if permits > 0 {
            permits -= 1
            return true
        }
        if let continuation { waiters.append(continuation) }
        return false
    }

    func release() {
        lock.lock()
        guard head < waiters.count else {
            permits += 1
            lock.unlock()
            return
        }
        let next = waiters[head]
        head += 1
        if head == waiters.count {
            waiters.removeAll(keepingCapacity: true)
            head = 0
        }
        lock.unlock()
        next.resume()
    }
}

enum AsyncMutexFloorScenario {
    static func contended(tasks: Int) -> Scenario {
        contended(
            tasks: tasks, name: "async mutex floor contended \(tasks) tasks",
            summary: "a FIFO async mutex (NSLock and a queue of continuations): await acquire, += 1, release, "
                + "from \(tasks) concurrent tasks"
        ) { mutex in
            await mutex.acquire()
        }
    }

    /// The floor with what every awaiting command of the library must install while it waits: a
    /// cancellation handler (a task cancelled while it waits leaves the queue) and, where the
    /// runtime has one, a priority escalation handler (a waiter escalated while it waits passes the
    /// escalation on). Empty handlers here: this measures what installing them costs a hand-off.
    static func contendedWithHandlers(tasks: Int) -> Scenario {
        contended(
            tasks: tasks, name: "async mutex floor with handlers contended \(tasks) tasks",
            summary: "the FIFO async mutex, each acquire inside withTaskCancellationHandler and "
                + "withTaskPriorityEscalationHandler (empty handlers), from \(tasks) concurrent tasks"
        ) { mutex in
            await withTaskCancellationHandler {
                if #available(macOS 26.0, iOS 26.0, watchOS 26.0, tvOS 26.0, visionOS 26.0, *) {
                    await withTaskPriorityEscalationHandler {
                        await mutex.acquire()
                    } onPriorityEscalated: { _, _ in
                    }
                } else {
                    await mutex.acquire()
                }
            } onCancel: {
            }
        }
    }

    /// `tasks` concurrent tasks each taking the mutex with `acquire`, adding one and releasing it,
    /// until the window ends.
    private static func contended(
        tasks: Int, name: String, summary: String, acquire: @escaping @Sendable (AsyncMutexFloor) async -> Void
    ) -> Scenario {
        Scenario(name: name, summary: summary, timeWindowed: true) { window in
            let mutex = AsyncMutexFloor()
            let counter = Counter()
            let (elapsed, operations) = Concurrency.runTasks(tasks, for: UInt64(window)) {
                await acquire(mutex)
                counter.value += 1
                mutex.release()
            }
            check(counter.value == operations, "\(name) counted \(counter.value) of \(operations)")
            return Sample(measured: Double(elapsed), operations: operations)
        }
    }
}
