import Dispatch
import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

/// The operations that run at once (a ``SectionProbe``, which counts them and the most that ever did),
/// and the order in which they started.
final class SlotProbe<Name: Sendable>: Sendable {
    private let inside = SectionProbe()
    private let started = Recorder<Name>()

    /// Counted before it is named: a start seen in ``startOrder`` is counted in ``runningNow``.
    func enter(_ name: Name) {
        inside.enter()
        started.append(name)
    }

    func exit() {
        inside.leave()
    }

    var runningNow: Int { inside.insideCount }
    var mostAtOnce: Int { inside.maximumInside }
    /// The names of the operations in the order they started.
    var startOrder: [Name] { started.snapshot }
}

/// `CommandQueue` of width n: slots, the order in which they are granted, re-prioritization,
/// cancellation and width changes, through the public API.
@Suite(.runsAlongsideOthers) struct CommandQueueWidthTests {
    /// Submits an operation that records its start, waits for `gate`, and ends.
    @discardableResult
    private func submitGated(
        _ queue: CommandQueue, _ name: String, priority: CommandPriority = .medium, probe: SlotProbe<String>, gate: Gate
    ) -> QueuedOperation<String> {
        queue.submit(priority: priority) {
            probe.enter(name)
            await gate.wait()
            probe.exit()
            return name
        }
    }

    @Test func aWidthBelowOneIsRefusedAndChangesNothing() throws {
        #expect(throws: QueueSafeValueError.self) { try CommandQueue(width: 0) }
        #expect(throws: QueueSafeValueError.self) { try CommandQueue(width: -3) }
        let queue = try CommandQueue(width: 3)
        #expect(queue.width == 3)
        do {
            try queue.setWidth(0)
            Issue.record("a width of 0 was accepted")
        } catch {
            guard case .invalidArgument = error else { throw error }
        }
        #expect(queue.width == 3)
        #expect(CommandQueue().width == 1)
    }

    @Test func neverMoreThanTheWidthRunAndEveryOperationRuns() async throws {
        let queue = try CommandQueue(width: 3)
        let probe = SlotProbe<String>()
        let operations = (0..<24).map { index in
            queue.submit(priority: CommandPriority(rawValue: UInt8(index * 10))) {
                probe.enter("\(index)")
                try await Task.sleep(nanoseconds: 2_000_000)
                probe.exit()
                return index
            }
        }
        var results: [Int] = []
        for operation in operations { results.append(try await operation.value) }
        #expect(results == Array(0..<24))
        #expect(probe.mostAtOnce == 3)
        #expect(operations.allSatisfy { $0.state == .finished })
    }

    @Test func eachFreeSlotGoesToTheMostUrgentEarliestWaiter() async throws {
        let queue = try CommandQueue(width: 2)
        let probe = SlotProbe<String>()
        let names = ["running 1", "running 2", "low", "medium 1", "high", "medium 2"]
        let priorities: [CommandPriority] = [.medium, .medium, .low, .medium, .high, .medium]
        let gates = names.map { _ in Gate() }
        var operations: [QueuedOperation<String>] = []
        for index in 0..<2 {
            operations.append(
                submitGated(queue, names[index], priority: priorities[index], probe: probe, gate: gates[index]))
        }
        try await waitUntil("both slots taken") { probe.runningNow == 2 }
        for index in 2..<names.count {
            operations.append(
                submitGated(queue, names[index], priority: priorities[index], probe: probe, gate: gates[index]))
        }
        #expect(operations[2...].allSatisfy { $0.state == .waiting })
        // One slot at a time: each is given to the most urgent, earliest waiter.
        // (The two running ones started side by side, in either order.)
        #expect(Set(probe.startOrder) == ["running 1", "running 2"])
        var expected: [String] = []
        for (released, next) in [(0, "high"), (1, "medium 1"), (4, "medium 2"), (3, "low")] {
            gates[released].open()
            expected.append(next)
            try await waitUntil("\(next) starts") { probe.startOrder.count == expected.count + 2 }
            #expect(Array(probe.startOrder[2...]) == expected)
            #expect(probe.runningNow == 2)
        }
        for gate in gates { gate.open() }
        for operation in operations { _ = try await operation.value }
        #expect(probe.mostAtOnce == 2)
    }

