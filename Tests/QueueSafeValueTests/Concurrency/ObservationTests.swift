import Dispatch
import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

/// Observing a value: the current value first, then every committed change in commit order, with
/// latest-value skipping for a slow consumer, many consumers each on their own, the end at the
/// container's release, and delivery outside every lock and critical section.
@Suite(.runsAlongsideOthers) struct ObservationTests {
    /// Iterates `values` in a task, recording each value, until `stop` says so or the sequence ends.
    final class Consumer: Sendable {
        let seen = Locked<[Int]>([])
        let ended = Locked(false)
        let task: Task<Void, Never>

        /// Holds the sequence, not the container: a sequence does not keep its container alive.
        init(_ value: QueueSafeValue<Int>, delay: @escaping @Sendable (Int) async -> Void = { _ in }) {
            let seen = self.seen
            let ended = self.ended
            let values = value.values
            task = Task {
                for await current in values {
                    seen.withLock { $0.append(current) }
                    await delay(current)
                }
                ended.set(true)
            }
        }
    }

    @Test func theCurrentValueComesFirst_thenEveryChangeInOrder() async throws {
        let value = QueueSafeValue(value: 10)
        let consumer = Consumer(value)
        try await waitUntil("the current value") { consumer.seen.value == [10] }
        for expected in 11...15 {
            value.wait.highestPriority.set { $0 += 1 }
            // Waits for each change, so none is skipped: every one is seen, in order.
            try await waitUntil("change \(expected)") { consumer.seen.value.last == expected }
        }
        #expect(consumer.seen.value == [10, 11, 12, 13, 14, 15])
        consumer.task.cancel()
        try await waitUntil("the consumer to stop") { consumer.ended.value }
    }

    @Test func readsAreNotChanges() async throws {
        let value = QueueSafeValue(value: 1)
        let consumer = Consumer(value)
        try await waitUntil("the current value") { consumer.seen.value == [1] }
        _ = value.wait.highestPriority.get()
        _ = value.wait.highestPriority.readResult { $0 }
        _ = try await value.async.highestPriority.get()
        value.wait.highestPriority.set { $0 = 2 }
        try await waitUntil("the change") { consumer.seen.value.last == 2 }
        #expect(consumer.seen.value == [1, 2], "a read was reported as a change")
        consumer.task.cancel()
    }

    @Test func aSlowConsumer_skipsToTheNewestValue_neverOutOfOrder() async throws {
        let value = QueueSafeValue(value: 0)
        let gate = Gate()
        let consumer = Consumer(value) { current in if current == 0 { await gate.wait() } }
        try await waitUntil("the current value") { consumer.seen.value == [0] }
        // The consumer is stuck in its loop body: 100 commits pile up as one pending value.
        for _ in 0..<100 { value.wait.highestPriority.set { $0 += 1 } }
        gate.open()
        try await waitUntil("the newest value") { consumer.seen.value.last == 100 }
        let seen = consumer.seen.value
        #expect(seen == [0, 100], "a slow consumer should skip to the newest value, got \(seen)")
        consumer.task.cancel()
    }

    @Test func manyConsumers_eachSeeACommitOrderSubsequence_endingWithTheFinalValue() async throws {
        var value: QueueSafeValue<Int>? = QueueSafeValue(value: 0)
        let consumers = (0..<4).map { index in
            Consumer(value!) { _ in if index % 2 == 1 { await Task.yield() } }
        }
        for consumer in consumers { try await waitUntil("each current value") { !consumer.seen.value.isEmpty } }
        let writers = ThreadGroup()
        let schedule = value!.wait
        for _ in 0..<4 {
            writers.spawn {
                for _ in 0..<250 { schedule.priority(.medium).set { $0 += 1 } }
            }
        }
        try await writers.join()
        value = nil  // released: each consumer gets the final value and ends
        for consumer in consumers {
            try await waitUntil("each consumer to end") { consumer.ended.value }
            let seen = consumer.seen.value
            #expect(seen == seen.sorted() && Set(seen).count == seen.count, "out of commit order: \(seen)")
            #expect(seen.last == 1000, "the last value seen is \(seen.last ?? -1), not the final 1000")
        }
    }

