import QueueSafeValueShims

// Performing the machine's actions: the one place where the storage carries out what a transition
// decided. Every transition that returns `EngineStateMachine.Actions` runs through `perform(_:)`,
// in two halves, because a grant's publication belongs to the transition's lock section and
// everything else must wait until the lock is released:
//
// - `prepare(_:_:)`, under the engine lock, right after the transition: marks the granted waiter,
//   publishes a granted dispatched command (in the dispatched holder's slot, or as a helper's job),
//   and reads from the waiters what the rest needs (their continuations and tasks are guarded by
//   this lock). It runs no user code, signals nothing and releases no reference.
// - `carryOut(_:nextHolder:_:)`, after unlocking: raises and starts the grant as the machine chose, ends
//   the releaser's boost, frees the value, lets go of an ended holder, then carries out the rarer
//   actions in order: resumes the tasks of commands that left, cancels tasks, finishes a manual
//   completion, starts shared reads.
extension CommandEngine {
    /// A rarer action (``EngineStateMachine/Other``) with what it needs from its waiter, read under
    /// the engine lock by ``prepare(_:_:)``.
    enum Deferred {
        /// The task of a command that left: resume it.
        case resume(TurnContinuation)
        /// Cancel this task (``CommandQueue/cancelAll()``).
        case cancel(any CancellableTask)
        /// A manual completion arrived after the closure returned: finish the command.
        case finish(Waiter)
        /// A shared read granted beside the first grant: start it.
        case start(Waiter)
        /// A waiting thread was handed a shared read to run: wake it.
        case postJob(Waiter)
        /// A waiting thread is woken to claim a free section (eventually fair mode).
        case postClaim(Waiter)
        /// A waiting thread is woken: its command left the queue (it expired).
        case postLeft(Waiter)
        /// Tell the running monitor.
        case report(QueueMonitor.Event)
    }

    /// The thread and task of a newly granted holder that inherits an urgency (see
    /// ``raiseNextHolder(_:_:)``), read under the lock.
    typealias NextHolder = (thread: Int, task: Int)

    /// What ``perform(_:)`` hands back: what the transition found for its caller
    /// (``EngineStateMachine/Actions/found``), and the granted command the machine chose the
    /// releasing block to run (``EngineStateMachine/Starter/releasingBlock``): the caller claims
    /// and runs it inline.
    struct Performed {
        var found: Machine.Found
        var inline: Waiter?
    }

    /// Runs one transition under the engine lock and carries out its actions after unlocking.
    /// - Parameter transition: the machine's transition (with the state word's handling, where it
    ///   changes the word).
    /// - Returns: what the transition found, and a command to run inline, if any.
    @inline(__always)
    @discardableResult
    final func perform(_ transition: (inout Machine) -> Machine.Actions) -> Performed {
        // The actions may hand a raise on to the nextHolder, or end the releaser's own.
        SyncPoints.inheritance(true)
        defer { SyncPoints.inheritance(false) }
        var deferred: [Deferred] = []
        var nextHolder: NextHolder = (0, 0)
        // The actions leave the lock section as its result, never through a captured variable:
        // the compiler then moves them instead of copying every reference they hold.
        var actions = machine.withLock { machine in
            var actions = transition(&machine)
            // A command that expired keeps the queue as the release that passed it over left it,
            // for its error (rare: only here does the lock section read the whole machine).
            for case .expired(let waiter) in actions.others {
                waiter.expired(snapshot(machine, word: state.loadAcquire()))
            }
            nextHolder = prepare(&actions, &deferred)
            return actions
        }
        // A waiter left: the boost it asked for ends with it (see `PriorityInheritance.swift`).
        // mutant(boost-sync-dropped): let lowersBoost = false
        let lowersBoost = actions.lowersBoost
        defer { if lowersBoost { lowerBoost() } }
        let found = actions.found
        return Performed(found: found, inline: carryOut(&actions, nextHolder: nextHolder, deferred))
    }

