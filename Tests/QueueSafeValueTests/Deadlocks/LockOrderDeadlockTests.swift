import Dispatch
import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

/// Lock-order cycles between threads (and tasks) fail with `.deadlock` instead of hanging, and
/// nothing that is not a cycle ever does.
@Suite(.runsAlongsideOthers) struct LockOrderDeadlockTests {
    /// Starts one thread per body, with all of them holding their first value before any asks for
    /// its second; waits (bounded) for all of them.
    private func runCycle(values: [QueueSafeValue<Int>], repeat round: Int) -> [Result<Int, QueueSafeValueError>] {
        let count = values.count
        let holding = DispatchGroup()
        let finished = DispatchGroup()
        let results = Locked<[Result<Int, QueueSafeValueError>?]>(Array(repeating: nil, count: count))
        let allHolding = DispatchSemaphore(value: 0)
        for index in 0..<count {
            holding.enter()
            finished.enter()
            let first = values[index]
            let second = values[(index + 1) % count]
            let thread = Thread {
                // Hold `first`, then wait for `second`, which the next thread holds.
                first.wait.highestPriority.set { value in
                    value += 1
                    holding.leave()
                    allHolding.wait()
                    allHolding.signal()
                    let inner = second.wait.highestPriority.set { $0 += 1 }
                    results.withLock { $0[index] = inner }
                }
                finished.leave()
            }
            thread.start()
        }
        #expect(holding.wait(timeout: .now() + 30) == .success, "round \(round): the threads never all held a value")
        allHolding.signal()
        #expect(finished.wait(timeout: .now() + 30) == .success, "round \(round): a cycle hung")
        return results.value.map { $0 ?? .failure(.anyTimedOut) }
    }

