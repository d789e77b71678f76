#if os(Linux)
    import Dispatch
    import Foundation
    import RealtimeSupport
    import Testing

    @testable import QueueSafeValue

    /// A release that hands the value to a thread waiting on the releaser's own processor gives that
    /// processor away (Architecture, "More threads than cores"), so the new holder starts before the
    /// releaser's command returns. On the kernel's real scheduler: two SCHED_FIFO threads of one
    /// priority on processor 0, where a thread runs until it blocks or yields. Without the yield the
    /// releaser's command returns first, every time.
    ///
    /// It needs real-time scheduling (root, CAP_SYS_NICE or an RLIMIT_RTPRIO). Without it the suite
    /// says so and skips, except under `CI=true`, where that is a failure.
    @Suite(.runsAlone, .serialized) struct ReleaserStepsAsideTests {
        @Test(.enabled(if: Realtime.mayRun, Realtime.skipReason))
        func releaseToAWaiterOnTheSameProcessor_letsItStartBeforeTheReleaserGoesOn() throws {
            try Realtime.require()
            #expect(SyncPoints.currentProcessor() >= 0, "no processor number: the releaser cannot step aside")
            let value = QueueSafeValue(value: 0, label: "steps aside")
            let waiterReady = DispatchSemaphore(value: 0)
            let goWaiter = DispatchSemaphore(value: 0)
            let waiterDone = DispatchSemaphore(value: 0)
            let holderDone = DispatchSemaphore(value: 0)
            let waiterStarted = Locked(false)
            let startedWhenHolderWentOn = Locked<Bool?>(nil)
            let setUp = Realtime.SetUpLog()
            // The waiter: blocks until the holder holds the value and yields to it; its command
            // then finds the value held, queues and spins (yielding to the holder after its head
            // polls).
            Thread {
                setUp.note("waiter real-time 10", qsvrt_set_realtime(10))
                setUp.note("waiter pin", qsvrt_pin_to_cpu(0))
                waiterReady.signal()
                goWaiter.wait()
                value.wait.set { current in
                    current += 1
                    waiterStarted.set(true)
                }
                _ = qsvrt_set_realtime(0)
                _ = qsvrt_pin_to_cpu(-1)
                waiterDone.signal()
            }.start()
            waitOrFail(waiterReady, "the waiter's set-up")
            // The holder: same priority, same processor; it cues the waiter (runnable, but it does
            // not preempt a thread of its own priority) and yields inside its hold so the waiter
            // queues. Its release grants the waiter; what it sees once its command returns is the
            // test.
            Thread {
                setUp.note("holder real-time 10", qsvrt_set_realtime(10))
                setUp.note("holder pin", qsvrt_pin_to_cpu(0))
                value.wait.set { current in
                    current += 1
                    goWaiter.signal()
                    sched_yield()
                }
                startedWhenHolderWentOn.set(waiterStarted.value)
                _ = qsvrt_set_realtime(0)
                _ = qsvrt_pin_to_cpu(-1)
                holderDone.signal()
            }.start()
            waitOrFail(holderDone, "the holder")
            waitOrFail(waiterDone, "the waiter")
            #expect(setUp.failures.isEmpty, "set-up failed: \(setUp.failures)")
            #expect(
                startedWhenHolderWentOn.value == true,
                "the holder's command returned before the waiter it handed the value to had started")
            #expect(try value.wait.get().get() == 2)
        }
    }
#endif
