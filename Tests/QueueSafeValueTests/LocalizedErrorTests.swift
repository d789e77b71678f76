import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

/// `QueueSafeValueError` is a `LocalizedError`: where an app shows `error.localizedDescription`,
/// every case reads as a sentence, and each has a reason and a recovery suggestion.
@Suite(.runsAlongsideOthers) struct LocalizedErrorTests {
    /// One error of every case; the payloads are made by hand, as the engine would make them.
    static let everyCase: [QueueSafeValueError] = {
        let held = QueueDiagnostics(
            name: "'orders'",
            holder: QueueDiagnostics.Holder(
                kind: .blocking, awaitsCompletion: false, since: nil, sinceIsExact: false, queue: nil,
                isWaitingForItsQueue: false, sharedReads: 0),
            waiting: [.high: 1], isContainerReleased: false)
        let cycle = DeadlockReport(
            kind: .waitCycle,
            cycle: [
                DeadlockReport.Link(waiter: "thread 0x1", value: "'audit'", holder: "thread 0x2"),
                DeadlockReport.Link(waiter: "thread 0x2", value: "'orders'", holder: "thread 0x1"),
            ],
            diagnostics: held, parkedPoolThreads: nil)
        return [
            .valueContainerDeinited, .commandClosureDeallocated, .reentrantAccess, .timedOut(held), .cancelled,
            .invalidArgument("RecurringPolicy interval must be above zero, got -1.0 s"), .deadlock(cycle),
        ]
    }()

    @Test(arguments: everyCase)
    func localizedDescription_isTheErrorDescription_aSentence(_ error: QueueSafeValueError) throws {
        let description = (error as any Error).localizedDescription
        #expect(description == error.errorDescription)
        #expect(!description.contains("The operation could not be completed"))
        #expect(!description.contains("QueueSafeValueError"))
        let first = try #require(description.first)
        #expect(first.isUppercase)
        #expect(description.hasSuffix("."))
    }

    @Test(arguments: everyCase)
    func everyCase_hasAReasonAndARecoverySuggestion(_ error: QueueSafeValueError) throws {
        let reason = try #require(error.failureReason)
        let suggestion = try #require(error.recoverySuggestion)
        #expect(!reason.isEmpty)
        #expect(suggestion.hasSuffix("."))
        #expect(try #require(reason.first).isUppercase)
        #expect(try #require(suggestion.first).isUppercase)
        // Bridged, as AppKit's and UIKit's error presentation read them.
        let bridged = error as NSError
        #expect(bridged.localizedFailureReason == reason)
        #expect(bridged.localizedRecoverySuggestion == suggestion)
        // The three say different things.
        #expect(Set([error.errorDescription, reason, suggestion]).count == 3)
    }

