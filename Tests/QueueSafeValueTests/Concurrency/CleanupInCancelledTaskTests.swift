import Dispatch
import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

/// Issue 42: cleanup in a cancelled task. A plain awaiting command in a cancelled task throws
/// `.cancelled` without running, so a slot given back with `try? await slots.async.withLock { … }`
/// is silently kept (the photo feed's hang); the same command on `async.evenIfCancelled` waits for
/// its turn and runs. The feed's case is the sample in Concurrency.md ("Cleaning up in a cancelled
/// task").
@Suite(.runsAlongsideOthers) struct CleanupInCancelledTaskTests {
    /// How the download gives its slot back.
    enum GiveBack: String, CaseIterable, CustomTestStringConvertible {
        /// `try? await slots.async.withLock { $0 -= 1 }`: what the feed wrote.
        case plain
        /// `try? await slots.async.evenIfCancelled.withLock { $0 -= 1 }`.
        case evenIfCancelled

        var testDescription: String { rawValue }
    }

    /// The feed, reduced: a download takes a slot, is cancelled while it loads (its cell scrolled
    /// away), and gives the slot back on its way out. With the plain command the counter stays at 1
    /// for good (the hang: every later download waits for a free slot); with `evenIfCancelled` it
    /// goes back to 0.
    @Test(arguments: GiveBack.allCases)
    func aSlotGivenBackInACancelledTask_isGivenBackOnlyEvenIfCancelled(_ form: GiveBack) async throws {
        let slots = QueueSafeValue(value: 0, label: "download slots")
        let loading = Gate()
        let download = Task {
            try await slots.async.withLock { $0 += 1 }  // take a slot
            do {
                loading.open()
                try await Task.sleep(nanoseconds: 60_000_000_000)  // the image loads; cancelled first
            } catch {
                switch form {
                case .plain: try? await slots.async.withLock { $0 -= 1 }
                case .evenIfCancelled: try? await slots.async.evenIfCancelled.withLock { $0 -= 1 }
                }
                throw error
            }
        }
        await loading.wait()
        download.cancel()
        _ = try await withHangTimeout { await download.result }
        let count = try await slots.async.get()
        switch form {
        case .plain: #expect(count == 1, "the plain command ran in a cancelled task")
        case .evenIfCancelled: #expect(count == 0, "the slot was not given back")
        }
    }

    /// A cleanup command of a task cancelled *while it waits* for a busy value: the plain command
    /// leaves the queue at once and never runs; the `evenIfCancelled` one keeps its place and runs
    /// once the holder releases, in its turn.
    @Test(arguments: GiveBack.allCases)
    func cancelledWhileWaiting_theCleanupKeepsItsPlace_andRunsInItsTurn(_ form: GiveBack) async throws {
        let slots = QueueSafeValue(value: 1, label: "slots")
        let holding = Gate()
        let release = Gate()
        let holder = Task {
            try await slots.async.highestPriority.withLock { _ in
                holding.open()
                await release.wait()
            }
        }
        await holding.wait()
        let cleanup = Task {
            switch form {
            case .plain: try await slots.async.withLock { $0 -= 1 }
            case .evenIfCancelled: try await slots.async.evenIfCancelled.withLock { $0 -= 1 }
            }
        }
        try await waitUntil("the cleanup waits") { slots.diagnostics.waitingCount == 1 }
        cleanup.cancel()
        switch form {
        case .plain:
            let outcome = try await withHangTimeout { await cleanup.result }
            #expect(throws: QueueSafeValueError.cancelled) { try outcome.get() }
            #expect(slots.diagnostics.waitingCount == 0, "the cancelled command kept its place")
        case .evenIfCancelled:
            try await Task.sleep(nanoseconds: 20_000_000)
            #expect(slots.diagnostics.waitingCount == 1, "the cleanup left the queue when its task was cancelled")
        }
        release.open()
        _ = try await withHangTimeout { await holder.result }
        let outcome = try await withHangTimeout { await cleanup.result }
        let count = try await slots.async.get()
        switch form {
        case .plain: #expect(count == 1)
        case .evenIfCancelled:
            #expect(throws: Never.self) { try outcome.get() }
            #expect(count == 0, "the cleanup did not run after its turn came")
        }
    }

    /// The cleanup form keeps every other rule of the awaiting schedule: its timeout (it gives up
    /// with `.timedOut`, and never runs later), its priority, and its refusal of reentrancy; and in
    /// a task that is not cancelled it is the plain command.
    @Test func evenIfCancelled_keepsTheTimeoutPriorityAndReentrancyRules() async throws {
        let value = QueueSafeValue(value: 0, label: "cleanup rules")
        let holding = Gate()
        let release = Gate()
        let holder = Task {
            try await value.async.withLock { _ in
                holding.open()
                await release.wait()
            }
        }
        await holding.wait()
        let timed = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await value.async(timeout: .milliseconds(50)).evenIfCancelled.withLock { $0 += 100 }
        }
        let timedOutcome = try await withHangTimeout { await timed.result }
        #expect(throws: (any Error).self) { try timedOutcome.get() }
        if case .failure(let error) = timedOutcome {
            #expect((error as? QueueSafeValueError)?.isTimedOut == true, "got \(error) instead of .timedOut")
        }
        // Priorities: a cancelled task's high cleanup runs before a low command queued earlier.
        let order = Locked<[String]>([])
        let low = Task { try await value.async.lowestPriority.withLock { _ in order.withLock { $0.append("low") } } }
        try await waitUntil("the low command waits") { value.diagnostics.waitingCount == 1 }
        let high = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            try await value.async.evenIfCancelled.highestPriority.withLock { _ in order.withLock { $0.append("high") } }
        }
        try await waitUntil("the high cleanup waits") { value.diagnostics.waitingCount == 2 }
        release.open()
        _ = try await withHangTimeout { await holder.result }
        _ = try await withHangTimeout { await low.result }
        _ = try await withHangTimeout { await high.result }
        #expect(order.value == ["high", "low"])
        // Reentrancy is refused as on the plain schedule.
        let nested = try await value.async.withLock { _ in
            do {
                try await value.async.evenIfCancelled.withLock { _ in }
                return "ran"
            } catch {
                return "\(error)"
            }
        }
        #expect(nested == "\(QueueSafeValueError.reentrantAccess)")
        #expect(try await value.async.evenIfCancelled.read { $0 } == 0, "the timed-out cleanup ran later")
    }
}

extension QueueSafeValueError {
    fileprivate var isTimedOut: Bool {
        if case .timedOut = self { return true }
        return false
    }
}
