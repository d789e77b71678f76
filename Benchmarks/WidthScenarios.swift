import Dispatch
import Foundation
import QueueSafeValue

// MARK: - A queue of width 4

/// `CommandQueue(width: 4)` beside what apps used before it: `OperationQueue` with
/// `maxConcurrentOperationCount = 4`, and a FIFO async semaphore of 4 permits (``AsyncMutexFloor``
/// with 4 permits: a lock, a count and a FIFO of continuations), written here so that the project
/// keeps no dependency. Each enqueues N jobs from synchronous code:
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

    /// A width row: `what` names the contender, `how` says what it does per job, and `makeEnqueue`
    /// builds one sample's contender and returns how it takes a job.
    private static func row(
        _ timing: Timing, _ what: String, _ how: String,
        _ makeEnqueue: @escaping () -> (@escaping @Sendable () -> Void) -> Void
    ) -> Scenario {
        Scenario(
            name: "width 4 \(timing.rawValue): \(what)",
            summary: how + "; " + (timing == .enqueue ? "the calls alone" : "until every job ended")
        ) { operations in
            sample(operations, timing, enqueue: makeEnqueue())
        }
    }

    static func commandQueue(timing: Timing) -> Scenario {
        row(timing, "CommandQueue", "CommandQueue(width: 4).enqueue { short job } × N from synchronous code") {
            let queue = try! CommandQueue(width: 4)
            return { job in queue.enqueue { job() } }
        }
    }

    static func operationQueue(timing: Timing) -> Scenario {
        row(timing, "OperationQueue", "OperationQueue, maxConcurrentOperationCount = 4, addOperation { short job } × N")
        {
            let queue = OperationQueue()
            queue.maxConcurrentOperationCount = 4
            return { job in queue.addOperation(job) }
        }
    }

    static func asyncSemaphore(timing: Timing) -> Scenario {
        row(
            timing, "FIFO async semaphore",
            "Task { await semaphore.acquire(); short job; semaphore.release() } × N, 4 permits, FIFO"
        ) {
            let semaphore = AsyncMutexFloor(permits: 4)
            return { job in
                Task {
                    await semaphore.acquire()
                    job()
                    semaphore.release()
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
