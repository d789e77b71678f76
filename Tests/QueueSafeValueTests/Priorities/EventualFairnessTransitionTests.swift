import Testing

@_spi(Testing) @testable import QueueSafeValue

/// The eventually fair mode in the pure state machine: when a release frees the section instead of
/// handing it on, who may take it first, and when the bound hands it on directly.
@Suite(.runsAlongsideOthers) struct EventualFairnessTransitionTests {
    typealias Machine = EngineStateMachine

    /// A machine with a bound of 1,000 ns whose section is held (untracked), and its word.
    private func heldMachine() -> (Machine, word: Int) {
        var machine = Machine(bargingBound: 1_000)
        let (admission, word) = machine.enqueue(
            0, kind: .blocking, priority: .medium, reentrant: false, observed: 0, now: 0)
        guard case .granted = admission else { preconditionFailure("a free section was not granted") }
        return (machine, word)
    }

    /// Enqueues a command; returns its ticket if it waits, `nil` if it was granted.
    private func arrive(
        _ machine: inout Machine, _ word: inout Int, _ number: Int, _ priority: CommandPriority,
        kind: CommandKind = .blocking, at now: UInt64
    ) -> Machine.Ticket? {
        let (admission, newWord) = machine.enqueue(
            number, kind: kind, priority: priority, reentrant: false, observed: word | EngineWord.slowRelease, now: now)
        word = newWord
        machine.checkInvariants(word: word)
        switch admission {
        case .queued(let ticket): return ticket
        case .granted: return nil
        case .refused(let error): preconditionFailure("refused: \(error)")
        case .expired: preconditionFailure("expired without a deadline")
        }
    }

    private func release(_ machine: inout Machine, _ word: inout Int, at now: UInt64) -> Machine.Actions {
        let (actions, newWord) = machine.release(observed: word, now: now)
        word = newWord
        machine.checkInvariants(word: word)
        return actions
    }

    private func claim(
        _ machine: inout Machine, _ word: inout Int, _ ticket: Machine.Ticket, parking: Bool = false, at now: UInt64
    ) -> (Machine.Found, Machine.Actions) {
        var newWord = word | EngineWord.slowRelease
        let result = machine.claim(ticket, parking: parking, word: &newWord, now: now)
        word = newWord
        machine.checkInvariants(word: word)
        return (result.found, result)
    }

    private func woken(_ actions: Machine.Actions) -> [Int] {
        actions.others.compactMap { if case .claim(let handle) = $0 { handle.number } else { nil } }
    }