    @Test(arguments: [2, 3])
    func cycleOfValues_failsWithDeadlock_andNeverHangs(values count: Int) {
        for round in 0..<20 {
            let values = (0..<count).map { QueueSafeValue(value: 0, label: "v\($0)") }
            let results = runCycle(values: values, repeat: round)
            let deadlocks = results.filter { if case .failure(.deadlock) = $0 { true } else { false } }
            #expect(deadlocks.count >= 1, "round \(round): no command of the cycle failed: \(results)")
            #expect(
                results.allSatisfy { if case .failure(let error) = $0 { error == .anyDeadlock } else { true } },
                "round \(round): an unexpected failure: \(results)")
            // Every refused command never ran: each value counts its holder plus the waits that succeeded.
            let succeeded = results.filter { if case .success = $0 { true } else { false } }.count
            let total = values.map { $0.wait.lowestPriority.get().valueOrZero }.reduce(0, +)
            #expect(total == count + succeeded, "round \(round): a refused command changed its value")
        }
    }

    @Test func deadlockReport_namesTheCycleByLabel() throws {
        let values = [QueueSafeValue(value: 0, label: "ledger"), QueueSafeValue(value: 0, label: "balance")]
        let results = runCycle(values: values, repeat: 0)
        let report = try #require(
            results.compactMap { result -> DeadlockReport? in
                if case .failure(.deadlock(let report)) = result { return report }
                return nil
            }.first)
        #expect(report.kind == .waitCycle)
        #expect(report.cycle.count == 2)
        let text = String(describing: QueueSafeValueError.deadlock(report))
        #expect(text.contains("'ledger'") && text.contains("'balance'"), "\(text)")
        #expect(text.contains("thread 0x"), "\(text)")
        #expect(text.contains("held by a blocking command"), "the report carries the diagnostics: \(text)")
    }

    @Test func chainWithoutCycle_succeeds() {
        // T0 holds a and waits for b; T1 holds b and waits for c; c's holder lets go: no cycle.
        let a = QueueSafeValue(value: 0, label: "a")
        let b = QueueSafeValue(value: 0, label: "b")
        let c = QueueSafeValue(value: 0, label: "c")
        let holdingC = DispatchSemaphore(value: 0)
        let releaseC = DispatchSemaphore(value: 0)
        let done = DispatchGroup()
        let results = Locked<[Result<Int, QueueSafeValueError>]>([])
        done.enter()
        Thread {
            c.wait.highestPriority.set { _ in
                holdingC.signal()
                releaseC.wait()
            }
            done.leave()
        }.start()
        holdingC.wait()
        let holdingB = DispatchSemaphore(value: 0)
        done.enter()
        Thread {
            b.wait.highestPriority.set { _ in
                holdingB.signal()
                let result = c.wait.highestPriority.set { $0 += 1 }
                results.withLock { $0.append(result) }
            }
            done.leave()
        }.start()
        holdingB.wait()
        done.enter()
        Thread {
            a.wait.highestPriority.set { _ in
                let result = b.wait.highestPriority.set { $0 += 1 }
                results.withLock { $0.append(result) }
            }
            done.leave()
        }.start()
        // Both waiters park behind c's holder before it lets go.
        #expect(
            waitUntil { b.diagnostics.waitingCount == 1 && c.diagnostics.waitingCount == 1 },
            "\(b.diagnostics) / \(c.diagnostics)")
        usleep(20_000)
        releaseC.signal()
        #expect(done.wait(timeout: .now() + 30) == .success, "the chain hung")
        #expect(results.value.count == 2)
        #expect(results.value.allSatisfy { if case .success = $0 { true } else { false } }, "\(results.value)")
    }

    @Test func manyThreadsTakingTwoValuesInOneOrder_neverSeeDeadlock_andLoseNoUpdate() {
        let first = QueueSafeValue(value: 0, label: "first")
        let second = QueueSafeValue(value: 0, label: "second")
        let failures = Locked<[QueueSafeValueError]>([])
        let done = DispatchGroup()
        let threads = 6
        let rounds = TestEnvironment.iterations(300, sanitized: 100)
        for _ in 0..<threads {
            done.enter()
            Thread {
                for _ in 0..<rounds {
                    let outer = first.wait.highestPriority.set { value in
                        value += 1
                        if case .failure(let error) = second.wait.highestPriority.set(completion: { $0 += 1 }) {
                            failures.withLock { $0.append(error) }
                        }
                    }
                    if case .failure(let error) = outer { failures.withLock { $0.append(error) } }
                }
                done.leave()
            }.start()
        }
        #expect(done.wait(timeout: .now() + 60) == .success, "the threads hung")
        #expect(failures.value.isEmpty, "\(failures.value.prefix(3))")
        #expect(first.wait.lowestPriority.get().valueOrZero == threads * rounds)
        #expect(second.wait.lowestPriority.get().valueOrZero == threads * rounds)
    }

    @Test func taskHoldingAcrossAwait_andThreadClosingTheCycle_isDetected() async throws {
        // A task holds `x` across an await and then awaits `y`; a thread holds `y` and waits for `x`.
        let x = QueueSafeValue(value: 0, label: "x")
        let y = QueueSafeValue(value: 0, label: "y")
        let threadHoldsY = Gate()
        let threadResult = Locked<Result<Int, QueueSafeValueError>?>(nil)
        let threadDone = DispatchSemaphore(value: 0)
        Thread {
            y.wait.highestPriority.set { _ in
                threadHoldsY.open()
                // Wait (bounded) until the task holds x, then ask for x.
                _ = waitUntil { x.diagnostics.holder != nil }
                threadResult.set(x.wait.highestPriority.set { $0 += 1 })
            }
            threadDone.signal()
        }.start()
        await threadHoldsY.wait()
        let taskResult: Result<Int, QueueSafeValueError> = await Task.detached {
            do throws(QueueSafeValueError) {
                let value = try await x.async.highestPriority.set { value in
                    value += 1
                    // Give the thread time to park on x, then ask for y.
                    try? await Task.sleep(nanoseconds: 20_000_000)
                    _ = try? await y.async.highestPriority.set { $0 += 100 }
                }
                return .success(value)
            } catch {
                return .failure(error)
            }
        }.value
        #expect(threadDone.wait(timeout: .now() + 30) == .success, "the thread hung")
        let threadDeadlocked = { if case .failure(.deadlock)? = threadResult.value { true } else { false } }()
        // One of the two was refused: the task's inner await (then x ends at 1 and y at 0), or the
        // thread's wait (then the task got y).
        let yValue = y.wait.lowestPriority.get().valueOrZero
        #expect(threadDeadlocked || yValue == 0, "neither party of the cycle was refused")
        #expect(taskResult.isSuccess)
    }
}
