import Dispatch
import Foundation
import Testing

@testable import QueueSafeValue

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
        let before = highs.value
        let during = Locked(-1)
        let result = value.wait(timeout: .seconds(10)).lowestPriority.map { _ in during.set(highs.value - before) }
        #expect(result.isSuccess, "the lowest command did not get the value: \(result)")
        // At most one looper waited before it arrived; every later high command counts.
        #expect(during.value <= Self.bound + 1, "\(during.value) high commands went first")
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