    @Test func everySchedulesChanges_areObserved() async throws {
        let value = QueueSafeValue(value: 0)
        let consumer = Consumer(value)
        try await waitUntil("the current value") { consumer.seen.value == [0] }
        value.wait.highestPriority.set { $0 = 1 }
        try await waitUntil("the blocking set") { consumer.seen.value.last == 1 }
        try await value.async.highestPriority.set { $0 = 2 }
        try await waitUntil("the awaiting set") { consumer.seen.value.last == 2 }
        value.async(performIn: .global()).highestPriority.set { $0 = 3 }
        try await waitUntil("the dispatch set") { consumer.seen.value.last == 3 }
        value.async(performIn: .global()).highestPriority.set(
            manualCompletion: { number, done in
                number = 4
                done()
            }, completion: { _ in })
        try await waitUntil("the manual dispatch set") { consumer.seen.value.last == 4 }
        try value.wait.withLock { $0 = 5 }
        try await waitUntil("withLock") { consumer.seen.value.last == 5 }
        value.wait.highestPriority.set { number, done in
            number = 6
            done()
        }
        try await waitUntil("the manual blocking set") { consumer.seen.value.last == 6 }
        #expect(consumer.seen.value == [0, 1, 2, 3, 4, 5, 6])
        consumer.task.cancel()
    }

    @Test func theLoopBody_mayUseTheSameValue_withoutDeadlock() async throws {
        let value = QueueSafeValue(value: 0)
        let result = try await withHangTimeout {
            var seen: [Int] = []
            for await current in value.values {
                seen.append(current)
                if current < 3 {
                    // A command on the same value from the loop body: delivery holds no lock.
                    value.wait.highestPriority.set { $0 += 1 }
                    _ = try await value.async.highestPriority.get()
                } else {
                    break
                }
            }
            return seen
        }
        #expect(result == [0, 1, 2, 3])
    }

    @Test func aReleasedContainer_endsItsSequences_evenBeforeTheyStart() async throws {
        var value: QueueSafeValue<Int>? = QueueSafeValue(value: 0)
        let values = value!.values
        value = nil
        let seen = try await withHangTimeout {
            var seen: [Int] = []
            for await current in values { seen.append(current) }
            return seen
        }
        #expect(seen.isEmpty)
    }

    @Test func anIteratorObservesFromWhenItIsMade_evenIfItsFirstNextComesAfterTheRelease() async throws {
        var value: QueueSafeValue<Int>? = QueueSafeValue(value: 0)
        var iterator = value!.values.makeAsyncIterator()
        value!.wait.highestPriority.set { $0 = 7 }
        value = nil
        let first = await iterator.next()
        let second = await iterator.next()
        #expect(first == 7, "the final value, committed after the iterator was made")
        #expect(second == nil)
    }

    @Test func observeOnAQueue_deliversInOrderOnThatQueue_untilCancelled() async throws {
        let value = QueueSafeValue(value: 0)
        let queue = DispatchQueue(label: "observer")
        let key = DispatchSpecificKey<Bool>()
        queue.setSpecific(key: key, value: true)
        let seen = Locked<[Int]>([])
        let offQueue = Locked(false)
        let token = value.observe(on: queue) { current in
            if DispatchQueue.getSpecific(key: key) != true { offQueue.set(true) }
            seen.withLock { $0.append(current) }
        }
        try await waitUntil("the current value") { seen.value == [0] }
        for _ in 0..<50 { value.wait.highestPriority.set { $0 += 1 } }
        try await waitUntil("the newest value") { seen.value.last == 50 }
        let observed = seen.value
        #expect(observed == observed.sorted() && Set(observed).count == observed.count, "\(observed)")
        #expect(!offQueue.value, "the handler ran off its queue")
        token.cancel()
        value.wait.highestPriority.set { $0 = -1 }
        sleepBriefly()
        queue.sync {}
        #expect(seen.value.last == 50, "a cancelled observation went on")
    }

    @Test func observeOnAQueue_stopsWhenItsTokenIsReleased_andTheHandlerMayUseTheValue() async throws {
        let value = QueueSafeValue(value: 0)
        let seen = Locked<[Int]>([])
        var token: ObservationToken? = value.observe(on: DispatchQueue(label: "observer")) { current in
            seen.withLock { $0.append(current) }
            if current == 1 { _ = value.wait.highestPriority.get() }  // no lock is held here
        }
        try await waitUntil("the current value") { seen.value == [0] }
        value.wait.highestPriority.set { $0 = 1 }
        try await waitUntil("the change") { seen.value.last == 1 }
        withExtendedLifetime(token) {}
        token = nil
        value.wait.highestPriority.set { $0 = 2 }
        sleepBriefly()
        #expect(seen.value == [0, 1])
    }
}
