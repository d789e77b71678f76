import Dispatch
import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

/// Shared reads through the public API, on real threads, queues and tasks: several reads hold the
/// value at once (each waits, bounded, until the others are inside too, which would never happen
/// if reads excluded each other), writers hold it alone, and the order is kept.
@Suite(.runsAlongsideOthers) struct SharedReadTests {
    /// Counts parties inside their closures; each waits until `count` are inside at once.
    final class Rendezvous: Sendable {
        let inside = Locked(0)
        let count: Int

        init(_ count: Int) { self.count = count }

        /// Arrives and waits (bounded) until every party is inside.
        @discardableResult
        func meet(sourceLocation: SourceLocation = #_sourceLocation) -> Bool {
            inside.increment()
            return waitUntil("\(count) readers inside at once", sourceLocation: sourceLocation) {
                self.inside.value >= self.count
            }
        }

        func meet(isolation: isolated (any Actor)? = #isolation, sourceLocation: SourceLocation = #_sourceLocation)
            async throws
        {
            inside.increment()
            try await waitUntil("\(count) readers inside at once", sourceLocation: sourceLocation) {
                self.inside.value >= self.count
            }
        }
    }

    // MARK: Reads share the value

    @Test func blockingReads_holdTheValueAtOnce() {
        let value = QueueSafeValue(value: 7)
        let rendezvous = Rendezvous(3)
        let threads = ThreadGroup()
        let results = Locked<[Result<Int, QueueSafeValueError>]>([])
        for _ in 0..<3 {
            threads.spawn {
                let result = value.waitBounded.highestPriority.readResult { number -> Int in
                    rendezvous.meet()
                    return number
                }
                results.withLock { $0.append(result) }
            }
        }
        threads.join()
        #expect(results.value == [.success(7), .success(7), .success(7)])
        #expect(value.waitBounded.highestPriority.get() == .success(7))
    }

    @Test func everySchedule_readsAtTheSameTime() async throws {
        let value = QueueSafeValue(value: "shared")
        let rendezvous = Rendezvous(4)
        let threads = ThreadGroup()
        threads.spawn { _ = value.waitBounded.priority(.medium).readResult { _ in rendezvous.meet() } }
        threads.spawn { _ = value.wait(timeout: .seconds(30)).priority(.low).readResult { _ in rendezvous.meet() } }
        let dispatched = DispatchSemaphore(value: 0)
        value.async(performIn: DispatchQueue(label: "reader")).highestPriority.read { result in
            #expect(result == .success("shared"))
            rendezvous.meet()
            dispatched.signal()
        }
        let read = try await withHangTimeout {
            try await value.async.highestPriority.read { text in
                try? await rendezvous.meet()
                return text.count
            }
        }
        #expect(read == 6)
        #expect(waitOrFail(dispatched, "the dispatch read"))
        try await threads.join()
        #expect(rendezvous.inside.value == 4)
    }

    @Test func dispatchReads_onAConcurrentQueue_runTogether() {
        let value = QueueSafeValue(value: [1, 2, 3])
        let queue = DispatchQueue(label: "readers", attributes: .concurrent)
        let rendezvous = Rendezvous(3)
        let group = DispatchGroup()
        let sums = Locked<[Int]>([])
        for _ in 0..<3 {
            group.enter()
            value.async(performIn: queue).priority(.medium).read { result in
                rendezvous.meet()
                sums.withLock { $0.append((try? result.get())?.reduce(0, +) ?? -1) }
                group.leave()
            }
        }
        #expect(waitOrFail(group, "three dispatch reads"))
        #expect(sums.value == [6, 6, 6])
    }

    // MARK: Writers hold the value alone

    @Test func aWriterWaitsForEveryReader_andNoReaderRunsBesideIt() {
        let value = QueueSafeValue(value: 0)
        let inRead = DispatchSemaphore(value: 0)
        let finishRead = DispatchSemaphore(value: 0)
        let threads = ThreadGroup()
        let events = Locked<[String]>([])
        threads.spawn {
            _ = value.waitBounded.highestPriority.readResult { _ in
                events.withLock { $0.append("read begins") }
                inRead.signal()
                waitOrFail(finishRead, "the test to end the read")
                events.withLock { $0.append("read ends") }
            }
        }
        #expect(waitOrFail(inRead))
        threads.spawn {
            _ = value.waitBounded.highestPriority.set { number in
                events.withLock { $0.append("write") }
                number += 1
            }
        }
        waitForPending(value.engine, count: 1)
        threads.spawn {
            // Same priority as the waiting writer: it waits behind it instead of joining.
            _ = value.waitBounded.highestPriority.readResult { number in
                events.withLock { $0.append("late read \(number)") }
            }
        }
        waitForPending(value.engine, count: 2)
        #expect(value.diagnostics.holder?.sharedReads == 1)
        sleepBriefly()
        #expect(events.value == ["read begins"], "a writer or a late read ran beside the read")
        finishRead.signal()
        threads.join()
        #expect(events.value == ["read begins", "read ends", "write", "late read 1"])
    }

