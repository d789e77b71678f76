import Dispatch
import QueueSafeValueShims

#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

// MARK: - DeadlockDetector

/// The process-wide storage of the ``WaitForGraph``: one lock, taken only by threads about to park
/// and tasks about to suspend, by the chain walk and by diagnostics (never on the idle path, never
/// while an engine's lock or boost lock is held: see the lock order in ``CommandEngine``), and the
/// reading of who holds an engine.
///
/// Engines are identified by their address; an engine stays alive while anything waits for it (the
/// waiter's frame holds it), and a party always unregisters before its wait returns.
@_spi(Testing)
public final class DeadlockDetector: @unchecked Sendable {  // @unchecked Sendable: graph under its lock
    /// An engine, by identity, without keeping it alive: while registered, its waiter keeps it.
    // @unchecked Sendable: only compared, or read while a waiter keeps the engine alive
    struct EngineHandle: Hashable, @unchecked Sendable {
        let engine: Unmanaged<CommandEngine>

        static func == (lhs: EngineHandle, rhs: EngineHandle) -> Bool { lhs.engine.toOpaque() == rhs.engine.toOpaque() }
        func hash(into hasher: inout Hasher) { hasher.combine(engine.toOpaque()) }
    }

    typealias Graph = WaitForGraph<EngineHandle>
    typealias Node = Graph.Node

    /// The process's detector (a controlled scheduler's threads use their world's own).
    static var shared: DeadlockDetector { SyncPoints.detectorOverride ?? process }
    private static let process = DeadlockDetector()

    /// What the lock guards: the graph, and the parked waiters that do not know which queue they
    /// run on (see ``tagQueue(_:)``).
    private struct State {
        var graph = Graph()
        var watchers: [ObjectIdentifier: BlockingWaiter] = [:]
        /// The identity of the queue tagged last (``QueueTag/mainQueue`` is taken).
        var lastQueueID = QueueTag.mainQueue
        /// The labels of registered threads' queues, for reports.
        var queueOfThread: [Int: String] = [:]
        /// The names of registered tasks (`Task.name`, where the runtime keeps one), for reports.
        var nameOfTask: [Int: String] = [:]
        /// The labels of the queues tagged most recently, by identity, for diagnostics (at most
        /// ``labelLimit``: a process that makes a queue per request must not grow this forever).
        var labels: [Int: String] = [QueueTag.mainQueue: "com.apple.main-thread"]
    }

    /// How many queue labels ``State/labels`` keeps.
    private static let labelLimit = 4096

    private let state = LockedState.make(State())
    /// How many queues have been tagged: changed under the lock, read without it.
    private let tagCount = AtomicWord(0)
    /// How many threads Swift's cooperative pool runs tasks on: one per processor. (Not
    /// `ProcessInfo`: only the `LocalizedError` conformance's file imports Foundation.)
    let poolWidth = max(1, sysconf(Int32(_SC_NPROCESSORS_ONLN)))

    /// A detector of its own (the process's is ``shared``), for a controlled scheduler's world.
    @_spi(Testing)
    public init() {}

