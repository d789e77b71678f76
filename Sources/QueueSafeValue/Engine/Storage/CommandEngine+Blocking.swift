import Dispatch
import QueueSafeValueShims

#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

// Blocking commands: a thread that waits for its turn, spins briefly and parks (see
// `BlockingWaiter`), and holds the section on its own thread.
extension CommandEngine {
    // MARK: Blocking commands

    /// Waits until the calling thread holds the critical section.
    ///
    /// On a free section this is one compare-and-swap. Otherwise the thread joins the queue, spins
    /// briefly and then parks.
    /// - Parameter timeout: how long to wait for the turn (see `commandDeadline(after:)`); `nil` waits
    ///   as long as it takes.
    /// - Returns: `nil` once the section is held (release it with ``release(_:)`` and
    ///   `.blocking`), or why not: `.valueContainerDeinited`, `.reentrantAccess` (the caller is
    ///   inside this section already), `.timedOut`, `.deadlock`, `.invalidArgument` (a negative
    ///   timeout).
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

    // Never inlined: the idle path above is what a command's call site inlines (the
    // `wait.set uncontended` instruction row).
    @usableFromInline
    @inline(never)
    final func acquireBlockingSlow(
        priority: CommandPriority,
        deadline: DispatchTime?,
        thread: Int,
        site: CallSite
    ) -> QueueSafeValueError? {
        let waiter = BlockingWaiter.forCurrentThread()
        waiter.keptSite = site.kept
        waiter.deadline = deadline?.uptimeNanoseconds ?? 0
        let reentrant =
            ownerThread.loadRelaxed() == thread || isInsideRunningSection() || isInsideSharedRead(thread: thread)
        switch enqueue(waiter, kind: .blocking, priority: priority, reentrant: reentrant, deadline: waiter.deadline) {
        case .granted:
            break
        case .refused(let error):
            return reportingRefusal(error.namingQueue(), site: site.kept, priority: priority)
        case .queued(let ticket):
            if let error = waitForGrant(waiter, ticket: ticket, deadline: deadline) {
                return reportingRefusal(error, site: site.kept, priority: priority)
            }
        }
        ownerThread.storeRelaxed(thread)
        return nil
    }

    /// Calls `body` with a completion closure on the thread that holds the section, then blocks
    /// that thread until the completion is called (from any thread) or dropped. The caller still
    /// holds the section afterwards and releases it as usual.
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

// The waiting thread's side of a blocking command, driven from here: the waiter (`BlockingWaiter`)
// is its word and its parker, and answers what its word says; every decision that involves the
// engine is taken here, so that the waiter never calls back into the engine.
extension CommandEngine {
    /// Blocks until the engine grants `waiter`, or until `deadline`; meanwhile runs the dispatch
    /// commands handed to it (see `BlockingWaiter`'s *helping*).
    ///
    /// Exactly one of "granted" and "gave up" wins: the state machine decides, under the engine
    /// lock, in ``leaveWithSnapshot(_:)``.
    /// - Returns: `nil` when granted; `.timedOut` when the deadline passed first; `.deadlock` when
    ///   parking would have closed a wait cycle or starved the cooperative pool.
    final func waitForGrant(_ waiter: BlockingWaiter, ticket: Ticket, deadline: DispatchTime?) -> QueueSafeValueError? {
        // Eventually fair mode: this thread was woken to claim a free section and is on its way.
        var claiming = false
        while true {
            // Before each spin, and as it parks: a deadline that passed while
            // this thread did not run ends the wait here.
            if let deadline, SyncPoints.now() >= deadline {
                return giveUp(waiter, ticket: ticket)
            }
            if let verdict = spin(waiter, ticket: ticket, claiming: &claiming) { return verdict.error }
            if claiming {
                // No longer on its way: the next release wakes it again.
                claiming = false
                if claim(ticket, parking: true) == .settled { return waiter.awaitVerdict() }
            }
            switch park(waiter, ticket: ticket, deadline: deadline) {
            case .granted: return nil
            case .gaveUp(let error): return error
            case .claim: claiming = true
            }
        }
    }

