import Dispatch
import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

@Suite(.runsAlongsideOthers) struct DispatchCommandTests {
    // MARK: Results and queues

    @Test func getWithCommandClosure_runsOnGivenQueue_withCurrentValue() throws {
        let queue = TaggedQueue(label: "get")
        let value = QueueSafeValue(value: 3)
        let received = Locked<(Result<Int, QueueSafeValueError>, Bool)?>(nil)
        let finished = DispatchSemaphore(value: 0)
        value.async(performIn: queue.queue).lowestPriority.get { result in
            received.set((result, queue.isCurrent))
            finished.signal()
        }
        waitOrFail(finished)
        #expect(received.value?.0 == .success(3))
        #expect(received.value?.1 == true, "the closure did not run on the given queue")
    }

    @Test func setNewValue_completionRunsOnGivenQueue_withUpdatedValue() throws {
        let queue = TaggedQueue(label: "set")
        let value = QueueSafeValue(value: 1)
        let received = Locked<(Result<Int, QueueSafeValueError>, Bool)?>(nil)
        let finished = DispatchSemaphore(value: 0)
        value.async(performIn: queue.queue).highestPriority.set(newValue: 2)
        value.async(performIn: queue.queue).highestPriority.set(newValue: 3) { result in
            received.set((result, queue.isCurrent))
            finished.signal()
        }
        waitOrFail(finished)
        #expect(received.value?.0 == .success(3))
        #expect(received.value?.1 == true)
        #expect(value.waitBounded.lowestPriority.get() == .success(3))
    }

    @Test func setWithAccessClosure_mutatesOnGivenQueue_andCompletionGetsUpdatedValue() throws {
        let queue = TaggedQueue(label: "access")
        let value = QueueSafeValue(value: [1])
        let accessOnQueue = Locked<Bool?>(nil)
        let received = Locked<Result<[Int], QueueSafeValueError>?>(nil)
        let finished = DispatchSemaphore(value: 0)
        value.async(performIn: queue.queue).priority(.medium).set { array in
            array.append(2)
            accessOnQueue.set(queue.isCurrent)
        } completion: { result in
            received.set(result)
            finished.signal()
        }
        waitOrFail(finished)
        #expect(accessOnQueue.value == true)
        #expect(received.value == .success([1, 2]))
    }

    @Test func map_transformsInsideSection_andDeliversResultOnGivenQueue() throws {
        let queue = TaggedQueue(label: "map")
        let value = QueueSafeValue(value: 20)
        let received = Locked<(Result<String, QueueSafeValueError>, Bool)?>(nil)
        let finished = DispatchSemaphore(value: 0)
        value.async(performIn: queue.queue).lowestPriority.map {
            "\($0 + 1)"
        } completion: { result in
            received.set((result, queue.isCurrent))
            finished.signal()
        }
        waitOrFail(finished)
        #expect(received.value?.0 == .success("21"))
        #expect(received.value?.1 == true)
        #expect(value.waitBounded.lowestPriority.get() == .success(20), "map changed the value")
    }

    @Test func completion_runsAfterValueWasReleased() throws {
        // A blocking command from inside the completion would fail with `.reentrantAccess` (or
        // wait forever) if the completion still ran inside the critical section.
        let value = QueueSafeValue(value: 0)
        let queue = DispatchQueue(label: "completion")
        let inner = Recorder<Result<Int, QueueSafeValueError>>()
        let finished = DispatchSemaphore(value: 0)
        value.async(performIn: queue).lowestPriority.set {
            $0 = 1
        } completion: { _ in
            inner.append(value.waitBounded.lowestPriority.get())
            finished.signal()
        }
        waitOrFail(finished)
        value.async(performIn: queue).lowestPriority.set(newValue: 2) { _ in
            inner.append(value.waitBounded.lowestPriority.get())
            finished.signal()
        }
        waitOrFail(finished)
        value.async(performIn: queue).lowestPriority.set { value, done in
            value = 3
            DispatchQueue.global().async { done() }
        } completion: { _ in
            inner.append(value.waitBounded.lowestPriority.get())
            finished.signal()
        }
        waitOrFail(finished)
        value.async(performIn: queue).lowestPriority.map {
            $0
        } completion: { _ in
            inner.append(value.waitBounded.lowestPriority.get())
            finished.signal()
        }
        waitOrFail(finished)
        #expect(inner.snapshot == [.success(1), .success(2), .success(3), .success(3)])
    }

