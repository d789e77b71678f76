import Dispatch
import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue
@testable import QueueSafeValueTesting  // SplitMix64, the explorer's seeded generator

@Suite(.runsAlongsideOthers) struct TimeoutTests {
    @Test func waitWithTimeout_whenValueHeldTooLong_timesOut_andNeverRunsLater() throws {
        let value = QueueSafeValue(value: 0)
        let holder = SectionHolder(value)
        let closureRan = Locked(false)
        let timed = value.wait(timeout: .milliseconds(30)).highestPriority
        #expect((timed.set { _ in closureRan.set(true) }) == .failure(.anyTimedOut))
        #expect(timed.get() == .failure(.anyTimedOut))
        #expect(timed.set(newValue: 5) == .failure(.anyTimedOut))
        #expect(
            timed.set { _, done in
                closureRan.set(true)
                done()
            } == .failure(.anyTimedOut))
        #expect((timed.map { _ in closureRan.set(true) }.map { _ in 0 }) == .failure(.anyTimedOut))
        var received: [Result<Int, QueueSafeValueError>] = []
        timed.get { received.append($0) }
        timed.get { result, done in
            received.append(result)
            done()
        }
        #expect(received == [.failure(.anyTimedOut), .failure(.anyTimedOut)])
        #expect(value.engine.pendingCount == 0, "a timed-out command is still pending")

