import Testing

@_spi(Testing) @testable import QueueSafeValue

/// The state machine's side of `CommandQueue.Policy.discardable`, driven without threads: which
/// operation a later enqueue discards, and when a discarded one may still begin.
@Suite(.runsAlongsideOthers) struct DiscardableTransitionTests {
    typealias Machine = EngineStateMachine

    /// Enqueues operation `waiter`; returns its ticket, whether it was granted, and what it discarded.
    private func enqueue(
        _ machine: inout Machine,
        _ waiter: Int,
        priority: CommandPriority = .medium,
        discardable: Bool,
        word: inout Int
    ) -> (ticket: Machine.Ticket?, granted: Bool, discarded: Int?) {
        let (admission, actions, next) = machine.enqueueOperation(
            waiter, priority: priority, discardable: discardable, observed: word)
        let discarded = actions.left.first
        word = next
        machine.checkInvariants(word: word)
        switch admission {
        case .granted(let ticket): return (ticket, true, discarded)
        case .queued(let ticket): return (ticket, false, discarded)
        case .refused(let error):
            Issue.record("an operation was refused: \(error)")
            return (nil, false, discarded)
        case .expired:
            Issue.record("an operation without a deadline expired")
            return (nil, false, discarded)
        }
    }

    @Test func waitingDiscardable_leavesTheQueue_whenAnyLaterOperationIsEnqueued() {
        var machine = Machine()
        var word = 0
        let holder = enqueue(&machine, 0, discardable: false, word: &word)
        #expect(holder.granted)
        let discardable = enqueue(&machine, 1, priority: .highest, discardable: true, word: &word)
        #expect(!discardable.granted && discardable.discarded == nil)
        // A later operation of a lower priority still replaces it.
        let later = enqueue(&machine, 2, priority: .lowest, discardable: false, word: &word)
        #expect(later.discarded == 1, "the waiting discardable operation was not discarded")
        #expect(machine.waitingCount == 1)
        #expect(machine.pendingDiscardable == nil)
        // The holder's release grants the later operation: the discarded one never runs.
        let (release, _) = machine.release(observed: word)
        #expect(release.next == 2)
    }

    @Test func onlyTheNewestDiscardable_isPending_andEachLaterOneReplacesTheLast() {
        var machine = Machine()
        var word = 0
        _ = enqueue(&machine, 0, discardable: false, word: &word)
        var discarded: [Int] = []
        for waiter in 1...5 {
            let result = enqueue(&machine, waiter, discardable: true, word: &word)
            if let gone = result.discarded { discarded.append(gone) }
            #expect(machine.pendingDiscardable == result.ticket)
        }
        #expect(discarded == [1, 2, 3, 4])
        #expect(machine.waitingCount == 1)
        let (release, _) = machine.release(observed: word)
        #expect(release.next == 5)
    }

    @Test func standardOperations_areNeverDiscarded() {
        var machine = Machine()
        var word = 0
        _ = enqueue(&machine, 0, discardable: false, word: &word)
        for waiter in 1...4 {
            #expect(enqueue(&machine, waiter, discardable: false, word: &word).discarded == nil)
        }
        #expect(machine.waitingCount == 4)
    }

    @Test func grantedDiscardable_thatHasNotBegun_isRefusedAtItsBeginning() {
        var machine = Machine()
        var word = 0
        // Granted at once on the free section, but its task has not begun the operation yet.
        let discardable = enqueue(&machine, 1, discardable: true, word: &word)
        #expect(discardable.granted)
        let later = enqueue(&machine, 2, discardable: false, word: &word)
        #expect(later.discarded == nil, "a holder is not in the queue: nothing to resume")
        let began = machine.beginDiscardable(discardable.ticket!)
        #expect(!began, "a discarded operation began")
        // It releases instead of running; the later operation gets the section.
        let (release, _) = machine.release(observed: word)
        #expect(release.ended?.number == 1 && release.next == 2)
    }

    @Test func discardable_thatHasBegun_isLeftAlone_byLaterOperations() {
        var machine = Machine()
        var word = 0
        let discardable = enqueue(&machine, 1, discardable: true, word: &word)
        let began = machine.beginDiscardable(discardable.ticket!)
        #expect(began)
        #expect(machine.pendingDiscardable == nil)
        let later = enqueue(&machine, 2, discardable: false, word: &word)
        #expect(later.discarded == nil && !later.granted)
        #expect(machine.summary(of: discardable.ticket!)?.discarded == false, "a begun operation was marked")
    }

    @Test func discardableThatLeftOnItsOwn_isNotDiscardedAgain() {
        var machine = Machine()
        var word = 0
        _ = enqueue(&machine, 0, discardable: false, word: &word)
        let discardable = enqueue(&machine, 1, discardable: true, word: &word)
        #expect(machine.leaving(discardable.ticket!) == 1)  // cancelled or timed out
        let later = enqueue(&machine, 2, discardable: false, word: &word)
        #expect(later.discarded == nil)
        #expect(machine.waitingCount == 1)
    }
}
