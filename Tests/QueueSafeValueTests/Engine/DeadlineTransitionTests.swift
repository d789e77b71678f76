import Testing

@_spi(Testing) @testable import QueueSafeValue

/// The machine's side of "timeouts that hold" and "cancel at once", driven without threads: a
/// grant never goes to a command whose deadline has passed by the transition's clock, a command
/// whose deadline has passed as it arrives never waits, and an operation cancelled through its
/// handle leaves or gives its turn back in one transition.
@Suite(.runsAlongsideOthers) struct DeadlineTransitionTests {
    typealias Machine = EngineStateMachine

    /// Holder 0 takes the free section; the others queue behind it (with the given deadlines).
    private func queued(_ deadlines: [Int: UInt64], shared: Set<Int> = [], now: UInt64 = 100) -> (Machine, Int) {
        var machine = Machine()
        var (_, word) = machine.enqueue(0, kind: .blocking, priority: .medium, reentrant: false, observed: 0, now: now)
        for number in deadlines.keys.sorted() {
            let (admission, next) = machine.enqueue(
                number, kind: .blocking, priority: .medium, reentrant: false, observed: word, now: now,
                shared: shared.contains(number), deadline: deadlines[number]!)
            guard case .queued = admission else {
                Issue.record("command \(number) was not queued: \(admission)")
                return (machine, word)
            }
            word = next
            machine.checkInvariants(word: word)
        }
        return (machine, word)
    }

    @Test func aReleaseAfterTheDeadline_passesTheCommandOver_andGrantsTheNext() {
        var (machine, word) = queued([1: 150, 2: 0])
        let (actions, next) = machine.release(observed: word, now: 150)
        machine.checkInvariants(word: next)
        #expect(actions.expired == [1], "the command whose deadline passed was not dropped")
        #expect(actions.next == 2, "the grant went to \(String(describing: actions.next)), not the next command")
        #expect(machine.waitingCount == 0)
        _ = word
        word = next
    }

    @Test func aReleaseBeforeTheDeadline_grantsTheTimedCommand() {
        var (machine, word) = queued([1: 150, 2: 0])
        let (actions, next) = machine.release(observed: word, now: 149)
        word = next
        machine.checkInvariants(word: word)
        #expect(actions.expired.isEmpty)
        #expect(actions.next == 1)
    }

    @Test func everyExpiredCommandFirstInLine_isPassedOver_andTheSectionGoesFreeIfNoneIsLeft() {
        var (machine, word) = queued([1: 120, 2: 130, 3: 140])
        let (actions, next) = machine.release(observed: word, now: 200)
        word = next
        machine.checkInvariants(word: word)
        #expect(actions.expired == [1, 2, 3])
        #expect(actions.next == nil)
        #expect(!EngineWord.isHeld(word), "the section should be free")
    }

    @Test func readsGrantedInABatch_skipAnExpiredRead() {
        // A writer holds; three reads wait behind it, the middle one past its deadline.
        var (machine, word) = queued([1: 0, 2: 120, 3: 0], shared: [1, 2, 3])
        let (actions, next) = machine.release(observed: word, now: 200)
        word = next
        machine.checkInvariants(word: word)
        #expect(actions.expired == [2])
        #expect(actions.next == 1)
        #expect(SharedReadTransitionTests.Driver.granted(actions).sorted() == [1, 3])
    }

    @Test func aCommandWhoseDeadlineHasPassed_isRefusedOnAHeldSection_andGrantedOnAFreeOne() {
        var machine = Machine()
        let (free, word) = machine.enqueue(
            0, kind: .blocking, priority: .medium, reentrant: false, observed: 0, now: 100, deadline: 100)
        guard case .granted = free else {
            Issue.record("a free section was not granted at once: \(free)")
            return
        }
        let (held, stored) = machine.enqueue(
            1, kind: .blocking, priority: .highest, reentrant: false, observed: word, now: 100, deadline: 100)
        guard case .expired = held else {
            Issue.record("a command past its deadline waits on a held section: \(held)")
            return
        }
        machine.checkInvariants(word: stored)
        #expect(machine.waitingCount == 0)
        // The holder took the section on the idle path; its idle release may have failed on the
        // `slowRelease` the engine set before the machine refused: the bit stays, and the release
        // goes through the lock.
        #expect(word & EngineWord.slowRelease == 0)
        #expect(stored & EngineWord.slowRelease != 0, "a refusal took back the announcement a holder may have seen")
        var released = stored
        _ = machine.release(word: &released, now: 101)
        machine.checkInvariants(word: released)
        #expect(released == 0, "the release through the lock did not free the section")
    }

