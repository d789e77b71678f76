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
            /// The holder thread's real-time priority at the end of its hold (20: it was raised).
            var holderPriorityAtEnd: Int32
            /// The set-up calls that failed (pinning, real-time policies), with their error codes:
            /// a failed one makes the shape meaningless, so a slow run names it.
            var setUpFailures: [String]
        }

        @Test(
            .enabled(if: Realtime.mayRun, Realtime.skipReason),
            arguments: Holder.allCases, Waiter.allCases)
        func urgentWaiter_getsTheValueSoon_andTheHolderGetsItsOwnPriorityBack(holder: Holder, waiter: Waiter) throws {
            try Realtime.require()
            let outcome = Self.run(holder: holder, waiter: waiter)
            #expect(outcome.setUpFailures.isEmpty, "set-up calls failed: \(outcome.setUpFailures)")
            // Mutex, whose futex inherits priority, takes 20 ms here; without inheritance ~970 ms.
            let waited = Int(outcome.latency * 1000)
            #expect(
                outcome.latency < 0.2,
                "the urgent waiter waited \(waited) ms; the holder's real-time priority: \(outcome.holderPriorityAtEnd)"
            )
            #expect(outcome.holderPriorityAtEnd == 20, "the holder did not run at the urgent waiter's priority")
            #expect(outcome.holderPriorityAfter == 0, "the holder kept a real-time priority after its release")
        }

        /// The same shape, with a fourth thread: a normal one, on the same processor, inside a lock
        /// the urgent waiter takes as it parks (the value's boost lock, held 50 ms here so that the
        /// spinner preempts it there; the deadlock detector's and the boost registry's are taken on
        /// the same path, by threads of every value: that is how it happened once in CI, 950 ms). A
        /// plain mutex leaves the waiter behind the spinner (1.5 s here); these locks pass the
        /// waiter's priority to the thread that holds them, as they do on Apple platforms.
        @Test(.enabled(if: Realtime.mayRun, Realtime.skipReason))
        func aNormalThreadInsideALockOfTheParkingPath_doesNotHoldUpTheUrgentWaiter() throws {
            try Realtime.require()
            let outcome = Self.run(holder: .blocking, waiter: .wait, lockHeldByANormalThread: true)
            #expect(outcome.setUpFailures.isEmpty, "set-up calls failed: \(outcome.setUpFailures)")
            #expect(outcome.latency < 0.2, "the urgent waiter waited \(Int(outcome.latency * 1000)) ms")
            #expect(outcome.holderPriorityAtEnd == 20, "the holder did not run at the urgent waiter's priority")
            #expect(outcome.holderPriorityAfter == 0, "the holder kept a real-time priority after its release")
        }

        /// How a boosted hold ends.
        enum Ending: String, CaseIterable, Sendable {
            /// The holder releases after the urgent waiter gave up (its deadline passed).
            case waiterTimedOut
            /// A manual-completion holder drops its `done` without calling it.
            case droppedCompletion
            /// The container is released while the holder holds; the holder releases later.
            case containerReleased
        }

        /// Whatever ends the hold, the holder ran at the waiter's real-time priority while it held
        /// and at its own once it released.
        @Test(.enabled(if: Realtime.mayRun, Realtime.skipReason), arguments: Ending.allCases)
        func boostLastsExactlyAsLongAsTheHold(ending: Ending) throws {
            try Realtime.require()
            var value: QueueSafeValue<Int>? = QueueSafeValue(value: 0, label: "boosted")
            let schedule = value!.wait
            let holding = DispatchSemaphore(value: 0)
            let waiterParked = DispatchSemaphore(value: 0)
            let holderDone = DispatchSemaphore(value: 0)
            let priorityDuring = Locked<Int32>(-1)
            let priorityAfter = Locked<Int32>(-1)
            Thread {
                let measure = {
                    holding.signal()
                    _ = waiterParked.wait(timeout: .now() + 30)
                    priorityDuring.set(qsvrt_realtime_priority())
                }
                switch ending {
                case .waiterTimedOut, .containerReleased:
                    schedule.highestPriority.set { _ in
                        measure()
                        if ending == .waiterTimedOut { usleep(150_000) }  // past the waiter's deadline
                    }
                case .droppedCompletion:
                    schedule.highestPriority.set(manualCompletion: { _, done in
                        measure()
                        _ = done  // dropped, never called: the command ends when the closure lets go of it
                    })
                }
                priorityAfter.set(qsvrt_realtime_priority())
                holderDone.signal()
            }.start()
            holding.wait()
            let waiterDone = DispatchSemaphore(value: 0)
            let urgent = value!.wait(timeout: ending == .waiterTimedOut ? .milliseconds(100) : .seconds(30))
            Thread {
                _ = qsvrt_set_realtime(20)
                _ = urgent.lowestPriority.get()
                _ = qsvrt_set_realtime(0)
                waiterDone.signal()
            }.start()
            // The waiter spins briefly, then parks and raises the holder.
            let raised = waitUntil("the holder to be raised") { value!.diagnostics.waitingCount == 1 }
            usleep(20_000)
            if ending == .containerReleased { value = nil }
            waiterParked.signal()
            #expect(raised)
            #expect(holderDone.wait(timeout: .now() + 30) == .success)
            #expect(waiterDone.wait(timeout: .now() + 30) == .success)
            #expect(priorityDuring.value == 20, "the holder was not raised while the waiter was parked")
            #expect(priorityAfter.value == 0, "the holder kept the waiter's priority after its release")
        }

        /// Shared reads hold the value together: an urgent writer that parks raises every one of
        /// them, and each gets its own priority back when it releases.
        @Test(.enabled(if: Realtime.mayRun, Realtime.skipReason))
        func everyReaderHolding_isRaised_andGetsItsOwnPriorityBack() throws {
            try Realtime.require()
            let value = QueueSafeValue(value: 0, label: "boosted readers")
            let readersIn = Locked(0)
            let waiterParked = DispatchSemaphore(value: 0)
            let readersDone = DispatchGroup()
            let during = Locked<[Int32]>([])
            let after = Locked<[Int32]>([])
            for _ in 0..<2 {
                readersDone.enter()
                Thread {
                    _ = value.wait.highestPriority.readResult { _ in
                        readersIn.increment()
                        _ = waiterParked.wait(timeout: .now() + 30)
                        waiterParked.signal()  // for the other reader
                        during.withLock { $0.append(qsvrt_realtime_priority()) }
                    }
                    after.withLock { $0.append(qsvrt_realtime_priority()) }
                    readersDone.leave()
                }.start()
            }
            #expect(waitUntil("both readers to hold") { readersIn.value == 2 })
            let writerDone = DispatchSemaphore(value: 0)
            Thread {
                _ = qsvrt_set_realtime(20)
                _ = value.waitBounded.lowestPriority.set { $0 += 1 }
                _ = qsvrt_set_realtime(0)
                writerDone.signal()
            }.start()
            // The writer spins briefly, then parks and raises every reader.
            #expect(waitUntil("the writer to wait") { value.diagnostics.waitingCount == 1 })
            usleep(20_000)
            waiterParked.signal()
            #expect(waitOrFail(readersDone, "the readers"))
            #expect(waitOrFail(writerDone, "the writer"))
            #expect(during.value == [20, 20], "a reader was not raised while the writer was parked")
            #expect(after.value == [0, 0], "a reader kept the writer's priority after its release")
        }

        /// Runs the shape once and undoes everything it set (affinities, policies).
        static func run(holder: Holder, waiter: Waiter, lockHeldByANormalThread: Bool = false) -> Outcome {
            let value = QueueSafeValue(value: 0, label: "pathfinder")
            let holding = DispatchSemaphore(value: 0)
            let urgentReady = DispatchSemaphore(value: 0)
            let goUrgent = DispatchSemaphore(value: 0)
            let urgentDone = DispatchSemaphore(value: 0)
            let holderDone = DispatchSemaphore(value: 0)
            let spinnerDone = DispatchSemaphore(value: 0)
            let latency = Locked(0.0)
            let priorityAfter = Locked<Int32>(-1)
            let priorityAtEnd = Locked<Int32>(-1)
            let setUp = Realtime.SetUpLog()
            let stop = Locked(false)
            // The holder: a normal thread, or a dispatch queue's thread, on processor 0.
            switch holder {
            case .blocking:
                Thread {
                    setUp.note("holder pin", qsvrt_pin_to_cpu(0))
                    value.wait.highestPriority.set { _ in
                        holding.signal()
                        qsvrt_burn_cpu(0.020)
                        priorityAtEnd.set(qsvrt_realtime_priority())
                    }
                    priorityAfter.set(qsvrt_realtime_priority())
                    _ = qsvrt_pin_to_cpu(-1)
                    holderDone.signal()
                }.start()
            case .dispatch:
                value.async(performIn: DispatchQueue(label: "PriorityInversionTests.holder")).highestPriority.set(
                    accessClosure: { _ in
                        setUp.note("holder pin", qsvrt_pin_to_cpu(0))
                        holding.signal()
                        qsvrt_burn_cpu(0.020)
                        priorityAtEnd.set(qsvrt_realtime_priority())
                    },
                    completion: { _ in
                        // Delivered on the same thread, after the release.
                        priorityAfter.set(qsvrt_realtime_priority())
                        _ = qsvrt_pin_to_cpu(-1)
                        holderDone.signal()
                    })
            }
            holding.wait()
            let bystanderDone = DispatchSemaphore(value: 0)
            if lockHeldByANormalThread {
                // A normal thread on the holder's processor, inside the value's boost lock.
                let locked = DispatchSemaphore(value: 0)
                Thread {
                    setUp.note("bystander pin", qsvrt_pin_to_cpu(0))
                    value.engine.boosts.withLock { _ in
                        locked.signal()
                        qsvrt_burn_cpu(0.050)
                    }
                    _ = qsvrt_pin_to_cpu(-1)
                    bystanderDone.signal()
                }.start()
                locked.wait()
            } else {
                bystanderDone.signal()
            }
            // The urgent waiter: real-time priority 20, waits for its cue.
            Thread {
                // Real-time first, then onto the holder's processor: it preempts the holder at once.
                setUp.note("waiter real-time 20", qsvrt_set_realtime(20))
                setUp.note("waiter pin", qsvrt_pin_to_cpu(0))
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
                setUp.note("spinner real-time 10", qsvrt_set_realtime(10))
                setUp.note("spinner pin", qsvrt_pin_to_cpu(0))
                goUrgent.signal()
                let end = qsvrt_now() + 1.5
                while qsvrt_now() < end && !stop.value {}
                _ = qsvrt_set_realtime(0)
                spinnerDone.signal()
            }.start()
            urgentDone.wait()
            spinnerDone.wait()
            holderDone.wait()
            bystanderDone.wait()
            return Outcome(
                latency: latency.value, holderPriorityAfter: priorityAfter.value,
                holderPriorityAtEnd: priorityAtEnd.value, setUpFailures: setUp.failures)
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

        /// The set-up calls of a scheduling shape that failed (pinning, real-time policies), with
        /// their error codes: a failed one makes the shape meaningless, so a test names it.
        struct SetUpLog: Sendable {
            private let calls = Locked<[String]>([])

            /// Notes `call` if its `status` is not 0.
            func note(_ call: String, _ status: Int32) {
                if status != 0 { calls.withLock { $0.append("\(call): \(status)") } }
            }

            var failures: [String] { calls.value }
        }

        /// Fails the test when real-time scheduling is required but not permitted.
        static func require(sourceLocation: SourceLocation = #_sourceLocation) throws {
            if !isPermitted {
                throw TestError.unavailable("CI=true, but \(skipReason)")
            }
        }
    }
#endif
