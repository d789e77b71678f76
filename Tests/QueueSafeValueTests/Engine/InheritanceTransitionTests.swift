import Testing

@_spi(Testing) @testable import QueueSafeValue

/// Priority inheritance in the state machine alone: what the holder must run at follows its parked
/// waiters up and down, including what a waiter inherits from a section it holds elsewhere (a link
/// of a chain).
@Suite struct InheritanceTransitionTests {
    typealias Driver = SharedReadTransitionTests.Driver
    static let blocking = CommandKind.blocking.wordBits

    /// The holder inherits the most urgent parked waiter's urgency; when that waiter leaves, it drops
    /// to the next one's, and to nothing when the last leaves, each time asking the storage to bring
    /// the raised parties down.
    @Test func aWaiterThatLeaves_takesItsBoostWithIt() {
        let driver = Driver()
        #expect(driver.issue(1, shared: false))
        #expect(!driver.issue(2, shared: false))
        #expect(!driver.issue(3, shared: false))
        let first = driver.machine.park(driver.tickets[2]!, urgency: Urgency(thread: 10), holderBits: Self.blocking)
        let second = driver.machine.park(driver.tickets[3]!, urgency: Urgency(thread: 20), holderBits: Self.blocking)
        let raisedTo = driver.machine.beginBoost()
        #expect(first && second && raisedTo == Urgency(thread: 20))
        driver.check()
        let left = driver.machine.leave(driver.tickets[3]!)
        #expect(driver.machine.holdUrgency == Urgency(thread: 10))
        #expect(left?.lowersBoost == true, "the raised parties were not brought down")
        driver.check()
        let leftToo = driver.machine.leave(driver.tickets[2]!)
        #expect(driver.machine.holdUrgency == .none)
        #expect(leftToo?.lowersBoost == true)
        driver.check()
        #expect(driver.release(1) == [])
    }

    /// A parked waiter that holds a section elsewhere passes on what it inherits there, and takes it
    /// back when that goes down, while its own urgency stays.
    @Test func aChainedWaiter_passesOnWhatItInherits_andTakesItBack() {
        let driver = Driver()
        #expect(driver.issue(1, shared: false))
        #expect(!driver.issue(2, shared: false))
        let ticket = driver.tickets[2]!
        let own = Urgency(thread: 5, task: TaskPriority.medium.rawValue)
        let parked = driver.machine.park(ticket, urgency: own, holderBits: Self.blocking)
        #expect(parked && driver.machine.holdUrgency == Urgency(thread: 5))
        let raised = driver.machine.setInherited(ticket, Urgency(thread: 20), holderBits: Self.blocking)
        #expect(raised && driver.machine.holdUrgency == Urgency(thread: 20))
        driver.check()
        let again = driver.machine.setInherited(ticket, Urgency(thread: 20), holderBits: Self.blocking)
        #expect(!again, "no change")
        let dropped = driver.machine.setInherited(ticket, .none, holderBits: Self.blocking)
        #expect(dropped && driver.machine.holdUrgency == Urgency(thread: 5), "the waiter's own urgency was lost")
        driver.check()
        #expect(driver.release(1) == [2])
        #expect(driver.machine.holdUrgency == .none)
        let afterGrant = driver.machine.setInherited(ticket, Urgency(thread: 30), holderBits: Self.blocking)
        #expect(!afterGrant, "it holds now")
        #expect(driver.release(2) == [])
    }

    /// A task holder keeps the thread axis of a waiting thread's urgency, to pass on to a thread
    /// it waits for in turn; a thread holder inherits the thread axis only.
    @Test func aTaskHolderKeepsTheThreadAxis_forTheNextLink() {
        let urgency = Urgency(thread: 20, task: TaskPriority.high.rawValue)
        #expect(urgency.inheritable(byHolder: CommandKind.awaiting.wordBits) == urgency)
        #expect(urgency.inheritable(byHolder: Self.blocking) == Urgency(thread: 20))
    }
}
