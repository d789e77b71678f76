import Dispatch
import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

/// The eventually fair mode on real threads: no lost update under contention, priorities as strict
/// as ever, a starved waiter served once it waited the bound, and timeouts as before.
@Suite(.runsAlongsideOthers) struct EventualFairnessTests {
    /// Six threads, 3,000 blocking commands each. If they do not finish within the bound, the
    /// failure says how far they got and whether they still move (slow progress) or not (a stall:
    /// a lost wake-up leaves the value free or held with nobody running).
    @Test func contendedThreads_loseNoUpdate_andNeverOverlap() throws {
        let value = QueueSafeValue(value: 0, label: "eventual counter", fairness: .eventual)
        let inside = Locked(0)
        let overlaps = Locked(0)
        let threads = ThreadGroup()
        for _ in 0..<6 {
            threads.spawn {
                for _ in 0..<3_000 {
                    value.wait.highestPriority.set { count in
                        if inside.increment() != 1 { _ = overlaps.increment() }
                        count += 1
                        _ = inside.add(-1)
                    }
                }
            }
        }
        if !threads.join() {
            // A read that does not get its turn within a second says so instead of a count.
            func progress() -> String {
                (try? value.wait(timeout: .seconds(1)).get().get()).map { "\($0)" } ?? "no turn within 1 s"
            }
            let atBound = progress()
            let state = "\(value.diagnostics)"  // rendered now: its waits are measured when rendered
            Thread.sleep(forTimeInterval: 1)
            Issue.record(
                "commands done at the bound: \(atBound) of 18,000, a second later: \(progress()); then: \(state)")
        }
        #expect(try value.wait.get().get() == 18_000)
        #expect(overlaps.value == 0)
    }

    /// Both waiters are queued behind a holder; its release frees the value, and the low one,
    /// though it may run first, never takes it ahead of the high one.
    @Test func aWaitingHigherPriority_goesFirst_asUnderStrictPriority() throws {
        for _ in 0..<20 {
            let value = QueueSafeValue(value: [String](), label: "eventual order", fairness: .eventual)
            let holder = SectionHolder(value)
            let threads = ThreadGroup()
            threads.spawn { value.wait.lowestPriority.set { $0.append("low") } }
            #expect(waitUntil("the low command to wait") { value.diagnostics.waitingCount == 1 })
            threads.spawn { value.wait.highestPriority.set { $0.append("high") } }
            #expect(waitUntil("the high command to wait") { value.diagnostics.waitingCount == 2 })
            holder.release()
            #expect(threads.join())
            #expect(try value.wait.get().get() == ["high", "low"])
        }
    }

    /// Two threads take the value back to back at one priority; a third command of that priority
    /// still runs: it is passed over only until it has waited the bound (here 5 ms).
    @Test func aWaiterPassedOverByAStream_isServedOnceItWaitedTheBound() throws {
        let value = QueueSafeValue(
            value: 0, label: "eventual stream", fairness: try .eventual(starvationBound: .milliseconds(5)))
        let stop = Locked(false)
        let streamed = Locked(0)
        let threads = ThreadGroup()
        for _ in 0..<2 {
            threads.spawn {
                while !stop.value {
                    value.wait.highestPriority.set { $0 += 1 }
                    streamed.increment()
                }
            }
        }
        defer {
            stop.set(true)
            threads.join()
        }
        #expect(waitUntil("the stream to run") { streamed.value > 1_000 })
        for _ in 0..<20 {
            let result = value.wait(timeout: .seconds(30)).highestPriority.set { $0 += 1 }
            #expect(result.isSuccess, "\(result)")
        }
    }

    @Test func aTimedWaiter_timesOut_andTheValueStaysUsable() throws {
        let value = QueueSafeValue(value: 0, label: "eventual timeout", fairness: .eventual)
        let holder = SectionHolder(value)
        let result = value.wait(timeout: .milliseconds(20)).set { $0 += 1 }
        holder.release()
        guard case .failure(.timedOut) = result else {
            Issue.record("expected a timeout, got \(result)")
            return
        }
        #expect(value.wait.set { $0 += 1 }.isSuccess)
        #expect(try value.wait.get().get() == 1)
    }
}
