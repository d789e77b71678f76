import Dispatch
import QueueSafeValue

// MARK: - Dispatch scenarios

/// `value.async(performIn: queue)...`: the call returns at once and the closures run on a queue.
enum DispatchScenarios {
    static var all: [Scenario] {
        [setWithCompletion]
    }

    static var setWithCompletion: Scenario {
        Scenario(
            name: "async(performIn:).set",
            summary: "value.async(performIn: serialQueue).highestPriority.set(accessClosure:completion:); "
                + "timed until all completions ran"
        ) { operations in
            let value = QueueSafeValue(value: 0)
            let queue = DispatchQueue(label: "bench.dispatch.set")
            let completed = Counter()
            let allDone = DispatchSemaphore(value: 0)
            let elapsed = Clock.time {
                for _ in 0..<operations {
                    value.async(performIn: queue).highestPriority.set(
                        accessClosure: { $0 += 1 },
                        completion: { _ in
                            // Completions run on `queue`, one at a time.
                            completed.value += 1
                            if completed.value == operations { allDone.signal() }
                        }
                    )
                }
                allDone.wait()
            }
            let final = try! value.wait.highestPriority.get().get()
            check(final == operations, "async(performIn:).set counted \(final) of \(operations)")
            return Sample(measured: Double(elapsed))
        }
    }
}
