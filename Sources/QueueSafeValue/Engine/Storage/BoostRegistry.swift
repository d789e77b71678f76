import QueueSafeValueShims

#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

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
/// taken while it is held. Changing another thread's scheduling is a system call made under it;
/// escalating a task is not (the runtime calls escalation handlers, which take engine locks), so
/// ``set(_:source:to:)`` returns the escalation for the caller to make after unlocking.
///
/// A thread is changed only while it is alive: a contribution is set only by an engine that has
/// the thread among its raised parties (``BoostRecord/targets``), and the thread removes that
/// engine's contribution itself, under that engine's boost lock, before it leaves the holder's code.
@_spi(Testing)
public final class BoostRegistry: @unchecked Sendable {  // @unchecked Sendable: locked; `count` atomic
    typealias Node = DeadlockDetector.Node

    /// The process's registry (a controlled scheduler's threads use their world's own).
    static var shared: BoostRegistry { SyncPoints.registryOverride ?? process }
    private static let process = BoostRegistry(isVirtual: false)

    /// One raised party: each engine's contribution, and the thread boost in effect.
    private struct Entry {
        var sources: [ObjectIdentifier: Urgency] = [:]
        /// Linux and Apple platforms: what the boost of a thread changed, to be undone.
        var boost = qsv_boost()
        /// The thread urgency applied (a virtual registry applies nothing else), or the task
        /// priority escalated to.
        var appliedThread: Int32 = 0
        var escalatedTask: UInt8 = 0

        var inherited: Urgency { sources.values.reduce(Urgency.none) { $0.merged($1) } }
    }

    private struct State {
        var entries: [Node: Entry] = [:]
        /// A virtual registry's thread priorities of their own (see ``setOwnUrgency(ofThread:to:)``).
        var own: [Int: Int32] = [:]
    }

    private let state = LockedState.make(State())
    /// How many parties have an entry: read without the lock, so that a parking waiter pays one load
    /// while nobody is raised anywhere.
    private let count = AtomicWord(0)
    /// A virtual registry (the controlled scheduler's) changes no real thread: it records the
    /// urgency each thread would run at, for the checker to compare with what waits for it.
    let isVirtual: Bool

    /// A registry of its own (the process's is ``shared``); a virtual one changes no real thread.
    @_spi(Testing)
    public init(isVirtual: Bool) {
        self.isVirtual = isVirtual
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
                if new.thread != entry.appliedThread { apply(thread: thread, new.thread, &entry) }
            case .task:
                // Escalation cannot be undone: it only ever goes up (Swift keeps it for the task's life).
                if new.task > entry.escalatedTask {
                    entry.escalatedTask = new.task
                    escalate = new.task
                }
            }
            if entry.sources.isEmpty && entry.appliedThread == 0 {
                if state.entries.removeValue(forKey: node) != nil { _ = count.fetchAdd(-1) }
            } else {
                if state.entries.updateValue(entry, forKey: node) == nil { _ = count.fetchAdd(1) }
            }
            return (old, new, escalate)
        }
    }

    /// Under the lock: moves the thread's boost to `urgency` (0: ends it).
    private func apply(thread: Int, _ urgency: Int32, _ entry: inout Entry) {
        if isVirtual {
            entry.appliedThread = urgency
            return
        }
        let boosted = qsv_set_boost(UInt(bitPattern: thread), urgency, &entry.boost) != 0
        entry.appliedThread = boosted ? urgency : 0
    }

    /// The highest urgency `nodes` (the nodes of one waiting party) inherit from the sections they hold.
    func inherited(of nodes: [Node]) -> Urgency {
        guard !isEmpty else { return .none }
        return state.withLock { state in
            nodes.reduce(Urgency.none) { $0.merged(state.entries[$1]?.inherited ?? .none) }
        }
    }

    /// The calling thread's own scheduling urgency, without any boost it runs under now (a thread
    /// raised for one value that parks for another passes on what it inherits separately, so that
    /// the boost ends where it came from).
    func ownUrgencyOfCurrentThread() -> Int32 {
        let thread = currentThreadID()
        if isVirtual { return state.withLock { $0.own[thread] ?? 0 } }
        guard !isEmpty else { return qsv_thread_urgency() }
        return state.withLock { state -> Int32 in
            guard let entry = state.entries[.thread(thread)], entry.boost.applied != 0 else {
                return qsv_thread_urgency()
            }
            #if canImport(Darwin)
                return qsv_thread_urgency()
            #else
                let own = entry.boost.policy == SCHED_FIFO || entry.boost.policy == SCHED_RR
                return own ? entry.boost.priority : 0
            #endif
        }
    }

    // MARK: The checker's view

    /// A virtual registry: the priority of its own that `thread` runs at.
    @_spi(Testing)
    public func setOwnUrgency(ofThread thread: Int, to urgency: Int32) {
        state.withLock { $0.own[thread] = urgency }
    }

    /// The thread urgency `thread` runs at: its own, or the boost applied, whichever is higher.
    func runningUrgency(ofThread thread: Int) -> Int32 {
        state.withLock { state in
            max(state.own[thread] ?? 0, state.entries[.thread(thread)]?.appliedThread ?? 0)
        }
    }

    /// Every party with a contribution, and the engines it has them from.
    var contributions: [Node: [ObjectIdentifier: Urgency]] {
        state.withLock { state in state.entries.mapValues(\.sources).filter { !$0.value.isEmpty } }
    }
}
