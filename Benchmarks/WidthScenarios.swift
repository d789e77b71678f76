import Dispatch
import Foundation
import QueueSafeValue

// MARK: - A queue of width 4

/// `CommandQueue(width: 4)` beside what apps used before it: `OperationQueue` with
/// `maxConcurrentOperationCount = 4`, and a FIFO async semaphore of 4 permits (the shape of
/// groue/Semaphore or tokio's `Semaphore`: a lock, a count and a FIFO of continuations), written
/// here so that the project keeps no dependency. Each enqueues N jobs from synchronous code:
///
/// - "enqueue": the N calls alone are timed (the sample then waits, untimed, for the jobs to end);
/// - "drain": timed from the first call until the last job has ended. A job is short: it counts
///   to 200 (well under a microsecond), so the row is what the queue costs per job.
///
/// And the cost of re-prioritizing a waiting operation, with 1,000 operations waiting.
enum WidthScenarios {
    static var all: [Scenario] {
        [
            commandQueue(timing: .enqueue), operationQueue(timing: .enqueue), asyncSemaphore(timing: .enqueue),
            commandQueue(timing: .drain), operationQueue(timing: .drain), asyncSemaphore(timing: .drain),
            reprioritize,
        ]
    }

    enum Timing: String {
        case enqueue
        case drain
    }

    /// The work of one short job.
    @inline(never)
    static func shortJob(_ seed: Int) -> Int {
        var sum = seed
        for index in 0..<200 { sum = sum &* 31 &+ index }
        return sum
    }

    /// Runs `enqueue(job)` N times, `job` being a short job that reports its end; times the calls
    /// or the whole drain.
    private static func sample(
        _ operations: Int, _ timing: Timing, enqueue: (@escaping @Sendable () -> Void) -> Void
    ) -> Sample {
        let ended = AtomicCounter()
        let allDone = DispatchSemaphore(value: 0)
        let job: @Sendable () -> Void = {
            _ = shortJob(operations)
            if ended.increment() == operations { allDone.signal() }
        }
        let start = Clock.now()
        for _ in 0..<operations { enqueue(job) }
        let enqueued = Clock.now()
        allDone.wait()
        let drained = Clock.now()
        return Sample(measured: Double(timing == .enqueue ? enqueued - start : drained - start))
    }

    static func commandQueue(timing: Timing) -> Scenario {
        Scenario(
            name: "width 4 \(timing.rawValue): CommandQueue",
            summary: "CommandQueue(width: 4).enqueue { short job } × N from synchronous code; "
                + (timing == .enqueue ? "the calls alone" : "until every job ended")
        ) { operations in
            let queue = try! CommandQueue(width: 4)
            return sample(operations, timing) { job in queue.enqueue { job() } }
        }
    }

    static func operationQueue(timing: Timing) -> Scenario {
        Scenario(
            name: "width 4 \(timing.rawValue): OperationQueue",
            summary: "OperationQueue, maxConcurrentOperationCount = 4, addOperation { short job } × N; "
                + (timing == .enqueue ? "the calls alone" : "until every job ended")
        ) { operations in
            let queue = OperationQueue()
            queue.maxConcurrentOperationCount = 4
            return sample(operations, timing) { job in queue.addOperation(job) }
        }
    }

    static func asyncSemaphore(timing: Timing) -> Scenario {
        Scenario(
            name: "width 4 \(timing.rawValue): FIFO async semaphore",
            summary: "Task { await semaphore.wait(); short job; semaphore.signal() } × N, 4 permits, FIFO; "
                + (timing == .enqueue ? "the calls alone" : "until every job ended")
        ) { operations in
            let semaphore = FIFOAsyncSemaphore(permits: 4)
            return sample(operations, timing) { job in
                Task {
                    await semaphore.wait()
                    job()
                    semaphore.signal()
                }
            }
        }
    }

    /// Re-prioritizing one waiting operation, 1,000 waiting behind a running one: each change moves
    /// an operation between `.low` and `.high` (a heap removal and an insertion).
    static var reprioritize: Scenario {
        var scenario = Scenario(
            name: "re-prioritize a waiting operation",
            summary: "QueuedOperation.setPriority on one of 1,000 operations waiting in a CommandQueue(width: 4)"
        ) { operations in
            let queue = try! CommandQueue(width: 4)
            let release = DispatchSemaphore(value: 0)
            let running = (0..<4).map { _ in queue.submit { release.wait() } }
            let waiting = (0..<1_000).map { _ in queue.submit(priority: .low) {} }
            let start = Clock.now()
            for index in 0..<operations {
                let moved = waiting[index % waiting.count].setPriority(index.isMultiple(of: 2) ? .high : .low)
                if moved != .waiting { check(false, "a waiting operation was \(moved)") }
            }
            let elapsed = Clock.now() - start
            for _ in running { release.signal() }
            queue.cancelAll()
            return Sample(measured: Double(elapsed))
        }
        scenario.fixedOperations = 2_000
        return scenario
    }
}

/// A FIFO async semaphore: `wait()` takes a permit, or suspends in arrival order until `signal()`
/// hands one over. The baseline of the width rows.
final class FIFOAsyncSemaphore: @unchecked Sendable {  // Sendable: the lock guards every field
    private let lock = NSLock()
    private var permits: Int
    private var waiters: [UnsafeContinuation<Void, Never>] = []
    private var head = 0

    init(permits: Int) {
        self.permits = permits
    }

    // `lock()` and `unlock()`, not `withLock`: Foundation's `NSLocking.withLock` is newer than the
    // deployment floor on Apple platforms.

    /// Takes a permit if one is free; otherwise, with `continuation`, queues it.
    private func take(orQueue continuation: UnsafeContinuation<Void, Never>?) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        if permits > 0 {
            permits -= 1
            return true
        }
        if let continuation { waiters.append(continuation) }
        return false
    }

    func wait() async {
        if take(orQueue: nil) { return }
        await withUnsafeContinuation { continuation in
            if take(orQueue: continuation) { continuation.resume() }
        }
    }

    func signal() {
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
