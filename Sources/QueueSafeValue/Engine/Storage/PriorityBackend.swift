import QueueSafeValueShims

// Priority inheritance's calls into the operating system, kept apart from the policy that decides
// when to make them (`PriorityBackend.move(_:ofThread:to:)`), so that the tests run both platforms'
// policies on Linux against a recording fake (`RecordingPriorityBackend`).

// MARK: - The platform's calls

/// A thread's scheduling policy and priority, as `pthread_getschedparam` reads them (Linux).
@_spi(Testing)
public struct ThreadScheduling: Sendable, Hashable, CustomStringConvertible {
    /// The policy's number (`SCHED_OTHER`, `SCHED_FIFO`, …).
    public var policy: Int32
    /// The static priority (1...99 under a real-time policy, 0 otherwise).
    public var priority: Int32

    /// A policy and a priority.
    public init(policy: Int32, priority: Int32) {
        self.policy = policy
        self.priority = priority
    }

    /// `policy/priority`.
    public var description: String { "\(policy)/\(priority)" }
}

/// Linux's calls: a thread is raised by giving it a real-time policy, and brought back by giving it
/// what it had.
@_spi(Testing)
public protocol RealtimeSchedulingCalls: Sendable {
    /// The numbers of the real-time policies, `SCHED_FIFO` (which a raise uses) and `SCHED_RR`.
    var realtimePolicies: (fifo: Int32, roundRobin: Int32) { get }
    /// The live thread's scheduling (`pthread_getschedparam`), or `nil` if it cannot be read.
    func scheduling(ofThread thread: Int) -> ThreadScheduling?
    /// Sets the live thread's scheduling (`pthread_setschedparam`); `false` if the system refused.
    func setScheduling(_ scheduling: ThreadScheduling, ofThread thread: Int) -> Bool
}

/// Apple platforms' calls: a thread is raised by a QoS override, which lasts until it is ended.
@_spi(Testing)
public protocol QoSOverrideCalls: Sendable {
    /// The QoS class the live thread requested for itself (overrides are not counted); 0 for
    /// unspecified.
    func qosClass(ofThread thread: Int) -> Int32
    /// Starts an override: the live thread runs at least at `qosClass` until it is ended. Returns
    /// the override, or `nil` if the system refused.
    func startOverride(ofThread thread: Int, qosClass: Int32) -> UInt?
    /// Ends an override ``startOverride(ofThread:qosClass:)`` returned, once.
    func endOverride(_ override: UInt)
}

/// Every platform's call for tasks.
@_spi(Testing)
public protocol TaskEscalationCalls: Sendable {
    /// Escalates the live task at address `task` to run at least at `priority` (a `TaskPriority`
    /// raw value), as awaiting it would. Escalation is never undone: a task keeps it until it ends.
    func escalate(task: Int, to priority: UInt8)
}

/// How this platform raises the holder of a value that a more urgent party waits for, with the
/// calls that do it.
@_spi(Testing)
public enum PriorityBackend: Sendable {
    /// Linux: the holder thread gets a real-time policy (SCHED_FIFO) at the waiter's priority while
    /// it inherits it, then the policy and priority it had. A thread's urgency is its real-time
    /// priority (0 under any other policy); a task's priority has no thread urgency.
    case realtimePolicy(any RealtimeSchedulingCalls, tasks: any TaskEscalationCalls)
    /// Apple platforms: the holder thread gets a QoS override at the waiter's class while it
    /// inherits it. A thread's urgency is its QoS class, and a task's priority is a QoS class too.
    case qosOverrides(any QoSOverrideCalls, tasks: any TaskEscalationCalls)

    /// The process's backend: the real calls of the platform it runs on.
    static let platform: PriorityBackend = {
        #if canImport(Darwin)
            return .qosOverrides(DarwinQoSOverrides(), tasks: RuntimeTaskEscalation())
        #else
            return .realtimePolicy(LinuxRealtimeScheduling(), tasks: RuntimeTaskEscalation())
        #endif
    }()

