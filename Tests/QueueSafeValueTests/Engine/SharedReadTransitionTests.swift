import Testing

@_spi(Testing) @testable import QueueSafeValue

/// Shared reads in the pure state machine: each rule of the order, driven without threads.
@Suite(.runsAlongsideOthers) struct SharedReadTransitionTests {
    typealias Machine = EngineStateMachine

    /// Drives a machine with integer commands, tracking the word and who holds, and checking the
    /// machine's invariants after every step.
    final class Driver {
        var machine: Machine
        var word = 0
        var tickets: [Int: Machine.Ticket] = [:]
        /// The commands holding the section now (several only for shared reads).
        var holding: Set<Int> = []
        var exclusive: Int?

        init(maxOvertakes: Int? = nil) {
            machine = Machine(maxOvertakes: maxOvertakes)
        }

        /// Every command an action granted: the first grant, then the readers granted beside it.
        static func granted(_ actions: Machine.Actions) -> [Int] {
            var granted = actions.grant.map { [$0.handle.number] } ?? []
            for other in actions.others {
                switch other {
                case .startReader(let handle), .helpReader(let handle, _): granted.append(handle.number)
                case .left, .expired, .cancel, .finish, .claim, .longHoldEnded, .report: break
                }
            }
            return granted
        }

        func check(_ sourceLocation: SourceLocation = #_sourceLocation) {
            if let violation = machine.invariantViolation(word: word) {
                Issue.record("invariant: \(violation)", sourceLocation: sourceLocation)
            }
            if exclusive != nil && holding.count > 1 {
                Issue.record("an exclusive holder beside others: \(holding)", sourceLocation: sourceLocation)
            }
        }

        /// Issues a command; returns whether it holds the section at once.
        @discardableResult
        func issue(_ id: Int, shared: Bool, _ priority: CommandPriority = .medium) -> Bool {
            let (admission, next) = machine.enqueue(
                id, kind: .blocking, priority: priority, reentrant: false, observed: word, shared: shared)
            word = next
            defer { check() }
            switch admission {
            case .granted(let ticket):
                if let ticket { tickets[id] = ticket }
                hold(id, shared: shared)
                return true
            case .queued(let ticket):
                tickets[id] = ticket
                return false
            case .refused(let error):
                Issue.record("refused: \(error)")
                return false
            case .expired:
                Issue.record("expired without a deadline")
                return false
            }
        }

        func hold(_ id: Int, shared: Bool) {
            holding.insert(id)
            if !shared { exclusive = id }
        }

        /// Records what an action granted as holding; returns it in grant order.
        func apply(_ actions: Machine.Actions) -> [Int] {
            let granted = Self.granted(actions)
            for id in granted {
                let shared = machine.isHoldingReader(tickets[id]!)
                hold(id, shared: shared)
            }
            return granted
        }

        /// The holder `id` releases; returns what was granted.
        func release(_ id: Int) -> [Int] {
            holding.remove(id)
            let actions: Machine.Actions
            if exclusive == id {
                exclusive = nil
                (actions, word) = machine.release(observed: word)
            } else {
                (actions, word) = machine.releaseReader(tickets[id]!, observed: word)
            }
            let granted = apply(actions)
            check()
            return granted
        }

        /// The waiting command `id` leaves; returns what was granted because of it.
        func leave(_ id: Int) -> [Int] {
            guard let actions = machine.leave(tickets[id]!) else {
                Issue.record("\(id) could not leave")
                return []
            }
            #expect(actions.left == [id])
            let granted = apply(actions)
            check()
            return granted
        }
    }

    @Test func readsShareAFreeSection_andAWriterWaitsForAllOfThem() {
        let driver = Driver()
        #expect(driver.issue(1, shared: true))
        #expect(driver.word == EngineWord.shared | EngineWord.slowRelease)
        #expect(driver.issue(2, shared: true), "a read joins readers when nothing waits")
        #expect(!driver.issue(3, shared: false), "a writer waits for the readers")
        #expect(driver.release(1) == [], "one reader left: the writer still waits")
        #expect(driver.release(2) == [3], "the last reader hands the section to the writer")
        #expect(driver.word & EngineWord.holderMask == CommandKind.blocking.wordBits)
        #expect(driver.word & EngineWord.shared == 0)
        #expect(driver.release(3) == [])
        #expect(driver.word == 0)
    }