    /// Registers a party about to block for `engine`; see ``WaitForGraph/register(_:waitingFor:poolThread:poolWidth:holder:)``.
    /// - Parameter watcher: a blocking waiter that does not know which queue it runs on, with the
    ///   ``tagEpoch`` it read before it looked: it is told to look again when a queue is tagged
    ///   while it is registered, or at once if one was tagged since it looked.
    func register(
        _ nodes: [Node],
        waitingFor engine: CommandEngine,
        ticket: CommandEngine.Ticket = .none,
        poolThread: Bool,
        watcher: (waiter: BlockingWaiter, epoch: Int)? = nil
    ) -> Registration {
        let handle = EngineHandle(engine: .passUnretained(engine))
        var queue: String?
        if case .thread? = nodes.first { queue = QueueTag.currentLabel }
        // The party's own task (the first task node: the others await it) and its name, if any.
        let ownTask = nodes.lazy.compactMap { node -> Int? in if case .task(let task) = node { task } else { nil } }
            .first
        let taskName = ownTask == nil ? nil : Self.currentTaskName()
        let (registration, stale) = state.withLock { state -> (Registration, Bool) in
            let verdict = state.graph.register(
                nodes, waitingFor: handle, ticket: CommandEngine.packedTicket(ticket), poolThread: poolThread,
                poolWidth: poolWidth
            ) { handle in handle.engine.takeUnretainedValue().holderNodes }
            guard verdict == .wait else {
                // Every thread of a cycle is registered (parked, so alive) or is the caller: its
                // name can be read now, under the lock that keeps them registered.
                var taskNames = state.nameOfTask
                if let ownTask, let taskName { taskNames[ownTask] = taskName }
                return (
                    Registration(
                        verdict: verdict,
                        names: Self.names(in: verdict, queues: state.queueOfThread, tasks: taskNames)),
                    false
                )
            }
            if case .thread(let thread)? = nodes.first, let queue { state.queueOfThread[thread] = queue }
            if let ownTask, let taskName { state.nameOfTask[ownTask] = taskName }
            guard let watcher else { return (Registration(verdict: verdict, names: [:]), false) }
            state.watchers[ObjectIdentifier(watcher.waiter)] = watcher.waiter
            return (Registration(verdict: verdict, names: [:]), watcher.epoch != tagCount.loadRelaxed())
        }
        if stale { watcher?.waiter.postRecheck() }
        return registration
    }

    /// What ``register(_:waitingFor:poolThread:watcher:)`` decided, and, for a refusal, how the
    /// report names the parties of the cycle.
    struct Registration {
        let verdict: Graph.Verdict
        let names: [Node: String]
    }

    /// The party's wait ended; call before it does anything else.
    func unregister(_ nodes: [Node], watcher: BlockingWaiter? = nil) {
        state.withLock { state in
            state.graph.unregister(nodes)
            if case .thread(let thread)? = nodes.first, !state.queueOfThread.isEmpty {
                state.queueOfThread[thread] = nil
            }
            if !state.nameOfTask.isEmpty {
                for case .task(let task) in nodes { state.nameOfTask[task] = nil }
            }
            if let watcher { state.watchers[ObjectIdentifier(watcher)] = nil }
        }
    }

    /// What `node` waits for, if it is registered: the engine (alive while the party is registered,
    /// and retained here, under the lock that keeps it registered), the waiting command's ticket, and
    /// every node of the party. Priority inheritance's chain walk follows it.
    func wait(of node: Node) -> (engine: CommandEngine, ticket: CommandEngine.Ticket, party: [Node])? {
        state.withLock { state -> (engine: CommandEngine, ticket: CommandEngine.Ticket, party: [Node])? in
            guard let wait = state.graph.waits[node] else { return nil }
            return (wait.engine.engine.takeUnretainedValue(), CommandEngine.unpackedTicket(wait.ticket), wait.party)
        }
    }

    /// Every registered wait (for the checkers).
    var registeredWaits: [Node: Graph.Wait] {
        state.withLock { $0.graph.waits }
    }

    #if DEBUG
        /// Who waits for which value, and who holds it, one line per registered wait: for a controlled
        /// scheduler's report of a run where every party waits (`QueueSafeValueTesting`). Call it from
        /// no world's thread, while the waiting threads are parked (their frames keep the engines alive).
        @_spi(Testing)
        /// - Parameter names: the names of threads the caller knows (the platform's name otherwise).
        public func describeWaits(names: [Int: String] = [:]) -> [String] {
            let (waits, taskNames) = state.withLock { ($0.graph.waits, $0.nameOfTask) }
            let sorted = waits.sorted { Self.describe($0.key) < Self.describe($1.key) }
            let nameOf = { (node: Node) -> String? in
                switch node {
                case .thread(let thread): names[thread] ?? Self.threadName(thread)
                case .task(let task): taskNames[task]
                }
            }
            return sorted.map { node, wait in
                let engine = wait.engine.engine.takeUnretainedValue()
                let holders = engine.holderNodes.map { holder in Self.describe(holder, name: nameOf(holder), queue: nil)
                }
                return "\(Self.describe(node, name: nameOf(node), queue: nil)) waits for \(engine.displayName), "
                    + (holders.isEmpty
                        ? "held by no thread or task (a dispatch command, or a completion not called yet)"
                        : "held by \(holders.joined(separator: " and "))")
            }
        }
    #endif

