#if DEBUG
    import Foundation

    @_spi(Testing) import QueueSafeValue

    // MARK: - RecordingPriorityBackend

    /// A fake of the platform's priority calls (see `PriorityBackend` in the library): it plays the
    /// kernel for a controlled world or a test, so that either platform's policy — Linux's real-time
    /// policy or Apple platforms' QoS overrides — runs here and is checked.
    ///
    /// It keeps each thread's own urgency (a real-time priority, or a QoS class) and what raises it
    /// now (its scheduling, or its live overrides), says what each thread runs at, and records a
    /// *misuse*: an override ended twice or never started, a raise of a thread that runs at least
    /// that urgently on its own, a scheduling set on a thread in a policy that is not the real-time
    /// one or the thread's own. ``leftovers`` says what was still raised when nothing should be (the
    /// end of a run).
    // @unchecked Sendable: every field is touched under `lock`
    final class RecordingPriorityBackend: RealtimeSchedulingCalls, QoSOverrideCalls, TaskEscalationCalls,
        @unchecked Sendable
    {
        /// Which platform it plays.
        enum Platform: Sendable, CustomStringConvertible {
            /// Linux: raising a thread gives it SCHED_FIFO.
            case linux
            /// Apple platforms: raising a thread starts a QoS override.
            case apple

            var description: String { self == .linux ? "Linux's real-time policy" : "Apple's QoS overrides" }
        }

        /// Linux's numbers for the policies (`SCHED_OTHER` is 0).
        static let fifo: Int32 = 1
        static let roundRobin: Int32 = 2

        let platform: Platform
        /// Whether escalations also reach the concurrency runtime (the tasks of a controlled world
        /// are real tasks, whose escalation the library's behaviour may depend on).
        private let forwardsEscalations: Bool
        private let lock = NSLock()
        /// Each thread's own urgency: its real-time priority, or its QoS class (0: none).
        private var own: [Int: Int32] = [:]
        /// Linux: each thread's scheduling, where a call set it.
        private var scheduling: [Int: ThreadScheduling] = [:]
        /// Apple: the live overrides, by handle.
        private var overrides: [UInt: (thread: Int, qosClass: Int32)] = [:]
        private var nextOverride: UInt = 1
        private var misuse: String?
        private var overridesStarted = 0
        private var schedulingsSet = 0
        private var escalated: [(task: Int, priority: UInt8)] = []
        private var log: [String] = []
        /// Whether the calls that raise a thread are refused (as Linux refuses a real-time policy to
        /// a process without CAP_SYS_NICE).
        private var refusing = false

        /// A fake of `platform`.
        /// - Parameter forwardingEscalations: whether task escalations also reach the runtime.
        init(_ platform: Platform, forwardingEscalations: Bool = true) {
            self.platform = platform
            self.forwardsEscalations = forwardingEscalations
        }

        /// The library's backend that makes its calls here.
        var backend: PriorityBackend {
            switch platform {
            case .linux: .realtimePolicy(self, tasks: self)
            case .apple: .qosOverrides(self, tasks: self)
            }
        }

        /// Gives `thread` an urgency of its own: a real-time priority (SCHED_FIFO) on Linux, a QoS
        /// class on Apple platforms; 0 for none.
        func setOwnUrgency(ofThread thread: Int, to urgency: Int32) {
            lock.withLock { own[thread] = urgency }
        }

        // MARK: What the kernel would say

        /// The urgency `thread` has on its own (see ``setOwnUrgency(ofThread:to:)``).
        func ownUrgency(ofThread thread: Int) -> Int32 {
            lock.withLock { own[thread] ?? 0 }
        }

        /// The urgency `thread` runs at now: its own, or what raises it, whichever is higher.
        func runningUrgency(ofThread thread: Int) -> Int32 {
            lock.withLock { runningLocked(thread) }
        }

        private func runningLocked(_ thread: Int) -> Int32 {
            let mine = own[thread] ?? 0
            switch platform {
            case .linux:
                guard let set = scheduling[thread] else { return mine }
                return set.policy == Self.fifo || set.policy == Self.roundRobin ? set.priority : 0
            case .apple:
                return overrides.values.filter { $0.thread == thread }.map(\.qosClass).reduce(mine, max)
            }
        }

        /// The first misuse of the calls, if any (see the type's documentation).
        var firstMisuse: String? { lock.withLock { misuse } }

        /// What still raises a thread (an override not ended, a thread not back at its own
        /// scheduling), or `nil`.
        var leftovers: String? {
            lock.withLock {
                let live = overrides.sorted { $0.key < $1.key }.map { "override #\($0.key) at \($0.value.qosClass)" }
                let raised = scheduling.filter { thread, set in set != ownScheduling(thread) }.map {
                    "a thread at \($0.value), not its own \(ownScheduling($0.key))"
                }
                let all = live + raised
                return all.isEmpty ? nil : all.joined(separator: ", ")
            }
        }

        /// How many overrides were started, and how many schedulings were set, so far.
        var callCounts: (overridesStarted: Int, schedulingsSet: Int) {
            lock.withLock { (overridesStarted, schedulingsSet) }
        }

        /// Every call that changed a thread, in order: `start #n at c` and `end #n` (Apple), `set
        /// policy/priority` (Linux); each names the thread.
        var calls: [String] { lock.withLock { log } }

        /// From now on, refuses (`true`) or grants the calls that raise a thread.
        func refuseRaises(_ refuses: Bool) {
            lock.withLock { refusing = refuses }
        }

        /// The escalations made so far, in order.
        var escalations: [(task: Int, priority: UInt8)] { lock.withLock { escalated } }

        private func ownScheduling(_ thread: Int) -> ThreadScheduling {
            let mine = own[thread] ?? 0
            return ThreadScheduling(policy: mine > 0 ? Self.fifo : 0, priority: mine)
        }

        private func record(_ problem: String) {
            if misuse == nil { misuse = problem }
        }

        // MARK: RealtimeSchedulingCalls (Linux)

        var realtimePolicies: (fifo: Int32, roundRobin: Int32) { (Self.fifo, Self.roundRobin) }

        func scheduling(ofThread thread: Int) -> ThreadScheduling? {
            lock.withLock { scheduling[thread] ?? ownScheduling(thread) }
        }

        func setScheduling(_ scheduling: ThreadScheduling, ofThread thread: Int) -> Bool {
            lock.withLock {
                if platform != .linux { record("a scheduling was set on \(platform)") }
                if scheduling.policy != Self.fifo && scheduling != ownScheduling(thread) {
                    record("a thread was set to \(scheduling), neither a raise nor its own \(ownScheduling(thread))")
                }
                if scheduling.policy == Self.fifo, scheduling != ownScheduling(thread), let mine = own[thread],
                    mine >= scheduling.priority
                {
                    record("a thread that runs at \(mine) on its own was raised to \(scheduling.priority)")
                }
                if refusing && scheduling != ownScheduling(thread) { return false }
                schedulingsSet += 1
                log.append("set \(scheduling) on \(thread)")
                self.scheduling[thread] = scheduling == ownScheduling(thread) ? nil : scheduling
                return true
            }
        }

        // MARK: QoSOverrideCalls (Apple platforms)

        func qosClass(ofThread thread: Int) -> Int32 {
            lock.withLock { own[thread] ?? 0 }
        }

        func startOverride(ofThread thread: Int, qosClass: Int32) -> UInt? {
            lock.withLock {
                if platform != .apple { record("an override was started on \(platform)") }
                if qosClass <= 0 { record("an override was started at an unspecified class") }
                if let mine = own[thread], mine >= qosClass {
                    record("an override at \(qosClass) was started for a thread that runs at \(mine) on its own")
                }
                if refusing { return nil }
                overridesStarted += 1
                let handle = nextOverride
                nextOverride += 1
                overrides[handle] = (thread, qosClass)
                log.append("start #\(handle) at \(qosClass) on \(thread)")
                return handle
            }
        }

        func endOverride(_ override: UInt) {
            lock.withLock {
                guard let (thread, _) = overrides.removeValue(forKey: override) else {
                    let known = override < nextOverride
                    record(known ? "override #\(override) was ended twice" : "an unknown override was ended")
                    return
                }
                log.append("end #\(override) on \(thread)")
            }
        }

        // MARK: TaskEscalationCalls

        func escalate(task: Int, to priority: UInt8) {
            lock.withLock { escalated.append((task, priority)) }
            if forwardsEscalations { PriorityBackend.runtimeEscalation.escalate(task: task, to: priority) }
        }
    }
#endif
