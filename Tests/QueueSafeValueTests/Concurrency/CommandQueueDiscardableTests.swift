import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

/// `CommandQueue.Policy.discardable`: a waiting discardable operation never starts once a later
/// operation is enqueued, and its task throws `.cancelled` at once ("latest wins").
@Suite(.runsAlongsideOthers) struct CommandQueueDiscardableTests {

    @Test func waitingDiscardable_isDroppedAtOnce_whenALaterOperationIsEnqueued() async throws {
        let queue = CommandQueue()
        let gate = Gate()
        let blocker = try await holdQueue(queue, until: gate)
        let ran = Recorder<String>()
        let discarded = queue.enqueue(policy: .discardable) { ran.append("discardable") }
        let later = queue.enqueue(priority: .lowest) { ran.append("later") }
        // Its task ends while the queue is still held: it left the queue, it did not wait its turn.
        let error = try await withHangTimeout { await thrownError { try await discarded.value } }
        #expect(error == .cancelled)
        #expect(queue.engine.pendingCount == 1)
        gate.open()
        try await withHangTimeout {
            _ = try await blocker.value
            try await later.value
        }
        #expect(ran.snapshot == ["later"])
    }

    @Test func severalDiscardableSaves_onlyTheLatestRuns() async throws {
        let queue = CommandQueue()
        let gate = Gate()
        let blocker = try await holdQueue(queue, until: gate)
        let saved = Recorder<Int>()
        let saves = (0..<10).map { version in
            queue.enqueue(policy: .discardable) { saved.append(version) }
        }
        let errors = try await withHangTimeout {
            var errors: [QueueSafeValueError?] = []
            for save in saves.dropLast() { errors.append(await thrownError { try await save.value }) }
            return errors
        }
        #expect(errors == Array(repeating: .cancelled, count: 9))
        gate.open()
        try await withHangTimeout {
            _ = try await blocker.value
            try await saves.last!.value
        }
        #expect(saved.snapshot == [9])
    }

    @Test func discardableThatHasStarted_runsToTheEnd_uncancelled() async throws {
        let queue = CommandQueue()
        let gate = Gate()
        let started = Locked(0)
        let running = queue.enqueue(policy: .discardable) { () -> Bool in
            started.increment()
            await gate.wait()
            return Task.isCancelled
        }
        try await waitUntil("the discardable operation started") { started.value == 1 }
        let later = queue.enqueue { 1 }
        gate.open()
        let wasCancelled = try await withHangTimeout { try await running.value }
        #expect(!wasCancelled, "a started discardable operation was cancelled by a later one")
        #expect(try await withHangTimeout { try await later.value } == 1)
    }

    @Test func performDiscardable_throwsCancelledToItsCaller_whenReplaced() async throws {
        let queue = CommandQueue()
        let gate = Gate()
        let blocker = try await holdQueue(queue, until: gate)
        let ran = Locked(0)
        let caller = Task { try await queue.perform(policy: .discardable) { ran.increment() } }
        try await waitUntil("the perform is waiting") { queue.engine.pendingCount == 1 }
        queue.enqueue { ran.increment() }
        let error = try await withHangTimeout { await thrownError { try await caller.value } }
        #expect(error == .cancelled)
        gate.open()
        _ = try await withHangTimeout { try await blocker.value }
        try await waitUntil("the later operation ran") { ran.value == 1 }
        try await waitUntil("the queue drained") { queue.diagnostics.holder == nil }
        #expect(ran.value == 1)
    }

    /// A discardable operation granted on an idle queue has not begun until its task runs it: an
    /// operation enqueued in between must still keep it from beginning. Whether the later enqueue
    /// comes first is a race, but in every round the outcome is consistent (it ran and ended before
    /// the later one, or it never ran and its task threw `.cancelled`), and since a task takes far
    /// longer to start than an enqueue, it is discarded in most rounds; without the check at its
    /// beginning it would run in every round.
    @Test func discardableGrantedAtOnce_isStillDiscarded_beforeItBegins() async throws {
        var discardedRounds = 0
        for _ in 0..<200 {
            let queue = CommandQueue()
            let log = Recorder<String>()
            let first = queue.enqueue(policy: .discardable) { log.append("first") }
            let later = queue.enqueue { log.append("later") }
            let error = try await withHangTimeout { await thrownError { try await first.value } }
            try await withHangTimeout { try await later.value }
            if error == .cancelled {
                discardedRounds += 1
                #expect(log.snapshot == ["later"])
            } else {
                #expect(error == nil)
                #expect(log.snapshot == ["first", "later"])
            }
        }
        #expect(discardedRounds > 0, "a granted discardable operation began after a later enqueue")
    }
}
