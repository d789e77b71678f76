import QueueSafeValueShims

// Performing the machine's actions: the one place where the storage carries out what a transition
// decided. Every transition that returns `EngineStateMachine.Actions` runs through `perform(_:)`,
// in two halves, because a grant's publication belongs to the transition's lock section and
// everything else must wait until the lock is released:
//
// - `prepare(_:)`, under the engine lock, right after the transition: marks the granted waiter,
//   publishes a granted dispatched command (in the dispatched holder's slot, or as a helper's job),
//   and attaches to the rarer effects what they need from their waiters (their continuations and
//   tasks are guarded by this lock). It runs no user code, signals nothing and releases no
//   reference.
// - `carryOut(_:nextHolder:_:)`, after unlocking: raises and starts the grant as the machine chose, ends
//   the releaser's boost, frees the value, lets go of an ended holder, then carries out the rarer
//   actions in order: resumes the tasks of commands that left, cancels tasks, finishes a manual
//   completion, starts shared reads.
extension CommandEngine {
    /// The thread and task of a newly granted holder that inherits an urgency (see
    /// ``raiseNextHolder(_:_:)``), read under the lock.
    typealias NextHolder = (thread: Int, task: Int)

    /// What ``perform(_:)`` hands back: what the transition found for its caller
    /// (``EngineStateMachine/Actions/found``), the granted command the machine chose the
    /// releasing block to run (``EngineStateMachine/Starter/releasingBlock``: the caller claims
    /// and runs it inline), and the answer of a transition that has one besides its actions.
    struct Performed<Answer> {
        var found: Machine.Found
        var inline: Waiter?
        var answer: Answer
    }

    /// Runs one transition under the engine lock and carries out its actions after unlocking.
    /// - Parameter transition: the machine's transition (with the state word's handling, where it
    ///   changes the word).
    /// - Returns: what the transition found, and a command to run inline, if any.
    @inline(__always)
    @discardableResult
    final func perform(_ transition: (inout Machine) -> Machine.Actions) -> Performed<Void> {
        // The actions may hand a raise on to the nextHolder, or end the releaser's own.
        SyncPoints.inheritance(true)
        defer { SyncPoints.inheritance(false) }
        var nextHolder: NextHolder = (0, 0)
        // The actions leave the lock section as its result, never through a captured variable:
        // the compiler then moves them instead of copying every reference they hold.
        var actions = machine.withLock { machine in
            var actions = transition(&machine)
            // A command that expired gets its error, which shows the queue as the release that
            // passed it over left it (rare: only here does a lock section read the whole machine).
            if !actions.others.isEmpty {
                for case .expired(let waiter, _) in actions.others {
                    waiter.expired(snapshot(machine, word: state.loadAcquire()))
                }
            }
            nextHolder = prepare(&actions)
            return actions
        }
        return finish(&actions, nextHolder: nextHolder, answer: ())
    }

    /// ``perform(_:)`` for a transition that answers its caller besides its actions (an
    /// operation's enqueue, which discards the pending operation too): it returns the answer and
    /// leaves its actions in `actions`. (Not the common path: its result is a pair.)
    final func perform<Answer>(
        _ transition: (inout Machine, inout Machine.Actions) -> Answer
    ) -> Performed<Answer> {
        SyncPoints.inheritance(true)
        defer { SyncPoints.inheritance(false) }
        var nextHolder: NextHolder = (0, 0)
        let answer: Answer
        var actions: Machine.Actions
        (answer, actions) = machine.withLock { machine in
            var actions = Machine.Actions()
            let answer = transition(&machine, &actions)
            if !actions.others.isEmpty {
                for case .expired(let waiter, _) in actions.others {
                    waiter.expired(snapshot(machine, word: state.loadAcquire()))
                }
            }
            nextHolder = prepare(&actions)
            return (answer, actions)
        }
        return finish(&actions, nextHolder: nextHolder, answer: answer)
    }

