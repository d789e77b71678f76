// MARK: - BoostRegistry

/// What every raised party inherits, and from which engine: the process-wide half of priority
/// inheritance (`PriorityInheritance.swift` is the engine's half).
///
/// A party (a thread, or a task) may hold several sections at once, each raising it for its own
/// waiters, and a boost must end with its reason: so each engine's *contribution* to a party is
/// kept on its own, the party runs at the highest of them (and never below its own priority), and
/// removing or lowering one contribution brings the party down to the next highest. The chain walk
/// reads a party's *inherited* urgency here (the highest contribution) to pass it on to the holder
/// of the value that party waits for.
///
/// Its lock is a leaf: it is taken inside an engine's boost lock or engine lock, and nothing else is
/// taken while it is held. Changing another thread's scheduling is a system call made under it
/// (through its ``PriorityBackend``, whose policy decides what to change); escalating a task is not
/// (the runtime calls escalation handlers, which take engine locks), so ``set(_:source:to:)``
/// returns the escalation for the caller to make after unlocking.
///
/// A thread is changed only while it is alive: a contribution is set only by an engine that has
/// the thread among its raised parties (``BoostRecord/targets``), and the thread removes that
/// engine's contribution itself, under that engine's boost lock, before it leaves the holder's code.
@_spi(Testing)
public final class BoostRegistry: @unchecked Sendable {  // @unchecked Sendable: locked; `count` atomic
    typealias Node = DeadlockDetector.Node

    /// The process's registry (a controlled scheduler's threads use their world's own).
    static var shared: BoostRegistry { SyncPoints.registryOverride ?? process }
    private static let process = BoostRegistry(backend: .platform)

    /// One raised party: each engine's contribution, and the thread boost in effect.
    private struct Entry {
        var sources: [ObjectIdentifier: Urgency] = [:]
        /// What the boost of a thread changed, to be moved or undone.
        var boost = ThreadBoost.none
        /// The task priority escalated to.
        var escalatedTask: UInt8 = 0

        /// The highest of its contributions, on each axis.
        var inherited: Urgency {
            // mutant(registry-keeps-one-source): sources.values.first ?? .none
            sources.values.reduce(Urgency.none) { $0.merged($1) }
        }
    }

    /// What the lock guards (a type of its own: the lock-order check names a lock by it).
    private struct State {
        var entries: [Node: Entry] = [:]
    }

    private let state = LockedState.make(State())
    /// How many parties have an entry: read without the lock, so that a parking waiter pays one load
    /// while nobody is raised anywhere.
    private let count = AtomicWord(0)
    /// How threads are raised, and the calls that raise them: the platform's, or a test's fake.
    let backend: PriorityBackend

    /// A registry of its own that raises threads through `backend` (the process's is ``shared``,
    /// with the platform's backend; a controlled scheduler's uses a recording fake).
    @_spi(Testing)
    public init(backend: PriorityBackend) {
        self.backend = backend
    }

    /// Whether no party is raised by any engine.
    var isEmpty: Bool { count.loadAcquire() == 0 }

    /// Sets `source`'s contribution to `node` (`nil` or none: removes it), and brings a thread to the
    /// highest contribution left, or back to its own priority.
    /// - Returns: the node's inherited urgency before and after, and the task priority the caller
    ///   must escalate `node`'s task to (after unlocking), if any.
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
                // Under the lock: a system call that changes another thread's scheduling.
                if new.thread != entry.boost.urgency {
                    entry.boost = backend.move(entry.boost, ofThread: thread, to: new.thread)
                }
            case .task:
                // Escalation cannot be undone: it only ever goes up (Swift keeps it for the task's life).
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

    /// The highest urgency `nodes` (the nodes of one waiting party) inherit from the sections they hold.
    func inherited(of nodes: [Node]) -> Urgency {
        guard !isEmpty else { return .none }
        return state.withLock { state in
            nodes.reduce(Urgency.none) { $0.merged(state.entries[$1]?.inherited ?? .none) }
        }
    }

    /// The urgency of the calling thread, which is about to park: its own scheduling urgency, without
    /// any boost it runs under now (a thread raised for one value that parks for another passes on
    /// what it inherits separately, so that the boost ends where it came from), as this backend
    /// lends it.
    func urgencyOfCurrentThread() -> Urgency {
        let thread = currentThreadID()
        let boost = isEmpty ? ThreadBoost.none : self.boost(ofThread: thread)
        return backend.urgency(ofThreadAt: backend.ownUrgency(ofThread: thread, boost: boost))
    }

    /// The urgency of a task of `priority` that is about to suspend, as this backend lends it.
    func urgency(ofTask priority: TaskPriority) -> Urgency {
        backend.urgency(ofTask: priority)
    }

    /// The boost in effect on `thread`, if any.
    func boost(ofThread thread: Int) -> ThreadBoost {
        state.withLock { $0.entries[.thread(thread)]?.boost ?? .none }
    }

    // MARK: The checker's view

    /// Every party with a contribution, and the engines it has them from.
    var contributions: [Node: [ObjectIdentifier: Urgency]] {
        state.withLock { state in state.entries.mapValues(\.sources).filter { !$0.value.isEmpty } }
    }
}