    /// The label of the queue with identity `id`, if it was tagged recently enough to be
    /// remembered (``labelLimit`` queues).
    func label(ofQueue id: Int) -> String? {
        state.withLock { $0.labels[id] }
    }

    /// Read by a waiter before it reads which queues it runs on; see ``register(_:waitingFor:poolThread:watcher:)``.
    var tagEpoch: Int { tagCount.loadAcquire() }

    /// Tags a queue labelled `label`: `tag` is called under the lock with an identity no queue has had, stores the
    /// tag unless the queue has one already, and returns the queue's identity. When it stored one,
    /// every registered waiter that did not know its queue is told to look again (after
    /// unlocking), because it may run on this queue.
    func tagQueue(label: String, _ tag: (_ newID: Int) -> Int) -> Int {
        let (id, watchers) = state.withLock { state -> (Int, [BlockingWaiter]) in
            let newID = state.lastQueueID + 1
            let id = tag(newID)
            guard id == newID else { return (id, []) }
            state.lastQueueID = newID
            state.labels[newID] = label
            state.labels[newID - Self.labelLimit] = nil
            _ = tagCount.fetchAdd(1)
            return (id, Array(state.watchers.values))
        }
        for waiter in watchers { waiter.postRecheck() }
        return id
    }

    /// The nodes of the calling thread: its thread, and its task if it runs inside one (see
    /// ``taskNodes(_:)``).
    static func currentNodes() -> [Node] {
        let task = currentTaskID()
        return task == 0 ? [.thread(currentThreadID())] : [.thread(currentThreadID())] + taskNodes(task)
    }

    /// The nodes of the task `task` (the current one): the task, then the tasks that await its
    /// result, if it runs a ``CommandQueue`` operation that `perform` awaits (see
    /// ``OperationAwaiters``). They wait for whatever it waits for.
    static func taskNodes(_ task: Int) -> [Node] {
        [.task(task)] + OperationAwaiters.ofCurrentTask(task).map { .task($0) }
    }

    /// What to tell the user about a refused wait.
    static func report(
        _ registration: Registration,
        diagnostics: QueueDiagnostics,
        waiterDescription: String
    ) -> DeadlockReport {
        switch registration.verdict {
        case .cycle(let links):
            let name = { (node: Node) in registration.names[node] ?? describe(node) }
            let cycle = links.enumerated().map { index, link in
                DeadlockReport.Link(
                    waiter: index == 0 ? waiterDescription : name(link.waiter),
                    value: link.engine.engine.takeUnretainedValue().displayName,
                    holder: name(link.holder))
            }
            return DeadlockReport(kind: .waitCycle, cycle: cycle, diagnostics: diagnostics, parkedPoolThreads: nil)
        case .poolExhausted(let parked, let width):
            return DeadlockReport(
                kind: .cooperativePoolExhausted, cycle: [], diagnostics: diagnostics,
                parkedPoolThreads: (parked, width))
        case .wait:
            preconditionFailure("a wait is not a deadlock")
        }
    }

    /// The descriptions of the parties of a cycle: each thread is registered (parked) or is the
    /// caller, so it is alive while the lock is held, and read by its name; each task by the name it
    /// registered with, if it has one.
    private static func names(in verdict: Graph.Verdict, queues: [Int: String], tasks: [Int: String]) -> [Node: String]
    {
        guard case .cycle(let links) = verdict else { return [:] }
        var names: [Node: String] = [:]
        for node in links.flatMap({ [$0.waiter, $0.holder] }) where names[node] == nil {
            switch node {
            case .thread(let thread): names[node] = describe(node, name: threadName(thread), queue: queues[thread])
            case .task(let task): names[node] = describe(node, name: tasks[task], queue: nil)
            }
        }
        return names
    }

    /// The current task's name, where the runtime keeps one (`Task.name`: Swift 6.2's runtime, so
    /// macOS 26, iOS 26, tvOS 26, watchOS 26, visionOS 26 and Linux); `nil` for a task without one.
    static func currentTaskName() -> String? {
        guard #available(macOS 26.0, iOS 26.0, watchOS 26.0, tvOS 26.0, visionOS 26.0, *) else { return nil }
        return Task.name
    }

