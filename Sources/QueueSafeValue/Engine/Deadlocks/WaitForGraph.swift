// MARK: - WaitForGraph

/// Which thread or task waits for which engine, across the process, as a plain value
/// (``DeadlockDetector`` keeps it behind a lock). A party registers as it is about to block, and
/// the graph decides then whether blocking would close a cycle. Who holds an engine is read from
/// its words (`holder`): the idle path takes sections without any lock.
///
/// A cycle found is real: a party unregisters, under the same lock, before it does anything else
/// after its wait, so a registered party releases nothing while a walk looks at it. None is missed:
/// the last party of a cycle to register sees every other one registered, holding.
///
/// It also refuses to park the last free thread of Swift's cooperative pool while a task (which
/// needs the pool to resume) holds the value.
struct WaitForGraph<Engine: Hashable> {
    enum Node: Hashable {
        case thread(Int)
        case task(Int)
    }

    struct Link: Hashable {
        let waiter: Node
        let engine: Engine
        let holder: Node
    }

    /// Only `wait` registers the party.
    enum Verdict: Hashable {
        case wait
        /// The caller's link first.
        case cycle([Link])
        case poolExhausted(parked: Int, width: Int)
    }

    struct Wait: Hashable {
        let engine: Engine
        let poolThread: Bool
        /// Packed (``EngineStateMachine/Ticket/packed``), for inheritance's chain walk.
        var ticket: UInt64 = 0
        /// The waiting node first.
        var party: [Node] = []
    }

    private(set) var waits: [Node: Wait] = [:]
    private(set) var parkedPoolThreads = 0

    /// - Parameters:
    ///   - nodes: the waiting node first (its thread, then its task), then the tasks awaiting it.
    ///   - holder: an engine's holders, read from its words; none for a holder that is neither a
    ///     thread running a closure nor a task (a dispatch command before its block, or awaiting
    ///     `done()`).
    mutating func register(
        _ nodes: [Node],
        waitingFor engine: Engine,
        ticket: UInt64 = 0,
        poolThread: Bool = false,
        poolWidth: Int = 0,
        holder: (Engine) -> [Node]
    ) -> Verdict {
        if let cycle = cycle(from: nodes, waitingFor: engine, holder: holder) { return .cycle(cycle) }
        if poolThread {
            let taskHolds = holder(engine).contains { if case .task = $0 { true } else { false } }
            if taskHolds, parkedPoolThreads + 1 >= poolWidth {
                return .poolExhausted(parked: parkedPoolThreads, width: poolWidth)
            }
            parkedPoolThreads += 1
        }
        // mutant(awaiters-not-registered): for node in nodes.prefix(1) { waits[node] = Wait(engine: engine, poolThread: poolThread, ticket: ticket, party: nodes) }
        for node in nodes { waits[node] = Wait(engine: engine, poolThread: poolThread, ticket: ticket, party: nodes) }
        return .wait
    }

    /// Before the party does anything else after its wait.
    mutating func unregister(_ nodes: [Node]) {
        var wasPoolThread = false
        for node in nodes {
            if let wait = waits.removeValue(forKey: node) { wasPoolThread = wasPoolThread || wait.poolThread }
        }
        if wasPoolThread { parkedPoolThreads -= 1 }
    }

    /// Depth-first: an engine held by shared reads has several holders.
    private func cycle(from nodes: [Node], waitingFor engine: Engine, holder: (Engine) -> [Node]) -> [Link]? {
        var visited: Set<Engine> = []
        var links: [Link] = []
        func walk(_ waiter: Node, _ current: Engine) -> Bool {
            guard visited.insert(current).inserted else { return false }
            for owner in holder(current) {
                links.append(Link(waiter: waiter, engine: current, holder: owner))
                // mutant(missed-cycle): if nodes.contains(owner) && links.count > 8 { return true }
                if nodes.contains(owner) { return true }
                // A cycle that does not pass through the caller is not the caller's to break.
                // mutant(false-alarm): if let next = waits[owner] { if walk(owner, next.engine) { return true } } else if links.count >= 1 { return true }
                if let next = waits[owner], walk(owner, next.engine) { return true }
                links.removeLast()
            }
            return false
        }
        return walk(nodes[0], engine) ? links : nil
    }
}