    @Test func aReadOfHigherPriorityThanEveryWaitingWriter_joinsTheReaders() {
        let value = QueueSafeValue(value: 0)
        let inRead = DispatchSemaphore(value: 0)
        let finishRead = DispatchSemaphore(value: 0)
        let threads = ThreadGroup()
        threads.spawn {
            _ = value.waitBounded.priority(.medium).readResult { _ in
                inRead.signal()
                waitOrFail(finishRead, "the test to end the read")
            }
        }
        #expect(waitOrFail(inRead))
        threads.spawn { _ = value.waitBounded.priority(.medium).set { $0 += 1 } }
        waitForPending(value.engine, count: 1)
        // Joins while the first read and the writer wait: it must not wait for either.
        #expect(value.waitBounded.priority(.high).readResult { $0 } == .success(0))
        #expect(value.diagnostics.holder?.sharedReads == 1)
        finishRead.signal()
        threads.join()
        #expect(value.waitBounded.highestPriority.get() == .success(1))
    }

    @Test func aWriterIsNeverStarved_byFourThreadsReadingInALoop() {
        let value = QueueSafeValue(value: 0)
        let stop = Locked(false)
        let reads = Locked(0)
        let threads = ThreadGroup()
        for _ in 0..<4 {
            threads.spawn {
                while !stop.value {
                    _ = value.waitBounded.priority(.medium).readResult { _ in usleep(200) }
                    reads.increment()
                }
            }
        }
        waitUntil("the readers to get going") { reads.value >= 8 }
        for expected in 1...5 {
            // Bounded: a starved writer fails here instead of hanging.
            #expect(value.waitBounded.priority(.medium).set { $0 += 1 } == .success(expected))
        }
        stop.set(true)
        threads.join()
    }

    // MARK: Manual completion

    @Test func aManualRead_keepsItsShareUntilDone() {
        let value = QueueSafeValue(value: 1)
        let done = Locked<CommandCompletionClosure?>(nil)
        let threads = ThreadGroup()
        let readEnded = Locked(false)
        threads.spawn {
            value.waitBounded.highestPriority.read { _, completion in done.set(completion) }
            readEnded.set(true)
        }
        waitUntil("the manual read to hold") { done.value != nil }
        let wrote = Locked(false)
        threads.spawn {
            _ = value.waitBounded.highestPriority.set { $0 += 1 }
            wrote.set(true)
        }
        waitForPending(value.engine, count: 1)
        sleepBriefly()
        #expect(!wrote.value && !readEnded.value, "the read ended before done()")
        done.value?()
        threads.join()
        #expect(wrote.value && readEnded.value)
        #expect(value.waitBounded.highestPriority.get() == .success(2))
    }

    @Test func aManualDispatchRead_keepsItsShareUntilDone_thenTheWriterRuns() {
        let value = QueueSafeValue(value: 1)
        let done = Locked<CommandCompletionClosure?>(nil)
        value.async(performIn: DispatchQueue(label: "manual reader")).highestPriority.read { result, completion in
            #expect(result == .success(1))
            done.set(completion)
        }
        waitUntil("the manual read to hold") { done.value != nil }
        let wrote = DispatchSemaphore(value: 0)
        value.async(performIn: .global()).highestPriority.set {
            $0 += 1
        } completion: { _ in
            wrote.signal()
        }
        sleepBriefly()
        #expect(wrote.wait(timeout: .now()) == .timedOut, "the writer ran before done()")
        done.value?()
        #expect(waitOrFail(wrote, "the writer after done()"))
    }

    // MARK: Failures

