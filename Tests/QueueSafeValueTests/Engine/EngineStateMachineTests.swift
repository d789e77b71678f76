import Testing

@_spi(Testing) @testable import QueueSafeValue
@testable import QueueSafeValueTesting  // SplitMix64, the explorer's seeded generator

/// The engine's pure state machine, driven without threads: every transition and its action.
@Suite(.runsAlongsideOthers) struct EngineStateMachineTests {
    typealias Machine = EngineStateMachine

    // MARK: Keys and the heap

    @Test func key_ordersHigherPriorityFirst_thenLowerSequence() {
        let priorities: [CommandPriority] = [.lowest, CommandPriority(rawValue: 1), .low, .medium, .high, .highest]
        for (lower, higher) in zip(priorities, priorities.dropFirst()) {
            // A higher priority comes first even when it arrived much later.
            #expect(
                CommandHeap.key(priority: higher, sequence: 1_000_000) < CommandHeap.key(priority: lower, sequence: 0))
        }
        for priority in priorities {
            #expect(
                CommandHeap.key(priority: priority, sequence: 41) < CommandHeap.key(priority: priority, sequence: 42))
            #expect(CommandHeap.priority(of: CommandHeap.key(priority: priority, sequence: 7)) == priority)
        }
        #expect(
            CommandHeap.key(priority: .highest, sequence: 0x00FF_FFFF_FFFF_FFFE)
                < CommandHeap.key(priority: CommandPriority(rawValue: 254), sequence: 0))
    }

    @Test func heap_popsInKeyOrder_andRemoveAllWhereKeepsOrder() {
        var heap = CommandHeap()
        #expect(heap.popFirst() == nil)
        let keys: [UInt64] = [50, 3, 99, 7, 1, 42, 8, 77, 13]
        for (slot, key) in keys.enumerated() { heap.insert(.init(key: key, slot: UInt32(slot))) }
        heap.checkInvariants()
        heap.removeAll { $0.key % 2 == 0 }
        heap.checkInvariants()
        var popped: [UInt64] = []
        while let entry = heap.popFirst() { popped.append(entry.key) }
        #expect(popped == keys.filter { $0 % 2 == 1 }.sorted())
    }

    // MARK: Enqueue and release

    @Test func freeSection_isGrantedAtOnce_andReleasesToFree() {
        var machine = Machine()
        let (admission, word) = machine.enqueue(
            1, kind: .blocking, priority: .low, reentrant: false, observed: 0)
        guard case .granted(nil) = admission else {
            Issue.record("expected an untracked grant, got \(admission)")
            return
        }
        #expect(word == CommandKind.blocking.wordBits, "an untracked holder releases on the idle path")
        machine.checkInvariants(word: word)
    }

    @Test(arguments: [CommandKind.blocking, .dispatched, .awaiting, .operation])
    func waitingCommands_areGrantedByPriority_thenArrival(kind: CommandKind) {
        let priorities: [CommandPriority] = [.low, .high, .low, .highest, .high, .lowest, .low, .highest]
        var machine = Machine()
        var word = CommandKind.blocking.wordBits  // someone holds the section
        for (index, priority) in priorities.enumerated() {
            let (admission, next) = machine.enqueue(
                index, kind: kind, priority: priority, reentrant: false,
                observed: word)
            guard case .queued = admission else {
                Issue.record("expected queued, got \(admission)")
                return
            }
            word = next
            machine.checkInvariants(word: word)
        }
        #expect(word & EngineWord.slowRelease != 0, "waiters make the holder release under the lock")
        var granted: [Int] = []
        while true {
            let (release, next) = machine.release(observed: word)
            word = next
            machine.checkInvariants(word: word)
            guard let waiter = release.next else { break }
            granted.append(waiter)
            #expect(release.grant?.kind == kind && release.grant != nil)
            #expect(word & EngineWord.holderMask == kind.wordBits)
        }
        #expect(granted == CommandPriority.expectedRunOrder(priorities))
        #expect(word == 0, "the last release frees the section")
    }

    @Test func reentrantCommand_thatWouldWait_isRefused_andLeavesNoTrace() {
        var machine = Machine()
        let held = CommandKind.blocking.wordBits
        let (admission, word) = machine.enqueue(
            1, kind: .blocking, priority: .low, reentrant: true, observed: held)
        guard case .refused(.reentrantAccess) = admission else {
            Issue.record("got \(admission)")
            return
        }
        #expect(word == held, "the word is restored")
        #expect(machine.waitingCount == 0)
        // On a free section "reentrant" cannot be: the command is granted.
        let (free, _) = machine.enqueue(
            2, kind: .blocking, priority: .low, reentrant: true, observed: 0)
        guard case .granted = free else {
            Issue.record("got \(free)")
            return
        }
    }

    // MARK: Leave

    @Test func leftCommands_areNeverGranted_andTheirTicketsGoStale() {
        var machine = Machine()
        var word = CommandKind.blocking.wordBits
        var tickets: [Machine.Ticket] = []
        for index in 0..<10 {
            let (admission, next) = machine.enqueue(
                index, kind: .blocking, priority: .medium, reentrant: false, observed: word)
            guard case .queued(let ticket) = admission else {
                Issue.record("got \(admission)")
                return
            }
            tickets.append(ticket)
            word = next
        }
        for index in [0, 3, 4, 9] {
            #expect(machine.leaving(tickets[index]) == index)
            #expect(machine.leaving(tickets[index]) == nil, "a command leaves once")
            #expect(!machine.isWaiting(tickets[index]))
            machine.checkInvariants(word: word)
        }
        #expect(machine.waitingCount == 6)
        var granted: [Int] = []
        while let waiter = machine.release(observed: word).0.next {
            granted.append(waiter)
            word = CommandKind.blocking.wordBits | (machine.waitingCount > 0 ? EngineWord.slowRelease : 0)
        }
        #expect(granted == [1, 2, 5, 6, 7, 8])
        // A granted command cannot leave any more: its ticket is stale.
        #expect(machine.leaving(tickets[1]) == nil)
    }

    @Test func manyDepartures_sweepTheHeap_andKeepOrder() {
        var machine = Machine()
        var word = CommandKind.blocking.wordBits
        var tickets: [Machine.Ticket] = []
        for index in 0..<200 {
            let (admission, next) = machine.enqueue(
                index, kind: .dispatched, priority: CommandPriority.testPriorities[index % 7], reentrant: false,
                observed: word)
            guard case .queued(let ticket) = admission else {
                Issue.record("got \(admission)")
                return
            }
            tickets.append(ticket)
            word = next
        }
        for index in tickets.indices where index % 5 != 0 {
            #expect(machine.leaving(tickets[index]) == index)
            machine.checkInvariants(word: word)
        }
        let live = tickets.indices.filter { $0 % 5 == 0 }
        #expect(machine.waitingCount == live.count)
        #expect(
            machine.waitingInOrder().map(\.waiter.number)
                == CommandPriority.expectedRunOrder(live.map { CommandPriority.testPriorities[$0 % 7] }).map {
                    live[$0]
                })
    }

    /// Random enqueues, departures and releases against a sorted-array model of the queue.
    @Test func randomTransitions_matchASortedModel() {
        let seed: UInt64 = 0xC0FF_EE00_4EA9
        var random = SplitMix64(seed: seed)
        for round in 0..<20 {
            var machine = Machine()
            var word = CommandKind.blocking.wordBits
            var model: [(key: UInt64, waiter: Int, ticket: Machine.Ticket)] = []
            var sequence: UInt64 = 0
            // Odd rounds remove far more than they grant, so dead entries pile up and get swept.
            let (enqueueBelow, releaseBelow) = round % 2 == 0 ? (50, 80) : (45, 55)
            for step in 0..<600 {
                let roll = Int.random(in: 0..<100, using: &random)
                if roll < enqueueBelow || model.isEmpty {
                    let priority = CommandPriority(rawValue: UInt8.random(in: 0...255, using: &random))
                    let (admission, next) = machine.enqueue(
                        Int(sequence), kind: .blocking, priority: priority, reentrant: false,
                        observed: word)
                    guard case .queued(let ticket) = admission else {
                        Issue.record("got \(admission)")
                        return
                    }
                    word = next
                    let key = CommandHeap.key(priority: priority, sequence: sequence)
                    model.insert((key, Int(sequence), ticket), at: model.firstIndex { $0.key > key } ?? model.count)
                    sequence += 1
                } else if roll < releaseBelow {
                    let (release, next) = machine.release(observed: word)
                    word = next
                    #expect(release.next == model.removeFirst().waiter, "round \(round) step \(step): wrong grant")
                } else {
                    let removed = model.remove(at: Int.random(in: 0..<model.count, using: &random))
                    #expect(machine.leaving(removed.ticket) == removed.waiter)
                }
                machine.checkInvariants(word: word)
                #expect(machine.waitingCount == model.count, "round \(round) step \(step)")
                if machine.waitingCount != model.count { return }
            }
            #expect(machine.waitingInOrder().map(\.waiter.number) == model.map(\.waiter), "round \(round): final order")
        }
    }

    // MARK: Operations, cancelAll and attach

    @Test func cancelAll_takesEveryWaiterOut_andCancelsTheHoldersTask() {
        var machine = Machine()
        let (first, word0) = machine.enqueue(
            0, kind: .operation, priority: .medium, reentrant: false, observed: 0)
        guard case .granted(let holder?) = first else {
            Issue.record("got \(first)")
            return
        }
        #expect(word0 & EngineWord.slowRelease != 0, "a tracked holder releases under the lock")
        #expect(machine.attach(holder) == .keep)
        var word = word0
        var waiting: [Machine.Ticket] = []
        for index in 1...3 {
            let (admission, next) = machine.enqueue(
                index, kind: .operation, priority: .medium, reentrant: false, observed: word)
            guard case .queued(let ticket) = admission else {
                Issue.record("got \(admission)")
                return
            }
            waiting.append(ticket)
            word = next
        }
        #expect(machine.attach(waiting[0]) == .keep)
        let cancel = machine.cancelAll()
        #expect(cancel.left == [1, 2, 3])
        #expect(cancel.cancelled == [1, 2, 3, 0], "the tasks of the three that left, then the holder's")
        machine.checkInvariants(word: word)
        // Tasks attached later learn that they were cancelled.
        #expect(machine.attach(waiting[1]) == .cancelNow)
        #expect(machine.attach(waiting[2]) == .cancelNow)
        // The holder's release hands the section to nobody.
        let (release, after) = machine.release(observed: word)
        #expect(release.next == nil)
        #expect(release.ended?.number == 0)
        #expect(after == 0)
    }

    /// The first defect of issue 9: `cancelAll()` after an operation ended must not reach it.
    @Test func cancelAll_afterTheOperationEnded_cancelsNothing() {
        var machine = Machine()
        let (admission, word) = machine.enqueue(
            0, kind: .operation, priority: .medium, reentrant: false, observed: 0)
        guard case .granted(let ticket?) = admission else {
            Issue.record("got \(admission)")
            return
        }
        #expect(machine.attach(ticket) == .keep)
        let (release, after) = machine.release(observed: word)
        #expect(release.ended?.number == 0 && after == 0)
        let cancel = machine.cancelAll()
        #expect(cancel.cancelled.isEmpty && cancel.left.isEmpty)
    }

    @Test func cancelAll_beforeTheHoldersTaskIsAttached_cancelsItOnAttach() {
        var machine = Machine()
        let (admission, word) = machine.enqueue(
            0, kind: .operation, priority: .medium, reentrant: false, observed: 0)
        guard case .granted(let ticket?) = admission else {
            Issue.record("got \(admission)")
            return
        }
        let cancel = machine.cancelAll()
        #expect(cancel.cancelled.isEmpty, "no task to cancel yet")
        #expect(machine.attach(ticket) == .cancelNow)
        _ = machine.release(observed: word)
    }

    @Test func attach_afterTheOperationEnded_dropsTheTask() {
        var machine = Machine()
        let (admission, word) = machine.enqueue(
            0, kind: .operation, priority: .medium, reentrant: false, observed: 0)
        guard case .granted(let ticket?) = admission else {
            Issue.record("got \(admission)")
            return
        }
        _ = machine.release(observed: word)
        #expect(machine.attach(ticket) == .drop)
        #expect(machine.attach(ticket) == .drop)
    }

    // MARK: Manual completion

    @Test func manualCompletion_endsWhenBothPartiesArrived_inEitherOrder() {
        for completionFirst in [false, true] {
            var machine = Machine()
            let held = CommandKind.dispatched.wordBits
            let (ticket, word) = machine.beginManual(7, kind: .dispatched, observed: held)
            #expect(word & EngineWord.slowRelease != 0)
            #expect(machine.holderAwaitsCompletion)
            if completionFirst {
                guard machine.manualCompletionArrived(ticket, dropped: false).finish == nil else {
                    Issue.record("early finish")
                    return
                }
                guard case .release = machine.manualClosureReturned(ticket) else {
                    Issue.record("expected release")
                    return
                }
            } else {
                guard case .waitForCompletion = machine.manualClosureReturned(ticket) else {
                    Issue.record("expected wait")
                    return
                }
                guard let waiter = machine.manualCompletionArrived(ticket, dropped: false).finish else {
                    Issue.record("expected finish")
                    return
                }
                #expect(waiter == 7)
            }
            #expect(!machine.holderAwaitsCompletion)
            let (release, after) = machine.release(observed: word)
            #expect(release.ended?.number == 7 && after == 0)
            #expect(machine.droppedCompletions == 0)
        }
    }

    @Test func droppedCompletion_isCounted_andStaleArrivalsAreIgnored() {
        var machine = Machine()
        let held = CommandKind.blocking.wordBits
        let (ticket, word) = machine.beginManual(7, kind: .blocking, observed: held)
        _ = machine.manualClosureReturned(ticket)
        guard machine.manualCompletionArrived(ticket, dropped: true).finish == 7 else {
            Issue.record("expected finish")
            return
        }
        #expect(machine.droppedCompletions == 1)
        _ = machine.release(observed: word)
        guard machine.manualCompletionArrived(ticket, dropped: true).finish == nil else {
            Issue.record("stale arrival acted")
            return
        }
        #expect(machine.droppedCompletions == 1)
    }

    // MARK: Container release

    @Test func close_onAFreeSection_freesTheValueAtOnce_andRefusesLaterCommands() {
        var machine = Machine()
        let (actions, word) = machine.close(observed: 0)
        #expect(actions.freeValue && word == EngineWord.closed)
        let (admission, _) = machine.enqueue(
            1, kind: .blocking, priority: .low, reentrant: false, observed: word)
        guard case .refused(.valueContainerDeinited) = admission else {
            Issue.record("got \(admission)")
            return
        }
        #expect(!machine.close(observed: word).0.freeValue, "a second close frees nothing")
    }

    /// The second defect of issue 9: the value is freed when the last queued command ends.
    @Test func close_whileHeld_freesTheValueWhenTheQueueDrains() {
        var machine = Machine()
        var word = CommandKind.blocking.wordBits
        let (admission, next) = machine.enqueue(
            1, kind: .dispatched, priority: .low, reentrant: false, observed: word)
        guard case .queued = admission else {
            Issue.record("got \(admission)")
            return
        }
        word = next
        let (closing, closedWord) = machine.close(observed: word)
        #expect(!closing.freeValue, "a holder and a waiter still need the value")
        word = closedWord
        let (first, afterFirst) = machine.release(observed: word)
        #expect(first.next == 1 && !first.freeValue, "queued commands still run first")
        #expect(afterFirst & EngineWord.closed != 0)
        let (last, afterLast) = machine.release(observed: afterFirst)
        #expect(last.next == nil && last.freeValue)
        #expect(afterLast == EngineWord.closed)
        #expect(machine.isValueFreed)
    }
}
