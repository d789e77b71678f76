import Dispatch
import Foundation
import XCTest

@testable import QueueSafeValue

final class TimeoutTests: XCTestCase {
    func test_waitWithTimeout_whenValueHeldTooLong_timesOut_andNeverRunsLater() {
        let value = QueueSafeValue(value: 0)
        let holder = SectionHolder(value)
        let closureRan = Locked(false)
        let timed = value.wait(timeout: .milliseconds(30)).highestPriority
        XCTAssertEqual(timed.set { _ in closureRan.set(true) }, .failure(.anyTimedOut))
        XCTAssertEqual(timed.get(), .failure(.anyTimedOut))
        XCTAssertEqual(timed.set(newValue: 5), .failure(.anyTimedOut))
        XCTAssertEqual(
            timed.set { _, done in
                closureRan.set(true)
                done()
            }, .failure(.anyTimedOut))
        XCTAssertEqual(timed.map { _ in closureRan.set(true) }.map { _ in 0 }, .failure(.anyTimedOut))
        var received: [Result<Int, QueueSafeValueError>] = []
        timed.get { received.append($0) }
        timed.get { result, done in
            received.append(result)
            done()
        }
        XCTAssertEqual(received, [.failure(.anyTimedOut), .failure(.anyTimedOut)])
        XCTAssertEqual(value.storage.engine.pendingCount, 0, "a timed-out command is still pending")

        holder.release()
        // The queue keeps working, and the timed-out commands stay dead.
        XCTAssertEqual(value.waitBounded.lowestPriority.set { $0 += 1 }, .success(1))
        sleepBriefly(milliseconds: 20)
        XCTAssertFalse(closureRan.value, "a timed-out command ran later")
        XCTAssertEqual(value.waitBounded.lowestPriority.get(), .success(1))
        XCTAssertEqual(value.storage.engine.pendingCount, 0)
    }

    func test_timedOutWaiterBetweenOthers_isSkipped_andOthersKeepTheirOrder() {
        let value = QueueSafeValue(value: [String]())
        let holder = SectionHolder(value)
        let threads = ThreadGroup()
        let timedResult = Locked<Result<[String], QueueSafeValueError>?>(nil)
        threads.spawn { value.wait.priority(.medium).set { $0.append("first") } }
        waitForPending(value.storage.engine, count: 1)
        threads.spawn {
            timedResult.set(value.wait(timeout: .milliseconds(300)).priority(.medium).set { $0.append("timed") })
        }
        // Counting the timed waiter whether or not it has given up yet (it may, on a slow machine).
        let engine = value.storage.engine
        expectEventually("the timed waiter to queue") { engine.pendingCount + (timedResult.value == nil ? 0 : 1) == 2 }
        threads.spawn { value.wait.priority(.medium).set { $0.append("second") } }
        expectEventually("the second waiter to queue") { engine.pendingCount + (timedResult.value == nil ? 0 : 1) == 3 }
        value.async(performIn: .global()).lowestPriority.set { $0.append("dispatch") }
        expectEventually("the timed command to give up") { timedResult.value != nil }
        XCTAssertEqual(timedResult.value, .failure(.anyTimedOut))
        XCTAssertEqual(value.storage.engine.pendingCount, 3)

        holder.release()
        threads.join()
        expectEventually("every live command to run") { value.storage.engine.pendingCount == 0 }
        XCTAssertEqual(value.waitBounded.lowestPriority.get(), .success(["first", "second", "dispatch"]))
    }

