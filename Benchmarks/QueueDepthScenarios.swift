import Dispatch
import Foundation
import QueueSafeValue

#if canImport(Glibc)
    import Glibc
#endif

// MARK: - Queue depth scenarios

/// How the library behaves with many dispatch commands pending: drain cost per command at 1,000 and
/// 100,000 pending, and resident memory per pending command at 1,000,000.
///
/// Each cycle holds the value with a manual-completion dispatch command, submits the commands with
/// deterministic pseudo-random priorities (all 256 levels), then calls the held command's `done()`.
enum QueueDepthScenarios {
    static var all: [Scenario] {
        [drain(pending: 1_000, name: "pending 1k drain"), drain(pending: 100_000, name: "pending 100k drain"), memory]
    }

    static let memoryPending = 1_000_000

    static func drain(pending: Int, name: String) -> Scenario {
        Scenario(
            name: name,
            summary: "per command: release a held value with \(pending) dispatch sets of mixed priorities "
                + "pending; timed until all completions ran",
            granularity: pending,
            fixedOperations: pending >= 100_000 ? pending : nil
        ) { operations in
            var elapsed: UInt64 = 0
            var submitted: UInt64 = 0
            var generator = SplitMix64(seed: UInt64(operations))
            for _ in 0..<(operations / pending) {
                let cycle = drainCycle(pending: pending, generator: &generator)
                elapsed += cycle.drain
                submitted += cycle.submit
            }
            return Sample(
                measured: Double(elapsed),
                extras: ["submitNsPerOp": Double(submitted) / Double(operations)]
            )
        }
    }

    /// One hold, submit, release, drain cycle on a fresh value.
    private static func drainCycle(pending: Int, generator: inout SplitMix64) -> (submit: UInt64, drain: UInt64) {
        let value = QueueSafeValue(value: 0)
        let queue = DispatchQueue(label: "bench.drain")
        let held = hold(value, on: queue)
        let completed = Counter()
        let allDone = DispatchSemaphore(value: 0)
        let submit = Clock.time {
            for _ in 0..<pending {
                let priority = CommandPriority(rawValue: UInt8(truncatingIfNeeded: generator.next()))
                value.async(performIn: queue).priority(priority).set(
                    accessClosure: { $0 += 1 },
                    completion: { _ in
                        completed.value += 1
                        if completed.value == pending { allDone.signal() }
                    }
                )
            }
        }
        let drain = Clock.time {
            held()
            allDone.wait()
        }
        let final = try! value.wait.highestPriority.get().get()
        check(final == pending, "drain of \(pending) counted \(final)")
        return (submit, drain)
    }

    static var memory: Scenario {
        Scenario(
            name: "memory per pending command",
            summary: "resident bytes per pending dispatch set (VmRSS delta), \(memoryPending) pending",
            unit: .bytes,
            fixedOperations: memoryPending,
            warmUpOperations: memoryPending / 10,
            maximumSamples: 7
        ) { operations in
            let value = QueueSafeValue(value: 0)
            let queue = DispatchQueue(label: "bench.memory")
            var generator = SplitMix64(seed: 42)
            returnFreedMemory()
            let held = hold(value, on: queue)
            guard let before = residentBytes() else {
                held()
                printError("memory per pending command: no /proc/self/status here; reporting 0")
                return Sample(measured: 0)
            }
            let submit = Clock.time {
                for _ in 0..<operations {
                    let priority = CommandPriority(rawValue: UInt8(truncatingIfNeeded: generator.next()))
                    // A closure without captures: what is measured is the library's own cost.
                    value.async(performIn: queue).priority(priority).set(accessClosure: { $0 += 1 })
                }
            }
            let after = residentBytes() ?? before
            let allDone = DispatchSemaphore(value: 0)
            value.async(performIn: queue).lowestPriority.get { _ in allDone.signal() }
            let drain = Clock.time {
                held()
                allDone.wait()
            }
            let final = try! value.wait.highestPriority.get().get()
            check(final == operations, "memory scenario counted \(final) of \(operations)")
            return Sample(
                measured: Double(after - before),
                extras: [
                    "submitNsPerOp": Double(submit) / Double(operations),
                    "drainNsPerOp": Double(drain) / Double(operations),
                    "drainOpsPerSecond": Double(operations) * 1e9 / Double(drain),
                ]
            )
        }
    }

    /// Takes the value's critical section with a manual-completion dispatch command and returns once
    /// it is held. Calling the returned closure releases it.
    private static func hold(_ value: QueueSafeValue<Int>, on queue: DispatchQueue) -> () -> Void {
        let mailbox = Mailbox<CommandCompletionClosure>()
        let isHeld = DispatchSemaphore(value: 0)
        value.async(performIn: queue).highestPriority.set(manualCompletion: { _, done in
            mailbox.value = done
            isHeld.signal()
        })
        isHeld.wait()
        return {
            let done = mailbox.value!
            mailbox.value = nil
            done()
        }
    }

    /// The resident set size from `/proc/self/status`, or `nil` where there is none.
    static func residentBytes() -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return nil }
        for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard fields.count >= 2, let kilobytes = Int(fields[1]) else { return nil }
            return kilobytes * 1024
        }
        return nil
    }

    /// Gives memory freed by earlier samples back to the system, so the next delta starts clean.
    private static func returnFreedMemory() {
        #if canImport(Glibc)
            // glibc's malloc_trim is not in the Glibc module map; look it up at run time.
            typealias MallocTrim = @convention(c) (Int) -> Int32
            if let symbol = dlsym(nil, "malloc_trim") {
                _ = unsafeBitCast(symbol, to: MallocTrim.self)(0)
            }
        #endif
    }
}
