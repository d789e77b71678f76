// Performing the machine's actions: the one place where the storage carries out what a transition
// decided. Two halves, because a grant's publication belongs to the transition's lock section and
// everything else must wait until the lock is released:
//
// - `take(_:_:)`, under the engine lock, right after the transition, with the transition's actions
//   taken whole: marks the granted waiter, publishes a granted dispatched command (in the
//   dispatched holder's slot, or as a helper's job),
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
    /// ``raiseHeir(_:_:)``).
    typealias Heir = (thread: Int, task: Int)

    /// How ``perform(_:_:)`` starts the command a transition granted: the machine's
    /// ``EngineStateMachine/Starter``, with the command (and the helper) it concerns.
    enum Start {
        /// Nothing was granted.
        case none
        /// ``EngineStateMachine/Starter/itself``: start the granted command.
        case itself(Contender)
        /// ``EngineStateMachine/Starter/helper(_:)``: wake the helper, which was handed the
        /// granted command (`job`) under the lock.
        case helper(Contender, job: Contender)
        /// ``EngineStateMachine/Starter/releaser``: the releasing block runs the granted command.
        case releaser(Contender)
    }

    /// A transition's actions as the storage holds them between its two halves: how to start the
    /// grant, the ended holder, the plain values, and the heir's thread and task read under the
    /// lock. Storage types only: a type of the generic machine in here was copied and destroyed
    /// through its generic value witnesses, hundreds of instructions per release (and with one
    /// more field, the old form of this tuple was copied through the runtime's tuple witnesses,
    /// +270 per dispatched command). What only `take` needs stays there.
    ///
    /// It leaves the lock section through a local the section assigns, never as `withLock`'s
    /// result: there, the compiler handled it through generic value witnesses and metadata lookups
    /// (about 200 instructions per release).
    typealias Taken = (
        start: Start, ended: Contender?, flags: (urgency: Urgency, endBoost: Bool, freeValue: Bool), heir: Heir
    )

    /// No actions: what a lock section's local holds until the section takes the transition's.
    static var nothingTaken: Taken { (.none, nil, (.none, false, false), (0, 0)) }

    /// Runs one transition under the engine lock, takes its actions there and performs them after
    /// unlocking. For the rarer transitions, which return their actions by value (`nil`: none).
    /// - Returns: what ``perform(_:_:)`` returned.
    @discardableResult
    final func apply(_ transition: (inout Machine) -> Machine.Actions?) -> Contender? {
        SyncPoints.inheritance(true)
        defer { SyncPoints.inheritance(false) }
        var deferred: [Deferred] = []
        var lowersBoost = false
        var taken: Taken?
        machine.withLock { machine in
            let actions = transition(&machine)
            lowersBoost = machine.takeBoostSync()
            if let actions { taken = take(actions.taken(), &deferred) }
        }
        // A waiter left: the boost it asked for ends with it (see `PriorityInheritance.swift`).
        defer { if lowersBoost { lowerBoost() } }
        guard let taken else { return nil }
        return perform(taken, deferred)
    }

    /// Under the engine lock, in the lock section of the transition that returned `actions` (or
    /// left them in the machine's outbox, taken whole by ``EngineStateMachine/takeOutbox()``):
    /// marks the granted waiter, publishes a granted dispatched command (see
    /// ``publishGrantedDispatch(_:helper:)``), and takes from the waiters what the rarer actions
    /// need.
    @inline(__always)
    final func take(_ actions: consuming Machine.TakenActions, _ deferred: inout [Deferred]) -> Taken {
        let (grant, ended, endBoost, freeValue, others) = actions
        if !others.isEmpty {
            for other in others {
                switch other {
                case .left(let waiter):
                    // mutant(take-drops-left): break
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
        }
        guard let grant else { return (.none, ended, (.none, endBoost, freeValue), (0, 0)) }
        let next = grant.handle
        next.isGranted = true
        let heir: Heir = grant.urgency.isNone ? (0, 0) : (next.threadToBoost, next.taskToEscalate)
        let start: Start
        switch grant.starter {
        case .helper(let helper):
            if grant.shared {
                // A shared read is not published in the dispatched holder's slot: its block claims
                // it from the machine, and a helper takes it from there too.
                helper.assignJob(next)
            } else {
                publishGrantedDispatch(next, helper: helper)
            }
            start = .helper(helper, job: next)
        case .itself:
            if grant.kind == .dispatched && !grant.shared { publishGrantedDispatch(next, helper: nil) }
            start = .itself(next)
        case .releaser:
            publishGrantedDispatch(next, helper: nil)
            start = .releaser(next)
        }
        return (start, ended, (grant.urgency, endBoost, freeValue), heir)
    }

    /// After unlocking: performs the actions taken by ``take(_:_:)``, in the order
    /// ``EngineStateMachine/Actions`` gives.
    /// - Returns: the granted command when the machine chose the releasing block to run it
    ///   (``EngineStateMachine/Starter/releaser``): the caller claims and runs it inline.
    @inline(__always)
    final func perform(_ taken: consuming Taken, _ deferred: [Deferred]) -> Contender? {
        let (start, ended, flags, heir) = taken
        // A boosted holder hands the section on while still boosted, and only then goes back to
        // its own priority (below): at its own priority it might not get the processor to hand it on.
        var inline: Contender?
        // The new holder inherits the urgency of the waiters still parked before it starts.
        if !flags.urgency.isNone { raiseHeir(heir, flags.urgency) }
        switch start {
        case .none:
            break
        case .itself(let grant):
            grant.start()
        // mutant(helper-job-after-unlock): case .helper(let helper, let job): helper.assignJob(job)
        case .helper(let helper, job: _):
            helper.postJob()
        case .releaser(let grant):
            inline = grant
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
