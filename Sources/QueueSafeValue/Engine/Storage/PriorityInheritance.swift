import QueueSafeValueShims

// Priority inheritance: while a party of higher urgency waits for the section, the holder runs at
// least that urgently, and no longer than it holds.
//
// The state machine decides (``EngineStateMachine/park(_:urgency:holderBits:)``, `beginBoost(for:)`, and what
// a release returns: `endBoost`, `nextUrgency`); this file performs it, after the engine lock is
// released, under the engine's boost lock, which serializes raising a holder with ending that
// raise. A boost is applied only while the waiter that asked for it still waits (checked under the
// engine lock, inside the boost lock): the section cannot change hands then without a release that
// sees the hold was boosted and takes the boost lock too. So the holder is alive while it is raised,
// and every raise is undone by the raised thread itself before it leaves the holder's code — at its
// release, or, for a dispatch command with a manual completion, when its closure returns.
//
// A task holder is escalated instead (Swift's runtime keeps a task's escalation until the task
// ends: that is what awaiting a task does too). On Linux a thread's urgency is its real-time
// priority (SCHED_FIFO, SCHED_RR), and raising another thread needs CAP_SYS_NICE or an
// RLIMIT_RTPRIO: without it the boost quietly does not happen. On Apple platforms it is a QoS
// override of the holder thread.

/// What the engine's boost lock guards: the boosted threads of the engine, and what each boost
/// changed. At most two at once: the holder, and for a moment the releaser that hands the section
/// to it.
struct BoostRecord {
    var boosted: [Int: qsv_boost] = [:]
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
    /// the task priority a thread of it stands for (on Apple platforms its QoS class, which is the
    /// same scale; on Linux `.high` for a real-time thread, `.medium` for any other).
    static func ofCurrentThread() -> Urgency {
        let thread = qsv_thread_urgency()
        #if canImport(Darwin)
            return Urgency(thread: thread, task: UInt8(clamping: thread))
        #else
            let task = thread > 0 ? TaskPriority.high : TaskPriority.medium
            return Urgency(thread: thread, task: task.rawValue)
        #endif
    }

    /// The urgency of a task of `priority`, which is about to suspend: its priority, and on Apple
    /// platforms the QoS class it runs at (the same number).
    static func ofTask(_ priority: TaskPriority) -> Urgency {
        #if canImport(Darwin)
            return Urgency(thread: Int32(priority.rawValue), task: priority.rawValue)
        #else
            return Urgency(thread: 0, task: priority.rawValue)
        #endif
    }
}

extension CommandEngine {
    /// The waiting command `ticket` is about to park or suspend at `urgency`: raise the holder if it
    /// runs less urgently. Costs nothing more when the holder already inherits at least as much.
    final func inheritUrgency(_ ticket: Ticket, _ urgency: Urgency) {
        let raised = withMachineLocked { machine in
            machine.park(ticket, urgency: urgency, holderBits: state.loadAcquire() & EngineWord.holderMask)
        }
        guard let raised else { return }
        boosts.withLock { record in
            let holder = withMachineLocked { machine -> (thread: Int, task: Int)? in
                guard machine.beginBoost(for: ticket) else { return nil }
                return (ownerThread.loadAcquire(), ownerTask.loadAcquire())
            }
            guard let holder else { return }
            raise(thread: holder.thread, task: holder.task, to: raised, record: &record)
            // Every shared read holding runs at least as urgently too. A reader listed here has not
            // released yet: its release ends its thread's boost under this lock, after this raise.
            for reader in record.readers {
                raise(thread: reader.thread, task: reader.task, to: raised, record: &record)
            }
        }
    }

    /// A release returned `nextUrgency`: the new holder (its thread and task, read under the engine
    /// lock) inherits the urgency of the waiters still parked. Call after unlocking, before starting
    /// it.
    final func raiseHeir(_ heir: (thread: Int, task: Int), to urgency: Urgency) {
        boosts.withLock { record in raise(thread: heir.thread, task: heir.task, to: urgency, record: &record) }
    }

    /// The calling thread stops running the holder's code: it released the section (and started
    /// the next holder), or the hold goes on without it (a dispatch command's closure returned
    /// before its manual completion). It ends its boost, if it has one.
    final func endBoostOfCurrentThread() {
        boosts.withLock { record in endBoost(of: currentThreadID(), record: &record) }
    }

    /// Under the boost lock: raises the holder's thread (if one runs the holder's code) and task.
    private func raise(thread: Int, task: Int, to urgency: Urgency, record: inout BoostRecord) {
        if thread != 0 && urgency.thread > 0 {
            var boost = record.boosted[thread] ?? qsv_boost()
            if qsv_boost_thread(UInt(bitPattern: thread), urgency.thread, &boost) != 0 {
                record.boosted[thread] = boost
            }
        }
        if task != 0 && urgency.task > 0 {
            SyncPoints.willTouchTask()  // the runtime takes the task's lock, as a resume does
            qsv_escalate_task(UnsafeMutableRawPointer(bitPattern: task), Int(urgency.task))
        }
    }

    /// Under the boost lock: ends the boost of `thread` (the calling thread), if it has one.
    private func endBoost(of thread: Int, record: inout BoostRecord) {
        guard var boost = record.boosted.removeValue(forKey: thread) else { return }
        qsv_end_boost(UInt(bitPattern: thread), &boost)
    }
}