    @Test func aReadJoinsOnlyIfItStandsBeforeEveryWaitingWriter() {
        let driver = Driver()
        #expect(driver.issue(1, shared: true))
        #expect(!driver.issue(2, shared: false, .medium))
        #expect(!driver.issue(3, shared: true, .medium), "same priority as the waiting writer: behind it")
        #expect(!driver.issue(4, shared: true, .low), "lower priority: behind it")
        #expect(driver.issue(5, shared: true, .high), "higher priority than every waiting writer: joins")
        #expect(!driver.issue(6, shared: false, .high))
        #expect(!driver.issue(7, shared: true, .high), "a higher writer now waits: behind it")
        #expect(driver.issue(8, shared: true, .highest), "above the highest writer: joins")
        #expect(driver.release(1) == [])
        #expect(driver.release(5) == [])
        #expect(driver.release(8) == [6], "the highest writer first")
        #expect(driver.release(6) == [7], "then the read of high priority, alone: a writer of medium follows")
        #expect(driver.release(7) == [2])
        #expect(driver.release(2) == [3, 4], "the reads behind the writer are granted together")
        #expect(driver.release(4) == [])
        #expect(driver.release(3) == [])
        #expect(driver.word == 0)
    }

    @Test func aGrantedReadBringsEveryReadDirectlyBehindIt_upToTheFirstWriter() {
        let driver = Driver()
        #expect(driver.issue(0, shared: false))
        for id in 1...2 { #expect(!driver.issue(id, shared: true)) }
        #expect(!driver.issue(3, shared: false))
        #expect(!driver.issue(4, shared: true))
        #expect(!driver.issue(5, shared: true, .high))
        #expect(driver.release(0) == [5, 1, 2], "the order is priority then arrival; the batch stops at writer 3")
        #expect(driver.machine.readers.count == 3)
        for id in [2, 5] { #expect(driver.release(id) == []) }
        #expect(driver.release(1) == [3])
        #expect(driver.release(3) == [4])
        #expect(driver.release(4) == [])
    }

    @Test func aWaitingWriterThatLeaves_letsTheReadsBehindItJoin() {
        let driver = Driver()
        #expect(driver.issue(1, shared: true))
        #expect(!driver.issue(2, shared: false))
        #expect(!driver.issue(3, shared: true))
        #expect(!driver.issue(4, shared: true))
        #expect(!driver.issue(5, shared: false))
        #expect(!driver.issue(6, shared: true))
        #expect(driver.leave(2) == [3, 4], "the reads up to the next writer join at once")
        #expect(driver.machine.waitingCount == 2)
        #expect(driver.leave(6) == [], "a read that leaves admits nobody")
        for id in [1, 3] { #expect(driver.release(id) == []) }
        #expect(driver.release(4) == [5])
    }

    @Test func aReadThatLeft_isNeverGranted() {
        let driver = Driver()
        #expect(driver.issue(0, shared: false))
        #expect(!driver.issue(1, shared: true))
        #expect(!driver.issue(2, shared: true))
        #expect(driver.leave(1) == [])
        #expect(driver.release(0) == [2])
        #expect(driver.release(2) == [])
    }

    @Test func aBoundedOvertakingPolicy_countsReadsThatJoin() {
        let driver = Driver(maxOvertakes: 1)
        #expect(driver.issue(1, shared: true))
        #expect(!driver.issue(2, shared: false, .low))
        #expect(driver.issue(3, shared: true, .high), "the first overtake of the waiting writer")
        #expect(!driver.issue(4, shared: true, .high), "the bound is reached: it waits")
        #expect(driver.release(1) == [])
        #expect(driver.release(3) == [2], "the writer, overtaken once, goes next")
        #expect(driver.release(2) == [4])
    }

    @Test func aBoundedOvertakingPolicy_stopsABatchAtTheOldestCommand() {
        let driver = Driver(maxOvertakes: 1)
        #expect(driver.issue(0, shared: false))
        #expect(!driver.issue(1, shared: false, .low))
        #expect(!driver.issue(2, shared: true, .high))
        #expect(!driver.issue(3, shared: true, .high))
        #expect(driver.release(0) == [2], "one read overtakes the oldest; the second would exceed the bound")
        #expect(driver.release(2) == [1])
        #expect(driver.release(1) == [3])
    }

    @Test func aReleasedContainer_freesTheValueAfterTheLastReader() {
        let driver = Driver()
        #expect(driver.issue(1, shared: true))
        #expect(driver.issue(2, shared: true))
        let (closing, word) = driver.machine.close(observed: driver.word | EngineWord.closed)
        driver.word = word
        #expect(!closing.freeValue, "readers still hold the value")
        let (admission, _) = driver.machine.enqueue(
            9, kind: .blocking, priority: .high, reentrant: false, observed: driver.word, shared: true)
        guard case .refused(.valueContainerDeinited) = admission else {
            Issue.record("a read after the release was not refused: \(admission)")
            return
        }
        driver.holding.remove(1)
        var (actions, next) = driver.machine.releaseReader(driver.tickets[1]!, observed: driver.word)
        driver.word = next
        #expect(!actions.freeValue)
        (actions, next) = driver.machine.releaseReader(driver.tickets[2]!, observed: driver.word)
        driver.word = next
        #expect(actions.freeValue, "the last reader frees the value")
        #expect(next == EngineWord.closed)
    }

    @Test func aReentrantRead_isRefused() {
        var machine = Machine()
        let (_, word) = machine.enqueue(1, kind: .blocking, priority: .low, reentrant: false, observed: 0, shared: true)
        let (admission, _) = machine.enqueue(
            2, kind: .blocking, priority: .low, reentrant: true, observed: word, shared: true)
        guard case .refused(.reentrantAccess) = admission else {
            Issue.record("expected a refusal, got \(admission)")
            return
        }
    }

    @Test func aManualRead_keepsItsShareUntilItsCompletionArrives() {
        let driver = Driver()
        #expect(driver.issue(1, shared: true))
        let ticket = driver.tickets[1]!
        driver.machine.beginReaderManual(ticket)
        guard case .waitForCompletion = driver.machine.manualClosureReturned(ticket) else {
            Issue.record("the closure returned first: the read waits for its completion")
            return
        }
        let arrived = driver.machine.manualCompletionArrived(ticket, dropped: false)
        #expect(arrived.finish == 1, "the completion finishes the read")
        #expect(driver.release(1) == [])
        #expect(driver.word == 0)
    }

    @Test func everyReaderInheritsBothAxesOfAParkedWaitersUrgency() {
        let driver = Driver()
        #expect(driver.issue(1, shared: true))
        #expect(!driver.issue(2, shared: false))
        let urgency = Urgency(thread: 40, task: 25)
        let raised = driver.machine.park(driver.tickets[2]!, urgency: urgency, holderBits: 0)
        #expect(raised)
        #expect(driver.machine.holdUrgency == urgency)
        #expect(driver.machine.beginBoost() == urgency)
        #expect(driver.release(1) == [2])
    }

    @Test func aDispatchedReadIsStartedOnce_byItsBlockOrByAHelper() {
        var machine = Machine()
        let (admission, _) = machine.enqueue(
            1, kind: .dispatched, priority: .low, reentrant: false, observed: 0, shared: true)
        guard case .granted(let ticket?) = admission else {
            Issue.record("expected a grant with a ticket, got \(admission)")
            return
        }
        let first = machine.claimReaderStart(ticket)
        let second = machine.claimReaderStart(ticket)
        let handed = machine.takeUnstartedReaders(forQueues: [0])
        #expect(first)
        #expect(!second, "claimed twice")
        #expect(handed.isEmpty, "a started read is not handed to a helper")
    }
}
