import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

/// A blocking `set` that fails because of how the calling code is built (reentrant, or closing a
/// wait cycle) is reported to `LostUpdates.handler`: its result may be discarded, and the update must
/// not be lost without a word.
@Suite(.runsAlongsideOthers) struct LostUpdateTests {
    /// The shape: a fee applied from inside the withdrawal's own section. The inner `set`
    /// cannot run (it would wait for itself); its discarded result no longer hides that.
    @Test func reentrantSet_withItsResultDiscarded_isReported() {
        LostUpdateRecorder.install()
        let balance = QueueSafeValue(value: 100, label: "balance (reentrant set)")
        func applyFee(_ balance: QueueSafeValue<Int>) {
            balance.wait.highestPriority.set { $0 -= 1 }
        }
        balance.wait.highestPriority.set { amount in
            amount -= 30
            applyFee(balance)
        }
        balance.wait.highestPriority.set(newValue: 0)
        balance.wait.highestPriority.set(manualCompletion: { _, done in
            balance.wait.highestPriority.set(newValue: 5)
            balance.wait.highestPriority.set(manualCompletion: { _, inner in inner() })
            done()
        })
        #expect(balance.wait.highestPriority.get() == .success(0))
        let reports = LostUpdateRecorder.reports(forLabel: "balance (reentrant set)")
        #expect(reports.map(\.error) == [.reentrantAccess, .reentrantAccess, .reentrantAccess], "\(reports)")
        #expect(reports.first?.description.contains("'balance (reentrant set)'") == true)
        #expect(reports.first?.description.contains("reentrantAccess") == true)
    }

    /// Failures the caller cannot miss, or chose, are not reported: `get` and `map` return results
    /// that must be used, awaiting commands throw, and a timeout is the caller's own limit.
    @Test func failuresTheCallerSees_orChose_areNotReported() async {
        LostUpdateRecorder.install()
        let value = QueueSafeValue(value: 1, label: "not lost")
        value.wait.highestPriority.set { _ in
            _ = value.wait.highestPriority.get()
            _ = value.wait.highestPriority.map { $0 + 1 }
            value.wait.highestPriority.get { _ in }
        }
        let holder = SectionHolder(value)
        let timedOut = value.wait(timeout: .milliseconds(1)).highestPriority.set { $0 += 1 }
        #expect(timedOut == .failure(.anyTimedOut))
        holder.release()
        _ = try? await value.async.highestPriority.set { _ in
            _ = try? await value.async.highestPriority.set { $0 += 1 }
        }
        #expect(LostUpdateRecorder.reports(forLabel: "not lost").isEmpty)
    }

    /// A `set` refused because it would close a lock-order cycle is reported too.
    @Test func setRefusedAsADeadlock_isReported() {
        LostUpdateRecorder.install()
        let first = QueueSafeValue(value: 0, label: "lost-update cycle A")
        let second = QueueSafeValue(value: 0, label: "lost-update cycle B")
        let bothHold = DispatchGroup()
        let done = DispatchGroup()
        // Both enter before either thread starts: each waits until both hold their first value.
        for _ in 0..<2 {
            bothHold.enter()
            done.enter()
        }
        for (mine, theirs) in [(first, second), (second, first)] {
            Thread {
                mine.wait.highestPriority.set { _ in
                    bothHold.leave()
                    _ = bothHold.wait(timeout: .now() + 30)
                    theirs.wait.highestPriority.set { $0 += 1 }
                }
                done.leave()
            }.start()
        }
        #expect(done.wait(timeout: .now() + 30) == .success, "the cycle hung")
        let reports =
            LostUpdateRecorder.reports(forLabel: "lost-update cycle A")
            + LostUpdateRecorder.reports(forLabel: "lost-update cycle B")
        #expect(reports.count >= 1 && reports.allSatisfy { $0.error == .anyDeadlock }, "\(reports)")
    }

    @Test func lostUpdateDescription_namesTheValue_andTheHandler() {
        let report = LostUpdate(error: .reentrantAccess, value: "'x'")
        #expect(report.description.hasPrefix("QueueSafeValue: a blocking set on 'x' did not run"))
        #expect(report.description.contains("LostUpdates.handler"))
    }
}