    @Test func anyCommandFromInsideARead_isReentrant() async throws {
        let value = QueueSafeValue(value: 0)
        let inner = value.waitBounded.highestPriority.readResult { _ in
            (value.waitBounded.lowestPriority.get(), value.waitBounded.lowestPriority.readResult { $0 })
        }
        #expect(try inner.get().0 == .failure(.reentrantAccess))
        #expect(try inner.get().1 == .failure(.reentrantAccess))
        let nested = try await withHangTimeout {
            try await value.async.highestPriority.read { _ in
                async let child = thrownError { try await value.async.lowestPriority.read { $0 } }
                let direct = await thrownError { try await value.async.lowestPriority.set(newValue: 1) }
                return (direct, await child)
            }
        }
        #expect(nested.0 == .reentrantAccess)
        #expect(nested.1 == .reentrantAccess, "a child task of a reader is inside the read too")
        #expect(value.waitBounded.highestPriority.get() == .success(0))
    }

    @Test func aReadThatTimesOut_neverRunsLater() {
        let value = QueueSafeValue(value: 0)
        let holder = SectionHolder(value)
        let ran = Locked(false)
        #expect(
            value.wait(timeout: .milliseconds(30)).highestPriority.readResult { _ -> Int in
                ran.set(true)
                return 1
            } == .failure(.anyTimedOut))
        #expect(value.engine.pendingCount == 0)
        holder.release()
        #expect(value.waitBounded.lowestPriority.readResult { $0 } == .success(0))
        sleepBriefly(milliseconds: 20)
        #expect(!ran.value)
    }

    @Test func aCancelledAwaitingRead_leavesTheQueue_andNeverRuns() async throws {
        let value = QueueSafeValue(value: 0)
        let holder = SectionHolder(value)
        let ran = Locked(false)
        let task = Task { try await value.async.highestPriority.read { _ in ran.set(true) } }
        try await waitUntil("the read to wait") { value.engine.pendingCount == 1 }
        task.cancel()
        let error = await thrownError { try await task.value }
        #expect(error == .cancelled)
        #expect(value.engine.pendingCount == 0)
        holder.release()
        #expect(value.waitBounded.lowestPriority.get() == .success(0))
        #expect(!ran.value)
    }

    @Test func aReleasedContainer_freesItsValueAfterTheLastReader() {
        final class Tracked: Sendable {
            let freed: Locked<Bool>
            init(_ freed: Locked<Bool>) { self.freed = freed }
            deinit { freed.set(true) }
        }
        let freed = Locked(false)
        var value: QueueSafeValue<Tracked>? = QueueSafeValue(value: Tracked(freed))
        let reads = value!.waitBounded.highestPriority
        let inRead = DispatchSemaphore(value: 0)
        let finishRead = DispatchSemaphore(value: 0)
        let threads = ThreadGroup()
        threads.spawn {
            _ = reads.readResult { _ in
                inRead.signal()
                waitOrFail(finishRead, "the test to end the read")
            }
        }
        #expect(waitOrFail(inRead))
        value = nil
        #expect(reads.readResult { _ in 0 } == .failure(.valueContainerDeinited))
        sleepBriefly(milliseconds: 20)
        #expect(!freed.value, "the value was freed while a reader held it")
        finishRead.signal()
        threads.join()
        #expect(freed.value)
    }

    @Test func aDispatchReadAfterTheContainerWasReleased_getsTheError() {
        var value: QueueSafeValue<Int>? = QueueSafeValue(value: 1)
        let reads = value!.async(performIn: .global()).highestPriority
        value = nil
        let received = Locked<Result<Int, QueueSafeValueError>?>(nil)
        reads.read { received.set($0) }
        waitUntil("the failure to arrive") { received.value != nil }
        #expect(received.value == .failure(.valueContainerDeinited))
    }

    // MARK: Deadlocks and helping

