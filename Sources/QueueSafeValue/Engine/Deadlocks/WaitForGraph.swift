// MARK: - WaitForGraph

/// Which thread or task waits for which engine, across the process: the decisions of deadlock
/// detection, as a plain value (``DeadlockDetector`` keeps it behind a lock).
///
/// A party registers when it is about to block — a thread about to park, a task about to suspend —
/// and the graph decides at that moment whether blocking would close a cycle: the engine it waits
/// for is held by a party that waits for an engine held by a party … that waits for an engine the
/// caller holds. Who holds an engine is read by the caller from the engine's words (`holder`),
/// because the idle path takes sections without any lock.
///
/// Why a cycle found here is real: a party deregisters, under the same lock, before it does
/// anything else after its wait ends, so a registered party runs no code and releases nothing
/// while a walk looks at it; the engine it holds stays held by it. The caller holds what it holds.
/// Every link of a cycle found is therefore stable for as long as the walk runs. And no cycle is
/// missed: the last party of a cycle to register sees every other one registered, holding.
///
/// It also counts the threads of Swift's cooperative pool parked in blocking commands, to refuse
/// the one that would park the last of them while a task (which needs the pool to resume) holds
/// the value.
struct WaitForGraph<Engine: Hashable> {
    /// A party that can hold sections and wait for them.
    enum Node: Hashable {
        case thread(Int)
        case task(Int)
    }

    /// One party of a cycle: the node that waits, the engine it waits for, and that engine's holder.
    struct Link: Hashable {
        let waiter: Node
        let engine: Engine
        let holder: Node
    }

    /// What ``register(_:waitingFor:poolThread:poolWidth:holder:)`` decided.
    enum Verdict: Hashable {
        /// Blocking closes no cycle: the party is registered and may block.
        case wait
        /// Blocking would close this cycle (the caller's link first): the party was not registered.
        case cycle([Link])
        /// Parking would leave no free thread in the cooperative pool while a task holds the
        /// section: the party was not registered.
        case poolExhausted(parked: Int, width: Int)
    }

    struct Wait: Hashable {
        let engine: Engine
        let poolThread: Bool
        /// The waiting command's ticket in `engine`, packed (see `CommandEngine.packedTicket`): what
        /// priority inheritance's chain walk updates when the party is raised.
        var ticket: UInt64 = 0
        /// Every node of the party, the waiting one first.
        var party: [Node] = []
    }

    private(set) var waits: [Node: Wait] = [:]
    /// Threads of the cooperative pool parked in blocking commands.
    private(set) var parkedPoolThreads = 0

    init() {}

    /// A party is about to block until it gets `engine`.
    ///
    /// - Parameters:
    ///   - nodes: the party, the node that waits first: its thread, and its task if it runs inside
    ///     one; then the tasks that await that task's result (``CommandQueue/perform(priority:policy:_:)``
    ///     awaits the task of its operation), which wait for whatever it waits for.
    ///   - poolThread: it is a thread of the cooperative pool (a blocking command inside a task,
    ///     off the main thread).
    ///   - poolWidth: how many threads the cooperative pool has.
    ///   - holder: who holds an engine now, read from its words: one party, or several shared
    ///     reads; none for nobody, or a holder that is neither a thread running a closure nor a
    ///     task (a dispatch command between its grant and its block, or waiting for `done()`).
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

    /// The party's wait ended (granted, timed out, cancelled). Call it before the party does
    /// anything else.
    mutating func unregister(_ nodes: [Node]) {
        var wasPoolThread = false
        for node in nodes {
            if let wait = waits.removeValue(forKey: node) { wasPoolThread = wasPoolThread || wait.poolThread }
        }
        if wasPoolThread { parkedPoolThreads -= 1 }
    }

    /// The cycle that `nodes` waiting for `engine` would close, if any: a depth-first walk, since
    /// an engine held by shared reads has several holders (each party waits for one engine at most).
    private func cycle(from nodes: [Node], waitingFor engine: Engine, holder: (Engine) -> [Node]) -> [Link]? {
        var visited: Set<Engine> = []
        var links: [Link] = []
        func walk(_ waiter: Node, _ current: Engine) -> Bool {
            // An engine seen once is not walked again: its holders lead nowhere new.
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
