#if os(Linux)
    import Dispatch
    import Foundation
    import RealtimeSupport
    import Testing

    @testable import QueueSafeValue

    /// Transitive priority inheritance, on the kernel's real scheduler: when the holder of one value
    /// is itself parked waiting for another, an urgent waiter raises every holder along that chain
    /// (as the kernel's PI futexes do), not only the first one, which cannot run anyway. And a boost
    /// lasts only as long as the waiter that caused it: when that waiter times out and leaves, every
    /// holder it raised drops back to its own policy, even though it still holds.
    ///
    /// Like ``PriorityInversionTests`` it needs real-time scheduling (root, CAP_SYS_NICE or an
    /// RLIMIT_RTPRIO). Without it the suite says so and skips, except under `CI=true`, where that
    /// is a failure.
    @Suite(.runsAlone, .serialized) struct PriorityChainTests {
        /// What one run of a chain measured.
        struct ChainOutcome {
            /// How long the urgent waiter waited for the first value of the chain.
            var latency: Double
            /// Each holder's real-time priority right after its release (0: its own again), in the
            /// order of the values it held: A's holder first, the chain's end last.
            var prioritiesAfter: [Int32]
        }

        /// One reading of a thread's own real-time priority.
        struct Sample {
            /// When it was taken, on `qsvrt_now()`'s clock.
            var time: Double
            var priority: Int32
        }

        /// What the urgent waiter that gives up saw.
        struct TimedWait {
            var result: Result<Int, QueueSafeValueError>
            /// When its command returned, on `qsvrt_now()`'s clock.
            var returnedAt: Double
        }

        /// The Pathfinder shape with one link more: X holds B and needs 20 ms of processor time, L
        /// holds A and waits for B, the urgent waiter waits for A, and a spinner between them takes
        /// the processor. Raising L alone does nothing (it is parked); unless X is raised too, the
        /// urgent waiter waits out the spinner's 1.5 s.
        @Test(.enabled(if: Realtime.mayRun, Realtime.skipReason))
        func twoValueChain_urgentWaiterGetsTheValueSoon() throws {
            try Realtime.require()
            let outcome = try #require(Self.runChain(length: 2))
            #expect(outcome.latency < 0.2, "the urgent waiter waited \(Int(outcome.latency * 1000)) ms")
            #expect(
                outcome.prioritiesAfter == [0, 0],
                "the holders of A and B had real-time priorities \(outcome.prioritiesAfter) after their releases")
        }

        /// The same with two links more: X holds C, L2 holds B and waits for C, L1 holds A and waits
        /// for B. The raise must walk the whole chain, not stop after one step.
        @Test(.enabled(if: Realtime.mayRun, Realtime.skipReason))
        func threeValueChain_urgentWaiterGetsTheValueSoon() throws {
            try Realtime.require()
            let outcome = try #require(Self.runChain(length: 3))
            #expect(outcome.latency < 0.2, "the urgent waiter waited \(Int(outcome.latency * 1000)) ms")
            #expect(
                outcome.prioritiesAfter == [0, 0, 0],
                "the holders of A, B and C had real-time priorities \(outcome.prioritiesAfter) after their releases")
        }

        /// An urgent waiter with a timeout raises the holder while it waits, and once it gives up
        /// the holder runs at its own policy again at once, though it keeps holding: a boost that
        /// outlived its waiter would let a normal thread run at real-time priority for as long as
        /// it holds.
        @Test(.enabled(if: Realtime.mayRun, Realtime.skipReason))
        func timedWaiterLeaves_holderGetsItsOwnPolicyBackWhileHolding() throws {
            try Realtime.require()
            let value = QueueSafeValue(value: 0, label: "V")
            let holding = DispatchSemaphore(value: 0)
            let holderDone = DispatchSemaphore(value: 0)
            let stop = Locked(false)
            let samples = Locked<[Sample]>([])
            let priorityAfter = Locked<Int32>(-1)
            Thread {
                value.wait.highestPriority.set { _ in
                    holding.signal()
                    samples.set(Self.samplesOfOwnPriority(until: stop))
                }
                priorityAfter.set(qsvrt_realtime_priority())
                holderDone.signal()
            }.start()
            #expect(waitOrFail(holding, "the holder to hold"))
            let timedWait = Self.urgentWaitThatTimesOut(for: value)
            usleep(100_000)  // the holder keeps holding, and sampling, past the timeout
            stop.set(true)
            #expect(waitOrFail(holderDone, "the holder to release"))
            let timedOut = try #require(timedWait)
            #expect(timedOut.result == .failure(.anyTimedOut))
            Self.expectRaisedUntil(timedOut.returnedAt, samples.value, holder: "the holder")
            #expect(priorityAfter.value == 0, "the holder had a real-time priority after its release")
        }

        /// The same in the middle of a chain: X holds B, L holds A and waits for B, and the urgent
        /// waiter waits for A with a timeout. While it waits X runs at its priority; once it gives
        /// up, X (still holding) and L (still parked) both drop back to their own policy. L's is
        /// read when it finally gets B, long after the timeout.
        @Test(.enabled(if: Realtime.mayRun, Realtime.skipReason))
        func timedWaiterLeaves_midChain_bothHoldersDropTheirBoost() throws {
            try Realtime.require()
            let valueA = QueueSafeValue(value: 0, label: "A")
            let valueB = QueueSafeValue(value: 0, label: "B")
            let holding = DispatchSemaphore(value: 0)
            let holdersDone = DispatchGroup()
            let stop = Locked(false)
            let samples = Locked<[Sample]>([])
            let xPriorityAfter = Locked<Int32>(-1)
            let lPriorityOnGettingB = Locked<Int32>(-1)
            let lPriorityAfter = Locked<Int32>(-1)
            holdersDone.enter()
            Thread {
                valueB.wait.highestPriority.set { _ in
                    holding.signal()
                    samples.set(Self.samplesOfOwnPriority(until: stop))
                }
                xPriorityAfter.set(qsvrt_realtime_priority())
                holdersDone.leave()
            }.start()
            #expect(waitOrFail(holding, "X to hold B"))
            holdersDone.enter()
            Thread {
                valueA.wait.highestPriority.set { _ in
                    holding.signal()
                    valueB.wait.highestPriority.set { _ in lPriorityOnGettingB.set(qsvrt_realtime_priority()) }
                }
                lPriorityAfter.set(qsvrt_realtime_priority())
                holdersDone.leave()
            }.start()
            #expect(waitOrFail(holding, "L to hold A"))
            // L spins briefly, then parks waiting for B.
            #expect(waitUntil("L to wait for B") { valueB.diagnostics.waitingCount == 1 })
            usleep(20_000)
            let timedWait = Self.urgentWaitThatTimesOut(for: valueA)
            usleep(100_000)  // X keeps holding, and sampling, past the timeout
            stop.set(true)
            #expect(waitOrFail(holdersDone, "X and L to release"))
            let timedOut = try #require(timedWait)
            #expect(timedOut.result == .failure(.anyTimedOut))
            Self.expectRaisedUntil(timedOut.returnedAt, samples.value, holder: "X")
            #expect(lPriorityOnGettingB.value == 0, "L kept the timed-out waiter's boost until it got B")
            #expect(xPriorityAfter.value == 0, "X had a real-time priority after its release")
            #expect(lPriorityAfter.value == 0, "L had a real-time priority after its release")
        }

        /// One thread holds two values, each raised by a timed real-time waiter of its own (20 for A,
        /// 10 for B): it runs at the higher while both wait, at the other's once the first gives up,
        /// and at its own once both have: each boost is a contribution of its own, ended by its own
        /// reason.
        @Test(.enabled(if: Realtime.mayRun, Realtime.skipReason))
        func holderOfTwoValues_runsAtTheHighestBoostLeft() throws {
            try Realtime.require()
            let valueA = QueueSafeValue(value: 0, label: "A")
            let valueB = QueueSafeValue(value: 0, label: "B")
            let holding = DispatchSemaphore(value: 0)
            let holderDone = DispatchSemaphore(value: 0)
            let stop = Locked(false)
            let samples = Locked<[Sample]>([])
            Thread {
                valueA.wait.highestPriority.set { _ in
                    valueB.wait.highestPriority.set { _ in
                        holding.signal()
                        samples.set(Self.samplesOfOwnPriority(until: stop))
                    }
                }
                holderDone.signal()
            }.start()
            #expect(waitOrFail(holding, "the holder to hold A and B"))
            let waits = Locked<[Double]>([0, 0])
            let waitersDone = DispatchGroup()
            for (index, (value, priority, timeout)) in [(valueA, Int32(20), 200), (valueB, 10, 400)].enumerated() {
                waitersDone.enter()
                Thread {
                    _ = qsvrt_set_realtime(priority)
                    _ = value.wait(timeout: .milliseconds(timeout)).lowestPriority.get()
                    let returnedAt = qsvrt_now()
                    _ = qsvrt_set_realtime(0)
                    waits.withLock { $0[index] = returnedAt }
                    waitersDone.leave()
                }.start()
            }
            #expect(waitOrFail(waitersDone, "both waiters to time out"))
            usleep(50_000)
            stop.set(true)
            #expect(waitOrFail(holderDone, "the holder to release"))
            let (firstLeft, secondLeft) = (waits.value[0], waits.value[1])
            let all = samples.value
            let bothWaiting = all.filter { $0.time < firstLeft - 0.010 }.map(\.priority)
            let oneWaiting = all.filter { $0.time > firstLeft + 0.010 && $0.time < secondLeft - 0.010 }.map(\.priority)
            let noneWaiting = all.filter { $0.time > secondLeft + 0.010 }.map(\.priority)
            #expect(bothWaiting.contains(20), "the holder never ran at 20 while both waited: \(Set(bothWaiting))")
            #expect(!oneWaiting.isEmpty && oneWaiting.allSatisfy { $0 == 10 }, "after 20 left: \(Set(oneWaiting))")
            #expect(!noneWaiting.isEmpty && noneWaiting.allSatisfy { $0 == 0 }, "after both left: \(Set(noneWaiting))")
        }

        /// Builds a chain of `length` values (2: A, B; 3: A, B, C) on processor 0 and measures how
        /// long an urgent waiter waits for A, then undoes everything it set (affinities, policies).
        /// X, a normal thread, holds the last value and needs 20 ms of processor time; each other
        /// holder, a normal thread too, holds its value and waits for the next. Then the shape of
        /// `PriorityInversionTests.run(holder:waiter:)`: an urgent waiter (real-time 20) waits for
        /// A while a spinner (real-time 10) takes the processor for up to 1.5 s.
        /// - Returns: what it measured, or `nil` after a hang (recorded as an issue).
        static func runChain(length: Int) -> ChainOutcome? {
            let labels = ["A", "B", "C"]
            precondition((2...labels.count).contains(length), "a chain has 2 or 3 values")
            let values = labels.prefix(length).map { QueueSafeValue(value: 0, label: $0) }
            let holding = DispatchSemaphore(value: 0)
            // X waits here before it burns its 20 ms: burning during the setup (each holder's
            // parking, 20 ms apiece) it would release before the urgent waiter comes. The spinner
            // opens it once it has processor 0, so from then on X runs only if it is raised.
            let mayBurn = DispatchSemaphore(value: 0)
            let holdersDone = DispatchGroup()
            let urgentReady = DispatchSemaphore(value: 0)
            let goUrgent = DispatchSemaphore(value: 0)
            let urgentDone = DispatchSemaphore(value: 0)
            let spinnerDone = DispatchSemaphore(value: 0)
            let latency = Locked(0.0)
            let prioritiesAfter = Locked([Int32](repeating: -1, count: length))
            let stop = Locked(false)
            // X: holds the last value, on processor 0.
            let last = values[length - 1]
            holdersDone.enter()
            Thread {
                _ = qsvrt_pin_to_cpu(0)
                last.wait.highestPriority.set { _ in
                    holding.signal()
                    _ = mayBurn.wait(timeout: .now() + hangTimeout)
                    qsvrt_burn_cpu(0.020)
                }
                prioritiesAfter.withLock { $0[length - 1] = qsvrt_realtime_priority() }
                _ = qsvrt_pin_to_cpu(-1)
                holdersDone.leave()
            }.start()
            guard waitOrFail(holding, "X to hold \(labels[length - 1])") else { return nil }
            // The other holders, from the end of the chain back to A: each holds its value and waits
            // for the next one, on processor 0.
            for index in stride(from: length - 2, through: 0, by: -1) {
                let held = values[index]
                let next = values[index + 1]
                holdersDone.enter()
                Thread {
                    _ = qsvrt_pin_to_cpu(0)
                    held.wait.highestPriority.set { _ in
                        holding.signal()
                        next.wait.highestPriority.set { _ in }
                    }
                    prioritiesAfter.withLock { $0[index] = qsvrt_realtime_priority() }
                    _ = qsvrt_pin_to_cpu(-1)
                    holdersDone.leave()
                }.start()
                guard waitOrFail(holding, "the holder of \(labels[index]) to hold") else { return nil }
                // It spins briefly, then parks waiting for the next value.
                let parked = waitUntil("the holder of \(labels[index]) to wait for \(labels[index + 1])") {
                    next.diagnostics.waitingCount == 1
                }
                guard parked else { return nil }
                usleep(20_000)
            }
            // The urgent waiter: real-time priority 20, waits for its cue.
            let first = values[0]
            Thread {
                // Real-time first, then onto the holders' processor: it preempts them at once.
                _ = qsvrt_set_realtime(20)
                _ = qsvrt_pin_to_cpu(0)
                urgentReady.signal()
                goUrgent.wait()
                let start = qsvrt_now()
                _ = first.wait.lowestPriority.get()
                latency.set(qsvrt_now() - start)
                stop.set(true)
                _ = qsvrt_pin_to_cpu(-1)
                _ = qsvrt_set_realtime(0)
                urgentDone.signal()
            }.start()
            guard waitOrFail(urgentReady, "the urgent waiter to be ready") else { return nil }
            // The spinner: real-time priority 10, between the two; it lets X burn, cues the urgent
            // waiter, which preempts it at once, then spins until the waiter is done (at most 1.5 s).
            Thread {
                _ = qsvrt_set_realtime(10)
                _ = qsvrt_pin_to_cpu(0)
                mayBurn.signal()
                goUrgent.signal()
                let end = qsvrt_now() + 1.5
                while qsvrt_now() < end && !stop.value {}
                _ = qsvrt_pin_to_cpu(-1)
                _ = qsvrt_set_realtime(0)
                spinnerDone.signal()
            }.start()
            let urgentFinished = waitOrFail(urgentDone, "the urgent waiter")
            let spinnerFinished = waitOrFail(spinnerDone, "the spinner")
            let holdersFinished = waitOrFail(holdersDone, "the holders")
            guard urgentFinished && spinnerFinished && holdersFinished else { return nil }
            return ChainOutcome(latency: latency.value, prioritiesAfter: prioritiesAfter.value)
        }

        /// On a new thread of real-time priority 20 (not pinned), waits at most 300 ms for `value`,
        /// which is held the whole time, so the command gives up.
        /// - Returns: what the command returned and when, or `nil` after a hang (recorded as an issue).
        static func urgentWaitThatTimesOut(for value: QueueSafeValue<Int>) -> TimedWait? {
            let outcome = Locked<TimedWait?>(nil)
            let done = DispatchSemaphore(value: 0)
            Thread {
                _ = qsvrt_set_realtime(20)
                let result = value.wait(timeout: .milliseconds(300)).lowestPriority.get()
                let returnedAt = qsvrt_now()
                _ = qsvrt_set_realtime(0)
                outcome.set(TimedWait(result: result, returnedAt: returnedAt))
                done.signal()
            }.start()
            guard waitOrFail(done, "the urgent waiter to time out") else { return nil }
            return outcome.value
        }

        /// The calling thread's real-time priority about every millisecond, until `stop` is set or
        /// for at most a second. Kept in a local array, published by the caller once: a lock per
        /// sample would be one more thing for the sampled thread to wait on.
        static func samplesOfOwnPriority(until stop: Locked<Bool>) -> [Sample] {
            var samples: [Sample] = []
            samples.reserveCapacity(1_100)
            let end = qsvrt_now() + 1.0
            while !stop.value {
                let now = qsvrt_now()
                if now >= end { break }
                // Read after the timestamp: the priority is what the thread had at `now` or later.
                samples.append(Sample(time: now, priority: qsvrt_realtime_priority()))
                usleep(1_000)
            }
            return samples
        }

        /// Expects `samples`, taken by a thread holding a value, to show the urgent waiter's priority
        /// (20) at some point before its timed-out command returned at `timedOutAt`, and its own (0)
        /// in every sample from 10 ms after that on, of which there must be some.
        static func expectRaisedUntil(
            _ timedOutAt: Double,
            _ samples: [Sample],
            holder: String,
            sourceLocation: SourceLocation = #_sourceLocation
        ) {
            #expect(
                samples.contains { $0.time < timedOutAt && $0.priority == 20 },
                "\(holder) was not raised while the urgent waiter waited", sourceLocation: sourceLocation)
            let settled = timedOutAt + 0.010
            #expect(
                samples.contains { $0.time > settled },
                "\(holder) took no sample from 10 ms after the timeout on", sourceLocation: sourceLocation)
            let stillRaised = samples.filter { $0.time > settled && $0.priority != 0 }
            let lateness = stillRaised.last.map { Int(($0.time - timedOutAt) * 1000) } ?? 0
            let priority = stillRaised.last?.priority ?? 0
            #expect(
                stillRaised.isEmpty,
                "\(holder) was still at \(priority) \(lateness) ms after the urgent waiter timed out",
                sourceLocation: sourceLocation)
        }
    }
#endif