    @Test func aReprioritizedWaiterTakesItsNewPlaceBehindThoseAlreadyThere() async throws {
        let queue = try CommandQueue(width: 1)
        let probe = SlotProbe<String>()
        let running = Gate()
        submitGated(queue, "running", probe: probe, gate: running)
        try await waitUntil("the slot taken") { probe.runningNow == 1 }
        let rest = Gate()
        let prefetchA = submitGated(queue, "prefetch A", priority: .low, probe: probe, gate: rest)
        let visible = submitGated(queue, "visible", priority: .high, probe: probe, gate: rest)
        let prefetchB = submitGated(queue, "prefetch B", priority: .low, probe: probe, gate: rest)
        // B becomes urgent: it moves behind "visible" (already waiting at .high), ahead of A.
        #expect(prefetchB.setPriority(.high) == .waiting)
        #expect(prefetchB.priority == .high)
        running.open()
        rest.open()
        for operation in [prefetchA, visible, prefetchB] { _ = try await operation.value }
        #expect(probe.startOrder == ["running", "visible", "prefetch B", "prefetch A"])
    }

    @Test func aWaitingOperationCancelledNeverRunsAndFreesNoSlot() async throws {
        let queue = try CommandQueue(width: 2)
        let probe = SlotProbe<String>()
        let gate = Gate()
        submitGated(queue, "a", probe: probe, gate: gate)
        submitGated(queue, "b", probe: probe, gate: gate)
        try await waitUntil("both slots taken") { probe.runningNow == 2 }
        let cancelled = submitGated(queue, "cancelled", probe: probe, gate: gate)
        let next = submitGated(queue, "next", probe: probe, gate: gate)
        #expect(cancelled.cancel() == .waiting)
        await #expect(throws: QueueSafeValueError.cancelled) { try await cancelled.value }
        #expect(cancelled.state == .cancelled)
        // Its leaving freed no slot: "next" still waits behind the two running ones.
        try await Task.sleep(nanoseconds: 20_000_000)
        #expect(next.state == .waiting)
        #expect(probe.runningNow == 2)
        gate.open()
        #expect(try await next.value == "next")
        #expect(!probe.startOrder.contains("cancelled"))
        #expect(cancelled.setPriority(.highest) == .cancelled)
        #expect(next.setPriority(.highest) == .finished)
    }

    @Test func aRunningOperationCancelledGivesItsSlotBackWhenItEnds() async throws {
        let queue = try CommandQueue(width: 1)
        let probe = SlotProbe<String>()
        let running = queue.submit { () -> String in
            probe.enter("running")
            // Ends only once cancelled.
            while !Task.isCancelled { try? await Task.sleep(nanoseconds: 1_000_000) }
            probe.exit()
            return "ended after cancellation"
        }
        try await waitUntil("it runs") { running.state == .running }
        let gate = Gate()
        gate.open()
        let next = submitGated(queue, "next", probe: probe, gate: gate)
        #expect(running.cancel() == .running)
        #expect(try await running.value == "ended after cancellation")
        #expect(running.state == .finished)
        #expect(try await next.value == "next")
    }

    @Test func diagnosticsCountTheRunningOperationsAndTheWaitingOnes() async throws {
        let queue = try CommandQueue(label: "wide", width: 3)
        let probe = SlotProbe<String>()
        let gate = Gate()
        let operations = (0..<5).map { index in
            submitGated(queue, "\(index)", priority: index < 3 ? .medium : .low, probe: probe, gate: gate)
        }
        try await waitUntil("three run") { probe.runningNow == 3 }
        let diagnostics = queue.diagnostics
        #expect(diagnostics.holder?.kind == .operation)
        #expect(diagnostics.holder?.sharedReads == 3)
        #expect(diagnostics.waiting == [.low: 2])
        gate.open()
        for operation in operations { _ = try await operation.value }
        #expect(queue.diagnostics.holder == nil)
    }

