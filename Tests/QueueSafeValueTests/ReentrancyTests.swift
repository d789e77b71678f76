import Dispatch
import Foundation
import XCTest

@testable import QueueSafeValue

final class ReentrancyTests: XCTestCase {
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
        file: StaticString = #filePath,
        line: UInt = #line
    ) {
        guard let results else { return XCTFail("the outer command did not run", file: file, line: line) }
        XCTAssertEqual(results.count, 21, file: file, line: line)
        XCTAssertEqual(
            results, Array(repeating: .failure(.reentrantAccess), count: results.count), file: file, line: line)
        XCTAssertFalse(closureRan.value, "a nested command's closure ran", file: file, line: line)
    }

    /// Runs `body` on a new thread and waits for it, so a nested command that waits for itself
    /// (instead of failing at once) fails the test rather than hanging it.
    private func onBoundedThread(
        file: StaticString = #filePath,
        line: UInt = #line,
        _ body: @escaping @Sendable () -> Void
    ) {
        let threads = ThreadGroup()
        threads.spawn(body)
        threads.join(file: file, line: line)
    }

    // MARK: Same value: refused at once

    func test_blockingCommand_insideBlockingClosureOfSameValue_failsWithReentrantAccess() {
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
        XCTAssertEqual(outer.value, .success(2))
        XCTAssertEqual(value.waitBounded.lowestPriority.get(), .success(2))
    }

    func test_blockingCommand_insideClosureGrantedAfterWaiting_failsWithReentrantAccess() {
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
        waitForPending(value.storage.engine, count: 1)
        threads.spawn {
            value.wait.lowestPriority.set { _, done in
                inner.append(Self.nestedBlockingResults(value, closureRan: closureRan))
                done()
            }
        }
        waitForPending(value.storage.engine, count: 2)
        let finished = DispatchSemaphore(value: 0)
        value.async(performIn: DispatchQueue(label: "after")).lowestPriority.get { _ in
            inner.append(Self.nestedBlockingResults(value, closureRan: closureRan))
            finished.signal()
        }
        holder.release()
        threads.join()
        waitOrFail(finished)
        XCTAssertEqual(inner.count, 3)
        for results in inner.snapshot { assertAllReentrant(results, closureRan) }
    }

    func test_blockingCommand_insideBlockingGetAndMapClosures_failsWithReentrantAccess() {
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

    func test_blockingCommand_insideBlockingManualCompletionClosure_failsWithReentrantAccess() {
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
        XCTAssertEqual(value.waitBounded.lowestPriority.get(), .success(1))
    }

    func test_blockingCommand_insideDispatchClosures_failsWithReentrantAccess() {
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
        XCTAssertEqual(inner.count, 6)
        for results in inner.snapshot { assertAllReentrant(results, closureRan) }
        XCTAssertEqual(value.wait(timeout: .seconds(30)).lowestPriority.get(), .success(1))
    }

    func test_blockingCommand_insideSyncedValueClosure_failsWithReentrantAccess() {
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
        XCTAssertEqual(inner.snapshot, Array(repeating: .failure(.reentrantAccess), count: 3))
        XCTAssertEqual(timed.lowestPriority.get(), .success(1))
        XCTAssertEqual(synced.lowestPriority.get(), .success(3))
    }

    func test_reentrancyFailure_leavesQueueWorking() {
        let value = QueueSafeValue(value: 0)
        onBoundedThread {
            for _ in 0..<3 {
                value.wait.lowestPriority.set { counter in
                    counter += 1
                    _ = value.wait.highestPriority.get()
                }
            }
        }
        XCTAssertEqual(value.storage.engine.pendingCount, 0)
        XCTAssertEqual(value.wait(timeout: .seconds(30)).lowestPriority.get(), .success(3))
        let finished = DispatchSemaphore(value: 0)
        value.async(performIn: .global()).lowestPriority.get { result in
            XCTAssertEqual(result, .success(3))
            finished.signal()
        }
        waitOrFail(finished)
    }

    // MARK: Other values: allowed

    func test_commandOfDifferentValue_insideCriticalSection_runsNormally() {
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
        XCTAssertEqual(inner.snapshot, [.success(11), .success(11)])

        let fromDispatch = Recorder<Result<Int, QueueSafeValueError>>()
        let finished = DispatchSemaphore(value: 0)
        outer.async(performIn: .global()).lowestPriority.set { _, done in
            fromDispatch.append(other.wait.lowestPriority.set { $0 += 1 })
            done()
            finished.signal()
        }
        waitOrFail(finished)
        XCTAssertEqual(fromDispatch.snapshot, [.success(12)])
    }

    func test_nestedSections_refuseOnlyTheValuesAlreadyEntered() {
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
        XCTAssertEqual(
            results.snapshot,
            [.failure(.reentrantAccess), .failure(.reentrantAccess), .success("b2"), .failure(.reentrantAccess)])
        XCTAssertEqual(first.waitBounded.lowestPriority.get(), .success("a1"))
    }

    // MARK: No false positives

    func test_threadThatRanADispatchClosure_isNotInsideOnceTheClosureReturned_evenWhileDoneIsPending() {
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
        waitForPending(value.storage.engine, count: 1)
        XCTAssertNil(later.value)
        storedDone.value?()
        waitOrFail(finished)
        XCTAssertEqual(later.value, .success(2))
    }

    func test_blockingCommand_afterOwnSectionEnded_onSameThread_runsNormally() {
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
        XCTAssertEqual(results.snapshot, [.success(1), .success(2), .success(3)])
    }
}
