import QueueSafeValueShims

// Priority inheritance: while a party of higher urgency waits for the section, the holder runs at
// least that urgently, for as long as that party waits and no longer than it holds; and if the
// holder waits for another section in turn, so does that section's holder, down the chain.
//
// The state machine decides (`park`, `setInherited`, what a leave or a release changes in
// `holdUrgency`); this file performs it after the engine lock is released: `syncBoost` brings the
// parties raised for the current hold (the engine's targets) to what the machine says now, under the
// engine's boost lock, reading the decision under the engine lock inside it; the process-wide
// `BoostRegistry` keeps each party's contributions, one per engine, and applies the highest; and
// `walkChain` passes a change on through the deadlock detector's wait-for graph. While the hold
// inherits anything, parked waiters keep the holder from releasing on the idle path, and its release
// takes the boost lock to end what it got: a target is alive while it is listed. Every raise of a
// thread is undone by the thread itself before it leaves the holder's code (at its release, or, for
// a dispatch command with a manual completion, when its closure returns), or brought down earlier by
// whoever removed its reason.
//
// A task holder is escalated instead (Swift's runtime keeps a task's escalation until the task
// ends: that is what awaiting a task does too). On Linux a thread's urgency is its real-time
// priority (SCHED_FIFO, SCHED_RR), and raising another thread needs CAP_SYS_NICE or an
// RLIMIT_RTPRIO: without it the boost quietly does not happen. On Apple platforms it is a QoS
// override of the holder thread.
//
// Locks (see `CommandEngine`'s header for the whole order): boost lock, then engine lock or
// registry; engine lock, then registry; the walk takes the detector's lock alone, between links.
// A task is escalated after the boost lock is released (`Escalations`): the runtime takes the task's
// lock to escalate it and runs the task's escalation handler under it, which takes boost locks.

/// Task escalations decided under a boost lock, made after it is released. Each task is retained
/// from the moment it is added (while the lock keeps it alive: it is the holder, a granted next holder or a
/// listed reader) until it has been escalated. The first is kept inline: a raise escalates one task
/// (the holder) far more often than several, and that one costs no allocation.
struct Escalations: ~Copyable {
    private typealias Escalation = (task: UnsafeMutableRawPointer, priority: UInt8)
    private var first: Escalation?
    private var more: [Escalation] = []

    /// Under the boost lock: escalate `task` to `priority` once the lock is released.
    mutating func add(task: Int, to priority: UInt8) {
        guard let pointer = UnsafeMutableRawPointer(bitPattern: task) else { return }
        qsv_retain_task(pointer)
        if first == nil { first = (pointer, priority) } else { more.append((pointer, priority)) }
    }

    /// After the boost lock is released: escalates every task added, then lets it go.
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
    /// The parties this engine raised during the current hold (its holder, a granted next holder, the
    /// shared reads): each keeps this engine's contribution in the ``BoostRegistry`` until it ends it
    /// itself, under this lock, before it leaves the holder's code (so each is alive while it is
    /// listed here), or until the hold's urgency falls to none.
    var targets: Set<DeadlockDetector.Node> = []
    /// The shared reads running their closures (see `CommandEngine+Shared.swift`): raised like a
    /// holder, and followed by deadlock detection. Kept under this lock because both read it here.
    var readers: [ReaderParty] = []
    /// The value's observers (see `Observation.swift`), under this lock too: a leaf lock, taken
    /// after a command's release to offer it a change.
    var sinks: [ObservationSink] = []
    /// The value was freed and its observers finished: an observer added now ends at once.
    var observersFinished = false
}

extension Urgency {
    /// The urgency of the calling thread, which is about to park: its own scheduling urgency, and
    /// the task priority a thread of it stands for (see ``PriorityBackend/urgency(ofThreadAt:)``).
    static func ofCurrentThread() -> Urgency {
        BoostRegistry.shared.urgencyOfCurrentThread()
    }

    /// The urgency of a task of `priority`, which is about to suspend (see
    /// ``PriorityBackend/urgency(ofTask:)``).
    static func ofTask(_ priority: TaskPriority) -> Urgency {
        BoostRegistry.shared.urgency(ofTask: priority)
    }
}

extension CommandEngine {
    typealias Node = DeadlockDetector.Node

    /// How many links a chain walk follows at most, as the kernel's priority-inheriting futex does:
    /// a longer chain is left unraised past that point rather than walked without end.
    static let maxChainLinks = 1024

