import Dispatch
import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

/// A task that holds a value (an awaiting command, a `CommandQueue` operation) runs at least at the
/// priority of the most urgent party waiting for it: waiting tasks and threads escalate it, and a
/// waiter escalated while it waits passes the escalation on. Read through `Task.currentPriority`
/// inside the holder. (Escalation is never undone: a task keeps it until it ends, as when a task is
/// awaited.)
@Suite(.runsAlongsideOthers) struct TaskEscalationTests {
    /// What a holder task saw of its own priority. Read through a gate, never by awaiting the
    /// holder: awaiting a task escalates it to the awaiting task's priority.
    final class Measurement: @unchecked Sendable {  // @unchecked Sendable: `seen` is Locked, the gate is
        let seen = Locked(TaskPriority.background)
        let done = Gate()

        func result() async throws -> TaskPriority {
            try await withHangTimeout { await self.done.wait() }
            return seen.value
        }
    }

    /// Holds `value` in a task of `priority` until `release` opens; then measures the holder's
    /// priority once it is at least `expected` (or what it is after 5 s).
    private static func holdInTask(
        _ value: QueueSafeValue<Int>,
        priority: TaskPriority,
        until release: Gate,
        holding: Gate,
        expected: TaskPriority,
        reads: Bool = false
    ) -> Measurement {
        let measurement = Measurement()
        Task.detached(priority: priority) {
            let hold: @Sendable () async -> Void = {
                holding.open()
                await release.wait()
                // The escalation may reach the task a moment after the waiter suspended.
                let deadline = Date().addingTimeInterval(5)
                while Task.currentPriority < expected && Date() < deadline {
                    try? await Task.sleep(nanoseconds: 1_000_000)
                }
                measurement.seen.set(Task.currentPriority)
            }
            if reads {
                _ = try? await value.async.highestPriority.read { _ in await hold() }
            } else {
                _ = try? await value.async.highestPriority.set { _ in await hold() }
            }
            measurement.done.open()
        }
        return measurement
    }

    @Test func waitingTaskOfHigherPriority_escalatesTheHolderTask() async throws {
        let value = QueueSafeValue(value: 0, label: "escalated by a task")
        let holding = Gate()
        let release = Gate()
        let holder = Self.holdInTask(value, priority: .low, until: release, holding: holding, expected: .high)
        await holding.wait()
        let waiter = Task.detached(priority: .high) { _ = try? await value.async.lowestPriority.get() }
        try await waitUntil { value.diagnostics.waitingCount == 1 }
        release.open()
        let seen = try await holder.result()
        #expect(seen >= .high, "the holder ran at \(seen) while a .high task waited")
        _ = try await withHangTimeout { await waiter.value }
    }

    /// A task's shared read of an idle value holds on the word, without a record in the machine:
    /// a writer that waits for it finds it all the same and escalates it.
    @Test func waitingTaskOfHigherPriority_escalatesATaskReadingOnTheIdlePath() async throws {
        let value = QueueSafeValue(value: 0, label: "a read escalated by a task")
        let holding = Gate()
        let release = Gate()
        let reader = Self.holdInTask(
            value, priority: .low, until: release, holding: holding, expected: .high, reads: true)
        await holding.wait()
        #expect(value.engine.state.loadAcquire() == EngineWord.idleReaderUnit, "the read did not take the idle path")
        let writer = Task.detached(priority: .high) { _ = try? await value.async.lowestPriority.set(newValue: 1) }
        try await waitUntil { value.diagnostics.waitingCount == 1 }
        release.open()
        let seen = try await reader.result()
        #expect(seen >= .high, "the reader ran at \(seen) while a .high writer waited")
        _ = try await withHangTimeout { await writer.value }
        #expect(value.waitBounded.highestPriority.get() == .success(1))
    }

    /// `withTaskPriorityEscalationHandler` needs macOS 26 / iOS 26: below, a task escalated while it
    /// waits passes nothing on (see GettingStarted's Platforms section).
    @available(macOS 26.0, iOS 26.0, tvOS 26.0, watchOS 26.0, visionOS 26.0, *)
    @Test func waiterEscalatedWhileItWaits_passesTheEscalationOn() async throws {
        let value = QueueSafeValue(value: 0, label: "escalation passed on")
        let holding = Gate()
        let release = Gate()
        let holder = Self.holdInTask(value, priority: .low, until: release, holding: holding, expected: .high)
        await holding.wait()
        let waiter = Task.detached(priority: .low) { _ = try? await value.async.lowestPriority.get() }
        try await waitUntil { value.diagnostics.waitingCount == 1 }
        try await Task.sleep(nanoseconds: 10_000_000)  // let it suspend
        waiter.escalatePriority(to: .high)
        release.open()
        let seen = try await holder.result()
        #expect(seen >= .high, "the holder ran at \(seen) after its .low waiter was escalated to .high")
        _ = try await withHangTimeout { await waiter.value }
    }

