#if os(Linux)
    import Dispatch
    import Foundation
    import RealtimeSupport
    import Testing

    @testable import QueueSafeValue

    /// The Mars Pathfinder shape, on the kernel's real scheduler: three threads on one processor — a
    /// normal thread that holds the value for 20 ms of its own processor time, a real-time thread
    /// that spins for up to 1.5 s, and a higher real-time thread that waits for the value. Without
    /// priority inheritance the holder starves behind the spinner and the urgent waiter waits about a
    /// second; with it, the holder runs at the waiter's priority until it releases.
    ///
    /// It needs real-time scheduling (root, CAP_SYS_NICE or an RLIMIT_RTPRIO). Without it the suite
    /// says so and skips, except under `CI=true`, where that is a failure.
    @Suite(.runsAlone, .serialized) struct PriorityInversionTests {
        enum Holder: String, CaseIterable, Sendable {
            /// `value.wait…set` on a normal thread.
            case blocking
            /// `value.async(performIn:)…set`, its closure on a dispatch queue's thread.
            case dispatch
        }

        enum Waiter: String, CaseIterable, Sendable {
            case wait
            case waitWithTimeout
        }

        struct Outcome {
            /// How long the urgent waiter waited for the value.
            var latency: Double
            /// The holder thread's real-time priority after its release (0: its own again).
            var holderPriorityAfter: Int32
        }

        @Test(
            .enabled(if: Realtime.mayRun, Realtime.skipReason),
            arguments: Holder.allCases, Waiter.allCases)
        func urgentWaiter_getsTheValueSoon_andTheHolderGetsItsOwnPriorityBack(holder: Holder, waiter: Waiter) throws {
            try Realtime.require()
            let outcome = Self.run(holder: holder, waiter: waiter)
            // Mutex, whose futex inherits priority, takes 20 ms here; without inheritance ~970 ms.
            #expect(outcome.latency < 0.2, "the urgent waiter waited \(Int(outcome.latency * 1000)) ms")
            #expect(outcome.holderPriorityAfter == 0, "the holder kept a real-time priority after its release")
        }

        /// Runs the shape once and undoes everything it set (affinities, policies).
        static func run(holder: Holder, waiter: Waiter) -> Outcome {
            let value = QueueSafeValue(value: 0, label: "pathfinder")
            let holding = DispatchSemaphore(value: 0)
            let urgentReady = DispatchSemaphore(value: 0)
            let goUrgent = DispatchSemaphore(value: 0)
            let urgentDone = DispatchSemaphore(value: 0)
            let holderDone = DispatchSemaphore(value: 0)
            let spinnerDone = DispatchSemaphore(value: 0)
            let latency = Locked(0.0)
            let priorityAfter = Locked<Int32>(-1)
            let stop = Locked(false)
            // The holder: a normal thread, or a dispatch queue's thread, on processor 0.
            switch holder {
            case .blocking:
                Thread {
                    _ = qsvrt_pin_to_cpu(0)
                    value.wait.highestPriority.set { _ in
                        holding.signal()
                        qsvrt_burn_cpu(0.020)
                    }
                    priorityAfter.set(qsvrt_realtime_priority())
                    _ = qsvrt_pin_to_cpu(-1)
                    holderDone.signal()
                }.start()
            case .dispatch:
                value.async(performIn: DispatchQueue(label: "PriorityInversionTests.holder")).highestPriority.set(
                    accessClosure: { _ in
                        _ = qsvrt_pin_to_cpu(0)
                        holding.signal()
                        qsvrt_burn_cpu(0.020)
                    },
                    completion: { _ in
                        // Delivered on the same thread, after the release.
                        priorityAfter.set(qsvrt_realtime_priority())
                        _ = qsvrt_pin_to_cpu(-1)
                        holderDone.signal()
                    })
            }
            holding.wait()
            // The urgent waiter: real-time priority 20, waits for its cue.
            Thread {
                _ = qsvrt_pin_to_cpu(0)
                _ = qsvrt_set_realtime(20)
                urgentReady.signal()
                goUrgent.wait()
                let start = qsvrt_now()
                switch waiter {
                case .wait: _ = value.wait.lowestPriority.get()
                case .waitWithTimeout: _ = value.wait(timeout: .seconds(5)).lowestPriority.get()
                }
                latency.set(qsvrt_now() - start)
                stop.set(true)
                _ = qsvrt_set_realtime(0)
                urgentDone.signal()
            }.start()
            urgentReady.wait()
            // The spinner: real-time priority 10, between the two; it cues the urgent waiter, which
            // preempts it at once, then spins until the waiter is done (at most 1.5 s).
            Thread {
                _ = qsvrt_pin_to_cpu(0)
                _ = qsvrt_set_realtime(10)
                goUrgent.signal()
                let end = qsvrt_now() + 1.5
                while qsvrt_now() < end && !stop.value {}
                _ = qsvrt_set_realtime(0)
                spinnerDone.signal()
            }.start()
            urgentDone.wait()
            spinnerDone.wait()
            holderDone.wait()
            return Outcome(latency: latency.value, holderPriorityAfter: priorityAfter.value)
        }
    }

    /// Whether the process may use real-time scheduling, and what to do when it may not.
    enum Realtime {
        /// Probed once, on a thread of its own: can a thread take SCHED_FIFO here?
        static let isPermitted: Bool = {
            let result = Locked(false)
            let done = DispatchSemaphore(value: 0)
            Thread {
                result.set(qsvrt_set_realtime(1) == 0)
                _ = qsvrt_set_realtime(0)
                done.signal()
            }.start()
            done.wait()
            return result.value
        }()

        /// Under `CI=true` a test that needs real-time scheduling must run (and fail without it).
        static var isRequired: Bool { ProcessInfo.processInfo.environment["CI"] == "true" }

        static var mayRun: Bool { isPermitted || isRequired }

        static var skipReason: Comment {
            "real-time scheduling is not permitted here (needs root, CAP_SYS_NICE or an RLIMIT_RTPRIO)"
        }

        /// Fails the test when real-time scheduling is required but not permitted.
        static func require(sourceLocation: SourceLocation = #_sourceLocation) throws {
            if !isPermitted {
                throw TestError.unavailable("CI=true, but \(skipReason)")
            }
        }
    }
#endif
