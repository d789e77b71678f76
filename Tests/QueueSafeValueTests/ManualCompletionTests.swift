import Dispatch
import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

@Suite(.runsAlongsideOthers) struct ManualCompletionTests {
    // MARK: Held until done

    @Test func dispatchManualCompletion_holdsValueUntilDoneIsCalledLater_fromAnotherQueue() throws {
        let value = QueueSafeValue(value: 0)
        let storedDone = Locked<CommandCompletionClosure?>(nil)
        let entered = DispatchSemaphore(value: 0)
        let order = Recorder<String>()
        let finished = DispatchGroup()
        let holderResult = Recorder<Result<Int, QueueSafeValueError>>()
        finished.enter()
        value.async(performIn: DispatchQueue(label: "holder")).highestPriority.set { counter, done in
            counter += 1
            order.append("manual closure")
            storedDone.set(done)
            entered.signal()
        } completion: { result in
            holderResult.append(result)
            finished.leave()
        }
        waitOrFail(entered, "the manual command to start")

        // Two commands line up behind it: a dispatch command and a blocking one.
        finished.enter()
        value.async(performIn: .global()).lowestPriority.set { counter in
            counter += 10
            order.append("dispatch")
        } completion: { _ in
            finished.leave()
        }
        let threads = ThreadGroup()
        threads.spawn {
            value.wait.lowestPriority.set { counter in
                counter += 100
                order.append("blocking")
            }
        }
        waitForPending(value.engine, count: 2)
        sleepBriefly()
        #expect(order.snapshot == ["manual closure"], "a command ran before done() was called")
        #expect(value.engine.pendingCount == 2)

        DispatchQueue(label: "another").async {
            order.append("done")
            storedDone.value?()
        }
        threads.join()
        waitOrFail(finished)
        #expect(holderResult.snapshot == [.success(1)])
        #expect(order.snapshot == ["manual closure", "done", "dispatch", "blocking"])
        #expect(value.waitBounded.lowestPriority.get() == .success(111))
        #expect(value.abandonedCompletionCount == 0)
    }

    @Test func blockingManualCompletion_blocksCallerAndHoldsValueUntilDone_thenReturnsValue() throws {
        let value = QueueSafeValue(value: 0)
        let storedDone = Locked<CommandCompletionClosure?>(nil)
        let entered = DispatchSemaphore(value: 0)
        let doneCalled = Locked(false)
        let returned = Locked<(Result<Int, QueueSafeValueError>, Bool)?>(nil)
        let threads = ThreadGroup()
        threads.spawn {
            let result = value.wait.highestPriority.set { counter, done in
                counter = 42
                storedDone.set(done)
                entered.signal()
            }
            returned.set((result, doneCalled.value))
        }
        waitOrFail(entered, "the manual command to start")
        let other = Locked(false)
        value.async(performIn: .global()).highestPriority.get { _ in other.set(true) }
        sleepBriefly()
        #expect(returned.value == nil, "the blocking call returned before done() was called")
        #expect(!other.value, "another command ran before done() was called")
        #expect(value.engine.pendingCount == 1)

        DispatchQueue.global().async {
            doneCalled.set(true)
            storedDone.value?()
        }
        threads.join()
        #expect(returned.value?.0 == .success(42))
        #expect(returned.value?.1 == true)
        waitUntil("the next command to run") { other.value }
    }

    @Test func blockingGetWithManualCompletion_holdsValueUntilDone() throws {
        let value = QueueSafeValue(value: "held")
        let storedDone = Locked<CommandCompletionClosure?>(nil)
        let entered = DispatchSemaphore(value: 0)
        let returned = Locked(false)
        let received = Recorder<Result<String, QueueSafeValueError>>()
        let threads = ThreadGroup()
        threads.spawn {
            value.wait.lowestPriority.get { result, done in
                received.append(result)
                storedDone.set(done)
                entered.signal()
            }
            returned.set(true)
        }
        waitOrFail(entered)
        #expect(value.wait(timeout: .milliseconds(50)).highestPriority.get() == .failure(.anyTimedOut))
        #expect(!returned.value)
        storedDone.value?()
        threads.join()
        #expect(returned.value)
        #expect(received.snapshot == [.success("held")])
        #expect(value.waitBounded.highestPriority.get() == .success("held"))
    }

    // MARK: done() before the closure returns

    /// A manual-completion command whose closure calls `done()` first.
    enum ManualCommand: String, CaseIterable, Sendable {
        case waitSet, waitGet, dispatchSet, dispatchGet

        var mutates: Bool { self == .waitSet || self == .dispatchSet }
    }

