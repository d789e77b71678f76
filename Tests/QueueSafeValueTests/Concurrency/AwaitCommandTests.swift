import Dispatch
import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

/// A plain actor with the same read-`await`-write increment, to show what an actor does not give.
private actor ActorCounter {
    var count = 0

    /// Reads the count, then suspends until `expected` increments have arrived (the last one to
    /// arrive opens `gate`), then writes.
    func incrementAcrossSuspension(arrived: Locked<Int>, expected: Int, gate: Gate) async {
        let current = count
        if arrived.increment() == expected { gate.open() }
        await gate.wait()
        count = current + 1
    }
}

/// Awaiting commands (`value.async.{priority}.{command}`): results, critical sections that last
/// across suspension points, and the uncontended path.
@Suite(.runsAlongsideOthers) struct AwaitCommandTests {

    // MARK: Commands

    @Test func setClosure_canAwaitInsideAndReturnsTheUpdatedValue() async throws {
        let value = QueueSafeValue(value: 10)
        @Sendable func something() async -> Int {
            await Task.yield()
            try? await Task.sleep(nanoseconds: 1_000_000)
            return 5
        }
        let returned = try await value.async.highestPriority.set { value in
            value += await something()
        }
        #expect(returned == 15)
        let read = try await value.async.highestPriority.get()
        #expect(read == 15)
    }

    @Test func map_transformsWithoutChangingTheValue() async throws {
        let value = QueueSafeValue(value: [1, 2, 3])
        let mapped = try await value.async.priority(.high).map { array -> String in
            await Task.yield()
            return array.map(String.init).joined(separator: ",")
        }
        #expect(mapped == "1,2,3")
        let read = try await value.async.highestPriority.get()
        #expect(read == [1, 2, 3])
    }

    @Test func commands_onAContainerReleasedBeforeTheCall_throwValueContainerDeinited() async throws {
        var value: QueueSafeValue<Int>? = QueueSafeValue(value: 1)
        let commands = value!.async.highestPriority
        value = nil
        let error = await thrownError { try await commands.get() }
        #expect(error == .valueContainerDeinited)
    }

    // MARK: Critical sections across suspension points

