import QueueSafeValueShims

// Priority inheritance (Architecture.md, "Priorities that hold"): the machine decides, this file
// performs it after the engine lock is released. Every raise of a thread is undone by the thread
// itself before it leaves the holder's code, or brought down earlier by whoever removed its reason;
// a task holder is escalated instead, which lasts until the task ends. On Linux raising another
// thread needs CAP_SYS_NICE or an RLIMIT_RTPRIO: without it the boost quietly does not happen.
//
// Locks: boost lock, then engine lock or registry; engine lock, then registry; the walk takes the
// detector's lock alone, between links. A task is escalated after the boost lock is released
// (`Escalations`): the runtime runs its escalation handler under the task's lock, and that takes
// boost locks.

/// Task escalations decided under a boost lock, made after it is released; each task is retained
/// until then. The first is inline: a raise escalates one task far more often than several.
struct Escalations: ~Copyable {
    private typealias Escalation = (task: UnsafeMutableRawPointer, priority: UInt8)
    private var first: Escalation?
    private var more: [Escalation] = []

    mutating func add(task: Int, to priority: UInt8) {
        guard let pointer = UnsafeMutableRawPointer(bitPattern: task) else { return }
        qsv_retain_task(pointer)
        if first == nil { first = (pointer, priority) } else { more.append((pointer, priority)) }
    }

    mutating func make() {
        if let first { Self.escalate(first) }
        for escalation in more { Self.escalate(escalation) }
        first = nil
        more = []
    }

    private static func escalate(_ escalation: Escalation) {
        SyncPoints.willTouchTask()  // the runtime takes the task's lock, as a resume does
        BoostRegistry.shared.backend.escalate(task: Int(bitPattern: escalation.task), to: escalation.priority)
        qsv_release_task(escalation.task)
    }

    deinit {
        precondition(first == nil && more.isEmpty, "escalations decided but not made")
    }
}

/// What the engine's boost lock guards: the parties raised for the current hold, the shared reads
/// running their closures, and the value's observers.
struct BoostRecord {
    /// The parties this engine raised during the current hold: each ends its contribution itself,
    /// under this lock, before it leaves the holder's code, so each is alive while listed.
    var targets: Set<DeadlockDetector.Node> = []
    /// The shared reads running their closures: raised like a holder, and seen by deadlock detection.
    var readers: [ReaderParty] = []
    /// The value's observers (see `Observation.swift`).
    var sinks: [ObservationSink] = []
    /// The value was freed and its observers finished: an observer added now ends at once.
    var observersFinished = false
}

extension Urgency {
    /// The urgency of the calling thread, which is about to park.
    static func ofCurrentThread() -> Urgency {
        BoostRegistry.shared.urgencyOfCurrentThread()
    }

    /// The urgency of a task of `priority`, which is about to suspend.
    static func ofTask(_ priority: TaskPriority) -> Urgency {
        BoostRegistry.shared.backend.urgency(ofTask: priority)
    }
}

extension CommandEngine {
    typealias Node = DeadlockDetector.Node

    /// How many links a chain walk follows at most, as the kernel's priority-inheriting futex does.
    static let maxChainLinks = 1024

    /// The waiting command `ticket` is about to park or suspend at `urgency`, on behalf of `party`:
    /// raise the holder and pass the raise down the chain. One engine lock section, in which `step`
    /// runs first; inside the boost lock only when the park may raise anything.
    /// - Parameter walks: `false` from a task's escalation handler, which runs under the task's lock
    ///   (the walk's locks would close a cycle); the runtime passes the escalation on instead.
    /// - Returns: what `step` returned, and what the party inherited as it parked.
    final func park<R>(
        _ ticket: Ticket, _ urgency: Urgency, party: [Node] = [], walks: Bool = true,
        _ step: (inout Machine) -> R
    ) -> (result: R, inherited: Urgency) {
        SyncPoints.inheritance(true)
        defer { SyncPoints.inheritance(false) }
        let registry = BoostRegistry.shared
        let inherits = !party.isEmpty && !registry.isEmpty
        guard inherits || !urgency.isNone else { return (machine.withLock { step(&$0) }, .none) }
        var escalations = Escalations()
        defer { escalations.make() }
        let (result, inherited, changed) = boosts.withLock { record in
            let (result, inherited, target) = machine.withLock { machine in
                let result = step(&machine)
                // Under the engine lock: the newest value wins against a chain walk's refresh.
                let inherited = inherits ? registry.inherited(of: party) : Urgency.none
                let raised = machine.park(
                    ticket, urgency: urgency, inherited: inherited,
                    holderBits: state.loadAcquire() & EngineWord.holderMask)
                return (result, inherited, raised ? boostTarget(&machine) : nil)
            }
            // mutant(park-raise-dropped): return (result, inherited, [Node]())
            return (result, inherited, target.map { applyBoost($0, nextHolder: nil, &record, &escalations) } ?? [])
        }
        if walks { Self.walkChain(from: changed) }
        return (result, inherited)
    }

