import Foundation
import Testing

// MARK: - InterleavingExplorer

/// A world whose every interleaving can be explored: a value that lists the steps enabled in it,
/// applies one, and checks its own invariants.
protocol ExplorableWorld {
    associatedtype Step
    associatedtype Fingerprint: Hashable

    /// The steps that may happen next. Empty when the world has ended, or is stuck.
    func enabledSteps() -> [Step]
    /// Applies `step`, recording any violation it notices on the way.
    mutating func apply(_ step: Step)
    /// A violation found by the last `apply`, or by checking the world after it.
    func violation() -> String?
    /// Checks a world with no enabled step: it must have ended well, not be stuck.
    func terminalViolation() -> String?
    /// Identifies the state, so a state reached along two interleavings is explored once.
    var fingerprint: Fingerprint { get }
    /// Says what `step` does in this world, for the trace of a violation.
    func describe(_ step: Step) -> String
}

/// A state's identity for the explorer's visited set: two differently seeded hashes of the same
/// fields (128 bits), so that two distinct states practically never collide. `feed` combines every
/// field that can change a world's future.
struct StateFingerprint: Hashable {
    let first: Int
    let second: Int

    init(_ feed: (inout Hasher) -> Void) {
        var first = Hasher()
        var second = Hasher()
        second.combine(0x5EED)
        feed(&first)
        feed(&second)
        self.first = first.finalize()
        self.second = second.finalize()
    }
}

/// What an exploration found.
struct ExplorationReport: Sendable {
    /// Distinct states reached.
    var states = 0
    /// Steps applied, across every interleaving.
    var transitions = 0
    /// Worlds with no enabled step.
    var terminals = 0
    /// The first violation, with the steps that led to it.
    var violation: (message: String, trace: [String])?
}

/// Explores every interleaving of a world's steps, depth first, visiting each distinct state once
/// (stateful model checking, as loom and spin do): a state reached along two interleavings has the
/// same futures, so its subtree is explored once. Stops at the first violation, with its trace.
enum InterleavingExplorer {
    static func explore<World: ExplorableWorld>(_ initial: World, stateLimit: Int = 5_000_000) -> ExplorationReport {
        var report = ExplorationReport()
        var visited: Set<World.Fingerprint> = [initial.fingerprint]
        // Each frame: a world, its enabled steps, and the index of the next one to try.
        var stack: [(world: World, steps: [World.Step], next: Int)] = [(initial, initial.enabledSteps(), 0)]
        if let violation = initial.violation() {
            report.violation = (violation, [])
            return report
        }
        while !stack.isEmpty {
            let top = stack.count - 1
            if stack[top].steps.isEmpty && stack[top].next == 0 {
                report.terminals += 1
                if let violation = stack[top].world.terminalViolation() {
                    report.violation = (violation, trace(stack))
                    break
                }
            }
            guard stack[top].next < stack[top].steps.count else {
                stack.removeLast()
                continue
            }
            let step = stack[top].steps[stack[top].next]
            stack[top].next += 1
            var world = stack[top].world
            world.apply(step)
            report.transitions += 1
            if let violation = world.violation() {
                report.violation = (violation, trace(stack) + [stack[top].world.describe(step)])
                break
            }
            guard visited.insert(world.fingerprint).inserted else { continue }
            if visited.count >= stateLimit {
                report.violation = ("state limit of \(stateLimit) reached: the scenario is too big", trace(stack))
                break
            }
            stack.append((world, world.enabledSteps(), 0))
        }
        report.states = visited.count
        return report
    }

    /// The steps taken to reach the top of the stack.
    private static func trace<World: ExplorableWorld>(_ stack: [(world: World, steps: [World.Step], next: Int)])
        -> [String]
    {
        stack.dropLast().map { $0.world.describe($0.steps[$0.next - 1]) }
    }
}

extension InterleavingExplorer {
    /// Explores `world` as a test: prints how many states it explored, records the first violation
    /// (with the steps that led to it) as a test issue, and expects the exploration to reach an end.
    ///
    /// The exploration runs on a thread of its own, not on the cooperative pool: it is seconds of
    /// CPU work that would otherwise keep a pool thread from the other tests' tasks.
    static func expectEveryInterleavingHolds<World: ExplorableWorld>(
        _ world: World,
        scenario name: String,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async {
        let started = Date()
        // The world is handed over to the exploring thread, never shared.
        nonisolated(unsafe) let exploreWorld = { explore(world) }
        let report = await withCheckedContinuation { (continuation: CheckedContinuation<ExplorationReport, Never>) in
            let thread = Thread { continuation.resume(returning: exploreWorld()) }
            thread.stackSize = 8 << 20
            thread.start()
        }
        let seconds = Date().timeIntervalSince(started)
        print(
            "Explorer: \(name): \(report.states) states explored, \(report.transitions) transitions, "
                + "\(report.terminals) terminal states, \(String(format: "%.1f", seconds)) s")
        if let (message, trace) = report.violation {
            Issue.record(
                "\(name): \(message)\n  after: \(trace.joined(separator: "\n         "))",
                sourceLocation: sourceLocation)
        }
        #expect(report.terminals > 0, "the exploration never reached an end", sourceLocation: sourceLocation)
    }
}
