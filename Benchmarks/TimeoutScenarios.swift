import Dispatch
import Foundation
import QueueSafeValue
import QueueSafeValueShims

// MARK: - Timeout lateness

/// How late a timed wait that gives up returns after its deadline, while every processor is kept
/// busy: a thread (or, for `async`, a task) makes timed waits of ``timeout`` one after another on a
/// value that another thread holds for the whole sample, so that every one of them times out; each
/// one's lateness is the time from its deadline (the call plus ``timeout``) to its return. A row's
/// figure is a percentile of the lateness over one sample's waits, in microseconds (the median over
/// the rounds is what the table shows); the baseline is `DispatchSemaphore.wait(timeout:)` on a
/// semaphore nobody signals, measured the same way.
///
/// The load is as many threads spinning at normal priority as there are processors, started before
/// the first wait of the sample and stopped after its last: a timed-out waiter has to win a
/// processor back from them, as in a busy app.
enum TimeoutScenarios {
    static var all: [Scenario] {
        [50, 99].flatMap { [blocking($0), awaiting($0), semaphore($0)] }
    }

    /// The timeout of every wait: longer than a waiter's spin, so each one parks.
    static let timeoutInterval = DispatchTimeInterval.microseconds(100)
    /// ``timeoutInterval`` in nanoseconds.
    static let timeout: UInt64 = 100_000
    /// The fewest waits a sample makes, even past its window (up to ``longestWindows`` windows): a
    /// wait that returns milliseconds late would otherwise leave a percentile of two or three values.
    static let minimumWaits = 20
    /// How many windows a sample may take to make its ``minimumWaits``, so that waits far later
    /// still keep a run short.
    static let longestWindows: UInt64 = 50

    /// Whether a sample that started at `start` with a window of `window` nanoseconds and has made
    /// `waits` waits makes another.
    static func continues(_ waits: Int, start: UInt64, window: UInt64) -> Bool {
        let elapsed = Clock.now() - start
        return elapsed < window || (waits < minimumWaits && elapsed < window * longestWindows)
    }

    static func blocking(_ percentile: Int) -> Scenario {
        row(
            "wait(timeout:)", percentile,
            summary: "try value.wait(timeout: .microseconds(100)).withLock { … } on a held value"
        ) { window in
            let value = QueueSafeValue(value: 0, label: "lateness")
            let release = hold(value)
            defer { release() }
            return repeatTimedWaits(for: window) {
                do {
                    try value.wait(timeout: timeoutInterval).withLock { $0 += 1 }
                    return false
                } catch QueueSafeValueError.timedOut {
                    return true
                } catch {
                    return false
                }
            }
        }
    }

    static func awaiting(_ percentile: Int) -> Scenario {
        row(
            "async(timeout:)", percentile,
            summary: "try await value.async(timeout: .microseconds(100)).withLock { … } on a held value, "
                + "one task"
        ) { window in
            let value = QueueSafeValue(value: 0, label: "lateness")
            let release = hold(value)
            defer { release() }
            return Concurrency.blockingAwait {
                var latenesses: [Double] = []
                let start = Clock.now()
                repeat {
                    let called = Clock.now()
                    var gaveUp = false
                    do {
                        try await value.async(timeout: timeoutInterval).withLock { $0 += 1 }
                    } catch QueueSafeValueError.timedOut {
                        gaveUp = true
                    } catch {}
                    latenesses.append(lateness(calledAt: called))
                    check(gaveUp, "a timed await on a held value did not time out")
                } while continues(latenesses.count, start: start, window: window)
                return latenesses
            }
        }
    }

    static func semaphore(_ percentile: Int) -> Scenario {
        row(
            "DispatchSemaphore", percentile,
            summary: "semaphore.wait(timeout: .now() + .microseconds(100)) on a semaphore nobody signals"
        ) { window in
            let semaphore = DispatchSemaphore(value: 0)
            return repeatTimedWaits(for: window) {
                semaphore.wait(timeout: .now() + timeoutInterval) == .timedOut
            }
        }
    }

    /// A row named `timeout lateness p<percentile>: <subject>`. `latenesses` makes timed waits for
    /// a window (in nanoseconds) and returns the lateness of each, in nanoseconds; the processors
    /// are kept busy meanwhile.
    private static func row(
        _ subject: String, _ percentile: Int, summary: String,
        latenesses: @escaping (_ window: UInt64) -> [Double]
    ) -> Scenario {
        Scenario(
            name: "timeout lateness p\(percentile): \(subject)",
            summary: "the \(percentile)th percentile of how late each timed wait returns after its deadline, "
                + "in µs, \(summary), every processor kept busy",
            unit: .microseconds,
            timeWindowed: true
        ) { window in
            let stopLoad = busyProcessors()
            let values = latenesses(UInt64(window)).sorted()
            stopLoad()
            let index = min(values.count - 1, values.count * percentile / 100)
            return Sample(measured: values[index] / 1_000, operations: 1)
        }
    }

    /// Runs `attempt`, a timed wait of ``timeout`` that returns whether it gave up, until `window`
    /// nanoseconds have passed and it made ``minimumWaits`` (see ``continues(_:start:window:)``),
    /// and returns the lateness of each, in nanoseconds. Every attempt must give up: the thing it
    /// waits for never comes.
    private static func repeatTimedWaits(for window: UInt64, _ attempt: () -> Bool) -> [Double] {
        var latenesses: [Double] = []
        let start = Clock.now()
        repeat {
            let called = Clock.now()
            let gaveUp = attempt()
            latenesses.append(lateness(calledAt: called))
            check(gaveUp, "a timed wait on something held did not time out")
        } while continues(latenesses.count, start: start, window: window)
        return latenesses
    }

    /// Nanoseconds from the deadline of a wait called at `called` until now; negative if it
    /// returned before its deadline.
    @inline(__always)
    private static func lateness(calledAt called: UInt64) -> Double {
        Double(Clock.now()) - Double(called + timeout)
    }

    /// Holds `value` on a thread of its own until the returned closure is called (which returns
    /// once the hold has ended).
    private static func hold(_ value: QueueSafeValue<Int>) -> () -> Void {
        let holding = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let ended = DispatchSemaphore(value: 0)
        Thread {
            value.wait.set { _ in
                holding.signal()
                release.wait()
            }
            ended.signal()
        }.start()
        holding.wait()
        return {
            release.signal()
            ended.wait()
        }
    }

    /// Starts as many threads as there are processors, each spinning at normal priority, and
    /// returns once all of them run; the returned closure stops them and returns once they ended.
    private static func busyProcessors() -> () -> Void {
        let stop = SpinFlag()
        let running = DispatchSemaphore(value: 0)
        let ended = DispatchGroup()
        let count = ProcessInfo.processInfo.activeProcessorCount
        for _ in 0..<count {
            ended.enter()
            Thread {
                running.signal()
                while !stop.isSet { qsv_cpu_relax() }
                ended.leave()
            }.start()
        }
        for _ in 0..<count { running.wait() }
        return {
            stop.set()
            ended.wait()
        }
    }
}

/// A flag the spinning threads poll without a lock (a lock would make them wait, not spin).
// @unchecked Sendable: its word is only read and written atomically.
final class SpinFlag: @unchecked Sendable {
    private let word = UnsafeMutablePointer<Int>.allocate(capacity: 1)

    init() {
        word.initialize(to: 0)
    }

    deinit { word.deallocate() }

    var isSet: Bool { qsv_atomic_load_acquire(word) != 0 }

    func set() { qsv_atomic_store_release(word, 1) }
}
