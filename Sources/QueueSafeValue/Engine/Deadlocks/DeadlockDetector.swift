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

/// The process-wide ``WaitForGraph`` behind one lock, taken by threads about to park, tasks about to
/// suspend, the chain walk and diagnostics: never on the idle path, never under an engine's lock or
/// boost lock (the lock order in ``CommandEngine``).
///
/// An engine, known by its address, stays alive while anything waits for it (the waiter's frame
/// holds it), and a party unregisters before its wait returns.
@_spi(Testing)
public final class DeadlockDetector: @unchecked Sendable {  // @unchecked Sendable: graph under its lock
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

    private struct State {
        var graph = Graph()
        /// Parked waiters that do not know which queue they run on (see ``tagQueue(label:_:)``).
        var watchers: [ObjectIdentifier: BlockingWaiter] = [:]
        var lastQueueID = QueueTag.mainQueue
        /// For reports: registered threads' queue labels, registered tasks' names.
        var queueOfThread: [Int: String] = [:]
        var nameOfTask: [Int: String] = [:]
        /// The ``labelLimit`` queues tagged last: a process that makes a queue per request must not
        /// grow this forever.
        var labels: [Int: String] = [QueueTag.mainQueue: "com.apple.main-thread"]
    }

    private static let labelLimit = 4096

    private let state = LockedState.make(State(), inheritsPriority: true)
    /// Changed under the lock, read without it.
    private let tagCount = AtomicWord(0)
    /// One thread per processor. Not `ProcessInfo`: only one file imports Foundation.
    let poolWidth = max(1, sysconf(Int32(_SC_NPROCESSORS_ONLN)))

    /// A detector of its own (the process's is ``shared``), for a controlled scheduler's world.
    @_spi(Testing)
    public init() {}

    /// See ``WaitForGraph/register(_:waitingFor:ticket:poolThread:poolWidth:holder:)``. `watcher`: a
    /// waiter that does not know its queue, with the ``tagEpoch`` it read before it looked: told to
    /// look again when a queue is tagged while it is registered, or at once if one was since.
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
        // The first task node is the party's own: the others await it.
        let ownTask = nodes.lazy.compactMap { node -> Int? in if case .task(let task) = node { task } else { nil } }
            .first
        let taskName = ownTask == nil ? nil : Self.currentTaskName()
        let (registration, stale) = state.withLock { state -> (Registration, Bool) in
            let verdict = state.graph.register(
                nodes, waitingFor: handle, ticket: ticket.packed, poolThread: poolThread,
                poolWidth: poolWidth
            ) { handle in handle.engine.takeUnretainedValue().holderNodes }
            guard verdict == .wait else {
                // Every thread of a cycle is parked or the caller, so alive under this lock.
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

    /// For a refusal, `names` names the cycle's parties.
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

    /// What a registered `node` waits for, for inheritance's chain walk: the engine is retained
    /// here, under the lock that keeps it registered.
    func wait(of node: Node) -> (engine: CommandEngine, ticket: CommandEngine.Ticket, party: [Node])? {
        state.withLock { state -> (engine: CommandEngine, ticket: CommandEngine.Ticket, party: [Node])? in
            guard let wait = state.graph.waits[node] else { return nil }
            return (wait.engine.engine.takeUnretainedValue(), CommandEngine.Ticket(packed: wait.ticket), wait.party)
        }
    }

    /// For the checkers.
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

    /// `nil` unless it is among the ``labelLimit`` tagged last.
    func label(ofQueue id: Int) -> String? {
        state.withLock { $0.labels[id] }
    }

    /// Read by a waiter before it reads which queues it runs on.
    var tagEpoch: Int { tagCount.loadAcquire() }

    /// `tag`, under the lock, stores a new identity unless the queue has one, and returns the
    /// queue's. A new tag tells every watcher to look again (after unlocking): it may run on it.
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

    /// The calling thread, and its task's nodes if it runs inside one.
    static func currentNodes() -> [Node] {
        let task = currentTaskID()
        return task == 0 ? [.thread(currentThreadID())] : [.thread(currentThreadID())] + taskNodes(task)
    }

    /// The current task `task`, then the tasks that await it (``OperationAwaiters``).
    static func taskNodes(_ task: Int) -> [Node] {
        [.task(task)] + OperationAwaiters.ofCurrentTask(task).map { .task($0) }
    }

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

    /// Under the lock: each thread of a cycle is parked or the caller, so alive, and read by name.
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

    /// `Task.name` needs Swift 6.2's runtime.
    static func currentTaskName() -> String? {
        guard #available(macOS 26.0, iOS 26.0, watchOS 26.0, tvOS 26.0, visionOS 26.0, *) else { return nil }
        return Task.name
    }

    /// "thread 0x7f3a1c"; with what is known of it, "thread 'worker' (0x7f3a1c) on queue 'db'".
    static func describe(_ node: Node, name: String? = nil, queue: String? = nil) -> String {
        let (party, id) =
            switch node {
            case .thread(let number): ("thread", number)
            case .task(let number): ("task", number)
            }
        let hex = "0x" + String(UInt(bitPattern: id), radix: 16)
        let text = name.map { "\(party) '\($0)' (\(hex))" } ?? "\(party) \(hex)"
        return queue.map { text + " on queue '\($0)'" } ?? text
    }

    /// A name of its own: not the one every thread starts with, nor a Dispatch worker's on Linux (a
    /// global queue label's tail, `oot.default-qos`), which says nothing the queue label does not.
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

    private static let dispatchWorkerNames: [String] = {
        let classes = ["maintenance", "background", "utility", "default", "user-initiated", "user-interactive"]
        return classes.flatMap { ["com.apple.root.\($0)-qos", "com.apple.root.\($0)-qos.overcommit"] }
    }()

    /// The caller: "thread 'ui' (0x7f3a1c) (main thread)", or "… on queue 'db'", and "… in task 0x55d2a0".
    static func describeCurrent() -> String {
        let thread = currentThreadID()
        let isMain = qsv_is_main_thread() != 0
        var text = describe(.thread(thread), name: threadName(thread), queue: isMain ? nil : QueueTag.currentLabel)
        if isMain { text += " (main thread)" }
        let task = currentTaskID()
        if task != 0 { text += " in " + describe(.task(task), name: currentTaskName()) }
        return text
    }
}

// MARK: - Tasks that await an operation

/// The tasks that await the ``CommandQueue`` operation the current task runs (`perform` awaits
/// it): they wait for whatever it waits for, so it registers them with itself, and a cycle through
/// an operation and its awaiter is a cycle of the wait-for graph.
///
/// The record names the operation's task: a task created inside it inherits the task-local but is
/// awaited by nobody, so a record that does not name the current task is ignored (so,
/// conservatively, is a child task's: a cycle through one is not detected).
@usableFromInline
struct OperationAwaiters: Sendable {
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

    @usableFromInline
    static func ofCurrentTask(_ task: Int) -> [Int] {
        guard let record = current.get(), record.task == task else { return [] }
        return record.awaiters
    }

    /// What an operation `perform` enqueues now carries: the calling task, then those awaiting it.
    @usableFromInline
    static func forOperationAwaitedByCurrentTask() -> [Int] {
        let task = currentTaskID()
        guard task != 0 else { return [] }
        return [task] + ofCurrentTask(task)
    }
}
