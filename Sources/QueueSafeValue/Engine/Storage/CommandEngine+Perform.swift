import QueueSafeValueShims

// Performing the machine's actions (Architecture.md, "What a transition returns"): `prepare`
// under the lock, in the transition's section (it runs no user code, signals nothing, releases no
// reference); `carryOut` after unlocking.
extension CommandEngine {
    /// The thread and task of a new holder that inherits an urgency, read under the lock.
    typealias NextHolder = (thread: Int, task: Int)

    /// What ``perform(_:)`` hands back: ``EngineStateMachine/Actions/found``, the grant the
    /// releasing block runs inline (``EngineStateMachine/Starter/releasingBlock``), and the answer
    /// of a transition that has one besides its actions.
    struct Performed<Answer> {
        var found: Machine.Found
        var inline: Waiter?
        var answer: Answer
    }

    /// Runs one transition under the engine lock and carries out its actions after unlocking.
    @inline(__always)
    @discardableResult
    final func perform(_ transition: (inout Machine) -> Machine.Actions) -> Performed<Void> {
        SyncPoints.inheritance(true)
        defer { SyncPoints.inheritance(false) }
        var nextHolder: NextHolder = (0, 0)
        // Returned from the lock section, never captured: moved, not copied.
        var actions = machine.withLock { machine in
            var actions = transition(&machine)
            // An expired command's error shows the queue as the release that passed it left it.
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

    /// ``perform(_:)`` for a transition that also answers its caller (an operation's enqueue).
    /// Not the common path: its result is a pair.
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
            // An expired command's error shows the queue as the release that passed it left it.
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

    @inline(__always)
    private func finish<Answer>(
        _ actions: inout Machine.Actions, nextHolder: NextHolder, answer: Answer
    ) -> Performed<Answer> {
        // A waiter left: the boost it asked for ends with it.
        // mutant(boost-sync-dropped): let lowersBoost = false
        let lowersBoost = actions.lowersBoost
        defer { if lowersBoost { lowerBoost() } }
        let found = actions.found
        return Performed(found: found, inline: carryOut(&actions, nextHolder: nextHolder), answer: answer)
    }

    /// Under the lock, in the transition's section: marks the granted waiter, publishes a granted
    /// dispatched command, and attaches to the rarer effects what they need from their waiters.
    /// - Returns: the new holder's thread and task, if the grant inherits an urgency.
    @inline(__always)
    private func prepare(_ actions: inout Machine.Actions) -> NextHolder {
        if !actions.others.isEmpty { prepareOthers(&actions.others) }
        // Moved out and back, so that reading it retains nothing.
        guard let grant = actions.grant.take() else { return (0, 0) }
        defer { actions.grant = consume grant }
        let next = grant.handle
        next.isGranted = true
        next.isGrantedShared = grant.shared
        // With a monitor running: an event only for a wait past its threshold.
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
                // A shared read is claimed from the machine, not from the dispatched holder's slot.
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

    /// ``prepare(_:)`` for the rarer effects. Out of line: most transitions have none, and the lock
    /// section of those stays small enough to inline into its caller.
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
                // Before the grant: the holder's words still name the hold that ended.
                if let event = longHoldEnded(nanoseconds: nanoseconds) { others[index] = .report(event) }
            case .finish, .claim, .report:
                break
            }
        }
    }

    /// After unlocking: carries out the prepared actions, in the order ``EngineStateMachine/Actions``
    /// gives.
    /// - Returns: the grant the releasing block runs inline.
    @inline(__always)
    private func carryOut(_ actions: inout Machine.Actions, nextHolder: NextHolder) -> Waiter? {
        // A boosted holder hands on while still boosted: at its own priority it might not get the
        // processor to hand on.
        var inline: Waiter?
        var givesProcessorAway = false
        if let grant = actions.grant.take() {
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
        // The machine forgot it in the same transition: this is the last touch.
        actions.ended.take()?.endHold()
        if !actions.others.isEmpty { carryOut(actions.others) }
        // The new holder waits on this processor ("More threads than cores").
        if givesProcessorAway { SyncPoints.yield() }
        return inline
    }

    /// ``carryOut(_:nextHolder:)`` for the rarer effects, in order; out of line, as ``prepareOthers(_:)``.
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