    @Test func anOperationWhoseTaskWasCancelled_leavesWhenItsTurnComes() {
        var machine = Machine()
        var word = 0
        var tickets: [Int: Machine.Ticket] = [:]
        var handles: [Int: NumberedHandle] = [:]
        for number in 0...2 {
            let handle = NumberedHandle(number)
            handles[number] = handle
            let admission = machine.enqueueOperation(handle, priority: .medium, discardable: false, word: &word)
            switch admission {
            case .granted(let ticket?), .queued(let ticket): tickets[number] = ticket
            default: Issue.record("operation \(number): \(admission)")
            }
        }
        handles[1]!.taskCancelled = true
        let (actions, next) = machine.release(observed: word, now: 0)
        machine.checkInvariants(word: next)
        #expect(actions.left == [1])
        #expect(actions.next == 2)
    }

    @Test func cancellingAWaitingOperation_takesItOutAtOnce_andCancelsItsTask() {
        var machine = Machine()
        var word = 0
        var tickets: [Machine.Ticket] = []
        for number in 0...1 {
            let admission = machine.enqueueOperation(
                NumberedHandle(number), priority: .medium, discardable: false, handled: true, word: &word)
            switch admission {
            case .granted(let ticket?), .queued(let ticket): tickets.append(ticket)
            default: Issue.record("operation \(number): \(admission)")
            }
        }
        var cancelWord = word | EngineWord.slowRelease
        let actions = machine.cancelOperation(tickets[1], word: &cancelWord, now: 0)
        machine.checkInvariants(word: cancelWord)
        #expect(actions.found == .left)
        #expect(actions.left == [1] && actions.cancelled == [1])
        #expect(machine.waitingCount == 0)
        #expect(!machine.isLive(tickets[1]))
        // A second cancel finds it gone.
        var again = cancelWord
        #expect(machine.cancelOperation(tickets[1], word: &again, now: 0).found == .gone)
    }

    @Test func cancellingAGrantedOperationThatHasNotBegun_givesItsTurnToTheNext() {
        var machine = Machine()
        var word = 0
        var tickets: [Machine.Ticket] = []
        for number in 0...1 {
            let admission = machine.enqueueOperation(
                NumberedHandle(number), priority: .medium, discardable: false, handled: true, word: &word)
            switch admission {
            case .granted(let ticket?), .queued(let ticket): tickets.append(ticket)
            default: Issue.record("operation \(number): \(admission)")
            }
        }
        // Operation 0 was granted at once; its task has not begun it.
        var cancelWord = word | EngineWord.slowRelease
        let actions = machine.cancelOperation(tickets[0], word: &cancelWord, now: 0)
        machine.checkInvariants(word: cancelWord)
        #expect(actions.found == .gaveBack)
        #expect(actions.next == 1, "the turn it gave back did not go to the next operation")
        #expect(actions.cancelled == [0])
        // Its task then asks to begin, and is told it never runs.
        var beginWord = cancelWord
        #expect(machine.beginOperation(tickets[0], taskCancelled: true, word: &beginWord, now: 0).found == .gone)
        machine.checkInvariants(word: beginWord)
    }

    @Test func cancellingABegunOperation_onlyCancelsItsTask() {
        var machine = Machine()
        var word = 0
        let admission = machine.enqueueOperation(
            NumberedHandle(0), priority: .medium, discardable: false, handled: true, word: &word)
        guard case .granted(let ticket?) = admission else {
            Issue.record("not granted: \(admission)")
            return
        }
        var beginWord = word
        #expect(machine.beginOperation(ticket, taskCancelled: false, word: &beginWord, now: 0).found == .holding)
        var cancelWord = beginWord | EngineWord.slowRelease
        let actions = machine.cancelOperation(ticket, word: &cancelWord, now: 0)
        machine.checkInvariants(word: cancelWord)
        #expect(actions.found == .holding)
        #expect(actions.cancelled == [0])
        #expect(actions.next == nil)
        #expect(machine.isLive(ticket))
    }
}
