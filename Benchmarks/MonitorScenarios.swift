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
        BlockingScenarios.setContended(threads: threads, variant: extra.rawValue) { value in
            switch extra {
            case .monitor:
                let monitor = startMonitor()
                return { monitor.stop() }
            case .statistics:
                value.collectStatistics()
                return {}
            }
        }
    }
}
