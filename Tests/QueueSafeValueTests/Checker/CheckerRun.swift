import Dispatch
import Foundation

@testable import QueueSafeValue

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
            }
            return nil
        }
    }

    /// Expects every command of `names` to have ended (a hang shows as one that did not).
    func expectEnded(_ names: [String]) -> String? {
        if let reported { return reported }
        for name in names where outcome(of: name) == nil { return "\(name) never ended" }
        return nil
    }
}
