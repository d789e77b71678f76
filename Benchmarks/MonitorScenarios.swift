import QueueSafeValue

// MARK: - Monitor scenarios

/// Issue 46's costs on the wall clock, beside the same rows without them: a command that takes a
/// free value while a monitor runs, and a contended hand-off with the monitor on or the statistics
/// on. (The instruction rows of `.ci/instructions` carry the targets; these say what it costs in
/// time on this machine.) Each row starts what it measures and stops it before it returns, so the
/// rows interleaved with it run without.
enum MonitorScenarios {
    static var all: [Scenario] {
        [
            setUncontendedMonitored, setContended(threads: 2, with: .monitor),
            setContended(threads: 2, with: .statistics),
        ]
    }

    /// What a contended row runs with.
    enum Extra: String {
        case monitor = "monitor on"
        case statistics = "statistics on"
    }

    /// Thresholds no command of these rows reaches: the cost measured is the watching, not events.
    static func startMonitor() -> QueueMonitor {
        QueueSafeValue<Never>.monitor(
            thresholds: try! QueueMonitor.Thresholds(longHold: .seconds(3600), longWait: .seconds(3600))
        ) { _ in }
    }

    static var setUncontendedMonitored: Scenario {
        Scenario(
            name: "wait.set uncontended, monitor on",
            summary: "value.wait.highestPriority.set { $0 += 1 }, one thread, a QueueMonitor running"
        ) { operations in
            let monitor = startMonitor()
            defer { monitor.stop() }
            let value = QueueSafeValue(value: 0)
            let elapsed = Clock.time {
                for _ in 0..<operations {
                    value.wait.highestPriority.set { $0 += 1 }
                }
            }
            let final = try! value.wait.highestPriority.get().get()
            check(final == operations, "wait.set uncontended, monitor on counted \(final) of \(operations)")
            return Sample(measured: Double(elapsed))
        }
    }

    static func setContended(threads: Int, with extra: Extra) -> Scenario {
        Scenario(
            name: "wait.set contended \(threads) threads, \(extra.rawValue)",
            summary: "value.wait.priority(p).set { $0 += 1 } from \(threads) threads at once, mixed priorities,"
                + " \(extra == .monitor ? "a QueueMonitor running" : "the value's statistics on")",
            timeWindowed: true
        ) { window in
            let monitor = extra == .monitor ? startMonitor() : nil
            defer { monitor?.stop() }
            let value = QueueSafeValue(value: 0)
            if extra == .statistics { value.collectStatistics() }
            let priorities = BlockingScenarios.mixedPriorities
            let (elapsed, operations) = Concurrency.runThreads(threads, for: UInt64(window)) { index, deadline in
                var slot = index % priorities.count
                return Concurrency.repeatUntil(deadline) {
                    value.wait.priority(priorities[slot]).set { $0 += 1 }
                    slot = slot == priorities.count - 1 ? 0 : slot + 1
                }
            }
            let final = try! value.wait.highestPriority.get().get()
            check(final == operations, "wait.set contended \(threads) threads, \(extra.rawValue) counted \(final)")
            return Sample(measured: Double(elapsed), operations: operations)
        }
    }
}
