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
///
/// The `priority chain` rows add a link: the starved thread holds a second section B, and a second
/// normal thread holds A and, inside, waits for B; the urgent waiter waits for A. The waiter gets A
/// in about 20 ms only if its priority passes along the chain, through A's holder, to B's.
enum PriorityInversionScenarios {
    static var all: [Scenario] {
        guard isPermitted else {
            printError("Benchmarks: the priority-inversion rows need real-time scheduling; left out")
            return []
        }
        var all = [queueSafeValue]
        if #available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *) { all.append(mutex) }
        all.append(lock)
        all.append(chainQueueSafeValue)
        if #available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *) { all.append(chainMutex) }
        all.append(chainLock)
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
            holds: [hold(value)],
            take: { _ = value.wait.lowestPriority.get() })
    }

    @available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *)
    static var mutex: Scenario {
        let shared = MutexCounter()
        return scenario(
            name: "priority inversion: Mutex",
            summary: "the same with Synchronization.Mutex (a priority-inheriting futex on Linux), ms",
            holds: [hold(shared)],
            take: { shared.mutex.withLock { _ in } })
    }

    static var lock: Scenario {
        let lock = NSLock()
        return scenario(
            name: "priority inversion: NSLock",
            summary: "the same with NSLock (a plain pthread mutex), ms",
            holds: [hold(lock)],
            take: { lock.withLock {} })
    }

    /// The chain through two values: each held with `value.wait.highestPriority.set`, A's holder
    /// taking B the same way inside its hold, the urgent waiter taking A with `lowestPriority.get()`.
    static var chainQueueSafeValue: Scenario {
        let a = QueueSafeValue(value: 0, label: "pathfinder A")
        let b = QueueSafeValue(value: 0, label: "pathfinder B")
        return scenario(
            name: "priority chain: wait",
            summary: "urgent waiter's wait for value A, whose holder waits for B, held by a starved normal thread, ms",
            holds: [hold(a), hold(b)],
            take: { _ = a.wait.lowestPriority.get() })
    }

    /// The chain through two `Synchronization.Mutex`es, whose futexes pass the priority along.
    @available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *)
    static var chainMutex: Scenario {
        let a = MutexCounter()
        let b = MutexCounter()
        return scenario(
            name: "priority chain: Mutex",
            summary: "the same with two Synchronization.Mutexes (priority-inheriting futexes on Linux), ms",
            holds: [hold(a), hold(b)],
            take: { a.mutex.withLock { _ in } })
    }

    /// The chain through two `NSLock`s, which pass no priority on.
    static var chainLock: Scenario {
        let a = NSLock()
        let b = NSLock()
        return scenario(
            name: "priority chain: NSLock",
            summary: "the same with two NSLocks (plain pthread mutexes), ms",
            holds: [hold(a), hold(b)],
            take: { a.withLock {} })
    }

    /// A link that runs its body inside `value.wait.highestPriority.set`.
    private static func hold(_ value: QueueSafeValue<Int>) -> @Sendable (() -> Void) -> Void {
        return { body in
            // The seed grammar's closures are escaping; this one does not escape the command.
            withoutActuallyEscaping(body) { body in value.wait.highestPriority.set { _ in body() } }
        }
    }

    /// A link that runs its body inside `shared.mutex.withLock`.
    @available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *)
    private static func hold(_ shared: MutexCounter) -> @Sendable (() -> Void) -> Void {
        return { body in shared.mutex.withLock { _ in body() } }
    }

    /// A link that runs its body inside `lock.withLock`.
    private static func hold(_ lock: NSLock) -> @Sendable (() -> Void) -> Void {
        return { body in lock.withLock { body() } }
    }

    /// One shape per sample; `holds` are the links of the chain (see `measure`), `take` waits for the
    /// first link and takes it.
    private static func scenario(
        name: String,
        summary: String,
        holds: [@Sendable (() -> Void) -> Void],
        take: @escaping @Sendable () -> Void
    ) -> Scenario {
        Scenario(
            name: name, summary: summary, unit: .milliseconds, fixedOperations: 1, warmUpOperations: 0,
            maximumSamples: 5
        ) { operations in
            guard operations > 0 else { return Sample(measured: 0) }  // no warm-up: each run is a second
            let latency = measure(holds: holds, take: take)
            // A spinner that ran long used up the period's real-time budget (the kernel keeps 5% of
            // each second for other threads): wait for the next period, or the next sample would
            // run its real-time threads throttled.
            if latency > 0.1 { usleep(1_000_000) }
            return Sample(measured: latency * 1000)
        }
    }

    /// Runs the shape once and returns the urgent waiter's wait, in seconds.
    ///
    /// `holds[i]` runs its body while holding link `i` of the chain, each on a normal thread of its
    /// own: the last link's holder burns 20 ms of its processor time inside its hold, every other
    /// link's holder takes the next link (`holds[i + 1]` with an empty body) inside its hold. The
    /// holders start from the end of the chain, each once the one after it holds, and each but the
    /// last gets 20 ms to block on the next link. Then the burn starts and the urgent waiter takes
    /// the first link with `take`. With one link this is the Pathfinder shape.
    private static func measure(holds: [@Sendable (() -> Void) -> Void], take: @escaping @Sendable () -> Void)
        -> Double
    {
        let holding = DispatchSemaphore(value: 0)
        let burn = DispatchSemaphore(value: 0)
        let urgentReady = DispatchSemaphore(value: 0)
        let goUrgent = DispatchSemaphore(value: 0)
        let finished = DispatchGroup()
        let latency = Mailbox<Double>()
        let stop = Flag()
        let last = holds.count - 1
        for link in holds.indices.reversed() {
            let holdThis = holds[link]
            let holdNext: (@Sendable (() -> Void) -> Void)? = link < last ? holds[link + 1] : nil
            finished.enter()
            Thread {
                _ = qsvrt_pin_to_cpu(0)
                holdThis {
                    holding.signal()
                    if let holdNext {
                        holdNext {}
                    } else {
                        // Not while the chain is set up: the holder would have burnt its 20 ms by then.
                        burn.wait()
                        qsvrt_burn_cpu(0.020)
                    }
                }
                _ = qsvrt_pin_to_cpu(-1)
                finished.leave()
            }.start()
            holding.wait()
            if link < last { usleep(20_000) }  // time to block on the next link
        }
        burn.signal()
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
