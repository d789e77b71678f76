import Dispatch
import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

/// The one-liners a Swift developer writes with `Mutex`, `NSLock.withLock` or an actor, each as one
/// line here: throwing, value-returning commands on every schedule, and a default priority.
@Suite(.runsAlongsideOthers) struct ModernSurfaceTests {
    struct DecodeError: Error, Equatable {}

    static func decode(_ text: String) throws(DecodeError) -> Int {
        guard let number = Int(text) else { throw DecodeError() }
        return number
    }

    // MARK: withLock

    @Test func withLock_returnsWhatTheClosureReturns() throws {
        let jobs = QueueSafeValue(value: [1, 2, 3])
        let job = try jobs.wait.highestPriority.withLock { $0.popLast() }
        #expect(job == 3)
        let next = try jobs.wait.withLock { $0.popLast() }  // the default priority
        #expect(next == 2)
        #expect(jobs.wait.get() == .success([1]))
    }

    @Test func withLock_ofANonThrowingClosure_throwsOnlyTheLibrarysError() throws {
        let value = QueueSafeValue(value: 0)
        let failure = try value.wait.highestPriority.withLock { _ in
            // Typed: `error` is a QueueSafeValueError, no cast needed.
            do throws(QueueSafeValueError) {
                try value.wait.lowestPriority.withLock { $0 += 1 }
                return QueueSafeValueError?.none
            } catch {
                return error
            }
        }
        #expect(failure == .reentrantAccess, "a reentrant withLock throws instead of deadlocking")
    }