    @Test func aLargerWidthStartsWaitersAtOnceAndASmallerOneLetsTheRunningFinish() async throws {
        let queue = try CommandQueue(width: 2)
        let probe = SlotProbe<String>()
        let gates = (0..<7).map { _ in Gate() }
        let operations = (0..<7).map { index in submitGated(queue, "\(index)", probe: probe, gate: gates[index]) }
        try await waitUntil("two run") { probe.runningNow == 2 }
        try queue.setWidth(4)
        try await waitUntil("four run") { probe.runningNow == 4 }
        #expect(Set(probe.startOrder) == ["0", "1", "2", "3"])
        try queue.setWidth(2)
        // Four still run; none starts until fewer than two run.
        gates[0].open()
        gates[1].open()
        try await waitUntil("two ended") { operations[0].state == .finished && operations[1].state == .finished }
        try await Task.sleep(nanoseconds: 20_000_000)
        #expect(operations[4].state == .waiting)
        gates[2].open()
        // Its body has started (a start seen in `startOrder` is counted in `runningNow`): the state
        // says `running` from the grant on, a moment before the body enters the probe.
        try await waitUntil("the next one") { operations[4].state == .running && probe.startOrder.count == 5 }
        #expect(probe.runningNow == 2)
        #expect(operations[5].state == .waiting)
        for gate in gates { gate.open() }
        for operation in operations { _ = try await operation.value }
        #expect(probe.startOrder[4] == "4" && Set(probe.startOrder[5...]) == ["5", "6"])
        #expect(probe.mostAtOnce == 4)
    }

    @Test func anOperationThatStartedAloneStaysAloneWhenTheWidthGrows() async throws {
        let queue = CommandQueue()
        let probe = SlotProbe<String>()
        let gates = (0..<4).map { _ in Gate() }
        let operations = (0..<4).map { index in submitGated(queue, "\(index)", probe: probe, gate: gates[index]) }
        try await waitUntil("one runs") { probe.runningNow == 1 }
        try queue.setWidth(3)
        #expect(queue.width == 3)
        // Operation 0 was promised to run alone: the others wait until it ends, then three start.
        try await Task.sleep(nanoseconds: 20_000_000)
        #expect(probe.runningNow == 1)
        gates[0].open()
        try await waitUntil("three run") { probe.runningNow == 3 }
        #expect(probe.startOrder.first == "0" && Set(probe.startOrder) == ["0", "1", "2", "3"])
        for gate in gates { gate.open() }
        for operation in operations { _ = try await operation.value }
        #expect(probe.mostAtOnce == 3)
    }

    @Test func timeoutsAndDiscardingKeepTheirMeaningPerOperation() async throws {
        let queue = try CommandQueue(width: 2)
        let probe = SlotProbe<String>()
        let gate = Gate()
        submitGated(queue, "a", probe: probe, gate: gate)
        submitGated(queue, "b", probe: probe, gate: gate)
        try await waitUntil("both slots taken") { probe.runningNow == 2 }
        // Gives up before a slot frees: it never runs, and takes no slot from anyone.
        let timed = queue.enqueue(timeout: .milliseconds(20)) { probe.enter("timed") }
        await #expect(throws: QueueSafeValueError.self) { try await timed.value }
        // Latest wins: a discardable waiting operation is dropped when a later one is enqueued.
        let discarded = queue.enqueue(policy: .discardable) { probe.enter("discarded") }
        let later = submitGated(queue, "later", probe: probe, gate: gate)
        await #expect(throws: QueueSafeValueError.cancelled) { try await discarded.value }
        gate.open()
        #expect(try await later.value == "later")
        #expect(!probe.startOrder.contains("timed") && !probe.startOrder.contains("discarded"))
        #expect(probe.mostAtOnce == 2)
    }

