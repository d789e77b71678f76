import Dispatch
import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

@Suite(.runsAlongsideOthers) struct BlockingCommandTests {
    // MARK: Results of each command

    @Test func getWithCommandClosure_passesCurrentValue_once() throws {
        let value = QueueSafeValue(value: 7)
        var received: [Result<Int, QueueSafeValueError>] = []
        value.wait.lowestPriority.get { received.append($0) }
        #expect(received == [.success(7)])
    }

    @Test func syncedValue_commandsMatchWaitCommandsOfPlainValue() throws {
        let synced = QueueSafeSyncedValue(value: 1)
        #expect(synced.lowestPriority.get() == .success(1))
        #expect(synced.highestPriority.set(newValue: 2) == .success(2))
        #expect((synced.priority(.medium).set { $0 += 3 }) == .success(5))
        #expect((synced.lowestPriority.map { $0 * 10 }) == .success(50))
        #expect(
            synced.highestPriority.set { value, done in
                value += 1
                done()
            } == .success(6))
    }

    // MARK: Nil closures

    @Test func nilClosures_failWithCommandClosureDeallocated_andLeaveValueUntouched() throws {
        let value = QueueSafeValue(value: 5)
        let access: ((inout Int) -> Void)? = nil
        let manualAccess: ((inout Int, @escaping CommandCompletionClosure) -> Void)? = nil
        let transform: ((Int) -> String)? = nil
        #expect(value.wait.lowestPriority.set(completion: access) == .failure(.commandClosureDeallocated))
        #expect(value.wait.lowestPriority.set(manualCompletion: manualAccess) == .failure(.commandClosureDeallocated))
        #expect(value.wait.lowestPriority.map(completion: transform) == .failure(.commandClosureDeallocated))
        // The `get` forms have nothing to report to: they return without touching the value.
        value.wait.lowestPriority.get(completion: nil)
        value.wait.lowestPriority.get(manualCompletion: nil)

        let synced = QueueSafeSyncedValue(value: 5)
        #expect(synced.highestPriority.set(completion: access) == .failure(.commandClosureDeallocated))
        #expect(synced.highestPriority.map(completion: transform) == .failure(.commandClosureDeallocated))

        // Nothing was left holding the value: the next commands run at once and see it unchanged.
        #expect(value.waitBounded.lowestPriority.get() == .success(5))
        #expect(synced.lowestPriority.get() == .success(5))
        #expect(value.engine.pendingCount == 0)
    }

    // MARK: Threads

    @Test func idleValue_runsClosureOnCallingThread() throws {
        let value = QueueSafeValue(value: 0)
        let caller = pthread_self()
        var sameThread: [Bool] = []
        value.wait.lowestPriority.set { _ in sameThread.append(pthread_equal(pthread_self(), caller) != 0) }
        value.wait.lowestPriority.get { _ in sameThread.append(pthread_equal(pthread_self(), caller) != 0) }
        _ = value.wait.lowestPriority.map { _ in sameThread.append(pthread_equal(pthread_self(), caller) != 0) }
        value.wait.lowestPriority.get { _, done in
            sameThread.append(pthread_equal(pthread_self(), caller) != 0)
            done()
        }
        #expect(sameThread == [true, true, true, true])
    }

    @Test func contendedValue_runsWaitersClosureOnWaitersOwnThread() throws {
        let value = QueueSafeValue(value: 0)
        let holder = SectionHolder(value)
        let onOwnThread = Locked<Bool?>(nil)
        let threads = ThreadGroup()
        threads.spawn {
            let me = pthread_self()
            value.wait.lowestPriority.set { _ in onOwnThread.set(pthread_equal(pthread_self(), me) != 0) }
        }
        waitForPending(value.engine, count: 1)
        holder.release()
        threads.join()
        #expect(onOwnThread.value == true)
    }

    @Test func blockingCommand_returnsOnlyAfterItsClosureRan_whenItHadToWait() throws {
        let value = QueueSafeValue(value: 0)
        let holder = SectionHolder(value)
        let returned = Locked<Result<Int, QueueSafeValueError>?>(nil)
        let threads = ThreadGroup()
        threads.spawn { returned.set(value.wait.lowestPriority.set { $0 += 1 }) }
        waitForPending(value.engine, count: 1)
        sleepBriefly()
        #expect(returned.value == nil, "a blocked command returned while the value was held")
        holder.release()
        threads.join()
        #expect(returned.value == .success(1))
    }

    // MARK: Order

    @Test func blockedThreads_runInPriorityOrder_FIFOWithinPriority() throws {
        let priorities: [CommandPriority] = [
            .low, .high, .low, .medium, .highest, .high, .lowest, .low, CommandPriority(rawValue: 200), .medium,
            .high, .highest, .lowest, CommandPriority(rawValue: 1), .medium,
        ]
        let value = QueueSafeValue(value: [Int]())
        let order = Recorder<Int>()
        let holder = SectionHolder(value)
        let threads = ThreadGroup()
        for (index, priority) in priorities.enumerated() {
            threads.spawn {
                // Every command form, in turn, so they all take part in the same order.
                let commands = value.wait.priority(priority)
                switch index % 5 {
                case 0:
                    commands.set { value in
                        value.append(index)
                        order.append(index)
                    }
                case 1:
                    commands.get { _ in order.append(index) }
                case 2:
                    _ = commands.map { _ in order.append(index) }
                case 3:
                    commands.get { _, done in
                        order.append(index)
                        done()
                    }
                default:
                    commands.set { value, done in
                        value.append(index)
                        order.append(index)
                        done()
                    }
                }
            }
            // Each thread is in the queue before the next one starts: issue order is known.
            guard waitForPending(value.engine, count: index + 1) else { break }
        }
        holder.release()
        threads.join()
        #expect(order.snapshot == CommandPriority.expectedRunOrder(priorities))
        let writers = CommandPriority.expectedRunOrder(priorities).filter { $0 % 5 == 0 || $0 % 5 == 4 }
        #expect(value.waitBounded.lowestPriority.get() == .success(writers))
        #expect(value.engine.pendingCount == 0)
    }

    @Test func syncedValue_blockedThreads_runInPriorityOrder_FIFOWithinPriority() throws {
        let priorities: [CommandPriority] = [.lowest, .highest, .lowest, .highest, .medium, .lowest, .medium]
        let synced = QueueSafeSyncedValue(value: [Int]())
        let holderDone = Locked<CommandCompletionClosure?>(nil)
        let held = DispatchSemaphore(value: 0)
        let threads = ThreadGroup()
        threads.spawn {
            synced.highestPriority.get { _, done in
                holderDone.set(done)
                held.signal()
            }
        }
        waitOrFail(held, "the holder")
        for (index, priority) in priorities.enumerated() {
            threads.spawn { synced.priority(priority).set { $0.append(index) } }
            guard waitForPending(synced.engine, count: index + 1) else { break }
        }
        holderDone.withLock { done in
            done?()
            done = nil
        }
        threads.join()
        #expect(synced.lowestPriority.get() == .success(CommandPriority.expectedRunOrder(priorities)))
    }

    @Test func runningCommand_isNotPreempted_byHigherPriorityArrivals() throws {
        let value = QueueSafeValue(value: [String]())
        let entered = DispatchSemaphore(value: 0)
        let proceed = DispatchSemaphore(value: 0)
        let threads = ThreadGroup()
        threads.spawn {
            value.wait.lowestPriority.set { log in
                log.append("low begins")
                entered.signal()
                proceed.wait()
                log.append("low ends")
            }
        }
        waitOrFail(entered, "the low-priority command to start")
        threads.spawn { value.wait.highestPriority.set { $0.append("highest") } }
        waitForPending(value.engine, count: 1)
        proceed.signal()
        threads.join()
        #expect(value.waitBounded.lowestPriority.get() == .success(["low begins", "low ends", "highest"]))
    }

    // MARK: Contention

    @Test func concurrentBlockingCommands_neverOverlap_andLoseNoUpdate() throws {
        let threadCount = 6
        let perThread = TestEnvironment.iterations(1_000, sanitized: 600)
        let value = QueueSafeValue(value: 0)
        let probe = SectionProbe()
        let threads = ThreadGroup()
        for thread in 0..<threadCount {
            threads.spawn {
                for step in 0..<perThread {
                    let commands = value.wait.priority(
                        CommandPriority.testPriorities[(thread + step) % CommandPriority.testPriorities.count])
                    switch step % 4 {
                    case 0:
                        commands.set { counter in
                            probe.enter()
                            counter += 1
                            probe.leave()
                        }
                    case 1:
                        commands.set { counter, done in
                            probe.enter()
                            counter += 1
                            probe.leave()
                            done()
                        }
                    case 2:
                        _ = commands.map { _ in probe.pass() }
                        commands.set { counter in
                            probe.enter()
                            counter += 1
                            probe.leave()
                        }
                    default:
                        commands.get { _ in probe.pass() }
                        commands.set { counter in
                            probe.enter()
                            counter += 1
                            probe.leave()
                        }
                    }
                }
            }
        }
        threads.join()
        #expect(probe.maximumInside == 1, "two closures ran inside the critical section at once")
        #expect(value.waitBounded.lowestPriority.get() == .success(threadCount * perThread))
    }

    @Test func blockingSetResults_reportTheValueTheirOwnCommandLeft_underContention() throws {
        // Each command adds 1, so the k-th command to run returns k: every number from 1 to n
        // exactly once, whatever the interleaving.
        let threadCount = 4
        let perThread = TestEnvironment.iterations(1_000, sanitized: 500)
        let value = QueueSafeValue(value: 0)
        let reported = Recorder<Int>()
        let threads = ThreadGroup()
        for thread in 0..<threadCount {
            threads.spawn {
                for step in 0..<perThread {
                    let commands = value.wait.priority(
                        CommandPriority.testPriorities[(thread + step) % CommandPriority.testPriorities.count])
                    let result: Result<Int, QueueSafeValueError>
                    switch step % 3 {
                    case 0:
                        result = commands.set { $0 += 1 }
                    case 1:
                        result = commands.set { counter, done in
                            counter += 1
                            DispatchQueue.global().async { done() }
                        }
                    default:
                        result = commands.set { counter, done in
                            done()
                            counter += 1
                        }
                    }
                    reported.append((try? result.get()) ?? -1)
                }
            }
        }
        threads.join()
        #expect(reported.snapshot.sorted() == Array(1...(threadCount * perThread)))
    }

}