    @Test func aCycleThroughAReader_isRefused() {
        let first = QueueSafeValue(value: 0, label: "first")
        let second = QueueSafeValue(value: 0, label: "second")
        let bothHold = Rendezvous(2)
        let threads = ThreadGroup()
        let outcomes = Locked<[Result<Int, QueueSafeValueError>]>([])
        threads.spawn {
            let outcome = first.waitBounded.highestPriority.readResult { _ -> Result<Int, QueueSafeValueError> in
                bothHold.meet()
                return second.waitBounded.highestPriority.set { $0 += 1 }
            }
            outcomes.withLock { $0.append((try? outcome.get()) ?? .failure(.anyTimedOut)) }
        }
        threads.spawn {
            let outcome = second.waitBounded.highestPriority.map { _ -> Result<Int, QueueSafeValueError> in
                bothHold.meet()
                return first.waitBounded.highestPriority.set { $0 += 1 }
            }
            outcomes.withLock { $0.append((try? outcome.get()) ?? .failure(.anyTimedOut)) }
        }
        threads.join()
        let refused = outcomes.value.filter { $0 == .failure(.anyDeadlock) }.count
        let succeeded = outcomes.value.filter { $0 == .success(1) }.count
        #expect(refused == 1 && succeeded == 1, "outcomes: \(outcomes.value)")
    }

    @Test func aThreadWaitingOnASerialQueue_runsTheDispatchReadForThatQueue() {
        let value = QueueSafeValue(value: 0)
        let queue = DispatchQueue(label: "serial reader queue")
        let holder = SectionHolder(value)
        let readRan = Locked(false)
        value.async(performIn: queue).priority(.high).read { _ in readRan.set(true) }
        let wrote = DispatchSemaphore(value: 0)
        queue.async {
            // Waits behind the read, on the queue that the read needs: the thread runs it itself.
            _ = value.waitBounded.priority(.low).set { $0 += 1 }
            wrote.signal()
        }
        waitForPending(value.engine, count: 2)
        holder.release()
        #expect(waitOrFail(wrote, "the write behind the read"))
        #expect(readRan.value)
    }

    // MARK: The idle path

    /// A blocking read that holds on the idle path, until the test lets it go.
    final class IdleReader: Sendable {
        let inside = DispatchSemaphore(value: 0)
        let finish = DispatchSemaphore(value: 0)
        let done = DispatchSemaphore(value: 0)
        let result = Locked<Result<Int, QueueSafeValueError>?>(nil)

        init(_ value: QueueSafeValue<Int>, _ threads: ThreadGroup) {
            threads.spawn { [self] in
                // No timeout: the idle path of a read without one.
                let outcome = value.wait.priority(.medium).readResult { number -> Int in
                    inside.signal()
                    waitOrFail(finish, "the test to end the read")
                    return number
                }
                result.set(outcome)
                done.signal()
            }
            waitOrFail(inside, "the read to begin")
        }

        func end() {
            finish.signal()
            waitOrFail(done, "the read to end")
        }
    }

    @Test func readsOfAnIdleValue_joinAndLeaveOnTheWord_withoutTheMachine() {
        let value = QueueSafeValue(value: 5)
        let threads = ThreadGroup()
        let first = IdleReader(value, threads)
        let second = IdleReader(value, threads)
        // Two readers counted in the word, nothing else: no record in the machine, no lock to release.
        #expect(value.engine.state.loadAcquire() == 2 * EngineWord.idleReaderUnit)
        #expect(value.engine.withMachine { machine, _ in machine.readers.isEmpty })
        #expect(value.diagnostics.holder?.sharedReads == 2)
        #expect(value.diagnostics.holder?.kind == .blocking)
        first.end()
        second.end()
        threads.join()
        #expect(value.engine.state.loadAcquire() == 0)
        #expect(first.result.value == .success(5) && second.result.value == .success(5))
    }

    /// One task at a time reads an idle value on the word too; a second task's read beside it, a
    /// read nested in it and a read from its child task take the lock's path.
    @Test func anAwaitingReadOfAnIdleValue_joinsOnTheWord_andTheNextTaskReadTakesTheLock() async throws {
        let value = QueueSafeValue(value: 5)
        let inside = Gate()
        let finish = Gate()
        let first = Task {
            try await value.async.read { number in
                inside.open()
                await finish.wait()
                return number
            }
        }
        try await withHangTimeout { await inside.wait() }
        #expect(value.engine.state.loadAcquire() == EngineWord.idleReaderUnit)
        #expect(value.engine.withMachine { machine, _ in machine.readers.isEmpty })
        #expect(value.diagnostics.holder?.kind == .awaiting)
        #expect(value.diagnostics.holder?.sharedReads == 1)
        let word = try await withHangTimeout {
            try await value.async.read { _ in value.engine.state.loadAcquire() }
        }
        #expect(word == EngineWord.idleReaderUnit | EngineWord.shared | EngineWord.slowRelease, "not beside it, listed")
        finish.open()
        #expect(try await withHangTimeout { try await first.value } == 5)
        #expect(value.engine.state.loadAcquire() == 0)
        #expect(value.engine.word(.taskReader).loadAcquire() == 0, "the idle task read kept its place")
    }

