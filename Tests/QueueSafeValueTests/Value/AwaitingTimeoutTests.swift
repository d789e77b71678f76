import Dispatch
import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

/// `value.async(timeout:)` and `CommandQueue.enqueue/perform(timeout:)`: a command that has not
/// started within its timeout throws `.timedOut` with a snapshot of the queue, leaves the queue and
/// never runs; one that starts in time runs normally.
@Suite(.runsAlongsideOthers) struct AwaitingTimeoutTests {
    @Test func heldValue_timesOut_withASnapshot_andTheCommandNeverRuns() async throws {
        let value = QueueSafeValue(value: 0, label: "held")
        let holder = SectionHolder(value)
        let error = try await withHangTimeout {
            await thrownError { try await value.async(timeout: .milliseconds(30)).highestPriority.set { $0 = 99 } }
        }
        holder.release()
        guard case .timedOut(let diagnostics)? = error else {
            Issue.record("expected .timedOut, got \(String(describing: error))")
            return
        }
        #expect(diagnostics.description.contains("'held'"))
        #expect(try await value.async.highestPriority.get() == 0, "a timed-out command ran")
        #expect(value.diagnostics.waitingCount == 0, "the timed-out command is still queued")
    }

    @Test func commandGrantedInTime_runs() async throws {
        let value = QueueSafeValue(value: 0)
        let holder = SectionHolder(value)
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(20)) { holder.release() }
        let error = try await withHangTimeout {
            await thrownError { try await value.async(timeout: .seconds(10)).lowestPriority.set { $0 += 1 } }
        }
        #expect(error == nil)
        #expect(try await value.async.highestPriority.get() == 1)
    }

    @Test func zeroTimeout_succeedsOnlyOnAFreeValue() async throws {
        let value = QueueSafeValue(value: 0)
        #expect(try await value.async(timeout: .seconds(0)).highestPriority.set { $0 += 1 } == 1)
        let holder = SectionHolder(value)
        let error = try await withHangTimeout {
            await thrownError { try await value.async(timeout: .seconds(0)).highestPriority.get() }
        }
        holder.release()
        #expect(error == .anyTimedOut)
        #expect(try await value.async(timeout: .never).highestPriority.get() == 1)
    }

    /// A release racing the deadline: each command either timed out and never ran, or ran.
    @Test func raceWithTheRelease_eachCommandRunsExactlyWhenItDidNotTimeOut() async throws {
        let value = QueueSafeValue(value: 0)
        var succeeded = 0
        for round in 0..<200 {
            let holder = SectionHolder(value)
            let delay = DispatchTimeInterval.microseconds(round % 7 * 150)
            DispatchQueue.global().asyncAfter(deadline: .now() + delay) { holder.release() }
            let error = try await withHangTimeout {
                await thrownError {
                    try await value.async(timeout: .microseconds(500)).priority(.medium).set { $0 += 1 }
                }
            }
            if error == nil { succeeded += 1 } else { #expect(error == .anyTimedOut) }
            _ = try await value.async.lowestPriority.get()  // the holder has released
        }
        #expect(try await value.async.highestPriority.get() == succeeded)
    }

    @Test func queueOperation_timesOutWhileAnotherRuns_andNeverStarts() async throws {
        let queue = CommandQueue(label: "uploads")
        let gate = Gate()
        let running = queue.enqueue { await gate.wait() }
        let ran = Locked(false)
        let late = queue.enqueue(timeout: .milliseconds(30)) { ran.set(true) }
        // Awaited cancellably, so that the hang timeout can end it if it never times out.
        let error = try await withHangTimeout {
            await thrownError {
                try await withTaskCancellationHandler {
                    try await late.value
                } onCancel: {
                    late.cancel()
                }
            }
        }
        let performError = try await withHangTimeout {
            await thrownError { try await queue.perform(timeout: .milliseconds(30)) { ran.set(true) } }
        }
        gate.open()
        try await running.value
        guard case .timedOut(let diagnostics)? = error else {
            Issue.record("expected .timedOut, got \(String(describing: error))")
            return
        }
        #expect(diagnostics.description.contains("'uploads'"))
        #expect(performError == .anyTimedOut)
        #expect(try await withHangTimeout { try await queue.perform(timeout: .seconds(10)) { 7 } } == 7)
        #expect(!ran.value, "a timed-out operation ran")
    }
}
