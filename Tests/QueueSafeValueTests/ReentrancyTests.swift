import Dispatch
import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

@Suite(.runsAlongsideOthers) struct ReentrancyTests {
    /// Issues every blocking command form on `value` from the current (in-section) code and
    /// returns what each reported; closures that must not run record it in `closureRan`.
    private static func nestedBlockingResults(
        _ value: QueueSafeValue<Int>,
        closureRan: Locked<Bool>
    ) -> [Result<Int, QueueSafeValueError>] {
        var results: [Result<Int, QueueSafeValueError>] = []
        for commands in [
            value.wait.highestPriority, value.wait.lowestPriority, value.wait(timeout: .seconds(30)).lowestPriority,
        ] {
            results.append(commands.get())
            results.append(commands.set(newValue: 99))
            results.append(commands.set { _ in closureRan.set(true) })
            results.append(
                commands.set { _, done in
                    closureRan.set(true)
                    done()
                })
            results.append(
                commands.map { _ in
                    closureRan.set(true)
                    return 0
                })
            commands.get { results.append($0) }
            commands.get { result, done in
                results.append(result)
                done()
            }
        }
        return results
    }

    private func assertAllReentrant(
        _ results: [Result<Int, QueueSafeValueError>]?,
        _ closureRan: Locked<Bool>,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        guard let results else {
            Issue.record("the outer command did not run", sourceLocation: sourceLocation)
            return
        }
        #expect(results.count == 21, sourceLocation: sourceLocation)
        #expect(
            results == Array(repeating: .failure(.reentrantAccess), count: results.count),
            sourceLocation: sourceLocation)
        #expect(!closureRan.value, "a nested command's closure ran", sourceLocation: sourceLocation)
    }

    /// Runs `body` on a new thread and waits for it, so a nested command that waits for itself
    /// (instead of failing at once) fails the test rather than hanging it.
    private func onBoundedThread(
        sourceLocation: SourceLocation = #_sourceLocation,
        _ body: @escaping @Sendable () -> Void
    ) {
        let threads = ThreadGroup()
        threads.spawn(body)
        threads.join(sourceLocation: sourceLocation)
    }

    // MARK: Same value: refused at once

    @Test func blockingCommand_insideBlockingClosureOfSameValue_failsWithReentrantAccess() throws {
        let value = QueueSafeValue(value: 1)
        let closureRan = Locked(false)
        let inner = Locked<[Result<Int, QueueSafeValueError>]?>(nil)
        let outer = Locked<Result<Int, QueueSafeValueError>?>(nil)
        onBoundedThread {
            outer.set(
                value.wait.lowestPriority.set { counter in
                    inner.set(Self.nestedBlockingResults(value, closureRan: closureRan))
                    counter = 2
                })
        }
        assertAllReentrant(inner.value, closureRan)
        #expect(outer.value == .success(2))
        #expect(value.waitBounded.lowestPriority.get() == .success(2))
    }

    @Test func blockingCommand_insideClosureGrantedAfterWaiting_failsWithReentrantAccess() throws {
        // The outer commands get the section by hand-off (not on the idle fast path).
        let value = QueueSafeValue(value: 1)
        let closureRan = Locked(false)
        let inner = Recorder<[Result<Int, QueueSafeValueError>]>()
        let holder = SectionHolder(value)
        let threads = ThreadGroup()
        threads.spawn {
            value.wait.lowestPriority.set { _ in inner.append(Self.nestedBlockingResults(value, closureRan: closureRan))
            }
        }
        waitForPending(value.engine, count: 1)
        threads.spawn {
            value.wait.lowestPriority.set { _, done in
                inner.append(Self.nestedBlockingResults(value, closureRan: closureRan))
                done()
            }
        }
        waitForPending(value.engine, count: 2)
        let finished = DispatchSemaphore(value: 0)
        value.async(performIn: DispatchQueue(label: "after")).lowestPriority.get { _ in
            inner.append(Self.nestedBlockingResults(value, closureRan: closureRan))
            finished.signal()
        }
        holder.release()
        threads.join()
        waitOrFail(finished)
        #expect(inner.count == 3)
        for results in inner.snapshot { assertAllReentrant(results, closureRan) }
    }

    @Test func blockingCommand_insideBlockingGetAndMapClosures_failsWithReentrantAccess() throws {
        let value = QueueSafeValue(value: 1)
        let closureRan = Locked(false)
        let fromGet = Locked<[Result<Int, QueueSafeValueError>]?>(nil)
        let fromMap = Locked<[Result<Int, QueueSafeValueError>]?>(nil)
        onBoundedThread {
            value.wait.highestPriority.get { _ in fromGet.set(Self.nestedBlockingResults(value, closureRan: closureRan))
            }
            let mapped = value.wait.highestPriority.map { _ in Self.nestedBlockingResults(value, closureRan: closureRan)
            }
            fromMap.set(try? mapped.get())
        }
        assertAllReentrant(fromGet.value, closureRan)
        assertAllReentrant(fromMap.value, closureRan)
    }

    @Test func blockingCommand_insideBlockingManualCompletionClosure_failsWithReentrantAccess() throws {
        let value = QueueSafeValue(value: 1)
        let closureRan = Locked(false)
        let beforeDone = Locked<[Result<Int, QueueSafeValueError>]?>(nil)
        let afterDone = Locked<[Result<Int, QueueSafeValueError>]?>(nil)
        onBoundedThread {
            value.wait.lowestPriority.set { _, done in
                beforeDone.set(Self.nestedBlockingResults(value, closureRan: closureRan))
                done()
                afterDone.set(Self.nestedBlockingResults(value, closureRan: closureRan))
            }
        }
        assertAllReentrant(beforeDone.value, closureRan)
        assertAllReentrant(afterDone.value, closureRan)
        #expect(value.waitBounded.lowestPriority.get() == .success(1))
    }

    @Test func blockingCommand_insideDispatchClosures_failsWithReentrantAccess() throws {
        let value = QueueSafeValue(value: 1)
        let closureRan = Locked(false)
        let inner = Recorder<[Result<Int, QueueSafeValueError>]>()
        let group = DispatchGroup()
        let queue = DispatchQueue(label: "dispatch")
        let commands = value.async(performIn: queue).lowestPriority
        for _ in 0..<5 { group.enter() }
        commands.get { _ in
            inner.append(Self.nestedBlockingResults(value, closureRan: closureRan))
            group.leave()
        }
        commands.set { _ in
            inner.append(Self.nestedBlockingResults(value, closureRan: closureRan))
        } completion: { _ in
            group.leave()
        }
        commands.set { _, done in
            inner.append(Self.nestedBlockingResults(value, closureRan: closureRan))
            done()
            inner.append(Self.nestedBlockingResults(value, closureRan: closureRan))
        } completion: { _ in
            group.leave()
        }
        commands.get { _, done in
            inner.append(Self.nestedBlockingResults(value, closureRan: closureRan))
            DispatchQueue.global().async { done() }
            group.leave()
        }
        commands.map { _ in
            Self.nestedBlockingResults(value, closureRan: closureRan)
        } completion: { result in
            if let results = try? result.get() { inner.append(results) }
            group.leave()
        }
        waitOrFail(group)
        #expect(inner.count == 6)
        for results in inner.snapshot { assertAllReentrant(results, closureRan) }
        #expect(value.wait(timeout: .seconds(30)).lowestPriority.get() == .success(1))
    }

    @Test func blockingCommand_insideSyncedValueClosure_failsWithReentrantAccess() throws {
        let synced = QueueSafeSyncedValue(value: 1)
        let timed = QueueSafeSyncedValue(value: 1, timeout: .seconds(30))
        let inner = Recorder<Result<Int, QueueSafeValueError>>()
        onBoundedThread {
            synced.lowestPriority.set { counter in
                inner.append(synced.highestPriority.get())
                inner.append(synced.lowestPriority.set(newValue: 5))
                counter = 3
            }
            timed.lowestPriority.get { _ in inner.append(timed.lowestPriority.get()) }
        }
        #expect(inner.snapshot == Array(repeating: .failure(.reentrantAccess), count: 3))
        #expect(timed.lowestPriority.get() == .success(1))
        #expect(synced.lowestPriority.get() == .success(3))
    }

    @Test func reentrancyFailure_leavesQueueWorking() throws {
        let value = QueueSafeValue(value: 0)
        onBoundedThread {
            for _ in 0..<3 {
                value.wait.lowestPriority.set { counter in
                    counter += 1
                    _ = value.wait.highestPriority.get()
                }
            }
        }
        #expect(value.engine.pendingCount == 0)
        #expect(value.wait(timeout: .seconds(30)).lowestPriority.get() == .success(3))
        let finished = DispatchSemaphore(value: 0)
        let received = Recorder<Result<Int, QueueSafeValueError>>()
        value.async(performIn: .global()).lowestPriority.get { result in
            received.append(result)
            finished.signal()
        }
        waitOrFail(finished)
        #expect(received.snapshot == [.success(3)])
    }

    // MARK: Other values: allowed

    @Test func commandOfDifferentValue_insideCriticalSection_runsNormally() throws {
        let outer = QueueSafeValue(value: 1)
        let other = QueueSafeValue(value: 10)
        let inner = Recorder<Result<Int, QueueSafeValueError>>()
        onBoundedThread {
            outer.wait.lowestPriority.set { counter in
                let current = counter
                inner.append(other.wait.highestPriority.set { $0 += current })
                inner.append(other.wait.lowestPriority.get())
                counter = 2
            }
        }
        #expect(inner.snapshot == [.success(11), .success(11)])

        let fromDispatch = Recorder<Result<Int, QueueSafeValueError>>()
        let finished = DispatchSemaphore(value: 0)
        outer.async(performIn: .global()).lowestPriority.set { _, done in
            fromDispatch.append(other.wait.lowestPriority.set { $0 += 1 })
            done()
            finished.signal()
        }
        waitOrFail(finished)
        #expect(fromDispatch.snapshot == [.success(12)])
    }

    @Test func nestedSections_refuseOnlyTheValuesAlreadyEntered() throws {
        let first = QueueSafeValue(value: "a")
        let second = QueueSafeValue(value: "b")
        let results = Recorder<Result<String, QueueSafeValueError>>()
        onBoundedThread {
            first.wait.lowestPriority.set { firstValue in
                second.wait.lowestPriority.set { secondValue in
                    results.append(first.wait.highestPriority.get())
                    results.append(second.wait.highestPriority.get())
                    secondValue += "2"
                }
                // Back in `first` only: `second` is free again.
                results.append(second.wait.highestPriority.get())
                results.append(first.wait.highestPriority.get())
                firstValue += "1"
            }
        }
        #expect(
            results.snapshot == [
                .failure(.reentrantAccess), .failure(.reentrantAccess), .success("b2"), .failure(.reentrantAccess),
            ])
        #expect(first.waitBounded.lowestPriority.get() == .success("a1"))
    }

    // MARK: No false positives

    @Test func threadThatRanADispatchClosure_isNotInsideOnceTheClosureReturned_evenWhileDoneIsPending() throws {
        // The manual-completion closure returned on a serial queue, and the value is still held
        // until `done()`. A later block on the same queue (likely the same thread) is not inside the
        // section: its blocking command must wait for its turn, not fail as reentrant.
        let value = QueueSafeValue(value: 0)
        let queue = DispatchQueue(label: "serial")
        let storedDone = Locked<CommandCompletionClosure?>(nil)
        let later = Locked<Result<Int, QueueSafeValueError>?>(nil)
        let finished = DispatchSemaphore(value: 0)
        value.async(performIn: queue).lowestPriority.set { counter, done in
            counter = 1
            storedDone.set(done)
        }
        queue.async {
            later.set(value.wait(timeout: .seconds(30)).lowestPriority.set { $0 += 1 })
            finished.signal()
        }
        waitForPending(value.engine, count: 1)
        #expect(later.value == nil)
        storedDone.value?()
        waitOrFail(finished)
        #expect(later.value == .success(2))
    }

    @Test func blockingCommand_afterOwnSectionEnded_onSameThread_runsNormally() throws {
        let value = QueueSafeValue(value: 0)
        let queue = DispatchQueue(label: "serial")
        let results = Recorder<Result<Int, QueueSafeValueError>>()
        let finished = DispatchSemaphore(value: 0)
        queue.async {
            results.append(value.wait.lowestPriority.set { $0 += 1 })
            results.append(
                value.wait.lowestPriority.set { counter, done in
                    counter += 1
                    done()
                })
            results.append(value.wait.lowestPriority.set { $0 += 1 })
            finished.signal()
        }
        waitOrFail(finished)
        #expect(results.snapshot == [.success(1), .success(2), .success(3)])
    }
}