    @Test func cancelAllCancelsEveryRunningSlotAndEveryWaiter() async throws {
        let queue = try CommandQueue(width: 2)
        let probe = SlotProbe<String>()
        let runners = (0..<2).map { index in
            queue.submit { () -> Bool in
                probe.enter("\(index)")
                while !Task.isCancelled { try? await Task.sleep(nanoseconds: 1_000_000) }
                probe.exit()
                return true
            }
        }
        try await waitUntil("both run") { probe.runningNow == 2 }
        let waiter = queue.submit { false }
        queue.cancelAll()
        for runner in runners { #expect(try await runner.value) }
        await #expect(throws: QueueSafeValueError.cancelled) { try await waiter.value }
        #expect(try await queue.perform { 1 } == 1)
    }

    @Test func performFromInsideAnOperationOfAWideQueueIsRefused() async throws {
        let queue = try CommandQueue(width: 3)
        let inner = try await queue.perform { () -> String in
            #expect(queue.isInsideOperation)
            do {
                return try await queue.perform { "ran" }
            } catch {
                return "\(error)"
            }
        }
        #expect(inner == "\(QueueSafeValueError.reentrantAccess)")
    }

    @Test func raisingARunningOperationEscalatesItsTask() async throws {
        let queue = try CommandQueue(width: 2)
        let started = Gate()
        let proceed = Gate()
        let operation = await Task(priority: .low) {
            queue.submit(priority: .low) { () -> TaskPriority in
                started.open()
                await proceed.wait()
                return Task.currentPriority
            }
        }.value
        await started.wait()
        #expect(operation.setPriority(.high) == .running)
        #expect(operation.priority == .high)
        // Lowering a running operation changes nothing.
        #expect(operation.setPriority(.lowest) == .running)
        #expect(operation.priority == .high)
        proceed.open()
        #expect(try await operation.value >= .high)
    }

    /// An actor whose executor a test keeps busy, so that an operation isolated to it is granted but
    /// cannot start yet.
    private actor BusyActor {
        func submit(to queue: CommandQueue) -> QueuedOperation<TaskPriority> {
            queue.submit(priority: .low) { () -> TaskPriority in
                self.touch()
                return Task.currentPriority
            }
        }

        func touch() {}

        /// Blocks the actor's executor until `release` is signalled.
        func block(entered: DispatchSemaphore, release: DispatchSemaphore) {
            entered.signal()
            release.wait()
        }
    }

    @Test func raisingAGrantedOperationBeforeItStartsEscalatesItAsItStarts() async throws {
        let queue = CommandQueue()
        let gate = Gate()
        let first = queue.submit { await gate.wait() }
        try await waitUntil("the first runs") { first.state == .running }
        let busy = BusyActor()
        let second = await busy.submit(to: queue)
        let entered = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let blocker = Task.detached { await busy.block(entered: entered, release: release) }
        #expect(entered.wait(timeout: .now() + hangTimeout) == .success)
        gate.open()
        // The second is granted, but its actor is busy: it has not started.
        try await waitUntil("the second is granted") { queue.diagnostics.waitingCount == 0 && first.state == .finished }
        #expect(second.state == .waiting)
        // It has not begun: it says so, as `state` does, and its task is escalated now.
        #expect(second.setPriority(.high) == .waiting)
        #expect(second.priority == .high)
        release.signal()
        await blocker.value
        #expect(try await second.value >= .high)
    }

    /// A queue of width 4 under churn: operations submitted from tasks and a thread at every
    /// priority, re-prioritized and cancelled while they wait or run, performed (awaited, so that
    /// their waits take part in deadlock detection, which lists the running slots as the queue's
    /// holders), the width moved between 1 and 4 and the statistics read, all at once. Nothing is
    /// lost, nothing runs twice, an operation cancelled while it waited never runs, and never more
    /// than 4 run at once. Run under ThreadSanitizer in CI, it checks too that the list of running
    /// slots shares no memory with the engine once its lock is let go (issue 55).
    @Test func churnOfPrioritiesCancelsAndWidths_losesNothingAndRunsNothingCancelled() async throws {
        let perWorker = TestEnvironment.iterations(60, sanitized: 30)
        let queue = try CommandQueue(width: 4)
        queue.collectStatistics()
        let probe = SlotProbe<Int>()
        let operation = { @Sendable (index: Int) async -> Int in
            probe.enter(index)
            await Task.yield()
            try? await Task.sleep(nanoseconds: 200_000)
            probe.exit()
            return index
        }
        let handles = Locked<[(index: Int, operation: QueuedOperation<Int>)]>([])
        let cancelledWaiting = Locked<Set<Int>>([])  // cancel() answered .waiting: they must never run
        let performed = Locked<[Int]>([])
        let submitting = Locked(3)
        let submitter = { @Sendable (worker: Int, step: Int) in
            let index = worker * 1_000 + step
            let submitted = queue.submit(priority: CommandPriority.testPriorities[(worker + step) % 7]) {
                await operation(index)
            }
            handles.withLock { $0.append((index, submitted)) }
        }
        let tasks = (0..<2).map { worker in
            Task.detached {
                for step in 0..<perWorker {
                    submitter(worker, step)
                    if step % 3 == 0 {
                        let index = worker * 1_000 + 500 + step
                        let result = try await queue.perform(priority: CommandPriority.testPriorities[step % 7]) {
                            await operation(index)
                        }
                        performed.withLock { $0.append(result) }
                    }
                }
                submitting.add(-1)
            }
        }
        let threads = ThreadGroup()
        threads.spawn {
            for step in 0..<perWorker {
                submitter(2, step)
                if step % 4 == 0 { usleep(200) }
            }
            submitting.add(-1)
        }
        let churn = Task.detached {
            var turn = 0
            while submitting.value > 0 || turn < 4 * perWorker {
                // Picked under the lock: a copy of the list, read after it, would share storage
                // with the list the submitters append to (see `Statistics.unshared`).
                if let (index, handle) = handles.withLock({ $0.isEmpty ? nil : $0[(turn * 7) % $0.count] }) {
                    if turn % 5 == 4 {
                        if handle.cancel() == .waiting { cancelledWaiting.withLock { _ = $0.insert(index) } }
                    } else {
                        handle.setPriority(CommandPriority.testPriorities[turn % 7])
                    }
                }
                if turn % 10 == 9 { try queue.setWidth(turn / 10 % 4 + 1) }
                if turn % 16 == 15 { _ = queue.statistics(reset: turn % 32 == 31)?.description }
                turn += 1
                await Task.yield()
            }
            try queue.setWidth(4)
        }
        // What deadlock detection sees as the queue's holders while it churns: the running
        // operations' tasks, never more than the widest the queue has been. The watcher pauses
        // between looks, taking no lock the queue takes, as a waiter that registers does.
        let churning = Locked(true)
        let strayHolders = Locked<[String]>([])
        threads.spawn {
            while churning.value {
                let holders = queue.engine.holderNodes
                if holders.count > 4 || holders.contains(where: { if case .thread = $0 { true } else { false } }) {
                    strayHolders.withLock { $0.append("\(holders)") }
                }
                usleep(50)
            }
        }
        for task in tasks { try await withHangTimeout { try await task.value } }
        try await withHangTimeout { try await churn.value }
        churning.set(false)
        try await threads.join()
        #expect(strayHolders.value.isEmpty, "\(strayHolders.value)")
        var finished: [Int] = []
        for (index, handle) in handles.value {
            do {
                let result = try await withHangTimeout { try await handle.value }
                #expect(result == index)
                finished.append(index)
            } catch QueueSafeValueError.cancelled {
                #expect(!probe.startOrder.contains(index), "operation \(index) ran, then threw .cancelled")
            }
        }
        let started = probe.startOrder
        #expect(Set(started).count == started.count, "an operation ran twice: \(started)")
        #expect(Set(started) == Set(finished + performed.value), "the operations that ran are those that finished")
        #expect(cancelledWaiting.value.isDisjoint(with: started), "cancelled while waiting, but ran")
        #expect(performed.value.count == 2 * ((perWorker + 2) / 3))
        #expect(probe.mostAtOnce <= 4 && probe.runningNow == 0)
        #expect(queue.statistics() != nil)
    }

    @Test func aPermitComposesWithATaskGroup() async throws {
        let queue = try CommandQueue(width: 2)
        let probe = SlotProbe<String>()
        let sum = try await withThrowingTaskGroup(of: Int.self) { group in
            for index in 0..<10 {
                group.addTask {
                    try await queue.perform(priority: index.isMultiple(of: 2) ? .high : .low) {
                        probe.enter("\(index)")
                        try await Task.sleep(nanoseconds: 1_000_000)
                        probe.exit()
                        return index
                    }
                }
            }
            return try await group.reduce(0, +)
        }
        #expect(sum == 45)
        #expect(probe.mostAtOnce <= 2)
    }
}