    @Test func release_freesTheSection_andWakesTheFirstWaiterToClaimIt() {
        var (machine, word) = heldMachine()
        let waiter = arrive(&machine, &word, 1, .medium, at: 10)
        #expect(waiter != nil)
        let actions = release(&machine, &word, at: 20)
        #expect(actions.grant == nil, "handed on directly, as strict priority does")
        #expect(woken(actions) == [1])
        #expect(
            !EngineWord.isHeld(word) && word & EngineWord.slowRelease != 0, "free, and newcomers go through the lock")
        // Woken once: another release before its claim wakes nobody again.
        let (outcome, claimed) = claim(&machine, &word, waiter!, at: 30)
        #expect(outcome == .settled && claimed.grant?.handle.number == 1)
        #expect(EngineWord.isHeld(word))
    }

    @Test func aCommandOfTheSamePriority_takesTheFreedSectionFirst_andTheClaimerWaitsOn() {
        var (machine, word) = heldMachine()
        let waiter = arrive(&machine, &word, 1, .medium, at: 10)!
        _ = release(&machine, &word, at: 20)
        #expect(arrive(&machine, &word, 2, .medium, at: 30) == nil, "it barges")
        #expect(word & EngineWord.slowRelease != 0, "the barger hands on through the lock")
        let (outcome, actions) = claim(&machine, &word, waiter, at: 40)
        #expect(outcome == .stillHeld && actions.isEmpty)
        // It is still on its way (it spins), so the barger's release wakes nobody.
        let again = release(&machine, &word, at: 50)
        #expect(again.grant == nil && woken(again).isEmpty)
        #expect(claim(&machine, &word, waiter, at: 60).0 == .settled)
    }

    @Test func aClaimerThatParks_isWokenAgainByTheNextRelease() {
        var (machine, word) = heldMachine()
        let waiter = arrive(&machine, &word, 1, .medium, at: 10)!
        _ = release(&machine, &word, at: 20)
        _ = arrive(&machine, &word, 2, .medium, at: 30)
        #expect(claim(&machine, &word, waiter, parking: true, at: 40).0 == .stillHeld)
        #expect(woken(release(&machine, &word, at: 50)) == [1])
    }

    @Test func aLowerPriority_neverTakesTheSectionAheadOfAWaitingHigherOne() {
        var (machine, word) = heldMachine()
        let high = arrive(&machine, &word, 1, .high, at: 10)!
        _ = release(&machine, &word, at: 20)
        #expect(arrive(&machine, &word, 2, .medium, at: 30) != nil, "it waits behind the higher priority")
        #expect(arrive(&machine, &word, 3, .highest, at: 40) == nil, "a higher priority still takes it")
        _ = release(&machine, &word, at: 50)
        let (outcome, actions) = claim(&machine, &word, high, at: 60)
        #expect(outcome == .settled && actions.grant?.handle.number == 1)
    }

    @Test func aWaiterThatWaitedTheBound_isHandedTheSectionDirectly_andNobodyBargesPastIt() {
        var (machine, word) = heldMachine()
        let waiter = arrive(&machine, &word, 1, .medium, at: 10)!
        _ = release(&machine, &word, at: 20)
        // Due at 1,010: a command of its priority arriving then waits.
        #expect(arrive(&machine, &word, 2, .medium, at: 1_010) != nil)
        #expect(claim(&machine, &word, waiter, at: 1_020).0 == .settled)
        // 2 is due too by its release: handed on directly.
        let actions = release(&machine, &word, at: 2_020)
        #expect(actions.grant?.handle.number == 2 && woken(actions).isEmpty)
    }

    @Test func waitingDispatchAndAwaitingCommands_areHandedTheSectionDirectly() {
        for kind in [CommandKind.dispatched, .awaiting] {
            var (machine, word) = heldMachine()
            _ = arrive(&machine, &word, 1, .medium, kind: kind, at: 10)
            let actions = release(&machine, &word, at: 20)
            #expect(actions.grant?.handle.number == 1, "\(kind)")
            #expect(woken(actions).isEmpty)
        }
    }

    @Test func theWokenWaiterLeaves_andTheNextIsWokenInItsPlace() {
        var (machine, word) = heldMachine()
        let first = arrive(&machine, &word, 1, .medium, at: 10)!
        _ = arrive(&machine, &word, 2, .medium, at: 11)
        _ = release(&machine, &word, at: 20)
        var newWord = word | EngineWord.slowRelease
        let actions = machine.leave(first, word: &newWord, now: 30)
        word = newWord
        machine.checkInvariants(word: word)
        #expect(actions.map(woken) == [2])
    }

    @Test func theLastWaiterLeavesAFreeSection_whichGoesBackToTheIdlePath() {
        var (machine, word) = heldMachine()
        let first = arrive(&machine, &word, 1, .medium, at: 10)!
        _ = release(&machine, &word, at: 20)
        var newWord = word | EngineWord.slowRelease
        _ = machine.leave(first, word: &newWord, now: 30)
        machine.checkInvariants(word: newWord)
        #expect(newWord == 0)
    }

    @Test func aClaimerThatIsNoLongerFirst_passesTheClaimOn() {
        var (machine, word) = heldMachine()
        let medium = arrive(&machine, &word, 1, .medium, at: 10)!
        _ = release(&machine, &word, at: 20)
        // A barger holds; meanwhile a higher priority queues; the barger's release wakes it.
        _ = arrive(&machine, &word, 2, .medium, at: 30)
        _ = arrive(&machine, &word, 3, .high, at: 40)
        #expect(woken(release(&machine, &word, at: 50)) == [3])
        #expect(claim(&machine, &word, medium, at: 60).0 == .passedOn)
    }

    @Test func description_andValidation() throws {
        #expect(CommandFairness.eventual.description == "eventually fair within 1000 µs")
        #expect(CommandFairness.eventual.starvationBound == .nanoseconds(1_000_000))
        #expect(CommandFairness.strictPriority.starvationBound == nil)
        #expect(try CommandFairness.eventual(starvationBound: .seconds(2)).starvationBound != nil)
        #expect(throws: QueueSafeValueError.self) { try CommandFairness.eventual(starvationBound: .milliseconds(-1)) }
        #expect(throws: QueueSafeValueError.self) { try CommandFairness.eventual(starvationBound: .never) }
        #expect(CommandFairness.eventual != .strictPriority)
    }
}
