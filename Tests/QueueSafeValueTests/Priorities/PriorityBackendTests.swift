import Testing

@_spi(Testing) @testable import QueueSafeValue
@testable import QueueSafeValueTesting

/// Issue 41: the policy of priority inheritance on each platform (`PriorityBackend`), driven through
/// the registry on a recording fake of the platform's calls: Linux's real-time policy and Apple
/// platforms' QoS overrides both run here, deterministically. (The controlled scheduler runs the
/// same fake under the engine: `CheckerScenarios.onApplePlatforms`.)
@Suite(.runsAlongsideOthers) struct PriorityBackendTests {
    typealias Platform = RecordingPriorityBackend.Platform

    /// A thread id the fake knows (no real thread is touched).
    let thread = 0x7000
    /// Two engines' contributions, as the registry names them.
    let first = ObjectIdentifier(FirstSource.self)
    let second = ObjectIdentifier(SecondSource.self)
    enum FirstSource {}
    enum SecondSource {}

    func fake(_ platform: Platform) -> (RecordingPriorityBackend, BoostRegistry) {
        let calls = RecordingPriorityBackend(platform, forwardingEscalations: false)
        return (calls, BoostRegistry(backend: calls.backend))
    }

    /// A thread raised by two values runs at the higher of the two, whichever value asked first and
    /// whichever the registry's table lists first (both assignments are tried, so a registry that
    /// kept one arbitrary contribution fails in one of them), and comes down to the other one's,
    /// then to its own, as each reason goes.
    @Test(arguments: [Platform.linux, .apple])
    func aThreadRaisedByTwoValues_runsAtTheHigher(on platform: Platform) {
        let (calls, registry) = fake(platform)
        for (urgent, other) in [(first, second), (second, first)] {
            _ = registry.set(.thread(thread), source: urgent, to: Urgency(thread: 30))
            _ = registry.set(.thread(thread), source: other, to: Urgency(thread: 10))
            #expect(calls.runningUrgency(ofThread: thread) == 30, "raised by 30 and 10 (\(platform))")
            _ = registry.set(.thread(thread), source: urgent, to: Urgency(thread: 10))
            _ = registry.set(.thread(thread), source: other, to: Urgency(thread: 30))
            #expect(calls.runningUrgency(ofThread: thread) == 30, "raised by 10 and 30 (\(platform))")
            _ = registry.set(.thread(thread), source: other, to: nil)
            #expect(calls.runningUrgency(ofThread: thread) == 10, "the 30 left (\(platform))")
            _ = registry.set(.thread(thread), source: urgent, to: nil)
            #expect(calls.runningUrgency(ofThread: thread) == 0, "both left (\(platform))")
        }
        #expect(calls.leftovers == nil)
        #expect(calls.firstMisuse == nil)
        #expect(registry.contributions.isEmpty)
    }

    /// Apple platforms: a holder whose own QoS class reaches what it would inherit gets no override;
    /// one that runs below gets exactly the waiter's class, and loses the override once its own
    /// class reaches what is left to inherit (Linux's rule, which the Darwin branch lacked).
    @Test func appleHolderAtItsWaitersClass_getsNoOverride() {
        let (calls, registry) = fake(.apple)
        calls.setOwnUrgency(ofThread: thread, to: 25)
        _ = registry.set(.thread(thread), source: first, to: Urgency(thread: 25, task: 25))
        _ = registry.set(.thread(thread), source: first, to: Urgency(thread: 21, task: 21))
        #expect(calls.callCounts.overridesStarted == 0, "\(calls.calls)")
        _ = registry.set(.thread(thread), source: first, to: Urgency(thread: 33, task: 33))
        #expect(calls.runningUrgency(ofThread: thread) == 33)
        _ = registry.set(.thread(thread), source: first, to: Urgency(thread: 25, task: 25))
        #expect(calls.calls == ["start #1 at 33 on \(thread)", "end #1 on \(thread)"])
        #expect(calls.runningUrgency(ofThread: thread) == 25)
        _ = registry.set(.thread(thread), source: first, to: nil)
        #expect(calls.leftovers == nil && calls.firstMisuse == nil)
    }

