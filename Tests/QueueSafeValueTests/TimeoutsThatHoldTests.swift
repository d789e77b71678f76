import Dispatch
import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

#if os(Linux)
    import RealtimeSupport
#endif

/// No command runs after its deadline as the engine's clock sees it: a zero timeout takes only a
/// free value, and a release that comes after a waiting command's deadline (plus the coarse clock's
/// resolution) passes it over, even when the waiting party could not look at its deadline itself.
@Suite(.runsAlone, .serialized) struct TimeoutsThatHoldTests {
    /// One tick of the engine's coarse clock, plus a margin.
    static let clockResolution: DispatchTimeInterval = {
        #if os(Linux)
            var resolution = timespec()
            clock_getres(CLOCK_MONOTONIC_COARSE, &resolution)
            return .nanoseconds(Int(resolution.tv_nsec) + 2_000_000)
        #else
            return .milliseconds(3)
        #endif
    }()

    /// `tries` blocking commands with a zero timeout on a held value: none may succeed.
    private func zeroTimeoutsOnAHeldValue(tries: Int) -> Int {
        let value = QueueSafeValue(value: 0, label: "held")
        let holder = SectionHolder(value)
        var succeeded = 0
        for _ in 0..<tries {
            let result = value.wait(timeout: .seconds(0)).set { $0 += 1 }
            if case .success = result { succeeded += 1 }
        }
        holder.release()
        #expect(value.engine.pendingCount == 0, "a zero-timeout command stayed in the queue")
        return succeeded
    }

    @Test func aZeroTimeout_neverTakesAHeldValue_withIdleProcessors() {
        #expect(zeroTimeoutsOnAHeldValue(tries: 200) == 0)
    }

    @Test func aZeroTimeout_neverTakesAHeldValue_withEveryProcessorBusy() {
        let stop = Locked(false)
        let spinners = ThreadGroup()
        for _ in 0..<(ProcessInfo.processInfo.activeProcessorCount * 2) {
            spinners.spawn { while !stop.value {} }
        }
        let succeeded = zeroTimeoutsOnAHeldValue(tries: 200)
        stop.set(true)
        spinners.join()
        #expect(succeeded == 0)
    }

    @Test func aZeroTimeout_takesAFreeValue() {
        let value = QueueSafeValue(value: 0)
        #expect(value.wait(timeout: .seconds(0)).set { $0 += 1 } == .success(1))
    }

    /// An awaiting command whose deadline passes while every thread of the pool is busy cannot
    /// time itself out (its timer runs on the same threads): the holder releases after the
    /// deadline, from a thread of its own, and the release must pass the command over.
    @Test func anAwaitingCommandReleasedAfterItsDeadline_neverRuns_evenIfItsTimerCouldNotFire() {
        let value = QueueSafeValue(value: 0, label: "timed awaiting")
        let holder = SectionHolder(value)
        let ran = Locked(false)
        let outcome = Locked<String?>(nil)
        let done = DispatchSemaphore(value: 0)
        let issued = DispatchTime.now()
        Task.detached {
            do {
                try await value.async(timeout: .milliseconds(20)).set { _ in ran.set(true) }
                outcome.set("success")
            } catch QueueSafeValueError.timedOut {
                outcome.set("timedOut")
            } catch {
                outcome.set("\(error)")
            }
            done.signal()
        }
        waitUntil("the awaiting command to queue") { value.engine.pendingCount == 1 }
        sleepBriefly(milliseconds: 2)  // it suspends and arms its timer
        let pool = PoolBlocker()
        pool.block()
        let late = issued + .milliseconds(20) + Self.clockResolution + .milliseconds(5)
        while DispatchTime.now() < late { usleep(1_000) }
        holder.release()
        pool.release()
        waitOrFail(done, "the awaiting command to end")
        #expect(outcome.value == "timedOut", "the late command ended with \(String(describing: outcome.value))")
        #expect(!ran.value, "an awaiting command ran after its deadline")
    }

    #if os(Linux)
        /// A blocking command that waits with a deadline, on a processor where a thread of higher
        /// real-time priority keeps it from running (so it cannot see its deadline pass), is
        /// released after that deadline: the release must pass it over. Once it runs again it
        /// reports `.timedOut` and its closure never runs.
        @Test(.enabled(if: Realtime.mayRun, Realtime.skipReason))
        func aBlockingCommandReleasedAfterItsDeadline_neverRuns_evenIfItsThreadCouldNotLook() throws {
            try Realtime.require()
            let value = QueueSafeValue(value: 0, label: "timed blocking")
            let holder = SectionHolder(value)
            let setUp = Realtime.SetUpLog()
            let ran = Locked(false)
            let outcome = Locked<String?>(nil)
            let deadline = Locked<DispatchTime?>(nil)
            let waiterDone = DispatchSemaphore(value: 0)
            Thread {
                setUp.note("waiter real-time 10", qsvrt_set_realtime(10))
                setUp.note("waiter pin", qsvrt_pin_to_cpu(0))
                deadline.set(.now() + .milliseconds(50))
                let result = value.wait(timeout: .milliseconds(50)).set { _ in ran.set(true) }
                switch result {
                case .success: outcome.set("success")
                case .failure(.timedOut): outcome.set("timedOut")
                case .failure(let error): outcome.set("\(error)")
                }
                _ = qsvrt_set_realtime(0)
                _ = qsvrt_pin_to_cpu(-1)
                waiterDone.signal()
            }.start()
            waitUntil("the waiter to queue") { value.engine.pendingCount == 1 }
            // The blocker takes processor 0 from the waiter, past its deadline.
            let stopBlocking = Locked(false)
            let blockerRuns = DispatchSemaphore(value: 0)
            let blockerDone = DispatchSemaphore(value: 0)
            Thread {
                setUp.note("blocker real-time 20", qsvrt_set_realtime(20))
                setUp.note("blocker pin", qsvrt_pin_to_cpu(0))
                blockerRuns.signal()
                // Bounded, so that a test that failed on the way never leaves processor 0 taken.
                let giveUp = DispatchTime.now() + .seconds(5)
                while !stopBlocking.value && DispatchTime.now() < giveUp {}
                _ = qsvrt_set_realtime(0)
                _ = qsvrt_pin_to_cpu(-1)
                blockerDone.signal()
            }.start()
            waitOrFail(blockerRuns, "the blocker")
            let late = (deadline.value ?? .now()) + Self.clockResolution + .milliseconds(5)
            while DispatchTime.now() < late { usleep(1_000) }
            holder.release()
            stopBlocking.set(true)
            waitOrFail(blockerDone, "the blocker to stop")
            waitOrFail(waiterDone, "the waiter")
            #expect(setUp.failures.isEmpty, "set-up failed: \(setUp.failures)")
            #expect(!ran.value, "a blocking command ran after its deadline")
            #expect(outcome.value == "timedOut", "the late command ended with \(String(describing: outcome.value))")
            #expect(value.engine.pendingCount == 0)
        }
    #endif
}
