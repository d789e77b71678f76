// Performing the machine's actions: the one place where the storage carries out what a transition
// decided. Two halves, because a grant's publication belongs to the transition's lock section and
// everything else must wait until the lock is released:
//
// - `prepare(_:)`, under the engine lock, right after the transition: marks the granted waiter,
//   publishes a granted dispatched command (in the dispatched holder's slot, or as a helper's job),
//   and takes from the waiters what the rest needs (their continuations and tasks are guarded by
//   this lock). It runs no user code, signals nothing and releases no reference.
// - `perform(_:)`, after unlocking: raises and starts the grant as the machine chose, ends the
//   releaser's boost, finishes a manual completion, frees the value, resumes the tasks of commands
//   that left, cancels tasks, and lets go of the references it took.
extension CommandEngine {
    /// A transition's actions, with what performing them needs from the waiters, taken under the
    /// engine lock by ``prepare(_:)``.
    struct Effects {
        let actions: Machine.Actions
        /// The new holder's thread and task, when it inherits an urgency.
        var heir = (thread: 0, task: 0)
        /// The suspended tasks of commands that left.
        var resume: [TurnContinuation] = []
        /// Tasks to cancel.
        var cancel: [any CancellableTask] = []
        /// The task reference of a holder that ended: released after unlocking.
        var droppedTask: (any CancellableTask)?
    }

    /// Under the engine lock, in the lock section of the transition that returned `actions`.
    @inline(__always)
    final func prepare(_ actions: Machine.Actions) -> Effects {
        var effects = Effects(actions: actions)
        if let grant = actions.grant {
            let next = grant.handle
            next.isGranted = true
            if grant.urgency != nil { effects.heir = (next.threadToBoost, next.taskToEscalate) }
            if grant.kind == .dispatched {
                dispatchedHolderQueue.storeRelaxed(next.targetQueueID)
                switch grant.starter {
                case .helper(let helper):
                    // Handed over in this lock section: a helper that gives up takes the lock to
                    // leave, and then finds the job (see `BlockingWaiter`).
                    pendingDispatch.storeRelease(Self.dispatchStarted)
                    // mutant(helper-job-after-unlock): _ = helper
                    helper.assignJob(next)
                case .itself, .releaser:
                    // Published in the grant's lock section, for a waiter on its queue that comes later.
                    publishPendingDispatch(next)
                }
            }
        }
        if let ended = actions.ended { effects.droppedTask = ended.takeTask() }
        for waiter in actions.left {
            if let continuation = waiter.continuationToResume { effects.resume.append(continuation) }
        }
        for waiter in actions.cancel {
            if let task = waiter.taskToCancel { effects.cancel.append(task) }
        }
        return effects
    }

    /// After unlocking: performs the actions, in the order ``EngineStateMachine/Actions`` gives.
    /// - Returns: the granted command when the machine chose the releasing block to run it
    ///   (``EngineStateMachine/Starter/releaser``): the caller claims and runs it inline.
    @discardableResult
    final func perform(_ effects: Effects) -> Contender? {
        let actions = effects.actions
        var inline: Contender?
        if let grant = actions.grant {
            // The new holder inherits the urgency of the waiters still parked before it starts.
            if let urgency = grant.urgency { raiseHeir(effects.heir, to: urgency) }
            switch grant.starter {
            case .itself:
                grant.handle.start()
            case .helper(let helper):
                // mutant(helper-job-after-unlock): helper.assignJob(grant.handle); helper.postJob()
                helper.postJob()
            case .releaser:
                inline = grant.handle
            }
        }
        // A boosted holder hands the section on while still boosted, and only then goes back to
        // its own priority: at its own priority it might not get the processor to hand it on.
        if actions.endBoost { endBoostOfCurrentThread() }
        actions.finish?.finishManualCompletion()
        if actions.freeValue { freeValue() }
        for continuation in effects.resume { continuation.resumeFromAnotherThread() }
        for task in effects.cancel { task.cancel() }
        // `effects.droppedTask` and the machine's references go with `effects`, here.
        return inline
    }
}
