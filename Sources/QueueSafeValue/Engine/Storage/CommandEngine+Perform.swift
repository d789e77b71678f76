// Performing the machine's actions: the one place where the storage carries out what a transition
// decided. Two halves, because a grant's publication belongs to the transition's lock section and
// everything else must wait until the lock is released:
//
// - `take(_:_:)`, under the engine lock, right after the transition: marks the granted waiter,
//   publishes a granted dispatched command (in the dispatched holder's slot, or as a helper's job),
//   and takes from the waiters what the rest needs (their continuations and tasks are guarded by
//   this lock). It runs no user code, signals nothing and releases no reference.
// - `perform(_:_:)`, after unlocking: raises and starts the grant as the machine chose, ends the
//   releaser's boost, finishes a manual completion, frees the value, resumes the tasks of commands
//   that left, cancels tasks, and lets go of the references it took.
extension CommandEngine {
    /// What a rare action needs from a waiter, taken under the engine lock by ``take(_:_:)``
    /// (the waiters' continuations and tasks are guarded by that lock).
    enum Deferred {
        /// The task of a command that left: resume it.
        case resume(TurnContinuation)
        /// Cancel this task (``CommandQueue/cancelAll()``).
        case cancel(any CancellableTask)
        /// A manual completion arrived after the closure returned: finish the command.
        case finish(Contender)
        /// A shared read granted beside the first grant: start it.
        case start(Contender)
        /// A waiting thread was handed a shared read to run: wake it.
        case postJob(Contender)
    }

    /// The thread and task of a newly granted holder that inherits an urgency (see
    /// ``raiseHeir(_:)``).
    typealias Heir = (thread: Int, task: Int)

    /// A transition's actions as the storage holds them between its two halves: the references
    /// apart, and the rest as plain values. (As one struct holding references, the compiler
    /// copied and destroyed them through value witnesses, hundreds of instructions per release.
    /// Keep it this size: with one more flag, the compiler copied it through the runtime's tuple
    /// witnesses, +270 instructions per dispatched command; what only `take` needs stays there.)
    typealias Taken = (
        grant: Contender?, helper: Contender?, ended: Contender?,
        flags: (kind: CommandKind, starter: Machine.Starter, urgency: Urgency, endBoost: Bool, freeValue: Bool),
        heir: Heir
    )

    /// Runs one transition under the engine lock, takes its actions there and performs them after
    /// unlocking. For the rarer transitions, which return their actions by value (`nil`: none).
    /// - Returns: what ``perform(_:_:)`` returned.
    @discardableResult
    final func apply(_ transition: (inout Machine) -> Machine.Actions?) -> Contender? {
        SyncPoints.inheritance(true)
        defer { SyncPoints.inheritance(false) }
        var deferred: [Deferred] = []
        var lowersBoost = false
        let taken = machine.withLock { machine -> Taken? in
            guard let actions = transition(&machine) else {
                lowersBoost = machine.takeBoostSync()
                return nil
            }
            machine.outbox = actions
            lowersBoost = machine.takeBoostSync()
            return take(&machine, &deferred)
        }
        // A waiter left: the boost it asked for ends with it (see `PriorityInheritance.swift`).
        defer { if lowersBoost { lowerBoost() } }
        guard let taken else { return nil }
        return perform(taken, deferred)
    }

    /// Under the engine lock, in the lock section of the transition that left its actions in the
    /// machine's outbox: empties the outbox, marks the granted waiter, publishes a granted
    /// dispatched command (in the dispatched holder's slot, or as a helper's job), and takes from
    /// the waiters what the rarer actions need.
    @inline(__always)
    final func take(_ machine: inout Machine, _ deferred: inout [Deferred]) -> Taken {
        let grant = machine.outbox.grant.take()
        let helper = machine.outbox.helper.take()
        let ended = machine.outbox.ended.take()
        let flags = (
            kind: machine.outbox.grantKind, starter: machine.outbox.starter, urgency: machine.outbox.urgency,
            endBoost: machine.outbox.endBoost, freeValue: machine.outbox.freeValue
        )
        // Needed only here, under the lock: kept out of what `perform` receives.
        let shared = machine.outbox.grantShared
        (machine.outbox.urgency, machine.outbox.endBoost, machine.outbox.freeValue) = (.none, false, false)
        machine.outbox.grantShared = false
        if !machine.outbox.others.isEmpty {
            for other in machine.outbox.others {
                switch other {
                case .left(let waiter):
                    if let continuation = waiter.continuationToResume { deferred.append(.resume(continuation)) }
                case .cancel(let waiter):
                    // Read here: a holder's task is dropped by its release, after that release unlocks.
                    if let task = waiter.taskToCancel { deferred.append(.cancel(task)) }
                case .finish(let waiter):
                    deferred.append(.finish(waiter))
                case .startReader(let reader):
                    reader.isGranted = true
                    deferred.append(.start(reader))
                case .helpReader(let reader, let helper):
                    reader.isGranted = true
                    helper.assignJob(reader)
                    deferred.append(.postJob(helper))
                }
            }
            // mutant(outbox-keeps-others): _ = ()
            machine.outbox.others = []
        }
        var heir: Heir = (0, 0)
        if let next = grant {
            next.isGranted = true
            if !flags.urgency.isNone { heir = (next.threadToBoost, next.taskToEscalate) }
            if shared {
                // A shared read is not published in the dispatched holder's slot: its block claims
                // it from the machine, and a helper takes it from there too.
                if let helper { helper.assignJob(next) }
            } else if flags.kind == .dispatched {
                dispatchedHolderQueue.storeRelaxed(next.targetQueueID)
                if let helper {
                    // Handed over in this lock section: a helper that gives up takes the lock to
                    // leave, and then finds the job (see `BlockingWaiter`).
                    pendingDispatch.storeRelease(Self.dispatchStarted)
                    // mutant(helper-job-after-unlock): _ = helper
                    helper.assignJob(next)
                } else {
                    // Published in the grant's lock section, for a waiter on its queue that comes later.
                    publishPendingDispatch(next)
                }
            }
        }
        return (grant, helper, ended, flags, heir)
    }

    /// After unlocking: performs the actions taken by ``take(_:_:)``, in the order
    /// ``EngineStateMachine/Actions`` gives.
    /// - Returns: the granted command when the machine chose the releasing block to run it
    ///   (``EngineStateMachine/Starter/releaser``): the caller claims and runs it inline.
    @inline(__always)
    final func perform(_ taken: consuming Taken, _ deferred: [Deferred]) -> Contender? {
        let (grant, helper, ended, flags, heir) = taken
        // A boosted holder hands the section on while still boosted, and only then goes back to
        // its own priority (below): at its own priority it might not get the processor to hand it on.
        var inline: Contender?
        if let grant {
            // The new holder inherits the urgency of the waiters still parked before it starts.
            if !flags.urgency.isNone { raiseHeir(heir) }
            switch flags.starter {
            case .itself:
                grant.start()
            case .helper:
                // mutant(helper-job-after-unlock): helper!.assignJob(grant); helper!.postJob()
                helper!.postJob()
            case .releaser:
                inline = grant
            }
        }
        if flags.endBoost { endBoostOfCurrentThread() }
        if flags.freeValue { freeValue() }
        // Its release is the last to touch it: the machine forgot it in the same transition.
        ended?.endHold()
        for item in deferred {
            switch item {
            case .resume(let continuation): continuation.resumeFromAnotherThread()
            case .cancel(let task): task.cancel()
            case .finish(let command): command.finishManualCompletion()
            case .start(let reader): reader.start()
            case .postJob(let helper): helper.postJob()
            }
        }
        return inline
    }
}
