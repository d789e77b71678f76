import Dispatch
import Foundation
import Synchronization

// MARK: - Baselines

/// The tools a user would otherwise reach for: a lock, a serial dispatch queue, an actor, a task.
/// Every library scenario is compared with one of these.
enum Baselines {
    static var all: [Scenario] {
        var all = [lockUncontended]
        // `Synchronization` needs macOS 15 / iOS 18 on Apple platforms: there the floors are left out
        // where the benchmark runs on an older system.
        if #available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *) { all.append(mutexUncontended) }
        all += [lockContended(threads: 2), lockContended(threads: 4), lockContended(threads: 8)]
        if #available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *) {
            all += [2, 4, 8].map { fairLockContended(threads: $0) } + [2, 4, 8].map { mutexContended(threads: $0) }
        }
        all += [
            syncUncontended, syncContended, HandOffFloor.scenario, asyncSerial, actorCall, taskCreateAwait,
            tasksFromSyncCode,
        ]
        return all
    }

    /// The uncontended floor: `Synchronization.Mutex` around the counter, in a heap object as shared
    /// state always is.
    @available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *)
    static var mutexUncontended: Scenario {
        Scenario(
            name: "mutex uncontended",
            summary: "Synchronization.Mutex withLock { $0 += 1 }, one thread"
        ) { operations in
            let shared = MutexCounter()
            let elapsed = Clock.time {
                for _ in 0..<operations {
                    shared.mutex.withLock { $0 += 1 }
                }
            }
            let final = shared.mutex.withLock { $0 }
            check(final == operations, "mutex uncontended counted \(final) of \(operations)")
            return Sample(measured: Double(elapsed))
        }
    }

    /// The fair floor: a first-come-first-served ticket lock that parks (see `FairTicketLock`).
    @available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *)
    static func fairLockContended(threads: Int) -> Scenario {
        Scenario(
            name: "fair lock contended \(threads) threads",
            summary: "a strict first-come-first-served ticket lock that parks, increment, unlock, "
                + "from \(threads) threads at once",
            timeWindowed: true
        ) { window in
            let lock = FairTicketLock()
            let counter = Counter()
            let (elapsed, operations, performed) = Concurrency.runThreads(threads, for: UInt64(window)) { _, timed in
                timed.repeatInWindow {
                    lock.lock()
                    counter.value += 1
                    lock.unlock()
                }
            }
            check(counter.value == performed, "fair lock counted \(counter.value) of \(performed)")
            return Sample(measured: Double(elapsed), operations: operations)
        }
    }

    /// `Synchronization.Mutex` from several threads: on Linux a futex lock that lets a running
    /// thread take it ahead of a woken one (unfair), with priority inheritance.
    @available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *)
    static func mutexContended(threads: Int) -> Scenario {
        Scenario(
            name: "mutex contended \(threads) threads",
            summary: "Synchronization.Mutex withLock { $0 += 1 } from \(threads) threads at once",
            timeWindowed: true
        ) { window in
            let shared = MutexCounter()
            let (elapsed, operations, performed) = Concurrency.runThreads(threads, for: UInt64(window)) { _, timed in
                timed.repeatInWindow { shared.mutex.withLock { $0 += 1 } }
            }
            let final = shared.mutex.withLock { $0 }
            check(final == performed, "mutex contended counted \(final) of \(performed)")
            return Sample(measured: Double(elapsed), operations: operations)
        }
    }

    static var lockUncontended: Scenario {
        Scenario(
            name: "lock uncontended",
            summary: "NSLock lock, increment, unlock, one thread"
        ) { operations in
            let lock = NSLock()
            let counter = Counter()
            let elapsed = Clock.time {
                for _ in 0..<operations {
                    lock.lock()
                    counter.value += 1
                    lock.unlock()
                }
            }
            check(counter.value == operations, "lock uncontended counted \(counter.value) of \(operations)")
            return Sample(measured: Double(elapsed))
        }
    }

    /// An unfair lock: a thread that unlocks may take the lock again before a woken waiter runs.
    static func lockContended(threads: Int) -> Scenario {
        Scenario(
            name: "lock contended \(threads) threads",
            summary: "NSLock lock, increment, unlock, from \(threads) threads at once",
            timeWindowed: true
        ) { window in
            let lock = NSLock()
            let counter = Counter()
            let (elapsed, operations, performed) = Concurrency.runThreads(threads, for: UInt64(window)) { _, timed in
                timed.repeatInWindow {
                    lock.lock()
                    counter.value += 1
                    lock.unlock()
                }
            }
            check(counter.value == performed, "lock contended counted \(counter.value) of \(performed)")
            return Sample(measured: Double(elapsed), operations: operations)
        }
    }

    static var syncUncontended: Scenario {
        Scenario(
            name: "DispatchQueue.sync uncontended",
            summary: "sync on a serial queue, one thread"
        ) { operations in
            let queue = DispatchQueue(label: "bench.sync.uncontended")
            let counter = Counter()
            let elapsed = Clock.time {
                for _ in 0..<operations {
                    queue.sync { counter.value += 1 }
                }
            }
            check(counter.value == operations, "DispatchQueue.sync counted \(counter.value) of \(operations)")
            return Sample(measured: Double(elapsed))
        }
    }

    static var syncContended: Scenario {
        Scenario(
            name: "DispatchQueue.sync contended 2 threads",
            summary: "sync on a serial queue, from 2 threads at once",
            timeWindowed: true
        ) { window in
            let queue = DispatchQueue(label: "bench.sync.contended")
            let counter = Counter()
            let (elapsed, operations, performed) = Concurrency.runThreads(2, for: UInt64(window)) { _, timed in
                timed.repeatInWindow {
                    queue.sync { counter.value += 1 }
                }
            }
            check(counter.value == performed, "DispatchQueue.sync contended counted \(counter.value) of \(performed)")
            return Sample(measured: Double(elapsed), operations: operations)
        }
    }

    static var asyncSerial: Scenario {
        Scenario(
            name: "DispatchQueue.async serial",
            summary: "async onto a serial queue; timed until all blocks completed"
        ) { operations in
            let queue = DispatchQueue(label: "bench.async.serial")
            let counter = Counter()
            let allDone = DispatchSemaphore(value: 0)
            let elapsed = Clock.time {
                for _ in 0..<operations {
                    queue.async {
                        counter.value += 1
                        if counter.value == operations { allDone.signal() }
                    }
                }
                allDone.wait()
            }
            return Sample(measured: Double(elapsed))
        }
    }

    static var actorCall: Scenario {
        Scenario(
            name: "actor call",
            summary: "one await of an actor method from a task"
        ) { operations in
            let actor = CountingActor()
            let elapsed = Concurrency.blockingAwait {
                let start = Clock.now()
                for _ in 0..<operations {
                    await actor.increment()
                }
                let elapsed = Clock.now() - start
                let count = await actor.count
                check(count == operations, "actor call counted \(count) of \(operations)")
                return elapsed
            }
            return Sample(measured: Double(elapsed))
        }
    }

    /// What `CommandQueue.enqueue` does without the queue: start a task from synchronous code,
    /// N times, and wait until all have run.
    static var tasksFromSyncCode: Scenario {
        Scenario(
            name: "Task {} × N",
            summary: "create N unstructured Tasks from synchronous code; timed until all of them ran"
        ) { operations in
            let completed = AtomicCounter()
            let allDone = DispatchSemaphore(value: 0)
            let elapsed = Clock.time {
                for _ in 0..<operations {
                    Task {
                        if completed.increment() == operations { allDone.signal() }
                    }
                }
                allDone.wait()
            }
            return Sample(measured: Double(elapsed))
        }
    }

    static var taskCreateAwait: Scenario {
        Scenario(
            name: "Task create+await",
            summary: "create an unstructured Task and await its value"
        ) { operations in
            let elapsed = Concurrency.blockingAwait {
                var sum = 0
                let start = Clock.now()
                for index in 0..<operations {
                    let task = Task { index }
                    sum &+= await task.value
                }
                let elapsed = Clock.now() - start
                check(sum == operations * (operations - 1) / 2, "Task create+await summed \(sum)")
                return elapsed
            }
            return Sample(measured: Double(elapsed))
        }
    }
}

/// A counter that tasks running in parallel increment.
final class AtomicCounter: @unchecked Sendable {  // Sendable: the lock guards `value`
    private let lock = NSLock()
    private var value = 0

    /// Adds one and returns the new count.
    func increment() -> Int {
        lock.lock()
        defer { lock.unlock() }
        value += 1
        return value
    }
}

/// The actor of the `actor call` baseline.
actor CountingActor {
    private(set) var count = 0

    func increment() {
        count += 1
    }
}

/// The state of the `mutex uncontended` baseline.
@available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *)
final class MutexCounter: Sendable {
    let mutex = Mutex(0)
}