    /// Polls `waiter`'s word for a while (``BlockingWaiter/spinLimit`` turns), running the jobs
    /// handed over meanwhile and, in the eventually fair mode, claiming a section that was freed
    /// for this thread.
    ///
    /// Only the waiter the next grant goes to keeps its CPU: the `head` or `handedTo` hint names
    /// it. It polls without yielding for ``BlockingWaiter/headPatience`` polls (the holder is
    /// running on another CPU, or is about to), and then yields every
    /// ``BlockingWaiter/headYieldEvery``. Where the processor it runs on is unknown (Apple
    /// platforms), it also yields on its first poll while the holder has not started (whoever was
    /// handed the section may be waiting for this CPU); where it is known, the releasing thread gave
    /// that CPU away already if the new holder waited on it (see `waitsOnCallersProcessor`). Every
    /// other waiter yields at every poll: it cannot be granted before the head is, and its CPU is
    /// better spent on the holder or the head. With one processor online every waiter yields at
    /// every poll.
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
                    return waiter.awaitVerdict().map { .gaveUp($0) } ?? .granted
                case .passedOn: claiming = false
                default: break
                }
            }
            // Architecture, "More threads than cores": the head spins, the others yield (the holder
            // or the head may be waiting for this CPU).
            let isHead = word(.head).loadRelaxed() == me || word(.handedTo).loadRelaxed() == me
            let yields =
                !isHead || !mayKeepProcessor
                || (round == 1 && here < 0 && ownerThread.loadRelaxed() == 0)
                || (round > BlockingWaiter.headPatience && round % BlockingWaiter.headYieldEvery == 0)
            // A command with a deadline parks instead of yielding: on a busy machine a yield can
            // keep the thread off its processor for a scheduler tick, long past a short deadline,
            // where a timed park wakes it when the deadline passes.
            if yields && waiter.hasDeadline() { break }
            SyncPoints.relax(givingProcessorAway: yields)
            if yields { here = waiter.noteProcessor() }
        }
        return nil
    }

    /// The deadline passed while the thread did not park: it leaves the queue, unless the machine
    /// decided first (granted it, or found it expired).
    /// - Returns: `.timedOut`, or the machine's earlier verdict (`nil`: granted).
    private func giveUp(_ waiter: BlockingWaiter, ticket: Ticket) -> QueueSafeValueError? {
        if let diagnostics = leaveWithSnapshot(ticket) {
            waiter.runJobHandedBeforeLeaving()
            return .timedOut(diagnostics)
        }
        return waiter.awaitVerdict()
    }

    /// How a park ended.
    private enum ParkResult {
        case granted
        case gaveUp(QueueSafeValueError)
        /// Eventually fair mode: woken to claim the section a release freed.
        case claim
    }

    /// The parking half of ``waitForGrant(_:ticket:deadline:)``: registered for deadlock detection
    /// while parked, unregistered before it does anything else.
    private func park(_ waiter: BlockingWaiter, ticket: Ticket, deadline: DispatchTime?) -> ParkResult {
        let nodes = DeadlockDetector.currentNodes()
        let poolThread = nodes.count > 1 && qsv_is_main_thread() == 0
        // Before it blocks its queue for longer than a spin (see *helping*), in one lock section:
        // its helper role and its urgency. While it is parked, the holder runs at least as urgently
        // as this thread, and as what this thread inherits from sections it holds (a chain). From
        // that section until it is registered and has passed that on, the chains it may extend lag
        // (`becomeHelper` says so to a controlled scheduler; this ends it).
        let parked = becomeHelper(ticket, parking: nodes)
        var tagEpoch = parked.tagEpoch
        var inheritancePending = true
        while true {
            // About to park: would that close a cycle, or starve the cooperative pool?
            let registration = DeadlockDetector.shared.register(
                nodes, waitingFor: self, ticket: ticket, poolThread: poolThread,
                watcher: tagEpoch.map { (waiter, $0) })
            if inheritancePending {
                // A raise that reached this thread before the chain walk could see where it waits.
                if registration.verdict == .wait { passOnInherited(ticket, party: nodes, parkedWith: parked.inherited) }
                SyncPoints.inheritance(false)
                inheritancePending = false
            }
            guard registration.verdict == .wait else {
                return refuse(registration, waiter, ticket: ticket).map { .gaveUp($0) } ?? .granted
            }
            let outcome = waiter.parkOnce(deadline: deadline)
            // Unregistered before anything else, and before leaving the queue: a party that gave
            // up must not look like a waiter to another thread's walk.
            DeadlockDetector.shared.unregister(nodes, watcher: tagEpoch == nil ? nil : waiter)
            switch outcome {
            case .granted:
                return .granted
            case .job:
                waiter.runJob()
            case .recheck:
                // A queue was tagged: it may be the one this thread runs on.
                (tagEpoch, _) = becomeHelper(ticket)
            case .claim:
                return .claim
            case .left:
                return .gaveUp(waiter.tookLeave())
            case .deadlinePassed:
                // Unless granted (or found expired) at the same instant: then its start() (or its
                // leave) sets a bit without a signal (not parked).
                return giveUp(waiter, ticket: ticket).map { .gaveUp($0) } ?? .granted
            }
        }
    }

    /// Waiting would deadlock: leave the queue and report why, unless the grant came first.
    private func refuse(
        _ registration: DeadlockDetector.Registration, _ waiter: BlockingWaiter, ticket: Ticket
    ) -> QueueSafeValueError? {
        if let diagnostics = leaveWithSnapshot(ticket) {
            waiter.runJobHandedBeforeLeaving()
            return .deadlock(
                DeadlockDetector.report(
                    registration, diagnostics: diagnostics, waiterDescription: DeadlockDetector.describeCurrent()))
        }
        return waiter.awaitVerdict()
    }
}

extension BlockingWaiter.Verdict {
    /// `nil` when granted, or why it gave up.
    var error: QueueSafeValueError? {
        if case .gaveUp(let error) = self { error } else { nil }
    }
}