    /// The waiting command `ticket` has registered `party` for deadlock detection, having parked
    /// with `inherited`: a raise that reached the party before a walk could see it is passed on now.
    final func passOnInherited(_ ticket: Ticket, party: [Node], parkedWith inherited: Urgency) {
        let registry = BoostRegistry.shared
        guard !party.isEmpty, !registry.isEmpty || !inherited.isNone else { return }
        // mutant(pass-on-always-refreshes): _ = inherited
        guard registry.inherited(of: party) != inherited else { return }
        Self.walkChain(from: refreshInherited(ticket, party: party))
    }

    /// The waiting command `ticket` of `party` inherits something else now: the machine re-reads it
    /// under the engine lock, and the holder follows.
    /// - Returns: the raised parties whose inherited urgency changed.
    final func refreshInherited(_ ticket: Ticket, party: [Node]) -> [Node] {
        let registry = BoostRegistry.shared
        let changed = machine.withLock { machine in
            machine.setInherited(
                ticket, registry.inherited(of: party), holderBits: state.loadAcquire() & EngineWord.holderMask)
        }
        return changed ? syncBoost() : []
    }

    /// After unlocking, once a waiter left: the raised parties come down, along their chains.
    final func lowerBoost() {
        SyncPoints.inheritance(true)
        defer { SyncPoints.inheritance(false) }
        Self.walkChain(from: syncBoost())
    }

    /// Passes a change of what `changed` parties inherit down each chain of the wait-for graph, up
    /// to ``maxChainLinks`` links, stopping at a party met before (a cycle the detector reports).
    static func walkChain(from changed: [Node]) {
        guard !changed.isEmpty else { return }
        var frontier = changed
        var visited = Set(changed)
        var links = 0
        // mutant(chain-stops-at-first-link): while links < 0, let node = frontier.popLast() {
        // mutant(chain-stops-after-one-link): while links < 1, let node = frontier.popLast() {
        while links < maxChainLinks, let node = frontier.popLast() {
            guard let wait = DeadlockDetector.shared.wait(of: node) else { continue }
            links += 1
            for next in wait.engine.refreshInherited(wait.ticket, party: wait.party) where visited.insert(next).inserted
            {
                frontier.append(next)
            }
        }
    }

    /// Brings every party raised for the current hold (the holder, or `nextHolder`, granted and not
    /// started, and the shared reads) to what the machine says the holder inherits now. Read under
    /// the engine lock inside the boost lock, so whichever call comes last applies the newest.
    /// - Returns: the parties whose inherited urgency changed (for the chain walk).
    @discardableResult
    final func syncBoost(nextHolder: NextHolder? = nil) -> [Node] {
        var escalations = Escalations()
        defer { escalations.make() }
        return boosts.withLock { record in
            applyBoost(machine.withLock { boostTarget(&$0) }, nextHolder: nextHolder, &record, &escalations)
        }
    }

    /// What the raised parties must be brought to, and the holder's thread and task.
    typealias BoostTarget = (urgency: Urgency, thread: Int, task: Int)

    /// Under the engine lock, inside the boost lock: the ``BoostTarget`` now.
    @inline(__always)
    final func boostTarget(_ machine: inout Machine) -> BoostTarget {
        (machine.beginBoost(), ownerThread.loadAcquire(), ownerTask.loadAcquire())
    }