    /// Under the engine lock, in the lock section of the transition that returned `actions`:
    /// marks the granted waiter, publishes a granted dispatched command (see
    /// ``publishGrantedDispatch(_:helper:)``), and reads from the waiters what the rarer actions
    /// need.
    /// - Returns: the nextHolder's thread and task, if the grant inherits an urgency.
    @inline(__always)
    private func prepare(_ actions: inout Machine.Actions, _ deferred: inout [Deferred]) -> NextHolder {
        for other in actions.others {
            switch other {
            case .left(let waiter):
                // mutant(prepare-drops-left): break
                if let continuation = waiter.continuationToResume { deferred.append(.resume(continuation)) }
            case .expired(let waiter):
                if let continuation = waiter.continuationToResume {
                    deferred.append(.resume(continuation))
                } else {
                    deferred.append(.postLeft(waiter))
                }
            case .cancel(let waiter):
                // Read here: a holder's task is dropped by its release, after that release unlocks.
                if let task = waiter.taskToCancel { deferred.append(.cancel(task)) }
            case .finish(let waiter):
                deferred.append(.finish(waiter))
            case .startReader(let reader):
                reader.isGranted = true
                reader.isGrantedShared = true
                deferred.append(.start(reader))
            case .helpReader(let reader, let helper):
                reader.isGranted = true
                reader.isGrantedShared = true
                helper.assignJob(reader)
                deferred.append(.postJob(helper))
            case .claim(let waiter):
                deferred.append(.postClaim(waiter))
            case .longHoldEnded(let nanoseconds):
                // Before the grant below: the holder's words still name the hold that ended.
                if let event = longHoldEnded(nanoseconds: nanoseconds) { deferred.append(.report(event)) }
            }
        }
        // Moved out and back, so that reading it retains nothing.
        guard let grant = actions.grant.take() else { return (0, 0) }
        defer { actions.grant = consume grant }
        let next = grant.handle
        next.isGranted = true
        next.isGrantedShared = grant.shared
        // Under the lock, with a monitor running: two loads and a comparison (how long the command
        // waited came with the grant); an event is made only for a wait past its threshold.
        if grant.waited != Machine.Grant.unknownWait, qsv_monitor_load() != 0 {
            let waited = grant.waited
            let own = ownLongWaitWord.peekForAssertion()
            let threshold = own != 0 ? own : qsv_monitor_long_wait_load()
            if UInt(waited) >= UInt(bitPattern: threshold),
                let event = longWait(of: next, waited: waited, endedSite: holderSite.site)
            {
                deferred.append(.report(event))
            }
        }
        // Before it can start: a report that reads the section held reads its holder's call site.
        if !grant.shared { keepHolderSite(next.keptSite, priority: next.issuedPriority) }
        switch grant.starter {
        case .helper(let helper):
            if grant.shared {
                // A shared read is not published in the dispatched holder's slot: its block claims
                // it from the machine, and a helper takes it from there too.
                helper.assignJob(next)
            } else {
                publishGrantedDispatch(next, helper: helper)
            }
        case .itself:
            if grant.kind == .dispatched && !grant.shared { publishGrantedDispatch(next, helper: nil) }
        case .releasingBlock:
            publishGrantedDispatch(next, helper: nil)
        }
        return grant.urgency.isNone ? (0, 0) : (next.threadToBoost, next.taskToEscalate)
    }

    /// After unlocking: carries out the actions ``prepare(_:_:)`` prepared, in the order
    /// ``EngineStateMachine/Actions`` gives.
    /// - Returns: the granted command when the machine chose the releasing block to run it.
    @inline(__always)
    private func carryOut(_ actions: inout Machine.Actions, nextHolder: NextHolder, _ deferred: [Deferred]) -> Waiter? {
        // A boosted holder hands the section on while still boosted, and only then goes back to
        // its own priority (below): at its own priority it might not get the processor to hand it on.
        var inline: Waiter?
        var givesProcessorAway = false
        if let grant = actions.grant.take() {
            // The new holder inherits the urgency of the waiters still parked before it starts.
            if !grant.urgency.isNone { raiseNextHolder(nextHolder, grant.urgency) }
            switch grant.starter {
            case .itself:
                // Read before the start: once granted, the thread may run elsewhere.
                givesProcessorAway = grant.handle.waitsOnCallersProcessor
                grant.handle.start()
            // mutant(helper-job-after-unlock): case .helper(let helper): helper.assignJob(grant.handle)
            case .helper(let helper):
                helper.postJob()
            case .releasingBlock:
                inline = grant.handle
            }
        }
        if actions.endBoost { endBoostOfCurrentThread() }
        if actions.freeValue { freeValue() }
        // Its release is the last to touch it: the machine forgot it in the same transition.
        actions.ended.take()?.endHold()
        for item in deferred {
            switch item {
            case .resume(let continuation): continuation.resumeFromAnotherThread()
            case .cancel(let task): task.cancel()
            case .finish(let command): command.finishManualCompletion()
            case .start(let reader): reader.start()
            case .postJob(let helper): helper.postJob()
            case .postClaim(let waiter): waiter.postClaim()
            case .postLeft(let waiter): waiter.postLeft()
            case .report(let event): report(event)
            }
        }
        // Architecture, "More threads than cores": the new holder waits on this processor, and
        // cannot start until this thread gives it away.
        if givesProcessorAway { SyncPoints.yield() }
        return inline
    }
}