    /// A thread that blocks for a task's value escalates the task to the priority the thread
    /// stands for (`.medium` for a normal thread on Linux; its QoS class on Apple platforms).
    @Test func blockedThread_escalatesTheHolderTask() async throws {
        let value = QueueSafeValue(value: 0, label: "escalated by a thread")
        let holding = Gate()
        let release = Gate()
        let expected = TaskPriority(rawValue: Urgency.ofCurrentThreadForTesting().task)
        let holder = Self.holdInTask(value, priority: .background, until: release, holding: holding, expected: expected)
        await holding.wait()
        let done = DispatchSemaphore(value: 0)
        Thread {
            _ = value.waitBounded.lowestPriority.get()
            done.signal()
        }.start()
        try await waitUntil { value.diagnostics.waitingCount == 1 }
        try await Task.sleep(nanoseconds: 10_000_000)  // let it spin out and park
        release.open()
        let seen = try await holder.result()
        #expect(seen >= expected, "the holder ran at \(seen) while a thread standing for \(expected) waited")
        #expect(done.wait(timeout: .now() + 30) == .success)
    }

    /// A task granted while a more urgent task still waits behind it inherits that urgency before
    /// its closure starts (the release escalates it, see `CommandEngine.raiseNextHolder`): it sees the
    /// raised priority at once, without waiting for a raise.
    @Test func taskGrantedWhileAMoreUrgentTaskWaits_startsEscalated() async throws {
        let value = QueueSafeValue(value: 0, label: "escalated heir")
        let holding = Gate()
        let release = DispatchSemaphore(value: 0)
        let threadDone = DispatchSemaphore(value: 0)
        Thread {
            _ = value.wait.highestPriority.set { _ in
                holding.open()
                _ = release.wait(timeout: .now() + 30)
            }
            threadDone.signal()
        }.start()
        await holding.wait()
        let measurement = Measurement()
        // First in the value's order (the highest command priority), in a task of low priority.
        Task.detached(priority: .low) {
            _ = try? await value.async.highestPriority.set { _ in measurement.seen.set(Task.currentPriority) }
            measurement.done.open()
        }
        try await waitUntil { value.diagnostics.waitingCount == 1 }
        // Behind it in the value's order, in a task of high priority.
        let urgent = Task.detached(priority: .high) { _ = try? await value.async.lowestPriority.get() }
        try await waitUntil { value.diagnostics.waitingCount == 2 }
        try await Task.sleep(nanoseconds: 10_000_000)  // let both suspend
        release.signal()
        let seen = try await measurement.result()
        #expect(seen >= .high, "the granted task started at \(seen) while a .high task waited behind it")
        _ = try await withHangTimeout { await urgent.value }
        #expect(threadDone.wait(timeout: .now() + 30) == .success)
    }

    /// A `CommandQueue` operation is a task holder too: an operation of higher priority waiting
    /// behind it escalates it.
    @Test func waitingOperationOfHigherPriority_escalatesTheRunningOperation() async throws {
        let queue = CommandQueue(label: "escalated queue")
        let holding = Gate()
        let release = Gate()
        let measurement = Measurement()
        Task.detached(priority: .low) {
            try await queue.perform {
                holding.open()
                await release.wait()
                let deadline = Date().addingTimeInterval(5)
                while Task.currentPriority < .high && Date() < deadline {
                    try? await Task.sleep(nanoseconds: 1_000_000)
                }
                measurement.seen.set(Task.currentPriority)
            }
            measurement.done.open()
        }
        await holding.wait()
        let urgent = Task.detached(priority: .high) { try await queue.perform {} }
        try await waitUntil { queue.diagnostics.waitingCount == 1 }
        release.open()
        let seen = try await measurement.result()
        #expect(seen >= .high, "the running operation ran at \(seen) while a .high one waited")
        _ = try await withHangTimeout { try await urgent.value }
    }
}

extension Urgency {
    /// The urgency a parking thread of this process stands for (`ofCurrentThread()` on a thread of
    /// the default policy).
    static func ofCurrentThreadForTesting() -> Urgency {
        let result = Locked(Urgency.none)
        let done = DispatchSemaphore(value: 0)
        Thread {
            result.set(.ofCurrentThread())
            done.signal()
        }.start()
        done.wait()
        return result.value
    }
}
