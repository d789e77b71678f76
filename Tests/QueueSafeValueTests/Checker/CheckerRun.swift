import Dispatch
import Foundation

@_spi(Testing) @testable import QueueSafeValue
@testable import QueueSafeValueTesting

/// What the commands of one controlled run did, told by the commands themselves (their closures,
/// their results, their completions), and the checks made on it. Shared by the run's threads; an
/// `NSLock` guards it (held only briefly, never across a sync point, so it never blocks a thread of
/// the world).
final class CheckerRun: @unchecked Sendable {  // @unchecked Sendable: every access takes `lock`
    private let lock = NSLock()
    private var violation: String?
    private var holders = 0
    /// Shared reads inside their closures now.
    private var readers = 0
    private(set) var ran: [String] = []
    private var outcomes: [String: String] = [:]
    private var deliveries: [String: Int] = [:]

    /// The world the run happens in.
    unowned let world: ControlledWorld  // unowned: the world keeps this run alive through its quiescent check

    init(_ world: ControlledWorld) {
        self.world = world
    }

    private func record(_ message: String) {
        if violation == nil { violation = message }
    }

    /// Reports a violation a scenario noticed itself.
    func report(_ message: String) {
        lock.withLock { record(message) }
    }

    /// A command's closure begins: it must be the only holder.
    func enter(_ name: String) {
        lock.withLock {
            if holders > 0 { record("\(name) began while another command held the section: two holders at once") }
            if readers > 0 {
                record("\(name), an exclusive command, began while \(readers) shared reads held the section")
            }
            if ran.contains(name) { record("\(name) ran twice") }
            holders += 1
            ran.append(name)
        }
    }

    /// A command's closure ends.
    func exit(_ name: String) {
        lock.withLock { holders -= 1 }
    }

    /// A shared read's closure begins: no exclusive command may hold the section.
    func enterShared(_ name: String) {
        lock.withLock {
            if holders > 0 { record("\(name), a shared read, began while an exclusive command held the section") }
            if ran.contains(name) { record("\(name) ran twice") }
            readers += 1
            ran.append(name)
        }
    }

    /// A shared read's closure ends.
    func exitShared(_ name: String) {
        lock.withLock { readers -= 1 }
    }

    /// A command ended, with `outcome` (its result, or how it failed).
    func end(_ name: String, _ outcome: String) {
        lock.withLock {
            if let earlier = outcomes[name] { record("\(name) ended twice (\(earlier), then \(outcome))") }
            outcomes[name] = outcome
        }
    }

    /// A command's completion (or `map` delivery) ran.
    func deliver(_ name: String) {
        lock.withLock {
            deliveries[name, default: 0] += 1
            if deliveries[name]! > 1 { record("\(name) delivered its completion twice") }
        }
    }

    func outcome(of name: String) -> String? { lock.withLock { outcomes[name] } }
    func didRun(_ name: String) -> Bool { lock.withLock { ran.contains(name) } }
    func deliveryCount(_ name: String) -> Int { lock.withLock { deliveries[name] ?? 0 } }
    var runOrder: [String] { lock.withLock { ran } }

    /// The first violation the commands reported.
    var reported: String? { lock.withLock { violation } }

    /// Checks `engine` at a quiet step (no thread holds a lock): the machine's own invariants, and
    /// what the commands reported.
    func quiescentCheck(_ engines: [CommandEngine]) -> () -> String? {
        { [self] in
            if let reported { return reported }
            for engine in engines {
                if let violation = engine.withMachine({ machine, word in machine.invariantViolation(word: word) }) {
                    return "\(engine.displayName): \(violation)"
                }
                if let violation = engine.withMachine({ machine, _ in Self.fairnessViolation(machine) }) {
                    return "\(engine.displayName): \(violation)"
                }
            }
            return world.isInheritanceSettled ? inheritanceViolation(engines) : nil
        }
    }

    /// The eventually fair mode's promises (``CommandFairness/eventual(starvationBound:)``), on the
    /// clock the machine was given (the checker's step clock): the last grant went to no command
    /// while one of higher priority that had arrived before it waited (nobody is overtaken by a
    /// lower priority), nor while one of its own priority that arrived before it had waited the
    /// bound (nobody waits past the bound and one hold). Strict priority promises more, and
    /// bounded overtaking other things: `nil` for them.
    static func fairnessViolation(_ machine: EngineStateMachine) -> String? {
        guard let bound = machine.barging.bound, let grant = machine.barging.lastGrant else { return nil }
        for entry in machine.table.waitingEntries {
            let arrived = machine.barging.arrival(of: entry.slot)
            let priority = CommandHeap.priority(of: entry.key)
            if priority > grant.priority && arrived < grant.at {
                return
                    "a command of priority \(grant.priority) was granted while one of \(priority) waited: overtaken by"
                    + " a lower priority"
            }
            if priority == grant.priority && arrived < grant.arrival && grant.at &- arrived >= bound {
                return "a command was granted past one of its priority that had waited \(grant.at &- arrived) ns,"
                    + " the bound is \(bound) ns: it waits past the bound"
            }
        }
        return nil
    }