    /// `done()` called inside the closure does not end the command early: the next command, whatever
    /// its schedule, waits until the closure has returned (and sees what it left).
    @Test(arguments: ManualCommand.allCases, Schedule.allCases)
    func doneCalledInsideTheClosure_valueStaysHeldUntilTheClosureReturns(
        command: ManualCommand,
        next: Schedule
    ) async throws {
        let value = QueueSafeValue(value: 0)
        let probe = SectionProbe()
        let closureReturned = Locked(false)
        let nextSawReturned = Locked<Bool?>(nil)
        let nextResult = Locked<Result<Int, QueueSafeValueError>?>(nil)
        let nextTask = Locked<Task<Void, Never>?>(nil)
        let firstResult = Locked<Result<Int, QueueSafeValueError>?>(nil)
        let finished = Locked(false)
        // Inside the closure, after done(): the next command arrives and queues, then the closure
        // keeps the section a little longer before it returns.
        @Sendable func inside(_ counter: inout Int, _ done: CommandCompletionClosure) {
            probe.enter()
            done()
            nextTask.set(
                Task {
                    let result = await next.set(value, priority: .highest) { counter in
                        probe.pass()
                        nextSawReturned.set(closureReturned.value)
                        counter += 1
                    }
                    nextResult.set(result)
                })
            waitForPending(value.engine, count: 1)
            sleepBriefly()
            if command.mutates { counter = 7 }
            closureReturned.set(true)
            probe.leave()
        }
        let threads = ThreadGroup()
        let queue = DispatchQueue(label: "ManualCompletionTests.first")
        switch command {
        case .waitSet:
            threads.spawn {
                firstResult.set(value.wait.lowestPriority.set { counter, done in inside(&counter, done) })
                finished.set(true)
            }
        case .waitGet:
            threads.spawn {
                value.wait.lowestPriority.get { _, done in
                    var unchanged = 0
                    inside(&unchanged, done)
                }
                finished.set(true)
            }
        case .dispatchSet:
            value.async(performIn: queue).lowestPriority.set { counter, done in
                inside(&counter, done)
            } completion: { result in
                firstResult.set(result)
                finished.set(true)
            }
        case .dispatchGet:
            value.async(performIn: queue).lowestPriority.get { _, done in
                var unchanged = 0
                inside(&unchanged, done)
                finished.set(true)
            }
        }
        try await waitUntil("the first command to end") { finished.value }
        try await threads.join()
        try await waitUntil("the next command's task to start") { nextTask.value != nil }
        await nextTask.value?.value
        #expect(nextSawReturned.value == true, "the next command ran while the closure was still open")
        #expect(probe.maximumInside == 1, "the next command ran while the closure was still open")
        #expect(probe.entryCount == 2)
        let left = command.mutates ? 7 : 0
        #expect(nextResult.value == .success(left + 1), "the next command did not see what the closure left")
        if command.mutates { #expect(firstResult.value == .success(7)) }
        #expect(value.abandonedCompletionCount == 0)
    }

    // MARK: done() more than once

    @Test func doneCalledTwice_isHarmless_andDoesNotEndTheNextCommand() throws {
        let value = QueueSafeValue(value: [String]())
        let firstDone = Locked<CommandCompletionClosure?>(nil)
        let secondDone = Locked<CommandCompletionClosure?>(nil)
        let firstStarted = DispatchSemaphore(value: 0)
        let secondStarted = DispatchSemaphore(value: 0)
        let thirdRan = DispatchSemaphore(value: 0)
        let queue = DispatchQueue(label: "twice", attributes: .concurrent)
        value.async(performIn: queue).highestPriority.set { log, done in
            log.append("first")
            firstDone.set(done)
            firstStarted.signal()
        }
        waitOrFail(firstStarted)
        value.async(performIn: queue).highestPriority.set { log, done in
            log.append("second")
            secondDone.set(done)
            secondStarted.signal()
        }
        value.async(performIn: queue).highestPriority.set { log in
            log.append("third")
            thirdRan.signal()
        }
        #expect(value.engine.pendingCount == 2)

        firstDone.value?()
        firstDone.value?()
        waitOrFail(secondStarted)
        // The first command's completion, called again, must not end the second command.
        firstDone.value?()
        DispatchQueue.global().async { firstDone.value?() }
        sleepBriefly()
        #expect(value.engine.pendingCount == 1, "a repeated done() ended the next command")
        #expect(thirdRan.wait(timeout: .now()) == .timedOut, "a repeated done() ended the next command")

        secondDone.value?()
        secondDone.value?()
        waitOrFail(thirdRan)
        #expect(value.waitBounded.lowestPriority.get() == .success(["first", "second", "third"]))
        #expect(value.abandonedCompletionCount == 0)
    }

    @Test func doneCalledTwiceInsideBlockingClosure_isHarmless() throws {
        let value = QueueSafeValue(value: 1)
        #expect(
            value.wait.lowestPriority.set { counter, done in
                done()
                counter += 1
                done()
            } == .success(2))
        value.wait.lowestPriority.get { _, done in
            done()
            done()
        }
        #expect(value.waitBounded.lowestPriority.get() == .success(2))
        #expect(value.abandonedCompletionCount == 0)
    }