    @Test func readAwaitWrite_from200ConcurrentTasks_losesNoUpdate() async throws {
        let value = QueueSafeValue(value: 0)
        let taskCount = 200
        try await withHangTimeout {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in 0..<taskCount {
                    group.addTask {
                        try await value.async.priority(CommandPriority(rawValue: UInt8(index % 256))).set { value in
                            let current = value
                            if index.isMultiple(of: 2) {
                                await Task.yield()
                            } else {
                                try? await Task.sleep(nanoseconds: 100_000)
                            }
                            value = current + 1
                        }
                    }
                }
                try await group.waitForAll()
            }
        }
        let final = try await value.async.highestPriority.get()
        #expect(final == taskCount, "an update was lost: the section did not last across the await")
    }

    /// The contrast the docs draw: an actor lets other calls interleave at every `await`. Each
    /// increment below reads the count and then suspends on a gate that opens only once every
    /// increment has read, which an actor allows, so all of them read 0 and 199 of the 200 updates
    /// are lost. (On a QueueSafeValue the same gate could never open: the section is held across
    /// the `await`, which is what the test above relies on.)
    @Test func readAwaitWrite_onAPlainActor_interleavesAtTheAwait_andLosesUpdates() async throws {
        let counter = ActorCounter()
        let taskCount = 200
        let arrived = Locked(0)
        let gate = Gate()
        try await withHangTimeout {
            await withTaskGroup(of: Void.self) { group in
                for _ in 0..<taskCount {
                    group.addTask {
                        await counter.incrementAcrossSuspension(arrived: arrived, expected: taskCount, gate: gate)
                    }
                }
            }
        }
        let final = await counter.count
        #expect(final == 1, "every increment read the count before any of them wrote it")
    }

    @Test func exclusivity_acrossSuspensionPoints_neverTwoSectionsAtOnce_withAllSchedules() async throws {
        let value = QueueSafeValue(value: 0)
        let probe = SectionProbe()
        let awaitingCount = 60
        let blockingCount = 20
        let dispatchCount = 20
        let dispatchQueue = DispatchQueue(label: "exclusivity.dispatch", attributes: .concurrent)
        let dispatched = Locked(0)
        let blocked = Locked(0)

        let threads = ThreadGroup()
        for index in 0..<blockingCount {
            threads.spawn {
                _ = value.wait.priority(CommandPriority(rawValue: UInt8(index * 7 % 256))).set { value in
                    probe.enter()
                    usleep(100)
                    value += 1
                    probe.leave()
                }
                blocked.increment()
            }
        }
        for index in 0..<dispatchCount {
            value.async(performIn: dispatchQueue).priority(CommandPriority(rawValue: UInt8(index * 13 % 256))).set(
                accessClosure: { value in
                    probe.enter()
                    usleep(100)
                    value += 1
                    probe.leave()
                },
                completion: { _ in dispatched.increment() })
        }
        try await withHangTimeout {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in 0..<awaitingCount {
                    group.addTask {
                        try await value.async.priority(CommandPriority(rawValue: UInt8(index * 31 % 256))).set {
                            value in
                            probe.enter()
                            await Task.yield()
                            try? await Task.sleep(nanoseconds: 200_000)
                            await Task.yield()
                            value += 1
                            probe.leave()
                        }
                    }
                }
                try await group.waitForAll()
            }
        }
        try await waitUntil("blocking and dispatch commands finished") {
            blocked.value == blockingCount && dispatched.value == dispatchCount
        }
        try await threads.join()
        #expect(probe.maximumInside == 1, "two commands were inside the critical section at once")
        let final = try await value.async.highestPriority.get()
        #expect(final == (awaitingCount + blockingCount + dispatchCount))
    }

    @Test func awaitingCommands_onTwoDifferentValues_doNotExcludeEachOther() async throws {
        let first = QueueSafeValue(value: 0)
        let second = QueueSafeValue(value: 0)
        let gate = Gate()
        let holder = Task {
            try await first.async.highestPriority.set { value in
                await gate.wait()
                value = 1
            }
        }
        try await waitUntil("holder waits on the gate") { gate.waiterCount == 1 }
        let read = try await withHangTimeout {
            try await second.async.highestPriority.set(newValue: 2)
        }
        #expect(read == 2)
        gate.open()
        _ = try await holder.value
        let firstValue = try await first.async.highestPriority.get()
        #expect(firstValue == 1)
    }

    // MARK: The uncontended path

    /// On an idle value an awaiting command does not suspend: issued from the main actor, it
    /// completes before any other main-actor job can run. A probe job enqueued on the main actor
    /// first would run at the first suspension point (the main actor is FIFO), so it must not have
    /// run yet. The control at the end shows the probe does fire as soon as the task suspends.
    @Test @MainActor func uncontendedCommand_fromTheMainActor_doesNotSuspend() async throws {
        let value = QueueSafeValue(value: 0)
        let probe = Locked(0)
        let probeTask = Task { @MainActor in _ = probe.increment() }

        let read = try await value.async.highestPriority.get()
        #expect(probe.value == 0, "get suspended on an idle value")
        let stored = try await value.async.priority(.low).set(newValue: read + 1)
        #expect(probe.value == 0, "set(newValue:) suspended on an idle value")
        let updated = try await value.async.lowestPriority.set { $0 += 1 }
        #expect(probe.value == 0, "set(closure) suspended on an idle value")
        let mapped = try await value.async.highestPriority.map { $0 * 10 }
        #expect(probe.value == 0, "map suspended on an idle value")
        #expect([stored, updated, mapped] == [1, 2, 20] as [Int])

        // Control: a real suspension point lets the probe run.
        await Task.yield()
        await probeTask.value
        #expect(probe.value == 1)
    }

    /// The contrast: on a busy value the command does suspend (and the probe runs meanwhile).
    @Test @MainActor func contendedCommand_fromTheMainActor_suspendsAndLetsOtherMainActorWorkRun() async throws {
        let value = QueueSafeValue(value: 0)
        let gate = Gate()
        let holder = Task.detached {
            try await value.async.highestPriority.set { value in
                await gate.wait()
                value = 1
            }
        }
        try await waitUntil("holder waits on the gate") { gate.waiterCount == 1 }
        let probe = Locked(0)
        Task { @MainActor in
            probe.increment()
            gate.open()
        }
        let read = try await value.async.highestPriority.get()
        #expect(read == 1)
        #expect(probe.value == 1)
        _ = try await holder.value
    }

    /// The same check on a custom actor: an uncontended command keeps the actor busy from start to
    /// end, so a job enqueued on the actor before it cannot have run.
    @Test func uncontendedCommand_fromAnActor_doesNotSuspend() async throws {
        actor Probe {
            var fired = false
            func fire() { fired = true }

            func runCommandAndReportWhetherProbeRan(on value: QueueSafeValue<Int>) async throws -> Bool {
                Task { self.fire() }
                _ = try await value.async.highestPriority.set { $0 += 1 }
                _ = try await value.async.highestPriority.map { $0 }
                return fired
            }
        }
        let value = QueueSafeValue(value: 0)
        let probe = Probe()
        let probeRan = try await probe.runCommandAndReportWhetherProbeRan(on: value)
        #expect(!probeRan, "the command suspended on an idle value")
    }

    // MARK: Isolation of the closure

    /// The closure runs in the caller's isolation: from the main actor it can touch main-actor
    /// state synchronously, before and after its own `await`.
    @Test @MainActor func closure_runsInTheCallersIsolation_acrossItsSuspensionPoints() async throws {
        let value = QueueSafeValue(value: 0)
        let gate = Gate()
        let holder = Task.detached {
            try await value.async.highestPriority.set { value in
                await gate.wait()
                value = 5
            }
        }
        try await waitUntil("holder waits on the gate") { gate.waiterCount == 1 }
        Task.detached { gate.open() }
        let result = try await value.async.highestPriority.set { value in
            MainActor.assertIsolated()
            await Task.yield()
            MainActor.assertIsolated()
            value += 1
        }
        #expect(result == 6)
        _ = try await holder.value
    }
}
