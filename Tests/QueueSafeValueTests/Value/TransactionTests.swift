import Dispatch
import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

/// Issue 42: a throwing `withLock` keeps the changes its closure made before it threw (in place, as
/// documented on every form); `transaction` keeps none of them unless the closure returns, on every
/// schedule. The ledger case: a transfer refused its audit entry with `.deadlock` leaves the ledger
/// as it was.
@Suite(.runsAlongsideOthers) struct TransactionTests {
    struct Refused: Error {}

    @Test func aThrowingWithLock_keepsItsChanges_aTransactionKeepsNone() throws {
        let ledger = QueueSafeValue(value: [100, 200], label: "ledger")
        #expect(throws: Refused.self) {
            try ledger.wait.withLock { balances in
                balances[0] -= 10
                throw Refused()
            }
        }
        #expect(try ledger.wait.read { $0 } == [90, 200], "withLock's changes before the throw stay")
        #expect(throws: Refused.self) {
            try ledger.wait.highestPriority.transaction { balances in
                balances[0] -= 10
                balances.append(1)
                throw Refused()
            }
        }
        #expect(try ledger.wait.read { $0 } == [90, 200], "a transaction that threw changed the value")
        let returned = try ledger.wait.transaction { balances -> Int in
            balances[1] += 5
            return balances[1]
        }
        #expect(returned == 205)
        #expect(try ledger.wait.read { $0 } == [90, 205], "a transaction that returned was not kept")
    }

    @Test func anAwaitingTransaction_keepsTheValueAcrossItsAwaits_andNothingOfItOnAThrow() async throws {
        let ledger = QueueSafeValue(value: [100], label: "ledger")
        await #expect(throws: Refused.self) {
            try await ledger.async.transaction { balances in
                balances[0] -= 10
                await Task.yield()
                throw Refused()
            }
        }
        #expect(try await ledger.async.read { $0 } == [100])
        try await ledger.async.lowestPriority.transaction { balances in
            await Task.yield()
            balances[0] -= 10
        }
        #expect(try await ledger.async.read { $0 } == [90])
    }

    @Test func aDispatchTransaction_deliversTheErrorAndLeavesTheValue() throws {
        let ledger = QueueSafeValue(value: [100], label: "ledger")
        let queue = DispatchQueue(label: "transactions")
        let delivered = DispatchSemaphore(value: 0)
        let outcomes = Locked<[String]>([])
        ledger.async(performIn: queue).transaction(
            { balances in
                balances[0] -= 10
                throw Refused()
            },
            completion: { result in
                outcomes.withLock { $0.append(result.isSuccess ? "returned" : "threw") }
                delivered.signal()
            })
        ledger.async(performIn: queue).highestPriority.transaction(
            { balances in balances[0] += 1 },
            completion: { result in
                outcomes.withLock { $0.append(result.isSuccess ? "returned" : "threw") }
                delivered.signal()
            })
        waitOrFail(delivered)
        waitOrFail(delivered)
        #expect(Set(outcomes.value) == ["threw", "returned"])
        #expect(try ledger.wait.read { $0 } == [101])
    }

    /// The case: a transfer takes the ledger, subtracts, then asks for the audit log, which
    /// another thread holds while it waits for the ledger. The library refuses the second wait with
    /// `.deadlock`; in a `transaction` the subtraction goes with it.
    @Test func aTransferRefusedItsAuditEntry_leavesTheLedgerAsItWas() throws {
        let ledger = QueueSafeValue(value: ["alice": 100], label: "ledger")
        let audit = QueueSafeValue(value: [String](), label: "audit")
        let auditHeld = DispatchSemaphore(value: 0)
        let transferWaits = DispatchSemaphore(value: 0)
        let otherDone = DispatchSemaphore(value: 0)
        Thread {
            // Holds the audit log, then waits for the ledger: closes the cycle once the transfer
            // holds the ledger and asks for the log.
            _ = audit.wait.set { _ in
                auditHeld.signal()
                transferWaits.wait()
                _ = ledger.wait.get()
            }
            otherDone.signal()
        }.start()
        waitOrFail(auditHeld)
        var refused = false
        do {
            try ledger.wait.transaction { balances in
                balances["alice", default: 0] -= 10
                transferWaits.signal()
                // The other thread parks waiting for the ledger first, so this wait closes the
                // cycle and is the one refused.
                waitUntil("the other thread is registered, parked, as waiting for the ledger") {
                    DeadlockDetector.shared.registeredWaits.values.contains {
                        $0.engine.engine.takeUnretainedValue() === ledger.engine
                    }
                }
                try audit.wait.withLock { $0.append("alice -10") }
            }
        } catch QueueSafeValueError.deadlock {
            refused = true
        }
        waitOrFail(otherDone, "the other thread to finish")
        #expect(refused, "the transfer's wait for the audit log was not refused")
        #expect(try ledger.wait.read { $0["alice"] } == 100, "the refused transfer's subtraction stayed")
        #expect(try audit.wait.read { $0 }.isEmpty)
    }
}