    /// The dispatch commands that deliver a completion.
    enum CompletionForm: String, CaseIterable, Sendable {
        case setAccessClosure, setNewValue, setManualCompletion, map
    }

    @Test(arguments: CompletionForm.allCases)
    func completion_doesNotHoldUpTheNextCommand_onAnotherQueue(form: CompletionForm) throws {
        // The value is released before a completion runs, so the next command (on another queue)
        // may run while the completion is still running. The completion below waits for the next
        // command (for a third of the hang timeout, so the outer wait still reports cleanly); if the
        // hand-off waited for the completion, it would never come.
        let value = QueueSafeValue(value: 0)
        let first = DispatchQueue(label: "first", attributes: .concurrent)
        let second = DispatchQueue(label: "second", attributes: .concurrent)
        let sawNext = Recorder<Bool>()
        let finished = DispatchGroup()
        let holder = SectionHolder(value)
        let nextRan = DispatchSemaphore(value: 0)
        finished.enter()
        let waitForNext: @Sendable (Result<Int, QueueSafeValueError>) -> Void = { _ in
            sawNext.append(nextRan.wait(timeout: .now() + hangTimeout / 3) == .success)
            finished.leave()
        }
        let commands = value.async(performIn: first).lowestPriority
        switch form {
        case .setAccessClosure:
            commands.set(accessClosure: { $0 += 1 }, completion: waitForNext)
        case .setNewValue:
            commands.set(newValue: 5, completion: waitForNext)
        case .setManualCompletion:
            commands.set(
                manualCompletion: { counter, done in
                    counter += 1
                    done()
                }, completion: waitForNext)
        case .map:
            commands.map({ $0 }, completion: waitForNext)
        }
        value.async(performIn: second).lowestPriority.get { _ in nextRan.signal() }
        holder.release()
        waitOrFail(finished, "the completion")
        #expect(
            sawNext.snapshot == [true],
            "the completion held up the next command (it starts only after the completion)")
    }

    @Test func completion_mayIssueBlockingCommandOnSameValue_whileAThreadWaitsForIt() throws {
        // After the release the value belongs to the waiting thread; the completion's own blocking
        // command must simply wait behind it and then run (a third of the hang timeout is plenty).
        let value = QueueSafeValue(value: 0)
        let holder = SectionHolder(value)
        let inner = Locked<Result<Int, QueueSafeValueError>?>(nil)
        let finished = DispatchSemaphore(value: 0)
        value.async(performIn: DispatchQueue(label: "completion")).highestPriority.set {
            $0 += 1
        } completion: { _ in
            inner.set(value.wait(timeout: .seconds(Int(hangTimeout / 3))).lowestPriority.get())
            finished.signal()
        }
        let threads = ThreadGroup()
        threads.spawn { value.wait.highestPriority.set { $0 += 10 } }
        waitForPending(value.engine, count: 2)
        holder.release()
        waitOrFail(finished)
        threads.join()
        #expect(inner.value == .success(11))
    }

    @Test func asyncedValue_exposesItsQueue_andRunsCommandsOnIt() throws {
        let queue = TaggedQueue(label: "asynced")
        let asynced = QueueSafeAsyncedValue(value: "x", queue: queue.queue)
        #expect(asynced.queue === queue.queue)
        let onQueue = Recorder<Bool>()
        let finished = DispatchSemaphore(value: 0)
        asynced.highestPriority.set { value in
            value += "y"
            onQueue.append(queue.isCurrent)
        } completion: { _ in
            onQueue.append(queue.isCurrent)
        }
        let received = Recorder<Result<String, QueueSafeValueError>>()
        asynced.priority(.low).get { result, done in
            received.append(result)
            onQueue.append(queue.isCurrent)
            done()
            finished.signal()
        }
        waitOrFail(finished)
        #expect(received.snapshot == [.success("xy")])
        #expect(onQueue.snapshot == [true, true, true])
    }

    @Test func asyncPerformInQoS_runsOnGlobalQueueOfThatQoS() throws {
        let value = QueueSafeValue(value: 0)
        let labels = Recorder<String>()
        let finished = DispatchSemaphore(value: 0)
        value.async(performIn: .utility).lowestPriority.set { _ in
            labels.append(TaggedQueue.currentLabel())
        } completion: {
            _ in
            labels.append(TaggedQueue.currentLabel())
            finished.signal()
        }
        waitOrFail(finished)
        let expected = DispatchQueue.global(qos: .utility).label
        #expect(labels.snapshot == [expected, expected])
    }

    // MARK: Nil closures

    @Test func nilAccessClosure_deliversCommandClosureDeallocatedOnQueue_andLeavesValueUntouched() throws {
        let queue = TaggedQueue(label: "nil")
        let value = QueueSafeValue(value: 9)
        let received = Recorder<(Result<Int, QueueSafeValueError>, Bool)>()
        let finished = DispatchSemaphore(value: 0)
        let commands = value.async(performIn: queue.queue).lowestPriority
        commands.set(accessClosure: nil) { result in
            received.append((result, queue.isCurrent))
            finished.signal()
        }
        commands.set(manualCompletion: nil) { result in
            received.append((result, queue.isCurrent))
            finished.signal()
        }
        // Without a completion there is nothing to report to; nothing runs and nothing stalls.
        commands.set(accessClosure: nil)
        commands.set(manualCompletion: nil)
        commands.get(completion: nil)
        commands.get(manualCompletion: nil)
        waitOrFail(finished)
        waitOrFail(finished)
        #expect(
            received.snapshot.map(\.0) == [.failure(.commandClosureDeallocated), .failure(.commandClosureDeallocated)])
        #expect(received.snapshot.map(\.1) == [true, true])
        #expect(value.waitBounded.lowestPriority.get() == .success(9))
        #expect(value.engine.pendingCount == 0)
    }

    // MARK: Order

    @Test func dispatchCommandsFromOneThread_runInPriorityOrder_issueOrderWithinPriority() throws {
        let priorities: [CommandPriority] = [
            .lowest, .high, .high, .medium, .highest, .lowest, .high, CommandPriority(rawValue: 1), .medium,
            .highest, .low, .lowest, CommandPriority(rawValue: 200), .low, .medium,
        ]
        let value = QueueSafeValue(value: [Int]())
        let order = Recorder<Int>()
        let holder = SectionHolder(value)
        let group = DispatchGroup()
        // A concurrent queue: only the engine keeps the commands apart and in order.
        let queue = DispatchQueue(label: "order", attributes: .concurrent)
        for (index, priority) in priorities.enumerated() {
            issueRecordingDispatchCommand(
                value.async(performIn: queue).priority(priority), index: index, order: order, group: group)
        }
        #expect(value.engine.pendingCount == priorities.count)
        #expect(order.count == 0, "a command ran while the value was held")
        holder.release()
        waitOrFail(group)
        #expect(order.snapshot == CommandPriority.expectedRunOrder(priorities))
        let writers = CommandPriority.expectedRunOrder(priorities).filter { $0 % 5 == 0 || $0 % 5 == 3 }
        #expect(value.waitBounded.lowestPriority.get() == .success(writers))
    }

    @Test func dispatchCommandsOfOnePriority_onDifferentQueues_runInIssueOrder() throws {
        let value = QueueSafeValue(value: 0)
        let order = Recorder<Int>()
        let holder = SectionHolder(value)
        let group = DispatchGroup()
        let queues = (0..<4).map { DispatchQueue(label: "q\($0)") } + [.global(), .global(qos: .utility)]
        let count = 60
        for index in 0..<count {
            group.enter()
            value.async(performIn: queues[index % queues.count]).priority(.medium).set { counter in
                counter += 1
                order.append(index)
            } completion: { _ in
                group.leave()
            }
        }
        holder.release()
        waitOrFail(group)
        #expect(order.snapshot == Array(0..<count))
        #expect(value.waitBounded.lowestPriority.get() == .success(count))
    }

    @Test func blockingAndDispatchCommands_shareOnePriorityOrder() throws {
        let priorities: [CommandPriority] = [
            .medium, .low, .highest, .medium, .low, .high, .highest, .lowest, .medium, .high, .low, .lowest,
        ]
        let value = QueueSafeValue(value: [Int]())
        let order = Recorder<Int>()
        let holder = SectionHolder(value)
        let group = DispatchGroup()
        let threads = ThreadGroup()
        let queue = DispatchQueue(label: "mixed", attributes: .concurrent)
        for (index, priority) in priorities.enumerated() {
            if index % 2 == 0 {
                threads.spawn {
                    value.wait.priority(priority).set { array in
                        array.append(index)
                        order.append(index)
                    }
                }
            } else {
                group.enter()
                value.async(performIn: queue).priority(priority).set { array in
                    array.append(index)
                    order.append(index)
                } completion: { _ in
                    group.leave()
                }
            }
            guard waitForPending(value.engine, count: index + 1) else { break }
        }
        holder.release()
        threads.join()
        waitOrFail(group)
        #expect(order.snapshot == CommandPriority.expectedRunOrder(priorities))
        #expect(value.waitBounded.lowestPriority.get() == .success(CommandPriority.expectedRunOrder(priorities)))
    }

    @Test func dispatchCommandIssuedInsideSection_isQueued_andRunsAfterCurrentCommand() throws {
        let value = QueueSafeValue(value: [String]())
        let finished = DispatchSemaphore(value: 0)
        let queue = DispatchQueue(label: "inner")
        value.wait.lowestPriority.set { log in
            log.append("outer begins")
            value.async(performIn: queue).highestPriority.set {
                $0.append("inner")
            } completion: { _ in
                finished.signal()
            }
            #expect(value.engine.pendingCount == 1)
            sleepBriefly(milliseconds: 20)
            log.append("outer ends")
        }
        waitOrFail(finished)
        #expect(value.waitBounded.lowestPriority.get() == .success(["outer begins", "outer ends", "inner"]))
    }

    // MARK: Contention

    @Test func dispatchCommandsFromManyThreads_neverOverlap_andLoseNoUpdate() throws {
        let threadCount = 4
        let perThread = TestEnvironment.iterations(3_000, sanitized: 1_500)
        let value = QueueSafeValue(value: 0)
        let probe = SectionProbe()
        let group = DispatchGroup()
        let queues = [DispatchQueue(label: "a"), DispatchQueue(label: "b"), .global(), .global(qos: .userInitiated)]
        let threads = ThreadGroup()
        for thread in 0..<threadCount {
            threads.spawn {
                for step in 0..<perThread {
                    group.enter()
                    let commands = value.async(performIn: queues[(thread + step) % queues.count])
                        .priority(CommandPriority.testPriorities[step % CommandPriority.testPriorities.count])
                    if step % 3 == 0 {
                        commands.set { counter, done in
                            probe.enter()
                            if step % 2 == 0 {
                                // Done first: the section must stay held until the closure returns.
                                done()
                                counter += 1
                                probe.leave()
                            } else {
                                counter += 1
                                probe.leave()
                                DispatchQueue.global().async { done() }
                            }
                        } completion: { _ in
                            group.leave()
                        }
                    } else {
                        commands.set { counter in
                            probe.enter()
                            counter += 1
                            probe.leave()
                        } completion: { _ in
                            group.leave()
                        }
                    }
                }
            }
        }
        threads.join()
        waitOrFail(group)
        #expect(probe.maximumInside == 1, "two closures ran inside the critical section at once")
        #expect(value.waitBounded.lowestPriority.get() == .success(threadCount * perThread))
    }

    @Test func completions_receiveTheValueTheirOwnCommandLeft_underContention() throws {
        // Each command adds 1, so the k-th command to run leaves k: the completions must report
        // every number from 1 to n exactly once. A completion that read the value after the next
        // command had started would report a repeat (and miss a number).
        let threadCount = 3
        let perThread = TestEnvironment.iterations(1_000, sanitized: 500)
        let value = QueueSafeValue(value: 0)
        let reported = Recorder<Int>()
        let group = DispatchGroup()
        let queues = [DispatchQueue(label: "x"), DispatchQueue(label: "y", attributes: .concurrent), .global()]
        let threads = ThreadGroup()
        for thread in 0..<threadCount {
            threads.spawn {
                for step in 0..<perThread {
                    group.enter()
                    let commands = value.async(performIn: queues[(thread + step) % queues.count])
                        .priority(CommandPriority.testPriorities[step % CommandPriority.testPriorities.count])
                    let report: @Sendable (Result<Int, QueueSafeValueError>) -> Void = { result in
                        reported.append((try? result.get()) ?? -1)
                        group.leave()
                    }
                    switch step % 3 {
                    case 0:
                        commands.set(accessClosure: { $0 += 1 }, completion: report)
                    case 1:
                        commands.set(
                            manualCompletion: { counter, done in
                                counter += 1
                                if step % 2 == 0 { done() } else { DispatchQueue.global().async { done() } }
                            }, completion: report)
                    default:
                        commands.set(
                            manualCompletion: { counter, done in
                                done()
                                counter += 1
                            }, completion: report)
                    }
                }
            }
        }
        threads.join()
        waitOrFail(group)
        let total = threadCount * perThread
        #expect(reported.snapshot.sorted() == Array(1...total))
    }

    // MARK: Helpers

    /// Issues command form `index % 5` at the given priority; each records `index` in `order` from
    /// inside the critical section, and the two `set` forms also append it to the value.
    private func issueRecordingDispatchCommand(
        _ commands: DispatchSchedule<[Int]>,
        index: Int,
        order: Recorder<Int>,
        group: DispatchGroup
    ) {
        group.enter()
        switch index % 5 {
        case 0:
            commands.set { array in
                array.append(index)
                order.append(index)
            } completion: { _ in
                group.leave()
            }
        case 1:
            commands.get { _ in
                order.append(index)
                group.leave()
            }
        case 2:
            commands.get { _, done in
                order.append(index)
                done()
                group.leave()
            }
        case 3:
            commands.set { array, done in
                array.append(index)
                order.append(index)
                DispatchQueue.global().async { done() }
            } completion: { _ in
                group.leave()
            }
        default:
            commands.map { _ in
                order.append(index)
            } completion: { _ in
                group.leave()
            }
        }
    }

    // MARK: The default priority

    /// The original grammar on the dispatch schedule with the priority left out: each form runs on
    /// its queue, in issue order, and delivers what its explicit form delivers.
    @Test func everyCommand_withoutAPriority_runsOnItsQueue_inIssueOrder() {
        let queue = TaggedQueue(label: "default")
        let value = QueueSafeValue(value: 0)
        let log = Recorder<String>()
        let finished = DispatchSemaphore(value: 0)
        let commands = value.async(performIn: queue.queue)
        @Sendable func note(_ text: String) { log.append(queue.isCurrent ? text : "\(text) off the queue") }
        commands.set(newValue: 1) { note("set \($0.valueOrZero)") }
        commands.set(accessClosure: { $0 += 1 }, completion: { note("access \($0.valueOrZero)") })
        commands.set(
            manualCompletion: { value, done in
                value += 1
                done()
            },
            completion: { note("manual \($0.valueOrZero)") })
        commands.get { note("get \($0.valueOrZero)") }
        commands.get(manualCompletion: { result, done in
            note("manual get \(result.valueOrZero)")
            done()
        })
        commands.map({ $0 * 10 }, completion: { note("map \($0.valueOrZero)") })
        commands.read { note("read \($0.valueOrZero)") }
        commands.read(manualCompletion: { result, done in
            note("manual read \(result.valueOrZero)")
            done()
            finished.signal()
        })
        waitOrFail(finished)
        #expect(
            log.snapshot == [
                "set 1", "access 2", "manual 3", "get 3", "manual get 3", "map 30", "read 3", "manual read 3",
            ])
    }

    /// A dispatch command without a priority queues at `.medium`, between the explicit extremes.
    @Test func setWithoutAPriority_queuesAtMedium() {
        let queue = TaggedQueue(label: "medium")
        let value = QueueSafeValue(value: [String]())
        let holder = SectionHolder(value)
        let finished = DispatchSemaphore(value: 0)
        value.async(performIn: queue.queue).lowestPriority.set(
            accessClosure: { $0.append("lowest") }, completion: { _ in finished.signal() })
        value.async(performIn: queue.queue).set(accessClosure: { $0.append("default") })
        value.async(performIn: queue.queue).highestPriority.set(accessClosure: { $0.append("highest") })
        waitForPending(value.engine, count: 3)
        #expect(value.diagnostics.waiting[.medium] == 1)
        holder.release()
        waitOrFail(finished)
        #expect(value.waitBounded.lowestPriority.get() == .success(["highest", "default", "lowest"]))
    }

    /// The two single-schedule containers take the priority left out too: a synced value's blocking
    /// commands (with the container's timeout) and an asynced value's dispatch commands (on its
    /// queue), at `.medium`.
    @Test func theContainers_withoutAPriority_runAtMedium() throws {
        let synced = QueueSafeSyncedValue(value: 1, timeout: .seconds(30))
        #expect(synced.set { $0 += 1 } == .success(2))
        #expect(synced.get() == .success(2))
        #expect(synced.map { $0 * 10 } == .success(20))
        #expect((try? synced.withLock { $0 += 1 }) != nil)
        #expect(try synced.read { $0 } == 3)
        #expect(synced.defaultPriority.commandPriority == .medium)

        let queue = TaggedQueue(label: "asynced")
        let asynced = QueueSafeAsyncedValue(value: [String](), queue: queue.queue)
        let held = Locked<CommandCompletionClosure?>(nil)
        let finished = DispatchSemaphore(value: 0)
        asynced.highestPriority.get(manualCompletion: { _, done in
            held.set(done)
            finished.signal()
        })
        waitOrFail(finished)
        let onQueue = Locked<Bool?>(nil)
        asynced.lowestPriority.set(accessClosure: { $0.append("lowest") }, completion: { _ in finished.signal() })
        asynced.set(accessClosure: {
            $0.append("default")
            onQueue.set(queue.isCurrent)
        })
        asynced.highestPriority.set(accessClosure: { $0.append("highest") })
        waitForPending(asynced.engine, count: 3)
        #expect(asynced.diagnostics.waiting[.medium] == 1)
        held.value?()
        waitOrFail(finished)
        let final = Locked<[String]?>(nil)
        asynced.get { result in
            final.set(try? result.get())
            finished.signal()
        }
        waitOrFail(finished)
        #expect(final.value == ["highest", "default", "lowest"])
        #expect(onQueue.value == true, "the command did not run on the container's queue")
    }
}