    @Test func localizedDescription_ofEachCase_readsAsWritten() {
        let expected: [QueueSafeValueError: String] = [
            .valueContainerDeinited:
                "The value was released before the command was issued, so the command did not run.",
            .commandClosureDeallocated: "The command was given no closure, so it had nothing to run.",
            .reentrantAccess:
                "The command was issued from inside a critical section of the same value or queue, where it "
                + "would have waited for itself forever, so it failed at once.",
            .cancelled: "The command was cancelled before it started, so it did not run.",
            .invalidArgument("RecurringPolicy interval must be above zero, got -1.0 s"):
                "An argument was out of range: RecurringPolicy interval must be above zero, got -1.0 s.",
        ]
        for (error, text) in expected {
            #expect((error as any Error).localizedDescription == text)
        }
        for error in Self.everyCase {
            switch error {
            case .timedOut:
                #expect(
                    (error as any Error).localizedDescription
                        == "The command did not get the value before its timeout, and it will never run.")
            case .deadlock:
                #expect(
                    (error as any Error).localizedDescription
                        == "The command would have waited forever, so it failed at once instead of deadlocking.")
            default:
                #expect(expected[error] != nil, "every case has an expected text: \(error)")
            }
        }
    }

    @Test func payloads_reachTheReasonAndTheSuggestion() throws {
        let waitingForDone = QueueDiagnostics(
            name: "'orders'",
            holder: QueueDiagnostics.Holder(
                kind: .dispatch, awaitsCompletion: true, since: nil, sinceIsExact: false, queue: "db",
                isWaitingForItsQueue: false, sharedReads: 0),
            waiting: [:], isContainerReleased: false)
        let timedOut = QueueSafeValueError.timedOut(waitingForDone)
        let reason = try #require(timedOut.failureReason)
        #expect(reason.contains("'orders': held by a dispatch command on queue 'db' waiting for done()"))
        #expect(try #require(timedOut.recoverySuggestion).contains("done()"))

        let pool = DeadlockReport(
            kind: .cooperativePoolExhausted, cycle: [], diagnostics: waitingForDone, parkedPoolThreads: (1, 2))
        #expect(try #require(QueueSafeValueError.deadlock(pool).recoverySuggestion).contains("value.async"))
        let cycle = try #require(Self.everyCase.last)
        #expect(try #require(cycle.failureReason).hasPrefix("A wait cycle: thread 0x1 waits for 'audit'"))
    }

    @Test func aRealTimeout_isDescribedWithWhatHeldTheValue() throws {
        final class Outcome: @unchecked Sendable {  // written by the thread before `ended` is signalled
            var result: Result<Int, QueueSafeValueError>?
        }
        let value = QueueSafeValue(value: 0, label: "balance")
        let outcome = Outcome()
        let ended = DispatchSemaphore(value: 0)
        value.wait.highestPriority.get { _ in
            // This thread holds the value while another one tries for a millisecond.
            Thread {
                outcome.result = value.wait(timeout: .milliseconds(1)).lowestPriority.get()
                ended.signal()
            }.start()
            ended.wait()
        }
        guard case .failure(let error) = try #require(outcome.result) else {
            Issue.record("expected a timeout, got \(String(describing: outcome.result))")
            return
        }
        #expect(
            (error as any Error).localizedDescription
                == "The command did not get the value before its timeout, and it will never run.")
        #expect(error.failureReason?.contains("'balance': held by a blocking command") == true)
    }

    // MARK: The one Foundation import of the library changes nothing else

    /// `RecurringExecutorFailure` compares errors through a dynamic `as? any Equatable`. The file
    /// that adds the `LocalizedError` conformance imports Foundation(Essentials) into the library;
    /// these are the semantics that must not move because of it.
    @Test func recurringExecutorFailure_comparesErrorsAsBefore() {
        struct Plain: Error { let code: Int }
        struct Coded: Error, Equatable { let code: Int }
        #expect(RecurringExecutorFailure(Plain(code: 1)) == RecurringExecutorFailure(Plain(code: 1)))
        #expect(RecurringExecutorFailure(Plain(code: 1)) != RecurringExecutorFailure(Plain(code: 2)))
        #expect(RecurringExecutorFailure(Plain(code: 1)) != RecurringExecutorFailure(CancellationError()))
        #expect(RecurringExecutorFailure(Coded(code: 1)) == RecurringExecutorFailure(Coded(code: 1)))
        #expect(RecurringExecutorFailure(Coded(code: 1)) != RecurringExecutorFailure(Coded(code: 2)))
        #expect(RecurringExecutorFailure(Coded(code: 1)) != RecurringExecutorFailure(Plain(code: 1)))
        // QueueSafeValueError compares by case, not payload, also through the wrapper.
        let first = QueueSafeValueError.timedOut(Self.diagnostics(name: "'a'"))
        let second = QueueSafeValueError.timedOut(Self.diagnostics(name: "'b'"))
        #expect(RecurringExecutorFailure(first) == RecurringExecutorFailure(second))
        #expect(RecurringExecutorFailure(first) != RecurringExecutorFailure(QueueSafeValueError.cancelled))
    }

    private static func diagnostics(name: String) -> QueueDiagnostics {
        QueueDiagnostics(name: name, holder: nil, waiting: [:], isContainerReleased: false)
    }
}
