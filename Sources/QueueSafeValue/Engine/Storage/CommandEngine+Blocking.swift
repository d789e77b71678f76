import Dispatch
import QueueSafeValueShims

// Blocking commands: a thread waits for its turn, spins briefly, parks, and holds on its own thread.
extension CommandEngine {

    /// Waits until the calling thread holds the section: one compare-and-swap on a free section.
    /// - Parameter timeout: how long to wait for the turn; `nil` waits as long as it takes.
    /// - Returns: `nil` once held (release with ``release(_:)`` and `.blocking`), or why not:
    ///   `.valueContainerDeinited`, `.reentrantAccess`, `.timedOut`, `.deadlock`, `.invalidArgument`.
    @inlinable
    @inline(__always)
    final func acquireBlocking(
        priority: CommandPriority, timeout: DispatchTimeInterval?, site: CallSite
    ) -> QueueSafeValueError? {
        let deadline: DispatchTime?
        do { deadline = try commandDeadline(after: timeout) } catch { return error }
        let thread = currentThreadID()
        if tryAcquireIdleBlocking(thread: thread, site: site) { return nil }
        return acquireBlockingSlow(priority: priority, deadline: deadline, thread: thread, site: site)
    }

    // Never inlined: the idle path above is what a command's call site inlines.
    @usableFromInline
    @inline(never)
    final func acquireBlockingSlow(
        priority: CommandPriority,
        deadline: DispatchTime?,
        thread: Int,
        site: CallSite
    ) -> QueueSafeValueError? {
        switch acquireThroughLock(shared: false, priority: priority, deadline: deadline, thread: thread, site: site) {
        case .success:
            ownerThread.storeRelaxed(thread)
            return nil
        case .failure(let error):
            return error
        }
    }

    /// A blocking command, or shared read (`shared`), joins the queue through the lock and waits
    /// for its turn.
    /// - Returns: its ticket (a read's, or `nil`), or why it does not run.
    final func acquireThroughLock(
        shared: Bool, priority: CommandPriority, deadline: DispatchTime?, thread: Int, site: CallSite
    ) -> Result<Ticket?, QueueSafeValueError> {
        let waiter = BlockingWaiter.forCurrentThread()
        waiter.keptSite = site.kept
        waiter.deadline = deadline?.uptimeNanoseconds ?? 0
        let reentrant =
            ownerThread.loadRelaxed() == thread || isInsideRunningSection() || isInsideSharedRead(thread: thread)
        switch enqueue(
            waiter, kind: .blocking, priority: priority, reentrant: reentrant, shared: shared, deadline: waiter.deadline
        )
        {
        case .granted(let ticket):
            return .success(ticket)
        case .refused(let error):
            return .failure(reportingRefusal(error.namingQueue(), site: site.kept, priority: priority))
        case .queued(let ticket):
            if let error = waitForGrant(waiter, ticket: ticket, deadline: deadline) {
                return .failure(reportingRefusal(error, site: site.kept, priority: priority))
            }
            return .success(ticket)
        }
    }

    /// Calls `body` with a completion on the holding thread, then blocks that thread until the
    /// completion is called or dropped. The caller still holds the section afterwards.
    @usableFromInline
    final func holdUntilCompleted(_ body: (@escaping CommandCompletionClosure) -> Void) {
        let waiter = BlockingWaiter.forCurrentThread()
        let ticket = beginManual(waiter, kind: .blocking)
        CompletionToken.withCompletion(engine: self, ticket: ticket, body)
        if case .waitForCompletion = manualClosureReturned(ticket) {
            waiter.waitForManualCompletion()
        }
    }
}

// MARK: - Waiting for the grant

// The waiting thread's side of a blocking command: every decision that involves the engine is taken
// here, so that the waiter (`BlockingWaiter`) never calls back into the engine.
extension CommandEngine {
    /// Blocks until the engine grants `waiter`, or until `deadline`, running the dispatch commands
    /// handed to it meanwhile. The machine decides "granted" or "gave up" under the lock.
    /// - Returns: `nil` when granted; `.timedOut`; `.deadlock` when parking would have closed a wait
    ///   cycle or starved the cooperative pool.
    final func waitForGrant(_ waiter: BlockingWaiter, ticket: Ticket, deadline: DispatchTime?) -> QueueSafeValueError? {
        // Eventually fair mode: woken to claim a free section, and on its way.
        var claiming = false
        while true {
            // A deadline that passed while this thread did not run ends the wait here.
            if let deadline, SyncPoints.now() >= deadline {
                return giveUp(waiter, ticket: ticket).error
            }
            if let verdict = spin(waiter, ticket: ticket, claiming: &claiming) { return verdict.error }
            if claiming {
                // No longer on its way: the next release wakes it again.
                claiming = false
                if claim(ticket, parking: true) == .settled { return waiter.awaitVerdict().error }
            }
            let verdict = park(waiter, ticket: ticket, deadline: deadline)
            guard case .claim = verdict else { return verdict.error }
            claiming = true
        }
    }

