import Foundation
import QueueSafeValue
import RealtimeSupport
import Synchronization

// MARK: - Priority inversion

/// The Mars Pathfinder shape, measured as the urgent waiter's latency in milliseconds: on one
/// processor, a normal thread holds the section for 20 ms of its own processor time, a real-time
/// thread (priority 10) spins for up to 1.5 s, and a real-time thread of priority 20 waits for the
/// section. A holder that inherits the waiter's priority finishes its 20 ms first; one that does
/// not waits for the spinner. Linux with real-time scheduling only (root, CAP_SYS_NICE or an
/// RLIMIT_RTPRIO); elsewhere the rows are left out, with a note.
enum PriorityInversionScenarios {
    static var all: [Scenario] {
        guard isPermitted else {
            printError("Benchmarks: the priority-inversion rows need real-time scheduling; left out")
            return []
        }
        var all = [queueSafeValue]
        if #available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *) { all.append(mutex) }
        all.append(lock)
        return all
    }

    /// Whether a thread may take SCHED_FIFO here.
    static let isPermitted: Bool = {
        let permitted = Mailbox<Bool>()
        let done = DispatchSemaphore(value: 0)
        Thread {
            permitted.value = qsvrt_set_realtime(1) == 0
            _ = qsvrt_set_realtime(0)
            done.signal()
        }.start()
        done.wait()
        return permitted.value ?? false
    }()

    static var queueSafeValue: Scenario {
        let value = QueueSafeValue(value: 0, label: "pathfinder")
        return scenario(
            name: "priority inversion: wait",
            summary: "urgent waiter's wait behind value.wait…set on a starved normal thread, ms",
            hold: { body in
                // The seed grammar's closures are escaping; this one does not escape the command.
                withoutActuallyEscaping(body) { body in value.wait.highestPriority.set { _ in body() } }
            },
            take: { _ = value.wait.lowestPriority.get() })
    }

    @available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *)
    static var mutex: Scenario {
        let shared = MutexCounter()
        return scenario(
            name: "priority inversion: Mutex",
            summary: "the same with Synchronization.Mutex (a priority-inheriting futex on Linux), ms",
            hold: { body in shared.mutex.withLock { _ in body() } },
            take: { shared.mutex.withLock { _ in } })
    }

    static var lock: Scenario {
        let lock = NSLock()
        return scenario(
            name: "priority inversion: NSLock",
            summary: "the same with NSLock (a plain pthread mutex), ms",
            hold: { body in lock.withLock { body() } },
            take: { lock.withLock {} })
    }

    /// One shape per sample; `hold` runs its body while holding, `take` waits and takes.
    private static func scenario(
        name: String,
        summary: String,
        hold: @escaping @Sendable (() -> Void) -> Void,
        take: @escaping @Sendable () -> Void
    ) -> Scenario {
        Scenario(
            name: name, summary: summary, unit: .milliseconds, fixedOperations: 1, warmUpOperations: 0,
            maximumSamples: 5
        ) { operations in
            guard operations > 0 else { return Sample(measured: 0) }  // no warm-up: each run is a second
            let latency = measure(hold: hold, take: take)
            // A spinner that ran long used up the period's real-time budget (the kernel keeps 5% of
            // each second for other threads): wait for the next period, or the next sample would
            // run its real-time threads throttled.
            if latency > 0.1 { usleep(1_000_000) }
            return Sample(measured: latency * 1000)
        }
    }

    /// Runs the shape once and returns the urgent waiter's wait, in seconds.
    private static func measure(hold: @escaping @Sendable (() -> Void) -> Void, take: @escaping @Sendable () -> Void)
        -> Double
    {
        let holding = DispatchSemaphore(value: 0)
        let urgentReady = DispatchSemaphore(value: 0)
        let goUrgent = DispatchSemaphore(value: 0)
        let finished = DispatchGroup()
        let latency = Mailbox<Double>()
        let stop = Flag()
        finished.enter()
        Thread {
            _ = qsvrt_pin_to_cpu(0)
            hold {
                holding.signal()
                qsvrt_burn_cpu(0.020)
            }
            _ = qsvrt_pin_to_cpu(-1)
            finished.leave()
        }.start()
        holding.wait()
        finished.enter()
        Thread {
            // Real-time first, then onto the holder's processor: it preempts the holder at once.
            _ = qsvrt_set_realtime(20)
            _ = qsvrt_pin_to_cpu(0)
            urgentReady.signal()
            goUrgent.wait()
            let start = qsvrt_now()
            take()
            latency.value = qsvrt_now() - start
            stop.set()
            _ = qsvrt_set_realtime(0)
            _ = qsvrt_pin_to_cpu(-1)
            finished.leave()
        }.start()
        urgentReady.wait()
        finished.enter()
        Thread {
            _ = qsvrt_set_realtime(10)
            _ = qsvrt_pin_to_cpu(0)
            goUrgent.signal()
            let end = qsvrt_now() + 1.5
            while qsvrt_now() < end && !stop.isSet {}
            _ = qsvrt_set_realtime(0)
            _ = qsvrt_pin_to_cpu(-1)
            finished.leave()
        }.start()
        finished.wait()
        return latency.value ?? 0
    }
}

/// A flag one thread sets and another polls.
final class Flag: @unchecked Sendable {  // @unchecked Sendable: guarded by `lock`
    private let lock = NSLock()
    private var value = false

    func set() { lock.withLock { value = true } }
    var isSet: Bool { lock.withLock { value } }
}
