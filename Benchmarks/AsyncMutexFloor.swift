import Foundation

// MARK: - The async hand-off floor

/// What handing a critical section from one suspended task to the next costs at the least: a
/// first-come-first-served async mutex in a few lines, an `NSLock` around a flag and a queue of
/// continuations. A task that finds it taken suspends; the unlocking task resumes the first waiter,
/// which then holds it. No priorities, no cancellation, no timeouts, no reentrancy or deadlock
/// checks: the floor for tasks that suspend, which `await … contended` rows are read against.
final class AsyncMutexFloor: @unchecked Sendable {  // Sendable: `lock` guards every field.
    private let lock = NSLock()
    private var isLocked = false
    private var waiters: [UnsafeContinuation<Void, Never>] = []
    private var head = 0

    func acquire() async {
        if tryAcquire() { return }
        await withUnsafeContinuation { continuation in
            // Taken meanwhile by nobody: it is this task's at once.
            if enqueueUnlessFree(continuation) { continuation.resume() }
        }
        // Resumed by `release()`, which handed the mutex over: it is this task's now.
    }

    private func tryAcquire() -> Bool {
        lock.lock()
        defer { lock.unlock() }
        if isLocked { return false }
        isLocked = true
        return true
    }

    /// - Returns: `true` if the mutex was free after all (it is the caller's now).
    private func enqueueUnlessFree(_ continuation: UnsafeContinuation<Void, Never>) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        if !isLocked {
            isLocked = true
            return true
        }
        waiters.append(continuation)
        return false
    }

    func release() {
        lock.lock()
        guard head < waiters.count else {
            isLocked = false
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