    /// Apple platforms: moving a raised thread from one class to another starts the new override
    /// before it ends the old one (the thread is never unraised in between), and every override
    /// started is ended exactly once.
    @Test func appleMovingBetweenClasses_startsTheNewOverrideFirst() {
        let (calls, registry) = fake(.apple)
        _ = registry.set(.thread(thread), source: first, to: Urgency(thread: 21, task: 21))
        _ = registry.set(.thread(thread), source: first, to: Urgency(thread: 33, task: 33))
        _ = registry.set(.thread(thread), source: first, to: Urgency(thread: 25, task: 25))
        _ = registry.set(.thread(thread), source: first, to: nil)
        #expect(
            calls.calls == [
                "start #1 at 21 on \(thread)", "start #2 at 33 on \(thread)", "end #1 on \(thread)",
                "start #3 at 25 on \(thread)", "end #2 on \(thread)", "end #3 on \(thread)",
            ])
        #expect(calls.leftovers == nil && calls.firstMisuse == nil)
    }

    /// Linux: a raise gives SCHED_FIFO at the waiter's priority and puts back the thread's own
    /// scheduling when it ends, or once the thread's own priority reaches what is left.
    @Test func linuxRaise_setsTheRealtimePolicy_andPutsBackTheThreadsOwn() {
        let (calls, registry) = fake(.linux)
        calls.setOwnUrgency(ofThread: thread, to: 5)
        _ = registry.set(.thread(thread), source: first, to: Urgency(thread: 20))
        #expect(calls.runningUrgency(ofThread: thread) == 20)
        _ = registry.set(.thread(thread), source: first, to: Urgency(thread: 3))
        #expect(calls.runningUrgency(ofThread: thread) == 5)
        #expect(calls.calls == ["set 1/20 on \(thread)", "set 1/5 on \(thread)"])
        _ = registry.set(.thread(thread), source: first, to: nil)
        #expect(calls.leftovers == nil && calls.firstMisuse == nil)
    }

    /// On both platforms an unspecified urgency (a thread of no real-time priority or QoS class, a
    /// task on Linux) raises nothing, and a refused raise changes nothing else.
    @Test(arguments: [Platform.linux, .apple])
    func nothingToInherit_raisesNothing_andARefusedRaiseChangesNothing(on platform: Platform) {
        let (calls, registry) = fake(platform)
        let unspecified = calls.backend.urgency(ofThreadAt: 0)
        #expect(unspecified.thread == 0)
        _ = registry.set(.thread(thread), source: first, to: unspecified)
        #expect(calls.calls.isEmpty)
        calls.refuseRaises(true)
        _ = registry.set(.thread(thread), source: first, to: Urgency(thread: 25, task: 25))
        #expect(calls.runningUrgency(ofThread: thread) == 0)
        calls.refuseRaises(false)
        _ = registry.set(.thread(thread), source: first, to: nil)
        #expect(calls.leftovers == nil && calls.firstMisuse == nil)
    }

    /// What a waiting party lends the holder: on Apple platforms a task's priority is a QoS class,
    /// and a thread's class is a task priority; on Linux a task lends no thread urgency, and a
    /// real-time thread stands for a `.high` task.
    @Test func whatAWaiterLends_dependsOnThePlatform() {
        let (apple, linux) = (fake(.apple).0.backend, fake(.linux).0.backend)
        #expect(apple.urgency(ofTask: .high) == Urgency(thread: 25, task: 25))
        #expect(linux.urgency(ofTask: .high) == Urgency(thread: 0, task: 25))
        #expect(apple.urgency(ofThreadAt: 33) == Urgency(thread: 33, task: 33))
        #expect(linux.urgency(ofThreadAt: 20) == Urgency(thread: 20, task: TaskPriority.high.rawValue))
        #expect(linux.urgency(ofThreadAt: 0) == Urgency(thread: 0, task: TaskPriority.medium.rawValue))
    }
}