    /// The waiting command `ticket` is about to park or suspend at `urgency`, on behalf of `party`
    /// (its thread and task nodes, registered for deadlock detection or about to be), which may
    /// inherit an urgency from sections it holds: raise the holder if it runs less urgently, and
    /// pass the raise down the chain if the holder waits in turn.
    ///
    /// One section of the engine lock, in which `step` (the rest of the waiter's business there:
    /// its helper role, its continuation) runs first. When the park may raise anything, the section
    /// runs inside the boost lock, so that the raise is applied from the decision read in it rather
    /// than read again; a park that raises nothing costs no boost lock.
    /// - Parameter walks: whether to pass a raise down the chain: not from a task's escalation
    ///   handler, which runs under the task's lock in the runtime (the walk takes the deadlock
    ///   detector's lock, under which shared reads' parties are read under boost locks, under which
    ///   tasks are escalated: a cycle). An escalated task that waits passes the escalation on
    ///   through the runtime instead, task to task.
    /// - Returns: what `step` returned, and what the party inherited as it parked (see
    ///   ``passOnInherited(_:party:parkedWith:)``).
    final func park<R>(
        _ ticket: Ticket, _ urgency: Urgency, party: [Node] = [], walks: Bool = true,
        _ step: (inout Machine) -> R
    ) -> (result: R, inherited: Urgency) {
        SyncPoints.inheritance(true)
        defer { SyncPoints.inheritance(false) }
        let registry = BoostRegistry.shared
        let inherits = !party.isEmpty && !registry.isEmpty
        guard inherits || !urgency.isNone else { return (withMachineLocked { step(&$0) }, .none) }
        var escalations = Escalations()
        defer { escalations.make() }
        let (result, inherited, changed) = boosts.withLock { record in
            let (result, inherited, target) = withMachineLocked { machine in
                let result = step(&machine)
                // Read under the engine lock, so that the newest value wins against a chain walk's
                // refresh.
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

    /// Whether a park at `urgency` on behalf of `party` may raise anything: it has an urgency, or
    /// the party may inherit one.
    @inline(__always)
    final func mayRaise(_ urgency: Urgency, party: [Node]) -> Bool {
        !urgency.isNone || (!party.isEmpty && !BoostRegistry.shared.isEmpty)
    }

    /// The waiting command `ticket` has registered `party` for deadlock detection, having parked
    /// with `inherited`: a raise that reached the party before the chain walk could see where it
    /// waits is passed on now. Takes the engine lock only if what the party inherits changed.
    final func passOnInherited(_ ticket: Ticket, party: [Node], parkedWith inherited: Urgency) {
        let registry = BoostRegistry.shared
        guard !party.isEmpty, !registry.isEmpty || !inherited.isNone else { return }
        // mutant(pass-on-always-refreshes): _ = inherited
        guard registry.inherited(of: party) != inherited else { return }
        Self.walkChain(from: refreshInherited(ticket, party: party))
    }

    /// The waiting command `ticket` of `party` inherits something else now: the machine re-reads
    /// it (under the engine lock, so the newest value wins) and the holder follows.
    /// - Returns: the raised parties whose inherited urgency changed.
    final func refreshInherited(_ ticket: Ticket, party: [Node]) -> [Node] {
        let registry = BoostRegistry.shared
        let changed = withMachineLocked { machine in
            machine.setInherited(
                ticket, registry.inherited(of: party), holderBits: state.loadAcquire() & EngineWord.holderMask)
        }
        return changed ? syncBoost() : []
    }

    /// A transition lowered what the holder inherits (a waiter left): the raised parties come down,
    /// along their chains. Call after unlocking.
    final func lowerBoost() {
        SyncPoints.inheritance(true)
        defer { SyncPoints.inheritance(false) }
        Self.walkChain(from: syncBoost())
    }

    /// Passes a change of what `changed` parties inherit on to the holders of the values they wait
    /// for, and so on down each chain, through the deadlock detector's wait-for graph. Stops after
    /// ``maxChainLinks`` links, and at a party met before (a cycle: a deadlock, which the detector
    /// reports to the party that closes it).
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

    /// Brings every party raised for the current hold to what the machine says the holder inherits
    /// now (``EngineStateMachine/beginBoost()``), raising the holder (or `nextHolder`, granted and not
    /// started yet) and the shared reads, or bringing them down when a reason left. Under the boost
    /// lock, which serializes it with the raised parties' own ends; the urgency is read under the
    /// engine lock inside it, so whichever call comes last applies the newest decision.
    /// - Returns: the parties whose inherited urgency changed (for the chain walk).
    @discardableResult
    final func syncBoost(nextHolder: NextHolder? = nil) -> [Node] {
        var escalations = Escalations()
        defer { escalations.make() }
        return boosts.withLock { record in
            applyBoost(withMachineLocked { boostTarget(&$0) }, nextHolder: nextHolder, &record, &escalations)
        }
    }

    /// What the parties raised for the current hold must be brought to, read under the engine lock:
    /// the urgency the holder inherits (``EngineStateMachine/beginBoost()``), and the holder's thread
    /// and task.
    typealias BoostTarget = (urgency: Urgency, thread: Int, task: Int)

    /// Under the engine lock, inside the boost lock: the ``BoostTarget`` now.
    @inline(__always)
    final func boostTarget(_ machine: inout Machine) -> BoostTarget {
        (machine.beginBoost(), ownerThread.loadAcquire(), ownerTask.loadAcquire())
    }

    /// Under the boost lock, after reading `boost` under the engine lock inside it: brings the
    /// raised parties to it. - Returns: the parties whose inherited urgency changed.
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
                if nextHolder.thread != 0 { record.targets.insert(.thread(nextHolder.thread)) }
                if nextHolder.task != 0 { target(task: nextHolder.task, urgency, &record, &escalations) }
            }
            if thread != 0 { record.targets.insert(.thread(thread)) }
            if task != 0 { target(task: task, urgency, &record, &escalations) }
            for reader in record.readers {
                if reader.thread != 0 { record.targets.insert(.thread(reader.thread)) }
                if reader.task != 0 { target(task: reader.task, urgency, &record, &escalations) }
            }
            // Readers on the idle path: listed in their threads' records, and alive while they
            // are (an idle reader leaves its record before it leaves the section; one raised
            // here leaves through the lock, since waiters set `slowRelease`, and ends its boost).
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

    /// Under the boost lock: lists the holding task `task` as a target if what it inherits has a
    /// thread axis to pass on (a real-time thread waits, and the task may wait for a thread holder in
    /// turn) or it is listed already; otherwise only escalates it. An escalation needs no undoing
    /// (Swift keeps it for the task's life), and a task that awaits passes it on through its
    /// escalation handler (see `CommandEngine+Awaiting.swift`), so the common case, tasks waiting
    /// for a task (a deep `CommandQueue`), stays off the registry's lock: one call into the runtime,
    /// as before chains.
    private func target(task: Int, _ urgency: Urgency, _ record: inout BoostRecord, _ escalations: inout Escalations) {
        let node = Node.task(task)
        if urgency.thread != 0 || record.targets.contains(node) {
            record.targets.insert(node)
        } else if urgency.task > 0 {
            escalations.add(task: task, to: urgency.task)
        }
    }

    /// Under the boost lock: sets this engine's contribution to `node` and escalates its task if
    /// that raised it. - Returns: whether what the node inherits changed.
    private func apply(
        _ urgency: Urgency, to node: Node, registry: BoostRegistry, source: ObjectIdentifier,
        _ escalations: inout Escalations
    ) -> Bool {
        let (old, new, escalate) = registry.set(node, source: source, to: urgency)
        if let escalate, case .task(let task) = node { escalations.add(task: task, to: escalate) }
        return old != new
    }

    /// A shared read lists itself as running its closure: if the holders are raised, it is raised at
    /// once too. Under the boost lock.
    final func raiseJoiningReader(
        _ party: ReaderParty, record: inout BoostRecord, _ escalations: inout Escalations
    ) {
        let urgency = withMachineLocked { $0.isHoldBoosted ? $0.holdUrgency : .none }
        guard !urgency.isNone else { return }
        // Listed as `syncBoost` lists a holder, then brought to the hold's urgency.
        if party.thread != 0 { record.targets.insert(.thread(party.thread)) }
        if party.task != 0 { target(task: party.task, urgency, &record, &escalations) }
        let source = ObjectIdentifier(self)
        for node in [Node.thread(party.thread), .task(party.task)] where record.targets.contains(node) {
            _ = apply(urgency, to: node, registry: BoostRegistry.shared, source: source, &escalations)
        }
    }

    /// A release returned `urgency`: the new holder (its thread and task, read under the engine
    /// lock) inherits the urgency of the waiters still parked. Call after unlocking, before starting
    /// it.
    ///
    /// A suspended task granted the section alone, when what it inherits has no thread axis (every
    /// parked waiter is a task, or a thread whose priority the platform cannot lend), is only
    /// escalated, as ``syncBoost(nextHolder:)`` would do without listing it: an escalation needs no
    /// undoing, so neither the boost lock nor the registry is involved, and the release of a
    /// contended awaiting command makes one call into the runtime. (Its task is known only once it
    /// suspended, and stays suspended until it is started after this: it is alive. The word shows
    /// whether the grant went to shared reads, which `syncBoost` raises together.) Any other next holder
    /// goes through `syncBoost`, which reads what it inherits again, under the locks (a waiter may
    /// have left since).
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

    /// The calling thread stops running the holder's code: it released the section (and started
    /// the next holder), or the hold goes on without it (a dispatch command's closure returned
    /// before its manual completion). It ends what this engine raised it (and its task) by.
    final func endBoostOfCurrentThread() {
        let task = currentTaskID()
        let source = ObjectIdentifier(self)
        boosts.withLock { record in
            // Only tasks were escalated for this hold (nothing to undo): no node to look for.
            guard !record.targets.isEmpty else { return }
            for node in [Node.thread(currentThreadID()), .task(task)] where record.targets.remove(node) != nil {
                _ = BoostRegistry.shared.set(node, source: source, to: nil)
            }
        }
    }
}