    @Test func aWriterArrivingWhileIdleReadersHold_waitsForTheLast_andNoReadJoinsPastIt() {
        let value = QueueSafeValue(value: 0)
        let threads = ThreadGroup()
        let first = IdleReader(value, threads)
        let second = IdleReader(value, threads)
        let events = Locked<[String]>([])
        threads.spawn {
            _ = value.wait.priority(.medium).set { number in
                events.withLock { $0.append("write") }
                number += 1
            }
        }
        waitForPending(value.engine, count: 1)
        // The writer waits: the idle path is closed to the readers that come after it.
        #expect(value.engine.state.loadAcquire() & EngineWord.slowRelease != 0)
        threads.spawn {
            _ = value.wait.priority(.medium).readResult { number in events.withLock { $0.append("late read \(number)") }
            }
        }
        waitForPending(value.engine, count: 2)
        first.end()
        sleepBriefly()
        #expect(events.value.isEmpty, "the writer ran beside a reader, or the late read joined past the writer")
        #expect(value.diagnostics.holder?.sharedReads == 1)
        second.end()
        threads.join()
        #expect(events.value == ["write", "late read 1"])
        #expect(value.engine.state.loadAcquire() == 0)
    }

    @Test func idleAndListedReadsHoldTogether_andTheWordGoesBackToTheIdlePath() {
        let value = QueueSafeValue(value: 3)
        let threads = ThreadGroup()
        let idle = IdleReader(value, threads)
        // A dispatch read takes the lock's path: the machine lists it beside the idle reader.
        let listedInside = DispatchSemaphore(value: 0)
        let finishListed = DispatchSemaphore(value: 0)
        let listedDone = DispatchSemaphore(value: 0)
        let listedResult = Locked<Result<Int, QueueSafeValueError>?>(nil)
        value.async(performIn: DispatchQueue(label: "listed reader")).priority(.medium).read { result in
            listedInside.signal()
            waitOrFail(finishListed, "the test to end the read")
            listedResult.set(result)
            listedDone.signal()
        }
        waitOrFail(listedInside, "the dispatch read to begin")
        #expect(
            value.engine.state.loadAcquire() == EngineWord.idleReaderUnit | EngineWord.shared | EngineWord.slowRelease)
        #expect(value.diagnostics.holder?.sharedReads == 2)
        idle.end()
        #expect(value.engine.state.loadAcquire() == EngineWord.shared | EngineWord.slowRelease)
        finishListed.signal()
        waitOrFail(listedDone, "the dispatch read to end")
        threads.join()
        #expect(waitUntil("the dispatch read to give its share back") { value.engine.state.loadAcquire() == 0 })
        #expect(listedResult.value == .success(3))
        // Idle again: the next read joins on the word.
        #expect(value.wait.readResult { _ in value.engine.state.loadAcquire() } == .success(EngineWord.idleReaderUnit))
    }

    @Test func nestedReadsOfFiveValues_theFifthTakesTheLock_andEveryOneIsInsideACriticalSection() {
        let values = (0..<5).map { QueueSafeValue(value: $0) }
        var words: [Int] = []
        var inside: [Bool] = []
        func nest(_ index: Int) -> Int {
            guard index < values.count else { return 0 }
            let result = values[index].wait.readResult { number -> Int in
                words.append(values[index].engine.state.loadAcquire())
                inside.append(values[index].isInsideCriticalSection)
                return number + nest(index + 1)
            }
            return (try? result.get()) ?? -100
        }
        #expect(nest(0) == 0 + 1 + 2 + 3 + 4)
        // A thread lists four idle reads at most: the fifth is a read the machine keeps a record of.
        #expect(
            words == [1, 1, 1, 1].map { $0 * EngineWord.idleReaderUnit } + [EngineWord.shared | EngineWord.slowRelease])
        #expect(inside == [true, true, true, true, true])
        #expect(values.allSatisfy { $0.engine.state.loadAcquire() == 0 })
        // The same value inside its own idle read: refused, as on every path.
        let nested = values[0].wait.readResult { _ in values[0].wait.readResult { $0 } }
        #expect(nested == .success(.failure(.reentrantAccess)))
    }
}
