import Testing

@_spi(Testing) @testable import QueueSafeValue

/// The bounded-overtaking policy in the pure state machine: which command each release grants.
@Suite(.runsAlongsideOthers) struct FairnessTransitionTests {
    typealias Machine = EngineStateMachine

    /// Enqueues `priorities` (waiter `n` is the `n`th) behind a holder, then releases until the
    /// queue drains; returns the order of the grants. `arrivingLater` are enqueued after the first
    /// grant, each right after a release, as a stream of new commands.
    private func grants(
        _ priorities: [CommandPriority],
        maxOvertakes: Int?,
        arrivingLater: [CommandPriority] = []
    ) -> [Int] {
        var machine = Machine(maxOvertakes: maxOvertakes)
        var word = CommandKind.blocking.wordBits  // someone holds the section
        func enqueue(_ waiter: Int, _ priority: CommandPriority) {
            let (admission, newWord) = machine.enqueue(
                waiter, kind: .blocking, priority: priority, reentrant: false, observed: word | EngineWord.slowRelease)
            guard case .queued = admission else {
                Issue.record("expected to queue, got \(admission)")
                return
            }
            word = newWord
            machine.checkInvariants(word: word)
        }
        for (waiter, priority) in priorities.enumerated() { enqueue(waiter, priority) }
        var later = arrivingLater.enumerated().makeIterator()
        var order: [Int] = []
        while true {
            let (release, newWord) = machine.release(observed: word)
            word = newWord
            machine.checkInvariants(word: word)
            guard let next = release.next else { break }
            order.append(next)
            if let (index, priority) = later.next() { enqueue(priorities.count + index, priority) }
        }
        #expect(machine.waitingCount == 0)
        return order
    }

    @Test func strictPriority_letsLaterHighCommandsGoFirst_everyTime() {
        // The lowest (0) arrived first, and still goes last.
        #expect(grants([.lowest, .highest, .highest, .highest], maxOvertakes: nil) == [1, 2, 3, 0])
    }

    @Test(arguments: [(0, [0, 1, 2, 3]), (1, [1, 0, 2, 3]), (2, [1, 2, 0, 3]), (3, [1, 2, 3, 0])])
    func boundedOvertaking_grantsTheOldestOnceOvertakenEnough(maxOvertakes: Int, expected: [Int]) {
        #expect(grants([.lowest, .highest, .highest, .highest], maxOvertakes: maxOvertakes) == expected)
    }

    /// A steady stream of high-priority arrivals: the low command waits for exactly `maxOvertakes`
    /// of them (under strict priority, it would wait for all).
    @Test func streamOfLaterHighCommands_passesTheLowOneAtMostMaxOvertakesTimes() {
        let stream = Array(repeating: CommandPriority.highest, count: 10)
        let order = grants([.lowest, .highest], maxOvertakes: 3, arrivingLater: stream)
        // 1 and the first two of the stream overtake 0, then 0 goes.
        #expect(order.firstIndex(of: 0) == 3, "\(order)")
        let strict = grants([.lowest, .highest], maxOvertakes: nil, arrivingLater: stream)
        #expect(strict.last == 0, "\(strict)")
    }

    /// Commands that were already waiting when a command arrived are not overtakes of it: they go
    /// first in their own order, and only later arrivals count.
    @Test func earlierArrivals_doNotCountAsOvertakes() {
        // 0 and 1 are high and wait before the low 2 arrives; 3 and 4 are high and arrive after it.
        let order = grants([.high, .high, .lowest, .highest, .highest], maxOvertakes: 1)
        // 3 (highest) goes first: it overtakes 0, 1 and 2 once. 0 is then the oldest, overtaken once:
        // it goes; 1 goes, overtaken once as well; then 2, overtaken once; then 4.
        #expect(order == [3, 0, 1, 2, 4], "\(order)")
    }

    /// Commands that left the queue (a deadline, a cancellation) are skipped by the arrival order
    /// too, and the one behind them inherits no more overtakes than commands arrived after it.
    @Test func leftCommands_areSkipped() {
        var machine = Machine(maxOvertakes: 1)
        var word = CommandKind.blocking.wordBits
        var tickets: [Machine.Ticket] = []
        for (waiter, priority) in [CommandPriority.lowest, .lowest, .highest, .highest].enumerated() {
            let (admission, newWord) = machine.enqueue(
                waiter, kind: .blocking, priority: priority, reentrant: false, observed: word | EngineWord.slowRelease)
            guard case .queued(let ticket) = admission else {
                Issue.record("\(admission)")
                return
            }
            tickets.append(ticket)
            word = newWord
        }
        var order: [Int] = []
        func releaseOnce() {
            let (release, newWord) = machine.release(observed: word)
            word = newWord
            machine.checkInvariants(word: word)
            if let next = release.next { order.append(next) }
        }
        releaseOnce()  // 2 overtakes 0 (and 1)
        #expect(machine.leaving(tickets[0]) == 0)  // the overtaken oldest leaves
        releaseOnce()  // 1 is the oldest now, overtaken once too: it goes
        releaseOnce()
        #expect(order == [2, 1, 3], "\(order)")
        #expect(machine.waitingCount == 0)
    }

    @Test func negativeBound_isInvalidArgument() {
        #expect(throws: QueueSafeValueError.self) { try CommandFairness.bounded(maxOvertakes: -1) }
        #expect((try? CommandFairness.bounded(maxOvertakes: 0))?.maxOvertakes == 0)
        #expect(CommandFairness.strictPriority.maxOvertakes == nil)
    }
}
