import Testing

@_spi(Testing) @testable import QueueSafeValue

/// A `CommandQueue` of width n in the pure state machine: operations hold slots as shared holders,
/// at most the width at once; width changes; re-prioritizing a waiting operation. Driven without
/// threads, the invariant checked after every step.
@Suite(.runsAlongsideOthers) struct WidthTransitionTests {
    typealias Machine = EngineStateMachine

    final class Driver {
        var machine = Machine()
        var word = 0
        var tickets: [Int: Machine.Ticket] = [:]
        var running: Set<Int> = []
        var mostAtOnce = 0

        init(width: Int) {
            if width > 1 { _ = machine.setWidth(width) }
        }

        func check(_ sourceLocation: SourceLocation = #_sourceLocation) {
            if let violation = machine.invariantViolation(word: word) {
                Issue.record("invariant: \(violation)", sourceLocation: sourceLocation)
            }
            mostAtOnce = max(mostAtOnce, running.count)
        }

        func apply(_ actions: Machine.Actions) -> [Int] {
            let granted = SharedReadTransitionTests.Driver.granted(actions)
            running.formUnion(granted)
            check()
            return granted
        }

        /// Enqueues operation `id`; returns whether it runs at once.
        @discardableResult
        func enqueue(_ id: Int, _ priority: CommandPriority = .medium) -> Bool {
            let (admission, _, next) = machine.enqueueOperation(
                id, priority: priority, discardable: false, observed: word)
            word = next
            defer { check() }
            switch admission {
            case .granted(let ticket?):
                tickets[id] = ticket
                running.insert(id)
                return true
            case .queued(let ticket):
                tickets[id] = ticket
                return false
            case .granted(nil), .refused, .expired:
                Issue.record("an operation was not given a record")
                return false
            }
        }

        /// Operation `id` ends; returns what was granted.
        func end(_ id: Int) -> [Int] {
            running.remove(id)
            let ticket = tickets[id]!
            let actions: Machine.Actions
            if machine.isHoldingReader(ticket) {
                (actions, word) = machine.releaseReader(ticket, observed: word)
            } else {
                (actions, word) = machine.release(observed: word)
            }
            return apply(actions)
        }

        func setWidth(_ width: Int) -> [Int] {
            apply(machine.setWidth(width))
        }

        func reprioritize(_ id: Int, _ priority: CommandPriority) -> (Machine.Found, [Int]) {
            let actions = machine.reprioritize(tickets[id]!, to: priority)
            return (actions.found, apply(actions))
        }
    }

    @Test func slotsAreGrantedUpToTheWidthAndEachFreedSlotToTheFirstWaiter() {
        let driver = Driver(width: 3)
        #expect(driver.enqueue(1) && driver.enqueue(2) && driver.enqueue(3))
        #expect(!driver.enqueue(4, .low))
        #expect(!driver.enqueue(5, .medium))
        #expect(!driver.enqueue(6, .high))
        #expect(!driver.enqueue(7, .high))
        #expect(driver.end(2) == [6], "the most urgent first")
        #expect(driver.end(1) == [7], "then the next of that priority")
        #expect(driver.end(3) == [5])
        #expect(driver.end(6) == [4])
        #expect(driver.end(7) == [] && driver.end(5) == [] && driver.end(4) == [])
        #expect(driver.mostAtOnce == 3)
        #expect(driver.word == 0)
    }

    @Test func aRaisedWidthGrantsAtOnceAndALoweredOneWaitsForTheRunningToEnd() {
        let driver = Driver(width: 2)
        for id in 1...6 { driver.enqueue(id) }
        #expect(driver.running == [1, 2])
        #expect(driver.setWidth(4) == [3, 4])
        #expect(driver.setWidth(2) == [])
        #expect(driver.end(1) == [] && driver.end(2) == [], "four ran, two may: none starts")
        #expect(driver.end(3) == [5], "one runs: the next starts")
        #expect(driver.end(4) == [6])
        #expect(driver.mostAtOnce == 4)
    }

    @Test func crossingWidthOneConvertsOnlyTheWaitingOperations() {
        let driver = Driver(width: 1)
        for id in 1...4 { driver.enqueue(id) }
        #expect(driver.running == [1])
        #expect(!driver.machine.isHoldingReader(driver.tickets[1]!), "width 1: an exclusive operation")
        #expect(driver.setWidth(3) == [], "the one that started alone keeps running alone")
        #expect(driver.end(1) == [2, 3, 4], "then three slots at once")
        #expect(driver.setWidth(1) == [])
        driver.enqueue(5)
        driver.enqueue(6)
        #expect(driver.end(2) == [] && driver.end(3) == [])
        #expect(driver.end(4) == [5], "width 1 again: one at a time")
        #expect(driver.end(5) == [6])
        #expect(driver.mostAtOnce == 3)
    }

    @Test func aReprioritizedWaiterTakesItsNewPlaceBehindThoseAlreadyThere() {
        let driver = Driver(width: 2)
        driver.enqueue(1)
        driver.enqueue(2)
        driver.enqueue(3, .low)
        driver.enqueue(4, .high)
        driver.enqueue(5, .low)
        driver.enqueue(6, .medium)
        #expect(driver.reprioritize(5, .high) == (.moved, []))
        #expect(driver.reprioritize(1, .highest) == (.holding, []))
        #expect(driver.end(1) == [4], "already waiting at .high: ahead of the one that moved there")
        #expect(driver.end(2) == [5])
        #expect(driver.end(4) == [6])
        #expect(driver.end(5) == [3])
        #expect(driver.reprioritize(5, .low) == (.gone, []))
        // A reprioritization that makes a waiter first while a slot is free grants it at once.
        #expect(driver.setWidth(3) == [])
    }

    @Test func aReprioritizedWaiterKeepsItsArrivalAgeUnderABound() {
        let driver = Driver(width: 1)
        driver.machine = Machine(maxOvertakes: 1)
        driver.enqueue(1)
        driver.enqueue(2, .low)
        driver.enqueue(3, .high)
        driver.enqueue(4, .high)
        // 2 moves to .low again: a new place, behind nothing new; its overtake count stays.
        #expect(driver.reprioritize(2, .low) == (.moved, []))
        #expect(driver.end(1) == [3], "one overtake of 2 allowed")
        #expect(driver.end(3) == [2], "the bound is reached: 2, the oldest, goes before 4")
        #expect(driver.end(2) == [4])
    }
}