    /// "thread 0x7f3a1c", "task 0x55d2a0".
    static func describe(_ node: Node) -> String {
        switch node {
        case .thread(let id): return "thread 0x" + String(UInt(bitPattern: id), radix: 16)
        case .task(let id): return "task 0x" + String(UInt(bitPattern: id), radix: 16)
        }
    }

    /// "thread 'worker' (0x7f3a1c) on queue 'db'", "task 'refresh' (0x55d2a0)": a party with the
    /// name (its name first, then its id) and queue known of it.
    static func describe(_ node: Node, name: String?, queue: String?) -> String {
        var text = describe(node)
        if let name {
            switch node {
            case .thread(let id): text = "thread '\(name)' (0x" + String(UInt(bitPattern: id), radix: 16) + ")"
            case .task(let id): text = "task '\(name)' (0x" + String(UInt(bitPattern: id), radix: 16) + ")"
            }
        }
        if let queue { text += " on queue '\(queue)'" }
        return text
    }

    /// The name of a live thread, if it has one of its own: not the name every thread starts with,
    /// nor the one Dispatch gives its worker threads on Linux (the tail of a global queue's label,
    /// `oot.default-qos`), which says nothing the queue label does not.
    static func threadName(_ thread: Int) -> String? {
        let name = withUnsafeTemporaryAllocation(of: CChar.self, capacity: 64) { buffer -> String? in
            guard let base = buffer.baseAddress,
                qsv_thread_name(UInt(bitPattern: thread), base, buffer.count) != 0
            else { return nil }
            return String(cString: base)
        }
        guard let name, !dispatchWorkerNames.contains(where: { $0.hasSuffix(name) }) else { return nil }
        return name
    }

    /// The labels of Dispatch's global queues, whose tails name its worker threads.
    private static let dispatchWorkerNames: [String] = {
        let classes = ["maintenance", "background", "utility", "default", "user-initiated", "user-interactive"]
        return classes.flatMap { ["com.apple.root.\($0)-qos", "com.apple.root.\($0)-qos.overcommit"] }
    }()

    /// "thread 'ui' (0x7f3a1c) (main thread)", or "… on queue 'db'", or "… in task 0x55d2a0": the caller.
    static func describeCurrent() -> String {
        let thread = currentThreadID()
        var text: String
        if qsv_is_main_thread() != 0 {
            text = describe(.thread(thread), name: threadName(thread), queue: nil) + " (main thread)"
        } else {
            text = describe(.thread(thread), name: threadName(thread), queue: QueueTag.currentLabel)
        }
        let task = currentTaskID()
        if task != 0 { text += " in " + describe(.task(task), name: currentTaskName(), queue: nil) }
        return text
    }
}

// MARK: - Tasks that await an operation

/// The tasks that await the result of the ``CommandQueue`` operation the current task runs:
/// `perform` awaits its operation's task, so while that task waits for a value, so do they. The
/// operation's task carries them in a task-local, and registers them with itself whenever it is
/// about to wait: a cycle through an operation and the task that awaits it is then a cycle of the
/// wait-for graph (the task holds a value the operation waits for, directly or through others).
///
/// The task-local names the operation's task: an unstructured task created inside the operation
/// inherits the task-local but is awaited by nobody, and a record that does not name the current
/// task is ignored (so is, conservatively, a child task of the operation: a cycle through it is not
/// detected).
@usableFromInline
struct OperationAwaiters: Sendable {
    /// The operation's task.
    @usableFromInline let task: Int
    /// The task that awaits it, then the tasks that await that one, and so on.
    @usableFromInline let awaiters: [Int]

    @inlinable
    init(task: Int, awaiters: [Int]) {
        self.task = task
        self.awaiters = awaiters
    }

    @usableFromInline
    static let current = TaskLocal<OperationAwaiters?>(wrappedValue: nil)

    /// The tasks that await the current task, `task`, if it runs an awaited operation.
    @usableFromInline
    static func ofCurrentTask(_ task: Int) -> [Int] {
        guard let record = current.get(), record.task == task else { return [] }
        return record.awaiters
    }

    /// What an operation enqueued now by `perform` carries: the calling task, then the tasks that
    /// await it.
    @usableFromInline
    static func forOperationAwaitedByCurrentTask() -> [Int] {
        let task = currentTaskID()
        guard task != 0 else { return [] }
        return [task] + ofCurrentTask(task)
    }
}
