// MARK: - BoostRegistry

/// What every raised party inherits, and from which engine: the process-wide half of priority
/// inheritance. A party holding several sections keeps each engine's *contribution* apart and runs
/// at the highest, so that each boost ends with its reason.
///
/// Its lock is a leaf. A thread's scheduling is changed under it (a system call); a task's
/// escalation is returned for the caller to make after unlocking, since the runtime runs escalation
/// handlers, which take engine locks. A thread is changed only while alive: it removes an engine's
/// contribution itself, under that engine's boost lock, before it leaves the holder's code.
@_spi(Testing)
public final class BoostRegistry: @unchecked Sendable {  // @unchecked Sendable: locked; `count` atomic
    typealias Node = DeadlockDetector.Node

    /// The process's registry (a controlled scheduler's threads use their world's own).
    static var shared: BoostRegistry { SyncPoints.registryOverride ?? process }
    private static let process = BoostRegistry(backend: .platform)

    /// One raised party: each engine's contribution, and the thread boost in effect.
    private struct Entry {
        var sources: [ObjectIdentifier: Urgency] = [:]
        var boost = ThreadBoost.none
        /// The task priority escalated to.
        var escalatedTask: UInt8 = 0

        /// The highest of its contributions, on each axis.
        var inherited: Urgency {
            // mutant(registry-keeps-one-source): sources.values.first ?? .none
            sources.values.reduce(Urgency.none) { $0.merged($1) }
        }
    }

    /// A type of its own: the lock-order check names a lock by it.
    private struct State {
        var entries: [Node: Entry] = [:]
    }

    private let state = LockedState.make(State(), inheritsPriority: true)
    /// How many parties have an entry: a parking waiter pays one load while nobody is raised.
    private let count = AtomicWord(0)
    let backend: PriorityBackend

    /// A registry of its own that raises threads through `backend` (a controlled scheduler's fake).
    @_spi(Testing)
    public init(backend: PriorityBackend) {
        self.backend = backend
    }

    var isEmpty: Bool { count.loadAcquire() == 0 }

    /// Sets `source`'s contribution to `node` (`nil` or none: removes it), and brings a thread to the
    /// highest contribution left, or back to its own priority.
    /// - Returns: the inherited urgency before and after, and the task priority to escalate to.
    func set(_ node: Node, source: ObjectIdentifier, to urgency: Urgency?) -> (
        old: Urgency, new: Urgency, escalate: UInt8?
    ) {
        state.withLock { state in
            var entry = state.entries[node] ?? Entry()
            let old = entry.inherited
            if let urgency, !urgency.isNone { entry.sources[source] = urgency } else { entry.sources[source] = nil }
            let new = entry.inherited
            var escalate: UInt8?
            switch node {
            case .thread(let thread):
                if new.thread != entry.boost.urgency {
                    entry.boost = backend.move(entry.boost, ofThread: thread, to: new.thread)
                }
            case .task:
                // Escalation cannot be undone: it only goes up.
                if new.task > entry.escalatedTask {
                    entry.escalatedTask = new.task
                    escalate = new.task
                }
            }
            if entry.sources.isEmpty && entry.boost == .none {
                if state.entries.removeValue(forKey: node) != nil { _ = count.fetchAdd(-1) }
            } else {
                if state.entries.updateValue(entry, forKey: node) == nil { _ = count.fetchAdd(1) }
            }
            return (old, new, escalate)
        }
    }

    /// The highest urgency one waiting party's `nodes` inherit from the sections they hold.
    func inherited(of nodes: [Node]) -> Urgency {
        guard !isEmpty else { return .none }
        return state.withLock { state in
            nodes.reduce(Urgency.none) { $0.merged(state.entries[$1]?.inherited ?? .none) }
        }
    }

    /// The urgency of the calling thread, about to park: its own, without any boost it runs under
    /// (what it inherits is passed on apart, so that each boost ends where it came from).
    func urgencyOfCurrentThread() -> Urgency {
        let thread = currentThreadID()
        let boost = isEmpty ? ThreadBoost.none : state.withLock { $0.entries[.thread(thread)]?.boost ?? .none }
        return backend.urgency(ofThreadAt: backend.ownUrgency(ofThread: thread, boost: boost))
    }

    // MARK: The checker's view

    var contributions: [Node: [ObjectIdentifier: Urgency]] {
        state.withLock { state in state.entries.mapValues(\.sources).filter { !$0.value.isEmpty } }
    }
}
