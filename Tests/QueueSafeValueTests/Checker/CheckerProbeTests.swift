import Dispatch
import Foundation
import Testing

@testable import QueueSafeValue

@Suite(.runsAlongsideOthers) struct CheckerProbeTests {
    @Test func twoBlockingCommands() {
        let explorer = ScheduleExplorer(preemptionBound: 2)
        let started = Date()
        let report = explorer.explore { world in
            let value = QueueSafeValue(value: 0, label: "probe")
            for name in ["A", "B"] {
                world.spawn(name) { value.wait.highestPriority.set { $0 += 1 } }
            }
            return {
                let final = value.wait.highestPriority.get()
                return final == .success(2) ? nil : "final value \(final)"
            }
        }
        print(
            "probe: \(report.runs) runs, \(report.steps) steps, complete \(report.isComplete), \(Date().timeIntervalSince(started)) s"
        )
        if let violation = report.violation {
            Issue.record("\(violation.message)\n\(violation.trace.joined(separator: "\n"))")
        }
    }
}

extension CheckerProbeTests {
    @Test func awaitingAndDispatchCommands() {
        let explorer = ScheduleExplorer(preemptionBound: 1)
        let started = Date()
        let report = explorer.explore { world in
            let value = QueueSafeValue(value: 0, label: "probe")
            let queue = DispatchQueue(label: "probe queue")
            let delivered = Locked(0)
            world.spawn("A") { value.wait.highestPriority.set { $0 += 1 } }
            world.spawn("B") {
                value.async(performIn: queue).highestPriority.set(
                    accessClosure: { $0 += 10 }, completion: { _ in delivered.increment() })
            }
            Task(executorPreference: world) { _ = try? await value.async.highestPriority.set { $0 += 100 } }
            return {
                let final = value.wait.highestPriority.get()
                if final != .success(111) { return "final value \(final)" }
                return delivered.value == 1 ? nil : "delivered \(delivered.value) times"
            }
        }
        print(
            "probe2: \(report.runs) runs, \(report.steps) steps, complete \(report.isComplete), \(Date().timeIntervalSince(started)) s"
        )
        if let violation = report.violation {
            Issue.record("\(violation.message)\n\(violation.trace.joined(separator: "\n"))")
        }
    }
}
