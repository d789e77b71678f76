import Dispatch
import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

/// The shape, with the bounded-overtaking policy: two threads looping highest-priority
/// commands no longer starve a lowest-priority command; it waits for at most `maxOvertakes` of the
/// commands that arrive after it (plus the ones already waiting when it arrived).
@Suite(.runsAlongsideOthers) struct StarvationTests {
    static let bound = 8

    @Test func threadsLoopingHighestPriority_doNotStarveALowestCommand_underABound() throws {
        let value = QueueSafeValue(value: 0, label: "starved?", fairness: try .bounded(maxOvertakes: Self.bound))
        let stop = Locked(false)
        let highs = Locked(0)
        let loopers = DispatchGroup()
        for _ in 0..<2 {
            loopers.enter()
            Thread {
                while !stop.value {
                    value.wait.highestPriority.set { _ in
                        highs.increment()
                        usleep(200)
                    }
                }
                loopers.leave()
            }.start()
        }
        defer {
            stop.set(true)
            _ = loopers.wait(timeout: .now() + 30)
        }
        #expect(waitUntil("the loopers to run") { highs.value > 20 })
        // Freeze the loopers so the count has no race window: a third thread holds the value until
        // both loopers wait and the lowest command has arrived behind them. Exactly two high
        // commands then arrived before it; every later one counts against the bound.
        let holding = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        Thread {
            value.wait.highestPriority.set { _ in
                holding.signal()
                release.wait()
            }
        }.start()
        #expect(holding.wait(timeout: .now() + hangTimeout) == .success, "the freezing holder never got the value")
        #expect(waitUntil("both loopers to wait") { value.diagnostics.waitingCount == 2 })
        let before = highs.value
        Thread {
            waitUntil("the lowest command to arrive") { value.diagnostics.waitingCount == 3 }
            release.signal()
        }.start()
        let during = Locked(-1)
        let result = value.wait(timeout: .seconds(10)).lowestPriority.map { _ in during.set(highs.value - before) }
        #expect(result.isSuccess, "the lowest command did not get the value: \(result)")
        // The two loopers that waited when it arrived, then at most `bound` later arrivals.
        #expect(during.value >= 2, "\(during.value) high commands went first; both waiting loopers must")
        #expect(during.value <= Self.bound + 2, "\(during.value) high commands went first")
    }

    @Test func commandQueue_underABound_startsALowOperationAmongAStreamOfHighOnes() async throws {
        let queue = CommandQueue(label: "bounded queue", fairness: try .bounded(maxOvertakes: 2))
        let gate = Gate()
        let blocker = try await holdQueue(queue, until: gate)
        let order = Recorder<String>()
        let low = queue.enqueue(priority: .lowest) { order.append("low") }
        let highs = (0..<5).map { index in queue.enqueue(priority: .highest) { order.append("high \(index)") } }
        gate.open()
        try await withHangTimeout {
            _ = try await blocker.value
            try await low.value
            for high in highs { try await high.value }
        }
        #expect(order.snapshot == ["high 0", "high 1", "low", "high 2", "high 3", "high 4"])
    }
}
