import Dispatch
import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

/// Issue 42: every timed schedule takes a `Duration` as well as a `DispatchTimeInterval`, with the
/// same meaning: zero only takes a free value, a negative one is refused with `.invalidArgument`,
/// one too large for a `DispatchTimeInterval` waits as long as the largest one. `.seconds(2)`, which
/// both types spell, keeps meaning a `DispatchTimeInterval`.
@Suite(.runsAlongsideOthers) struct DurationTimeoutTests {
    /// Holds `value` on another thread until `release` is signalled; returns once it holds.
    private func hold(_ value: QueueSafeValue<Int>, until release: DispatchSemaphore) -> DispatchSemaphore {
        let holding = DispatchSemaphore(value: 0)
        let done = DispatchSemaphore(value: 0)
        Thread {
            _ = value.wait.highestPriority.set { _ in
                holding.signal()
                release.wait()
            }
            done.signal()
        }.start()
        waitOrFail(holding, "the holder to hold")
        return done
    }

    private func isTimedOut(_ error: (any Error)?) -> Bool {
        if case .timedOut? = error as? QueueSafeValueError { return true }
        return false
    }

    private func isInvalidArgument(_ error: (any Error)?) -> Bool {
        if case .invalidArgument? = error as? QueueSafeValueError { return true }
        return false
    }

    /// A command that finds the value held gives up after its `Duration`, on every timed schedule:
    /// blocking, awaiting, the synced container, and a command queue's operations.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test func aDurationTimeout_endsTheWait_onEveryTimedSchedule() async throws {
        let budget = Duration.milliseconds(30)
        let value = QueueSafeValue(value: 0, label: "duration")
        let release = DispatchSemaphore(value: 0)
        let done = hold(value, until: release)
        #expect(throws: (any Error).self) { try value.wait(timeout: budget).withLock { $0 += 1 } }
        #expect(isTimedOut(Result { try value.wait(timeout: budget).withLock { $0 += 1 } }.failure))
        let awaited = await Result.awaiting { () async throws -> Void in
            try await value.async(timeout: budget).withLock { $0 += 1 }
        }
        #expect(isTimedOut(awaited.failure))
        release.signal()
        waitOrFail(done, "the holder to release")
        #expect(try value.wait.read { $0 } == 0, "a timed-out command ran")

        let synced = QueueSafeSyncedValue(value: 0, timeout: budget, label: "synced duration")
        let syncedRelease = DispatchSemaphore(value: 0)
        let syncedHolding = DispatchSemaphore(value: 0)
        Thread {
            _ = synced.highestPriority.set { _ in
                syncedHolding.signal()
                syncedRelease.wait()
            }
        }.start()
        waitOrFail(syncedHolding, "the synced holder to hold")
        #expect(isTimedOut(synced.highestPriority.set { $0 += 1 }.failure))
        syncedRelease.signal()

        let queue = CommandQueue(label: "duration queue")
        let running = Gate()
        let finish = Gate()
        let first = queue.enqueue {
            running.open()
            await finish.wait()
        }
        await running.wait()
        let enqueued = queue.enqueue(timeout: budget) { 1 }
        #expect(isTimedOut(await enqueued.result.failure))
        let performed = await Result.awaiting { () async throws -> Int in try await queue.perform(timeout: budget) { 1 }
        }
        #expect(isTimedOut(performed.failure))
        finish.open()
        _ = try await withHangTimeout { try await first.value }
    }

    /// The edges: zero takes a free value and gives up at once on a held one; a negative duration is
    /// refused with `.invalidArgument` and never runs; a duration beyond what a
    /// `DispatchTimeInterval` holds waits for its turn, as `.seconds(Int.max)` does.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test func zeroNegativeAndHugeDurations() async throws {
        let value = QueueSafeValue(value: 0, label: "edges")
        try value.wait(timeout: .zero).withLock { $0 += 1 }
        try await value.async(timeout: .zero).withLock { $0 += 1 }
        #expect(try value.wait.read { $0 } == 2, "zero on a free value took it")
        for negative in [Duration.seconds(-1), .nanoseconds(-1), .milliseconds(-250)] {
            #expect(isInvalidArgument(Result { try value.wait(timeout: negative).withLock { $0 += 100 } }.failure))
            let awaited = await Result.awaiting { () async throws -> Void in
                try await value.async(timeout: negative).withLock { $0 += 100 }
            }
            #expect(isInvalidArgument(awaited.failure), "\(negative)")
            let queue = CommandQueue()
            #expect(isInvalidArgument(await queue.enqueue(timeout: negative) { 1 }.result.failure))
        }
        #expect(try value.wait.read { $0 } == 2, "a refused command ran")

        let release = DispatchSemaphore(value: 0)
        let done = hold(value, until: release)
        #expect(isTimedOut(Result { try value.wait(timeout: .zero).withLock { $0 += 100 } }.failure))
        let huge = Duration.seconds(Int64.max)
        let waiter = Task.detached { try value.wait(timeout: huge).withLock { $0 += 1 } }
        let awaiting = Task { try await value.async(timeout: huge).withLock { $0 += 1 } }
        try await waitUntil("both huge-timeout commands wait") { value.diagnostics.waitingCount == 2 }
        release.signal()
        waitOrFail(done, "the holder to release")
        try await withHangTimeout { try await waiter.value }
        try await withHangTimeout { try await awaiting.value }
        #expect(try value.wait.read { $0 } == 4, "the huge-timeout commands did not both run")
    }

    /// `.seconds(2)` keeps meaning a `DispatchTimeInterval` where both types would fit; a `Duration`
    /// is taken when it is one, converted to the nanosecond, in a unit an `Int` holds.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @Test func theSpellingsKeepTheirMeaning_andDurationsConvertToTheNanosecond() {
        let value = QueueSafeValue(value: 0)
        #expect(value.wait(timeout: .seconds(2)).timeout == .seconds(2))
        #expect(value.async(timeout: .milliseconds(500)).timeout == .milliseconds(500))
        let duration: Duration = .seconds(2)
        #expect(value.wait(timeout: duration).timeout == .nanoseconds(2_000_000_000))
        #expect(DispatchTimeInterval(timeout: .zero) == .nanoseconds(0))
        #expect(DispatchTimeInterval(timeout: .milliseconds(1.5)) == .nanoseconds(1_500_000))
        #expect(DispatchTimeInterval(timeout: .nanoseconds(1) / 3) == .nanoseconds(0), "below a nanosecond")
        #expect(DispatchTimeInterval(timeout: .seconds(-1.5)) == .nanoseconds(-1_500_000_000))
        #expect(DispatchTimeInterval(timeout: .seconds(Int64.max)) == .nanoseconds(Int.max))
        #expect(DispatchTimeInterval(timeout: .seconds(Int64.min)) == .nanoseconds(Int.min))
        #expect((try? RecurringPolicy.interval(Duration.milliseconds(250)))?.intervalNanoseconds == 250_000_000)
        #expect(throws: QueueSafeValueError.self) { try RecurringPolicy.interval(Duration.zero) }
        #expect(throws: QueueSafeValueError.self) { try RecurringPolicy.interval(Duration.seconds(-5)) }
    }
}

extension Result where Failure == any Error {
    /// `Result { try await body() }`.
    fileprivate static func awaiting(_ body: () async throws -> Success) async -> Result {
        do { return .success(try await body()) } catch { return .failure(error) }
    }
}