    /// Polls `waiter`'s word up to ``BlockingWaiter/spinLimit`` times, running jobs handed over
    /// and, in the eventually fair mode, claiming a section freed for it. Who yields when is
    /// Architecture.md's "More threads than cores".
    /// - Returns: how the wait ended, or `nil` if it spun out its polls (it parks next).
    private func spin(_ waiter: BlockingWaiter, ticket: Ticket, claiming: inout Bool) -> BlockingWaiter.Verdict? {
        let me = waiter.address
        let mayKeepProcessor = BlockingWaiter.otherProcessors
        var here = waiter.noteProcessor()
        for round in 1...SyncPoints.spinLimit(BlockingWaiter.spinLimit) {
            if let verdict = waiter.poll(claiming: &claiming) { return verdict }
            // On its way to a free section: claim it once the word shows no holder.
            if claiming && !EngineWord.isHeld(state.loadAcquire()) {
                switch claim(ticket, parking: false) {
                case .settled:
                    return waiter.awaitVerdict()
                case .passedOn: claiming = false
                default: break
                }
            }
            let isHead = word(.head).loadRelaxed() == me || word(.handedTo).loadRelaxed() == me
            let yields =
                !isHead || !mayKeepProcessor
                || (round == 1 && here < 0 && ownerThread.loadRelaxed() == 0)
                || (round > BlockingWaiter.headPatience && round % BlockingWaiter.headYieldEvery == 0)
            // A timed command parks instead of yielding: a yield can keep it off its processor for
            // a scheduler tick, long past a short deadline.
            if yields && waiter.hasDeadline() { break }
            SyncPoints.relax(givingProcessorAway: yields)
            if yields { here = waiter.noteProcessor() }
        }
        return nil
    }

    /// The wait ends (the deadline passed while not parked, or parking would deadlock): it leaves
    /// with the error `reason` makes of the queue's snapshot, unless the machine decided first.
    /// - Returns: that error, or the machine's earlier verdict.
    private func giveUp(
        _ waiter: BlockingWaiter, ticket: Ticket,
        _ reason: (QueueDiagnostics) -> QueueSafeValueError = { .timedOut($0) }
    ) -> BlockingWaiter.Verdict {
        guard let diagnostics = leaveWithSnapshot(ticket) else { return waiter.awaitVerdict() }
        waiter.runJobHandedBeforeLeaving()
        return .gaveUp(reason(diagnostics))
    }

    /// The parking half of ``waitForGrant(_:ticket:deadline:)``: registered for deadlock detection
    /// while parked.
    private func park(_ waiter: BlockingWaiter, ticket: Ticket, deadline: DispatchTime?) -> BlockingWaiter.Verdict {
        let nodes = DeadlockDetector.currentNodes()
        let poolThread = nodes.count > 1 && qsv_is_main_thread() == 0
        // In one lock section before it blocks its queue: its helper role and its urgency, so the
        // holder runs at least as urgently as this thread and what it inherits. Until registered
        // and passed on, the chains it may extend lag (ended below).
        let parked = becomeHelper(ticket, parking: nodes)
        var tagEpoch = parked.tagEpoch
        var inheritancePending = true
        while true {
            let registration = DeadlockDetector.shared.register(
                nodes, waitingFor: self, ticket: ticket, poolThread: poolThread,
                watcher: tagEpoch.map { (waiter, $0) })
            if inheritancePending {
                // A raise that reached it before the chain walk could see where it waits.
                if registration.verdict == .wait { passOnInherited(ticket, party: nodes, parkedWith: parked.inherited) }
                SyncPoints.inheritance(false)
                inheritancePending = false
            }
            guard registration.verdict == .wait else {
                return giveUp(waiter, ticket: ticket) { diagnostics in
                    .deadlock(
                        DeadlockDetector.report(
                            registration, diagnostics: diagnostics,
                            waiterDescription: DeadlockDetector.describeCurrent()))
                }
            }
            let outcome = waiter.parkOnce(deadline: deadline)
            // Unregistered first: a party that gave up must not look like a waiter to a walk.
            DeadlockDetector.shared.unregister(nodes, watcher: tagEpoch == nil ? nil : waiter)
            switch outcome {
            case .granted:
                return .granted
            case .job:
                waiter.runJob()
            case .recheck:
                // A queue was tagged: maybe the one this thread runs on.
                (tagEpoch, _) = becomeHelper(ticket)
            case .claim:
                return .claim
            case .left:
                return .gaveUp(waiter.tookLeave())
            case .deadlinePassed:
                // Unless granted or expired at the same instant (a bit set without a signal).
                return giveUp(waiter, ticket: ticket)
            }
        }
    }
}

extension BlockingWaiter.Verdict {
    var error: QueueSafeValueError? {
        if case .gaveUp(let error) = self { error } else { nil }
    }
}