    /// After unlocking: carries out `actions` and answers with what ``perform(_:)`` returns.
    @inline(__always)
    private func finish<Answer>(
        _ actions: inout Machine.Actions, nextHolder: NextHolder, answer: Answer
    ) -> Performed<Answer> {
        // A waiter left: the boost it asked for ends with it (see `PriorityInheritance.swift`).
        // mutant(boost-sync-dropped): let lowersBoost = false
        let lowersBoost = actions.lowersBoost
        defer { if lowersBoost { lowerBoost() } }
        let found = actions.found
        return Performed(found: found, inline: carryOut(&actions, nextHolder: nextHolder), answer: answer)
    }

    /// Under the engine lock, in the lock section of the transition that returned `actions`:
    /// marks the granted waiter, publishes a granted dispatched command (see
    /// ``publishGrantedDispatch(_:helper:)``), and attaches to the rarer effects what they need
    /// from their waiters.
    /// - Returns: the nextHolder's thread and task, if the grant inherits an urgency.
    @inline(__always)
    private func prepare(_ actions: inout Machine.Actions) -> NextHolder {
        if !actions.others.isEmpty { prepareOthers(&actions.others) }
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
                actions.others.append(.report(event))
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

    /// ``prepare(_:)`` for the rarer effects: attaches what each needs from its waiter. Out of
    /// line: most transitions have none, and the lock section of those that do not stays small
    /// enough for the compiler to inline into its caller.
    @inline(never)
    private func prepareOthers(_ others: inout [Machine.Other]) {
        for index in others.indices {
            switch others[index] {
            case .left(let waiter, _):
                // mutant(prepare-drops-left): break
                others[index] = .left(waiter, resume: waiter.continuationToResume)
            case .expired(let waiter, _):
                others[index] = .expired(waiter, resume: waiter.continuationToResume)
            case .cancel(let waiter, _):
                // Read here: a holder's task is dropped by its release, after that release unlocks.
                others[index] = .cancel(waiter, task: waiter.taskToCancel)
            case .startReader(let reader):
                reader.isGranted = true
                reader.isGrantedShared = true
            case .helpReader(let reader, let helper):
                reader.isGranted = true
                reader.isGrantedShared = true
                helper.assignJob(reader)
            case .longHoldEnded(let nanoseconds):
                // Before the grant below: the holder's words still name the hold that ended.
                if let event = longHoldEnded(nanoseconds: nanoseconds) { others[index] = .report(event) }
            case .finish, .claim, .report:
                break
            }
        }
    }

    /// After unlocking: carries out the actions ``prepare(_:)`` prepared, in the order
    /// ``EngineStateMachine/Actions`` gives.
    /// - Returns: the granted command when the machine chose the releasing block to run it.
    @inline(__always)
    private func carryOut(_ actions: inout Machine.Actions, nextHolder: NextHolder) -> Waiter? {
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
        if !actions.others.isEmpty { carryOut(actions.others) }
        // Architecture, "More threads than cores": the new holder waits on this processor, and
        // cannot start until this thread gives it away.
        if givesProcessorAway { SyncPoints.yield() }
        return inline
    }

    /// ``carryOut(_:nextHolder:)`` for the rarer effects, in order. Out of line, as
    /// ``prepareOthers(_:)``.
    @inline(never)
    private func carryOut(_ others: [Machine.Other]) {
        for other in others {
            switch other {
            case .left(_, let continuation): continuation?.resumeFromAnotherThread()
            case .expired(let waiter, let continuation):
                if let continuation { continuation.resumeFromAnotherThread() } else { waiter.postLeft() }
            case .cancel(_, let task): task?.cancel()
            case .finish(let command): command.finishManualCompletion()
            case .startReader(let reader): reader.start()
            case .helpReader(_, let helper): helper.postJob()
            case .claim(let waiter): waiter.postClaim()
            case .report(let event): report(event)
            case .longHoldEnded: break  // nothing to report (see `prepare`)
            }
        }
    }
}