    /// The concurrency runtime's escalation, for a fake that records escalations and still makes them.
    public static var runtimeEscalation: any TaskEscalationCalls { RuntimeTaskEscalation() }

    /// Escalates `task` (see ``TaskEscalationCalls/escalate(task:to:)``).
    func escalate(task: Int, to priority: UInt8) {
        switch self {
        case .realtimePolicy(_, let tasks), .qosOverrides(_, let tasks): tasks.escalate(task: task, to: priority)
        }
    }

    // MARK: Urgencies

    /// The urgency of a thread that runs at `own` and is about to park, with the task priority it
    /// stands for (Apple platforms: its QoS class; Linux: `.high` if real-time, else `.medium`).
    func urgency(ofThreadAt own: Int32) -> Urgency {
        switch self {
        case .realtimePolicy:
            let task = own > 0 ? TaskPriority.high : TaskPriority.medium
            return Urgency(thread: own, task: task.rawValue)
        case .qosOverrides:
            return Urgency(thread: own, task: UInt8(clamping: own))
        }
    }

    /// The urgency of a task of `priority` that is about to suspend (Linux cannot lend it to a thread).
    func urgency(ofTask priority: TaskPriority) -> Urgency {
        switch self {
        case .realtimePolicy: return Urgency(thread: 0, task: priority.rawValue)
        case .qosOverrides: return Urgency(thread: Int32(priority.rawValue), task: priority.rawValue)
        }
    }

    /// The urgency the live `thread` runs at on its own, without `boost`, the raise in effect on it.
    func ownUrgency(ofThread thread: Int, boost: ThreadBoost) -> Int32 {
        switch self {
        case .realtimePolicy(let calls, _):
            if case .realtime(let saved, _) = boost { return calls.urgency(of: saved) }
            return calls.scheduling(ofThread: thread).map { calls.urgency(of: $0) } ?? 0
        case .qosOverrides(let calls, _):
            return calls.qosClass(ofThread: thread)  // the requested class: overrides are not counted
        }
    }

    // MARK: The policy

    /// Brings the live `thread`, raised as `boost` says, to run at least at `urgency`, or back to its
    /// own scheduling when `urgency` is 0 or not above its own. A refused raise leaves the thread as
    /// it was (a best effort); on Apple platforms a move never leaves it unraised in between.
    /// - Returns: the boost in effect afterwards.
    func move(_ boost: ThreadBoost, ofThread thread: Int, to urgency: Int32) -> ThreadBoost {
        switch self {
        case .realtimePolicy(let calls, _):
            return calls.move(boost, ofThread: thread, to: urgency)
        case .qosOverrides(let calls, _):
            return calls.move(boost, ofThread: thread, to: urgency)
        }
    }
}

/// What a raise changed on one thread, to be moved or undone (see ``PriorityBackend/move(_:ofThread:to:)``).
@_spi(Testing)
public enum ThreadBoost: Sendable, Hashable {
    /// Not raised.
    case none
    /// Linux: the thread runs under SCHED_FIFO at `urgency`; `saved` is the scheduling it had.
    case realtime(saved: ThreadScheduling, urgency: Int32)
    /// Apple platforms: the QoS override `override` runs the thread at least at `urgency`.
    case qosOverride(UInt, urgency: Int32)

    /// The urgency the boost gives, 0 for none.
    var urgency: Int32 {
        switch self {
        case .none: 0
        case .realtime(_, let urgency), .qosOverride(_, let urgency): urgency
        }
    }
}

extension RealtimeSchedulingCalls {
    /// The urgency a thread with `scheduling` runs at: its priority under a real-time policy, else 0.
    func urgency(of scheduling: ThreadScheduling) -> Int32 {
        let (fifo, roundRobin) = realtimePolicies
        return scheduling.policy == fifo || scheduling.policy == roundRobin ? scheduling.priority : 0
    }

