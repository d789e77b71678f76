import Foundation

@_spi(Testing) @testable import QueueSafeValue
@testable import QueueSafeValueTesting

/// The lock-order check: every nesting of the engine's locks that any run of any checker scenario
/// took, by role, in one graph; a cycle in it is an order two threads could take in opposite
/// directions (a deadlock of the library's own locks, however narrow its window), and so is a lock
/// taken inside another of its own role (no order between two engines' locks is written down).
enum LockOrder {
    private static let graph = Locked<[LockNesting: (LockNesting.Witness, scenario: String)]>([:])
    private static let reported = Locked(false)

    /// Adds what a scenario's runs took; returns the description of a cycle the graph has now, the
    /// first time there is one.
    static func add(_ nestings: [LockNesting: LockNesting.Witness], scenario: String) -> String? {
        let edges = graph.withLock { graph in
            for (nesting, witness) in nestings where graph[nesting] == nil { graph[nesting] = (witness, scenario) }
            return graph
        }
        guard let cycle = cycle(in: Array(edges.keys)) else { return nil }
        let first = reported.withLock { reported -> Bool in
            defer { reported = true }
            return !reported
        }
        guard first else { return nil }
        let lines = cycle.map { nesting -> String in
            let (witness, scenario) = edges[nesting]!
            return "\(nesting.outer) → \(nesting.inner): \(nesting.inner) taken at \(witness.innerSite) while "
                + "\(nesting.outer) was held (taken at \(witness.outerSite)), by \(witness.thread) in \"\(scenario)\""
        }
        let all = edges.keys.map { "\($0.outer) → \($0.inner)" }.sorted()
        return "lock-order cycle of the engine's own locks: "
            + cycle.map { "\($0.outer)" }.joined(separator: " → ") + " → \(cycle[0].outer)\n    "
            + lines.joined(separator: "\n    ") + "\n  every nesting seen so far: " + all.joined(separator: "; ")
    }

    /// A cycle of `edges`, as the nestings along it, if there is one.
    static func cycle(in edges: [LockNesting]) -> [LockNesting]? {
        var next: [LockRole: [LockNesting]] = [:]
        // The one nesting of a kind inside itself that the order allows: a waiting task's escalation
        // handler escalates the holder it waits for, along the wait-for graph (as the runtime does for
        // a task that awaits another; a cycle there is a deadlock the detector refuses).
        for edge in edges where !(edge.outer == .taskRuntime && edge.inner == .taskRuntime) {
            next[edge.outer, default: []].append(edge)
        }
        // Depth-first search, colouring roles on the current path.
        var onPath: [LockRole: Int] = [:]
        var done: Set<LockRole> = []
        var path: [LockNesting] = []
        func visit(_ role: LockRole) -> [LockNesting]? {
            onPath[role] = path.count
            for edge in next[role] ?? [] {
                if let start = onPath[edge.inner] { return Array(path[start...]) + [edge] }
                if done.contains(edge.inner) { continue }
                path.append(edge)
                if let found = visit(edge.inner) { return found }
                path.removeLast()
            }
            onPath[role] = nil
            done.insert(role)
            return nil
        }
        for role in next.keys.sorted(by: { $0.description < $1.description }) where !done.contains(role) {
            if let found = visit(role) { return found }
        }
        return nil
    }
}