    /// Under the boost lock: brings the raised parties to `boost`.
    /// - Returns: the parties whose inherited urgency changed.
    private func applyBoost(
        _ boost: BoostTarget, nextHolder: NextHolder?, _ record: inout BoostRecord, _ escalations: inout Escalations
    ) -> [Node] {
        let registry = BoostRegistry.shared
        let source = ObjectIdentifier(self)
        let (urgency, thread, task) = boost
        if !urgency.isNone {
            // The holder is alive: waiters keep it from releasing without the lock, and its
            // release takes this lock to end what it got, after this.
            if let nextHolder {
                target(thread: nextHolder.thread, task: nextHolder.task, urgency, &record, &escalations)
            }
            target(thread: thread, task: task, urgency, &record, &escalations)
            listTaskReader(&record)
            for reader in record.readers {
                target(thread: reader.thread, task: reader.task, urgency, &record, &escalations)
            }
            // Idle readers are alive while listed in their threads' records, and one raised here
            // leaves through the lock (waiters set `slowRelease`) and ends its boost.
            if EngineWord.idleReaders(state.loadAcquire()) > 0 {
                for thread in idleReaderThreads() { record.targets.insert(.thread(thread)) }
            }
        }
        var changed: [Node] = []
        for node in record.targets {
            if apply(urgency, to: node, registry: registry, source: source, &escalations) { changed.append(node) }
        }
        if urgency.isNone { record.targets = [] }
        return changed
    }

    /// Under the boost lock: lists the holding party's thread (0: none) as a target, and its task
    /// if what it inherits has a thread axis to pass on or it is listed already; otherwise the task
    /// is only escalated, which needs no undoing, so tasks waiting for a task stay off the
    /// registry's lock.
    private func target(
        thread: Int, task: Int, _ urgency: Urgency, _ record: inout BoostRecord, _ escalations: inout Escalations
    ) {
        if thread != 0 { record.targets.insert(.thread(thread)) }
        guard task != 0 else { return }
        let node = Node.task(task)
        if urgency.thread != 0 || record.targets.contains(node) {
            record.targets.insert(node)
        } else if urgency.task > 0 {
            escalations.add(task: task, to: urgency.task)
        }
    }

    /// Under the boost lock: sets this engine's contribution to `node`.
    /// - Returns: whether what the node inherits changed.
    private func apply(
        _ urgency: Urgency, to node: Node, registry: BoostRegistry, source: ObjectIdentifier,
        _ escalations: inout Escalations
    ) -> Bool {
        let (old, new, escalate) = registry.set(node, source: source, to: urgency)
        if let escalate, case .task(let task) = node { escalations.add(task: task, to: escalate) }
        return old != new
    }

    /// Under the boost lock: a shared read starting its closure is raised at once if the holders are.
    final func raiseJoiningReader(
        _ party: ReaderParty, record: inout BoostRecord, _ escalations: inout Escalations
    ) {
        let urgency = machine.withLock { $0.isHoldBoosted ? $0.holdUrgency : .none }
        guard !urgency.isNone else { return }
        target(thread: party.thread, task: party.task, urgency, &record, &escalations)
        let source = ObjectIdentifier(self)
        for node in [Node.thread(party.thread), .task(party.task)] where record.targets.contains(node) {
            _ = apply(urgency, to: node, registry: BoostRegistry.shared, source: source, &escalations)
        }
    }

    /// After unlocking, before starting it: the new holder inherits `urgency` from the waiters still
    /// parked. A suspended task granted alone, when that urgency has no thread axis, is only
    /// escalated (no undoing: neither boost lock nor registry; it stays suspended, so alive, until
    /// started); any other goes through ``syncBoost(nextHolder:)``, which reads it again.
    @inline(never)
    final func raiseNextHolder(_ nextHolder: NextHolder, _ urgency: Urgency) {
        if urgency.thread == 0 && nextHolder.thread == 0 && nextHolder.task != 0
            && !EngineWord.readersHold(state.loadAcquire())
        {
            var escalations = Escalations()
            // mutant(next-holder-never-escalated): _ = nextHolder
            escalations.add(task: nextHolder.task, to: urgency.task)
            escalations.make()
            return
        }
        syncBoost(nextHolder: nextHolder)
    }

    /// The calling thread stops running the holder's code: it ends what this engine raised it (and
    /// its task) by.
    @usableFromInline
    final func endBoostOfCurrentThread() {
        let task = currentTaskID()
        let source = ObjectIdentifier(self)
        boosts.withLock { record in
            guard !record.targets.isEmpty else { return }
            for node in [Node.thread(currentThreadID()), .task(task)] { endBoost(of: node, source: source, &record) }
        }
    }

    /// Under the boost lock: `node` no longer inherits anything from this engine (`source`).
    final func endBoost(of node: Node, source: ObjectIdentifier, _ record: inout BoostRecord) {
        if record.targets.remove(node) != nil { _ = BoostRegistry.shared.set(node, source: source, to: nil) }
    }
}