    @Test func doneCalledConcurrentlyFromSeveralQueues_endsEachCommandExactlyOnce() throws {
        let commands = TestEnvironment.iterations(400, sanitized: 300)
        let value = QueueSafeValue(value: 0)
        let probe = SectionProbe()
        let group = DispatchGroup()
        let queue = DispatchQueue(label: "racing", attributes: .concurrent)
        for _ in 0..<commands {
            group.enter()
            value.async(performIn: queue).lowestPriority.set { counter, done in
                probe.enter()
                counter += 1
                sched_yield()
                probe.leave()
                for _ in 0..<3 { DispatchQueue.global().async { done() } }
            } completion: { _ in
                group.leave()
            }
        }
        waitOrFail(group)
        #expect(probe.maximumInside == 1, "a repeated done() released the value while another command held it")
        #expect(value.waitBounded.lowestPriority.get() == .success(commands))
        #expect(value.engine.pendingCount == 0)
    }

    // MARK: done() never called

    @Test func doneReleasedWithoutBeingCalled_stillEndsCommand_andIsCounted() throws {
        let value = QueueSafeValue(value: 0)
        let finished = DispatchSemaphore(value: 0)
        let received = Recorder<Result<Int, QueueSafeValueError>>()
        value.async(performIn: .global()).lowestPriority.set { counter, _ in
            counter = 5
        } completion: { result in
            received.append(result)
            finished.signal()
        }
        waitOrFail(finished)
        #expect(received.snapshot == [.success(5)])
        #expect(value.abandonedCompletionCount == 1)

        value.async(performIn: .global()).lowestPriority.get { _, _ in finished.signal() }
        waitOrFail(finished)
        // The next command is not stuck behind the abandoned one.
        #expect(value.waitBounded.lowestPriority.get() == .success(5))
        #expect(value.abandonedCompletionCount == 2)

        #expect((value.waitBounded.lowestPriority.set { counter, _ in counter = 6 }) == .success(6))
        value.waitBounded.lowestPriority.get { _, _ in }
        #expect(value.abandonedCompletionCount == 4)
        #expect(value.waitBounded.lowestPriority.get() == .success(6))
        #expect(value.engine.pendingCount == 0)
    }

    @Test func abandonedCompletionCount_onSyncedAndAsyncedValues() throws {
        let synced = QueueSafeSyncedValue(value: 0)
        synced.lowestPriority.get { _, _ in }
        #expect((synced.highestPriority.set { counter, _ in counter += 1 }) == .success(1))
        #expect(synced.abandonedCompletionCount == 2)
        synced.lowestPriority.get { _, done in done() }
        #expect(synced.abandonedCompletionCount == 2)

        let asynced = QueueSafeAsyncedValue(value: 0, queue: DispatchQueue(label: "asynced"))
        let finished = DispatchSemaphore(value: 0)
        let received = Recorder<Result<Int, QueueSafeValueError>>()
        asynced.lowestPriority.set { counter, _ in counter += 1 }
        asynced.lowestPriority.set { counter, done in
            counter += 1
            done()
        } completion: { result in
            received.append(result)
            finished.signal()
        }
        waitOrFail(finished)
        #expect(received.snapshot == [.success(2)])
        #expect(asynced.abandonedCompletionCount == 1)
    }

    @Test func doneKeptAliveThenReleasedUncalled_endsCommandOnlyWhenReleased() throws {
        let value = QueueSafeValue(value: 0)
        let storedDone = Locked<CommandCompletionClosure?>(nil)
        let entered = DispatchSemaphore(value: 0)
        let nextRan = Locked(false)
        value.async(performIn: DispatchQueue(label: "keeper")).lowestPriority.set { counter, done in
            counter = 1
            storedDone.set(done)
            entered.signal()
        }
        waitOrFail(entered)
        value.async(performIn: .global()).lowestPriority.get { _ in nextRan.set(true) }
        sleepBriefly()
        #expect(!nextRan.value, "the command ended while its completion was still alive")
        #expect(value.abandonedCompletionCount == 0)

        // Dropping the last reference, from another queue, ends the command.
        DispatchQueue.global().async { storedDone.set(nil) }
        waitUntil("the next command to run") { nextRan.value }
        #expect(value.abandonedCompletionCount == 1)
    }
}