    @Test func withLock_rethrowsTheClosuresError_afterReleasing_andKeepsItsChanges() throws {
        let cache = QueueSafeValue(value: [Int]())
        try cache.wait.withLock { try $0.append(Self.decode("7")) }
        #expect(throws: DecodeError()) {
            try cache.wait.withLock { entries in
                entries.append(8)
                try entries.append(Self.decode("not a number"))
            }
        }
        #expect(cache.wait.get() == .success([7, 8]), "changes before the throw stay")
        #expect(try cache.wait.highestPriority.withLock { $0.count } == 2, "the value was released")
    }

    @Test func withLock_ofAReleasedContainer_throws_andDoesNotRun() {
        var value: QueueSafeValue<Int>? = QueueSafeValue(value: 0)
        let commands = value!.wait.highestPriority
        value = nil
        let ran = Locked(false)
        #expect(throws: QueueSafeValueError.valueContainerDeinited) {
            try commands.withLock { _ in ran.set(true) }
        }
        #expect(!ran.value)
    }

    @Test func withLock_closureIsNotEscaping_soItMayCaptureInoutState() throws {
        let value = QueueSafeValue(value: 5)
        var total = 0
        func add(into sum: inout Int) throws {
            try value.wait.withLock { sum += $0 }  // captures an inout parameter: non-escaping only
        }
        try add(into: &total)
        try add(into: &total)
        #expect(total == 10)
    }

    @Test func read_returnsWhatTheClosureReturns_andThrowsItsError() throws {
        let value = QueueSafeValue(value: "abc")
        #expect(try value.wait.read { $0.count } == 3)
        #expect(try value.wait(timeout: .seconds(30)).lowestPriority.read { $0.count } == 3)
        #expect(throws: DecodeError()) { try value.wait.highestPriority.read { try Self.decode($0) } }
        #expect(throws: DecodeError()) {
            try value.wait.read { (text: String) throws(DecodeError) in try Self.decode(text) }
        }
        #expect(value.wait.get() == .success("abc"))
    }

    @Test func read_throwsWhyItDidNotRun() throws {
        let value = QueueSafeValue(value: 1)
        #expect(throws: QueueSafeValueError.reentrantAccess) {
            try value.wait.withLock { _ in try value.wait.read { $0 } }
        }
        #expect(throws: QueueSafeValueError.reentrantAccess) {
            try value.wait.read { _ in try value.wait.highestPriority.read { $0 } }
        }
        let negative = #expect(throws: QueueSafeValueError.self) { try value.wait(timeout: .seconds(-1)).read { $0 } }
        guard case .invalidArgument = negative else {
            Issue.record("a negative timeout: \(String(describing: negative))")
            return
        }
    }

    /// The forms replaced in issue 31 keep compiling and working, with a deprecation warning in a
    /// user's code: `withValue` (exclusive, read-only) and the blocking `read` that answered with a
    /// `Result` where a `Result` is asked for.
    @available(*, deprecated, message: "exercises the deprecated forms")
    @Test func deprecatedForms_keepWorking() throws {
        let value = QueueSafeValue(value: "abc")
        #expect(try value.wait.withValue { $0.count } == 3)
        #expect(try value.wait.highestPriority.withValue { $0.count } == 3)
        #expect(throws: DecodeError()) { try value.wait.highestPriority.withValue { try Self.decode($0) } }
        #expect(throws: DecodeError()) { try value.wait.withValue { try Self.decode($0) } }
        let answer: Result<Int, QueueSafeValueError> = value.wait.lowestPriority.read { $0.count }
        #expect(answer == .success(3))
        let defaultAnswer: Result<Int, QueueSafeValueError> = value.wait.read { $0.count }
        #expect(defaultAnswer == .success(3))
        #expect(try value.wait.read { $0.count }.get() == 3)
    }

    @Test func timedWithLock_timesOut_andThrows() {
        let value = QueueSafeValue(value: 0)
        let holder = SectionHolder(value)
        #expect(throws: QueueSafeValueError.anyTimedOut) {
            try value.wait(timeout: .milliseconds(20)).highestPriority.withLock { $0 += 1 }
        }
        holder.release()
        #expect(value.wait.get() == .success(0))
    }

    @Test func awaitingWithLock_returnsAndThrows_acrossSuspensions() async throws {
        let value = QueueSafeValue(value: [Int]())
        let count = try await value.async.withLock { entries -> Int in
            entries.append(1)
            await Task.yield()
            entries.append(2)
            return entries.count
        }
        #expect(count == 2)
        await #expect(throws: DecodeError()) {
            try await value.async.highestPriority.withLock { entries in
                entries.append(3)
                try entries.append(Self.decode("x"))
            }
        }
        #expect(try await value.async.get() == [1, 2, 3])
        do throws(QueueSafeValueError) {
            let typed = try await value.async.withLock { $0.count }  // typed: the catch below needs no cast
            #expect(typed == 3)
        } catch {
            Issue.record("withLock failed: \(error.localizedDescription)")
        }
    }

    @Test func dispatchWithLock_deliversTheOutcomeOnTheQueue() {
        let value = QueueSafeValue(value: [1, 2])
        let queue = DispatchQueue(label: "withLock")
        let outcomes = Locked<[String]>([])
        let done = DispatchGroup()
        done.enter()
        value.async(performIn: queue).highestPriority.withLock(
            { $0.removeLast() },
            completion: { result in
                outcomes.withLock { $0.append("popped \((try? result.get()) ?? -1)") }
                done.leave()
            })
        done.enter()
        value.async(performIn: queue).withLock(
            { entries -> Int in
                entries.append(9)
                return try Self.decode("nope")
            },
            completion: { result in
                if case .failure(let error) = result, error is DecodeError { outcomes.withLock { $0.append("threw") } }
                done.leave()
            })
        #expect(waitOrFail(done, "both completions"))
        #expect(outcomes.value == ["popped 2", "threw"])
        #expect(value.wait.get() == .success([1, 9]))
    }

    /// A closure that cannot throw: the completion may be left out (the change still happens, in
    /// order), and when given it receives a typed `Result<R, QueueSafeValueError>`.
    @Test func dispatchWithLock_withoutCompletion_andWithATypedOne() {
        let value = QueueSafeValue(value: [1])
        let queue = DispatchQueue(label: "withLock typed")
        value.async(performIn: queue).withLock { $0.append(2) }
        value.async(performIn: queue).defaultPriority.withLock { $0.append(3) }  // same priority: FIFO
        let delivered = Locked<Result<Int, QueueSafeValueError>?>(nil)
        let done = DispatchSemaphore(value: 0)
        value.async(performIn: queue).withLock(
            { $0.count },
            completion: { (result: Result<Int, QueueSafeValueError>) in
                delivered.set(result)
                done.signal()
            })
        #expect(waitOrFail(done, "the typed completion"))
        #expect(delivered.value == .success(3))
        #expect(value.wait.get() == .success([1, 2, 3]))
    }

    @Test func dispatchWithLock_ofAReleasedContainer_deliversATypedError_andDoesNotRun() {
        var value: QueueSafeValue<Int>? = QueueSafeValue(value: 0)
        let commands = value!.async(performIn: DispatchQueue(label: "released")).highestPriority
        value = nil
        let ran = Locked(false)
        let delivered = Locked<Result<Int, QueueSafeValueError>?>(nil)
        let done = DispatchSemaphore(value: 0)
        commands.withLock(
            { value -> Int in
                ran.set(true)
                return value
            },
            completion: { result in
                delivered.set(result)
                done.signal()
            })
        #expect(waitOrFail(done, "the completion"))
        #expect(delivered.value == .failure(.valueContainerDeinited))
        #expect(!ran.value)
    }

    @Test func awaitingRead_rethrowsTheClosuresError_afterReleasingItsShare() async throws {
        let value = QueueSafeValue(value: "abc")
        await #expect(throws: DecodeError()) { try await value.async.read { try Self.decode($0) } }
        await #expect(throws: DecodeError()) {
            try await value.async.highestPriority.read { (text: String) async throws(DecodeError) in
                try Self.decode(text)
            }
        }
        #expect(try await value.async.withLock { $0.count } == 3, "the share was released")
    }

    // MARK: Any value

    /// Not Sendable: a class with mutable state.
    final class Tally {
        var count = 0
        var log: [String] = []
    }

    @Test func aNonSendableValue_isSharedWithTasksAndThreads_throughWithLock() async throws {
        let tally = QueueSafeValue(value: Tally())  // the container is Sendable whatever it holds
        let threads = ThreadGroup()
        for _ in 0..<4 {
            threads.spawn {
                for _ in 0..<100 { _ = try? tally.wait.withLock { $0.count += 1 } }
            }
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<4 {
                group.addTask {
                    for _ in 0..<100 {
                        try await tally.async.withLock { tally in
                            tally.count += 1
                            if tally.count % 100 == 0 { tally.log.append("task \(index)") }
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        try await threads.join()
        // Only a `sending` (here Sendable) result leaves the section, never the value itself.
        let (count, entries) = try tally.wait.withLock { ($0.count, $0.log.count) }
        #expect(count == 800)
        #expect(entries <= 8)
    }

    // MARK: The default priority

    @Test func theDefaultPriority_isMedium_betweenTheExplicitOnes() {
        expectQueuedAtMedium { value in _ = try? value.wait.withLock { $0.append("default") } }
        #expect(CommandPriority.default == .medium)
    }

    /// `value.wait.set { }` without a priority queues at `.medium`, between the explicit extremes.
    @Test func theSeedsSet_withoutAPriority_queuesAtMedium() {
        expectQueuedAtMedium { value in _ = value.wait.set { $0.append("default") } }
    }

    /// Lines up a lowest, then `issueDefault` (which appends "default"), then a highest command
    /// behind a held section: the default one must wait at `.medium` and run between the two.
    private func expectQueuedAtMedium(
        sourceLocation: SourceLocation = #_sourceLocation,
        _ issueDefault: @escaping @Sendable (QueueSafeValue<[String]>) -> Void
    ) {
        let value = QueueSafeValue(value: [String]())
        let holder = SectionHolder(value)
        let threads = ThreadGroup()
        threads.spawn { _ = value.wait.lowestPriority.set { $0.append("lowest") } }
        waitForPending(value.engine, count: 1)
        threads.spawn { issueDefault(value) }
        waitForPending(value.engine, count: 2)
        threads.spawn { _ = value.wait.highestPriority.set { $0.append("highest") } }
        waitForPending(value.engine, count: 3)
        #expect(value.diagnostics.waiting[.medium] == 1, sourceLocation: sourceLocation)
        holder.release()
        threads.join()
        #expect(value.wait.get() == .success(["highest", "default", "lowest"]), sourceLocation: sourceLocation)
    }

    /// One rule on every schedule: a priority chosen again replaces the one before, and keeps the
    /// schedule's timeout. Four commands queue behind a held section, each having chosen twice; the
    /// diagnostics count them at their second choice, and they run in that order.
    @Test func aPriorityChosenAgain_replacesTheFirst_onEverySchedule() async throws {
        let value = QueueSafeValue(value: [String]())
        let holder = SectionHolder(value)
        let threads = ThreadGroup()
        threads.spawn { _ = value.wait.highestPriority.lowestPriority.set { $0.append("lowest") } }
        waitForPending(value.engine, count: 1)
        let ran = DispatchSemaphore(value: 0)
        value.async(performIn: .global()).lowestPriority.highestPriority.set(
            accessClosure: { $0.append("highest") }, completion: { _ in ran.signal() })
        waitForPending(value.engine, count: 2)
        let task = Task { try await value.async.lowestPriority.priority(.high).set { $0.append("high") } }
        try await waitUntil("the awaiting command queued") { value.engine.pendingCount == 3 }
        threads.spawn { _ = value.wait.priority(.low).defaultPriority.set { $0.append("medium") } }
        waitForPending(value.engine, count: 4)
        let waiting = value.diagnostics.waiting
        #expect([waiting[.highest], waiting[.high], waiting[.medium], waiting[.lowest]] == [1, 1, 1, 1])
        // The timeout stays with the schedule when the priority is chosen again.
        let timed = value.wait(timeout: .milliseconds(20)).highestPriority.lowestPriority.set { $0.append("timed") }
        guard case .failure(.timedOut) = timed else {
            Issue.record("expected the timed command to time out, got \(timed)")
            return
        }
        holder.release()
        try await threads.join()
        _ = try await task.value
        #expect(ran.wait(timeout: .now() + hangTimeout) == .success)
        #expect(value.wait.get() == .success(["highest", "high", "medium", "lowest"]))
        let synced = QueueSafeSyncedValue(value: 1)
        #expect(synced.highestPriority.lowestPriority.set { $0 += 1 } == .success(2))
    }

    @Test func defaultPriorityForms_onEverySchedule() async throws {
        let counter = QueueSafeValue(value: 1)
        #expect(counter.wait.get() == .success(1))
        #expect(counter.wait.set(newValue: 2) == .success(2))
        #expect(try await counter.async.get() == 2)
        #expect(try await counter.async.set(newValue: 3) == 3)
        #expect(try counter.wait.read { $0 } == 3)
        #expect(try await counter.async.read { $0 } == 3)
    }

    /// The original library's grammar with the priority left out, on the blocking and awaiting
    /// schedules: each command runs, at `.medium`, and reports as its explicit form does.
    @Test func theSeedsGrammar_withoutAPriority_onTheBlockingAndAwaitingSchedules() async throws {
        let counter = QueueSafeValue(value: 0)
        #expect(counter.wait.set { $0 += 1 } == .success(1))
        #expect(counter.wait(timeout: .seconds(30)).set { $0 += 1 } == .success(2))
        #expect(
            counter.wait.set(manualCompletion: { value, done in
                value += 1
                done()
            }) == .success(3))
        #expect(counter.wait.map { $0 * 10 } == .success(30))
        var seen: [Int] = []
        counter.wait.get { seen.append((try? $0.get()) ?? -1) }
        counter.wait.get(manualCompletion: { result, done in
            seen.append((try? result.get()) ?? -1)
            done()
        })
        #expect(seen == [3, 3])
        let read = counter.wait.read(manualCompletion: { value, done in
            seen.append(value)
            done()
        })
        #expect((try? read.get()) != nil)
        #expect(seen == [3, 3, 3])
        #expect(throws: DecodeError.self) { try counter.wait.read { try Self.decode("x\($0)") } }
        #expect(try await counter.async.set { $0 += 1 } == 4)
        #expect(try await counter.async(timeout: .seconds(30)).set { $0 += 1 } == 5)
        #expect(try await counter.async.map { $0 * 10 } == 50)

        // A nil closure is refused as its explicit form refuses it.
        let noClosure: ((inout Int) -> Void)? = nil
        #expect(counter.wait.set(completion: noClosure) == .failure(.commandClosureDeallocated))
    }
}