    /// Checks priority inheritance across `engines`, once no thread is passing a change along a
    /// chain (the machines' own invariants already say that each holder inherits exactly what its
    /// parked waiters ask for):
    /// - every party raised by an engine runs at exactly what that engine's holder inherits now,
    ///   and an engine's holders that it raised all are (no boost outlived its reason, none missed);
    /// - every parked waiter that holds sections elsewhere asks its engine for exactly what it
    ///   inherits there (a chain passes a raise on, and takes it back, link by link).
    /// Together: every holder on a chain from a parked waiter runs at least at that waiter's urgency,
    /// and no party runs above the most urgent party waiting for it, transitively.
    ///
    /// And what the world's fake of the platform (see `RecordingPriorityBackend`) says each thread
    /// runs at: exactly the higher of its own urgency and what it inherits (not raised when it
    /// reaches that on its own, and no more than the most urgent party waiting for it), with no
    /// call misused on the way (an override ended twice, say).
    func inheritanceViolation(_ engines: [CommandEngine]) -> String? {
        let registry = world.boostRegistry
        let platform = world.priorityCalls
        if let misuse = platform.firstMisuse { return "\(platform.platform): \(misuse)" }
        for (thread, name) in world.startedThreads {
            let own = platform.ownUrgency(ofThread: thread)
            let inherited = registry.inherited(of: [.thread(thread)]).thread
            let running = platform.runningUrgency(ofThread: thread)
            if running != max(own, inherited) {
                return "\(name) runs at \(running) under \(platform.platform), but its own urgency is \(own) and it"
                    + " inherits \(inherited) (a boost outlived its reason, one was missed, or one was made needlessly)"
            }
        }
        let byID = Dictionary(uniqueKeysWithValues: engines.map { (ObjectIdentifier($0), $0) })
        for (node, sources) in registry.contributions {
            for (source, urgency) in sources {
                guard let engine = byID[source] else { return "\(node) is raised by an engine of no scenario" }
                let hold = engine.withMachine { machine, _ in machine.holdUrgency }
                if urgency != hold {
                    return "\(node) runs at \(urgency) for \(engine.displayName), whose holder inherits \(hold)"
                        + " (a boost outlived its reason, or a raise was missed)"
                }
            }
        }
        for engine in engines {
            let (hold, boosted) = engine.withMachine { machine, _ in (machine.holdUrgency, machine.isHoldBoosted) }
            let targets = engine.boosts.withLock { $0.targets }
            if hold.isNone {
                if !targets.isEmpty {
                    return "\(engine.displayName) inherits nothing but still lists \(targets) raised"
                }
                continue
            }
            if !boosted { return "\(engine.displayName)'s holder inherits \(hold) but was never raised" }
            // Each listed party runs at what the hold inherits. (A holder is listed once a raise finds
            // which thread or task runs it: not one that took the section and has not said so yet,
            // nor a dispatch command whose block has not started; see GettingStarted.)
            for node in targets {
                let got = registry.contributions[node]?[ObjectIdentifier(engine)] ?? Urgency.none
                if got != hold { return "\(node) holds \(engine.displayName) at \(got), not at \(hold) it inherits" }
            }
        }
        for (node, wait) in world.detector.registeredWaits where node == wait.party.first {
            let engine = wait.engine.engine.takeUnretainedValue()
            let ticket = CommandEngine.Ticket(packed: wait.ticket)
            let inherited = registry.inherited(of: wait.party)
            let asked = engine.withMachine { machine, _ -> Urgency? in
                guard machine.isWaiting(ticket), machine.inheritance.urgency(of: ticket.slot) != nil else { return nil }
                return machine.inheritance.chainedUrgency(of: ticket.slot)?.inherited ?? Urgency.none
            }
            guard let asked else { continue }  // granted, or not parked yet
            if asked != inherited {
                return "\(node) waits for \(engine.displayName) passing on \(asked), but inherits \(inherited)"
                    + " from what it holds (a chain link was not followed)"
            }
        }
        return nil
    }

    /// Expects every command of `names` to have ended (a hang shows as one that did not).
    func expectEnded(_ names: [String]) -> String? {
        if let reported { return reported }
        for name in names where outcome(of: name) == nil { return "\(name) never ended" }
        return nil
    }
}