    func test_waitWithTimeout_succeeds_whenValueIsReleasedInTime() {
        let value = QueueSafeValue(value: 0)
        let holder = SectionHolder(value)
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(20)) { holder.release() }
        XCTAssertEqual(value.waitBounded.lowestPriority.set { $0 += 1 }, .success(1))
    }

    func test_zeroOrNegativeTimeout_succeedsOnlyWhenValueIsFree() {
        let value = QueueSafeValue(value: 0)
        XCTAssertEqual(value.wait(timeout: .seconds(0)).lowestPriority.set { $0 += 1 }, .success(1))
        XCTAssertEqual(value.wait(timeout: .milliseconds(-5)).lowestPriority.set { $0 += 1 }, .success(2))
        let holder = SectionHolder(value)
        XCTAssertEqual(value.wait(timeout: .seconds(0)).lowestPriority.get(), .failure(.anyTimedOut))
        XCTAssertEqual(value.wait(timeout: .milliseconds(-5)).lowestPriority.get(), .failure(.anyTimedOut))
        holder.release()
        XCTAssertEqual(value.waitBounded.lowestPriority.get(), .success(2))
    }

    func test_neverTimeout_waitsUntilValueIsFree() {
        let value = QueueSafeValue(value: 0)
        let holder = SectionHolder(value)
        let result = Locked<Result<Int, QueueSafeValueError>?>(nil)
        let threads = ThreadGroup()
        threads.spawn { result.set(value.wait(timeout: .never).lowestPriority.set { $0 += 1 }) }
        waitForPending(value.storage.engine, count: 1)
        sleepBriefly()
        XCTAssertNil(result.value)
        holder.release()
        threads.join()
        XCTAssertEqual(result.value, .success(1))
    }

    func test_hugeTimeout_waitsUntilValueIsFree_withoutOverflowing() {
        let value = QueueSafeValue(value: 0)
        let holder = SectionHolder(value)
        let results = Recorder<Result<Int, QueueSafeValueError>>()
        let threads = ThreadGroup()
        threads.spawn {
            results.append(value.wait(timeout: .seconds(Int.max)).lowestPriority.set { $0 += 1 })
            results.append(value.wait(timeout: .nanoseconds(Int.max)).lowestPriority.set { $0 += 1 })
        }
        waitForPending(value.storage.engine, count: 1)
        sleepBriefly()
        XCTAssertEqual(results.count, 0, "a huge timeout expired at once")
        holder.release()
        threads.join()
        XCTAssertEqual(results.snapshot, [.success(1), .success(2)])
    }

    func test_syncedValueWithTimeout_timesOut_andKeepsWorking() {
        let synced = QueueSafeSyncedValue(value: 0, timeout: .milliseconds(30))
        let storedDone = Locked<CommandCompletionClosure?>(nil)
        let entered = DispatchSemaphore(value: 0)
        let threads = ThreadGroup()
        threads.spawn {
            synced.highestPriority.get { _, done in
                storedDone.set(done)
                entered.signal()
            }
        }
        waitOrFail(entered)
        let closureRan = Locked(false)
        XCTAssertEqual(synced.lowestPriority.set { _ in closureRan.set(true) }, .failure(.anyTimedOut))
        XCTAssertEqual(synced.highestPriority.get(), .failure(.anyTimedOut))
        storedDone.value?()
        threads.join()
        XCTAssertEqual(synced.lowestPriority.set { $0 += 1 }, .success(1))
        XCTAssertFalse(closureRan.value)

        // Without a timeout, a synced value waits as long as it takes.
        let patient = QueueSafeSyncedValue(value: 0)
        XCTAssertEqual(patient.lowestPriority.set { $0 += 1 }, .success(1))
    }

    /// The timed wait and the grant race; exactly one must win: a command either ran once and
    /// reported success, or reported `.timedOut` and never ran.
    func test_timeoutsRacingGrants_eachCommandEitherRunsOnceOrTimesOut() {
        let waiterCount = 4
        let perWaiter = TestEnvironment.iterations(4_000, sanitized: 2_000)
        let seed: UInt64 = 0x5EED_7130_0001
        print("TimeoutTests race seed: 0x\(String(seed, radix: 16))")
        let value = QueueSafeValue(value: 0)
        let runs = Locked(0)
        let successes = Locked(0)
        let timeouts = Locked(0)
        let unexpected = Recorder<QueueSafeValueError>()
        let issued = Locked(0)
        let stop = Locked(false)
        // A cap on the work (not a check on speed): on a loaded machine the waiters stop early and
        // the bookkeeping below is checked on what they did issue.
        let workBudget = DispatchTime.now() + .seconds(10)
        let threads = ThreadGroup()
        // Holders keep the value busy for short random spells, so grants land near deadlines.
        for holder in 0..<2 {
            threads.spawn {
                var random = SplitMix64(seed: seed &+ UInt64(holder))
                while !stop.value {
                    // Busy for up to 300 µs of real time (no yielding: a yield on a loaded machine
                    // can last a whole time slice).
                    let holdNanoseconds = UInt64.random(in: 0..<300_000, using: &random)
                    value.wait.priority(allTestPriorities.randomElement(using: &random)!).set { _ in
                        let until = DispatchTime.now().uptimeNanoseconds + holdNanoseconds
                        while DispatchTime.now().uptimeNanoseconds < until {}
                    }
                }
            }
        }
        let waitersDone = DispatchGroup()
        for waiter in 0..<waiterCount {
            waitersDone.enter()
            threads.spawn {
                var random = SplitMix64(seed: seed &+ 100 &+ UInt64(waiter))
                for _ in 0..<perWaiter where DispatchTime.now() < workBudget {
                    issued.add(1)
                    let timeout = DispatchTimeInterval.microseconds(Int.random(in: 0..<400, using: &random))
                    let priority = allTestPriorities.randomElement(using: &random)!
                    let result = value.wait(timeout: timeout).priority(priority).set { counter in
                        counter += 1
                        runs.add(1)
                    }
                    switch result {
                    case .success: successes.add(1)
                    case .failure(.timedOut): timeouts.add(1)
                    case .failure(let error): unexpected.append(error)
                    }
                }
                waitersDone.leave()
            }
        }
        waitOrFail(waitersDone, "the timed waiters")
        stop.set(true)
        threads.join()

        print("TimeoutTests race: \(issued.value) issued, \(successes.value) ran, \(timeouts.value) timed out")
        XCTAssertEqual(unexpected.snapshot, [])
        XCTAssertEqual(successes.value + timeouts.value, issued.value, "a command was lost")
        XCTAssertGreaterThan(successes.value, 0)
        XCTAssertGreaterThan(timeouts.value, 0)
        XCTAssertEqual(runs.value, successes.value, "a timed-out command ran, or a successful one did not")
        XCTAssertEqual(value.waitBounded.lowestPriority.get(), .success(successes.value))
        XCTAssertEqual(value.storage.engine.pendingCount, 0)
    }
}