    /// Linux's policy (see ``PriorityBackend/move(_:ofThread:to:)``).
    func move(_ boost: ThreadBoost, ofThread thread: Int, to urgency: Int32) -> ThreadBoost {
        guard case .realtime(let saved, let current) = boost else {
            guard urgency > 0, let own = scheduling(ofThread: thread), self.urgency(of: own) < urgency else {
                return .none  // nothing to inherit, or it runs at least that urgently on its own
            }
            let raised = ThreadScheduling(policy: realtimePolicies.fifo, priority: urgency)
            return setScheduling(raised, ofThread: thread) ? .realtime(saved: own, urgency: urgency) : .none
        }
        if urgency <= self.urgency(of: saved) {
            // mutant(realtime-boost-outlives-reason): _ = saved
            _ = setScheduling(saved, ofThread: thread)
            return .none
        }
        if urgency == current { return boost }
        let moved = ThreadScheduling(policy: realtimePolicies.fifo, priority: urgency)
        return setScheduling(moved, ofThread: thread) ? .realtime(saved: saved, urgency: urgency) : boost
    }
}

extension QoSOverrideCalls {
    /// Apple platforms' policy (see ``PriorityBackend/move(_:ofThread:to:)``).
    func move(_ boost: ThreadBoost, ofThread thread: Int, to urgency: Int32) -> ThreadBoost {
        guard case .qosOverride(let override, let current) = boost else {
            guard urgency > 0 else { return .none }
            // mutant(override-for-a-thread-that-reaches-it): let reaches = false
            let reaches = qosClass(ofThread: thread) >= urgency
            guard !reaches, let started = startOverride(ofThread: thread, qosClass: urgency) else { return .none }
            return .qosOverride(started, urgency: urgency)
        }
        if urgency <= 0 || qosClass(ofThread: thread) >= urgency {
            // mutant(override-outlives-its-waiter): _ = override
            endOverride(override)
            return .none
        }
        if urgency == current { return boost }
        // The new override first: the thread is never unraised in between.
        guard let started = startOverride(ofThread: thread, qosClass: urgency) else { return boost }
        endOverride(override)
        return .qosOverride(started, urgency: urgency)
    }
}

// MARK: - The real calls

/// The concurrency runtime's escalation (`qsv_escalate_task`).
struct RuntimeTaskEscalation: TaskEscalationCalls {
    func escalate(task: Int, to priority: UInt8) {
        guard let pointer = UnsafeMutableRawPointer(bitPattern: task) else { return }
        qsv_escalate_task(pointer, Int(priority))
    }
}

#if canImport(Darwin)
    /// Apple platforms: `pthread_get_qos_class_np` and `pthread_override_qos_class_start_np`/`_end_np`.
    struct DarwinQoSOverrides: QoSOverrideCalls {
        func qosClass(ofThread thread: Int) -> Int32 {
            Int32(qsv_qos_class_of_thread(UInt(bitPattern: thread)))
        }

        func startOverride(ofThread thread: Int, qosClass: Int32) -> UInt? {
            qsv_qos_override_start(UInt(bitPattern: thread), qosClass).map { UInt(bitPattern: $0) }
        }

        func endOverride(_ override: UInt) {
            if let handle = UnsafeMutableRawPointer(bitPattern: override) { qsv_qos_override_end(handle) }
        }
    }
#else
    /// Linux: `pthread_getschedparam` and `pthread_setschedparam`.
    struct LinuxRealtimeScheduling: RealtimeSchedulingCalls {
        var realtimePolicies: (fifo: Int32, roundRobin: Int32) { (qsv_sched_fifo(), qsv_sched_rr()) }

        func scheduling(ofThread thread: Int) -> ThreadScheduling? {
            var (policy, priority): (Int32, Int32) = (0, 0)
            guard qsv_thread_scheduling(UInt(bitPattern: thread), &policy, &priority) == 0 else { return nil }
            return ThreadScheduling(policy: policy, priority: priority)
        }

        func setScheduling(_ scheduling: ThreadScheduling, ofThread thread: Int) -> Bool {
            qsv_set_thread_scheduling(UInt(bitPattern: thread), scheduling.policy, scheduling.priority) == 0
        }
    }
#endif