        holder.release()
        // The queue keeps working, and the timed-out commands stay dead.
        #expect((value.waitBounded.lowestPriority.set { $0 += 1 }) == .success(1))
        sleepBriefly(milliseconds: 20)
        #expect(!closureRan.value, "a timed-out command ran later")
        #expect(value.waitBounded.lowestPriority.get() == .success(1))
        #expect(value.engine.pendingCount == 0)
    }

    @Test func timedOutWaiterBetweenOthers_isSkipped_andOthersKeepTheirOrder() throws {
        let value = QueueSafeValue(value: [String]())
        let holder = SectionHolder(value)
        let threads = ThreadGroup()
        let timedResult = Locked<Result<[String], QueueSafeValueError>?>(nil)
        threads.spawn { value.wait.priority(.medium).set { $0.append("first") } }
        waitForPending(value.engine, count: 1)
        threads.spawn {
            timedResult.set(value.wait(timeout: .milliseconds(300)).priority(.medium).set { $0.append("timed") })
        }
        // Counting the timed waiter whether or not it has given up yet (it may, on a slow machine).
        let engine = value.engine
        waitUntil("the timed waiter to queue") { engine.pendingCount + (timedResult.value == nil ? 0 : 1) == 2 }
        threads.spawn { value.wait.priority(.medium).set { $0.append("second") } }
        waitUntil("the second waiter to queue") { engine.pendingCount + (timedResult.value == nil ? 0 : 1) == 3 }
        value.async(performIn: .global()).lowestPriority.set { $0.append("dispatch") }
        waitUntil("the timed command to give up") { timedResult.value != nil }
        #expect(timedResult.value == .failure(.anyTimedOut))
        #expect(value.engine.pendingCount == 3)

        holder.release()
        threads.join()
        waitUntil("every live command to run") { value.engine.pendingCount == 0 }
        #expect(value.waitBounded.lowestPriority.get() == .success(["first", "second", "dispatch"]))
    }

    @Test func waitWithTimeout_succeeds_whenValueIsReleasedInTime() throws {
        let value = QueueSafeValue(value: 0)
        let holder = SectionHolder(value)
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(20)) { holder.release() }
        #expect((value.waitBounded.lowestPriority.set { $0 += 1 }) == .success(1))
    }

    @Test func zeroTimeout_succeedsOnlyWhenValueIsFree() throws {
        let value = QueueSafeValue(value: 0)
        #expect((value.wait(timeout: .seconds(0)).lowestPriority.set { $0 += 1 }) == .success(1))
        #expect((value.wait(timeout: .nanoseconds(0)).lowestPriority.set { $0 += 1 }) == .success(2))
        let holder = SectionHolder(value)
        #expect(value.wait(timeout: .seconds(0)).lowestPriority.get() == .failure(.anyTimedOut))
        holder.release()
        #expect(value.waitBounded.lowestPriority.get() == .success(2))
    }

    /// A negative timeout is a mistake, refused like every negative interval of the library, on a
    /// free value as on a held one, and the command never runs. (It used to mean "try once".)
    @Test(arguments: [.milliseconds(-5), .seconds(-1), .nanoseconds(-1)] as [DispatchTimeInterval])
    func negativeTimeout_isInvalidArgument_onEverySchedule(timeout: DispatchTimeInterval) async throws {
        let value = QueueSafeValue(value: 0)
        let ran = Locked(0)
        let blocking = value.wait(timeout: timeout).lowestPriority.set { _ in ran.increment() }
        #expect(blocking.isNegativeTimeout, "\(blocking)")
        let synced = QueueSafeSyncedValue(value: 0, timeout: timeout).highestPriority.get()
        #expect(synced.isNegativeTimeout, "\(synced)")
        let awaiting = await thrownError {
            try await value.async(timeout: timeout).highestPriority.set { _ in ran.increment() }
        }
        #expect(awaiting.isNegativeTimeout, "\(String(describing: awaiting))")
        let queue = CommandQueue(label: "negative")
        let enqueued = await queue.enqueue(timeout: timeout) { ran.increment() }.result
        #expect(enqueued.isNegativeTimeout, "\(enqueued)")
        do {
            _ = try await queue.perform(timeout: timeout) { ran.increment() }
            Issue.record("perform with a negative timeout ran")
        } catch let error as QueueSafeValueError {
            #expect(error.isNegativeTimeout, "\(error)")
        }
        #expect(ran.value == 0)
        #expect(queue.engine.pendingCount == 0 && value.engine.pendingCount == 0)
    }

    @Test func neverTimeout_waitsUntilValueIsFree() throws {
        let value = QueueSafeValue(value: 0)
        let holder = SectionHolder(value)
        let result = Locked<Result<Int, QueueSafeValueError>?>(nil)
        let threads = ThreadGroup()
        threads.spawn { result.set(value.wait(timeout: .never).lowestPriority.set { $0 += 1 }) }
        waitForPending(value.engine, count: 1)
        sleepBriefly()
        #expect(result.value == nil)
        holder.release()
        threads.join()
        #expect(result.value == .success(1))
    }

    @Test func hugeTimeout_waitsUntilValueIsFree_withoutOverflowing() throws {
        let value = QueueSafeValue(value: 0)
        let holder = SectionHolder(value)
        let results = Recorder<Result<Int, QueueSafeValueError>>()
        let threads = ThreadGroup()
        threads.spawn {
            results.append(value.wait(timeout: .seconds(Int.max)).lowestPriority.set { $0 += 1 })
            results.append(value.wait(timeout: .nanoseconds(Int.max)).lowestPriority.set { $0 += 1 })
        }
        waitForPending(value.engine, count: 1)
        sleepBriefly()
        #expect(results.count == 0, "a huge timeout expired at once")
        holder.release()
        threads.join()
        #expect(results.snapshot == [.success(1), .success(2)])
    }

    @Test func syncedValueWithTimeout_timesOut_andKeepsWorking() throws {
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
        #expect((synced.lowestPriority.set { _ in closureRan.set(true) }) == .failure(.anyTimedOut))
        #expect(synced.highestPriority.get() == .failure(.anyTimedOut))
        storedDone.value?()
        threads.join()
        #expect((synced.lowestPriority.set { $0 += 1 }) == .success(1))
        #expect(!closureRan.value)

        // Without a timeout, a synced value waits as long as it takes.
        let patient = QueueSafeSyncedValue(value: 0)
        #expect((patient.lowestPriority.set { $0 += 1 }) == .success(1))
    }

    /// The timed wait and the grant race; exactly one must win: a command either ran once and
    /// reported success, or reported `.timedOut` and never ran.
    @Test func timeoutsRacingGrants_eachCommandEitherRunsOnceOrTimesOut() throws {
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
                    value.wait.priority(CommandPriority.testPriorities.randomElement(using: &random)!).set { _ in
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
                    let priority = CommandPriority.testPriorities.randomElement(using: &random)!
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
        #expect(unexpected.snapshot == [])
        #expect((successes.value + timeouts.value) == issued.value, "a command was lost")
        #expect(successes.value > 0)
        #expect(timeouts.value > 0)
        #expect(runs.value == successes.value, "a timed-out command ran, or a successful one did not")
        #expect(value.waitBounded.lowestPriority.get() == .success(successes.value))
        #expect(value.engine.pendingCount == 0)
    }
}
