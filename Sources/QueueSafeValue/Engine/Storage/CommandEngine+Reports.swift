import Dispatch
import QueueSafeValueShims

// What an engine reports: its diagnostics snapshot, its statistics, and what the running
// `QueueMonitor` asks of it and is told. Nothing here runs on the idle path.
extension CommandEngine {
    /// ``noteContention()`` while a monitor runs.
    @inline(never)
    final func watchFromNowOn() {
        if monitoredWord.peekForAssertion() == 0, let monitor = QueueMonitor.active { monitor.watch(self) }
    }

    /// The watchdog looks at the holder: an exclusive holder is *watched* (its release goes through
    /// the lock, where its end is seen) and reported once it has held for `threshold` nanoseconds.
    /// - Returns: the `longHold` event, if the hold is to be reported now.
    final func sampleHold(longHold threshold: UInt64) -> QueueMonitor.Event? {
        guard EngineWord.isHeld(state.loadRelaxed()) else { return nil }
        let now = machineNow()
        let found = machine.withLock { machine -> (UInt64, QueueDiagnostics)? in
            let holds = transition(announcing: EngineWord.slowRelease, &machine) { machine, word in
                machine.watch(word: &word, now: now)
            }
            guard holds, let held = machine.reportLongHold(now: now, threshold: threshold) else { return nil }
            SyncPoints.note("the monitor reports a long hold")
            return (held, snapshot(machine, word: state.loadAcquire()))
        }
        guard let (held, diagnostics) = found else { return nil }
        let named = diagnostics.namingQueue()
        return QueueMonitor.Event(
            kind: .longHold, value: displayName, duration: Double(held) / 1e9, callSite: named.holder?.callSite,
            priority: named.holder?.priority, diagnostics: named, time: DispatchTime(uptimeNanoseconds: now))
    }

    /// Under the lock: `next` was granted after waiting `waited` milliseconds, past its threshold,
    /// by the holder at `endedSite`. The event to report once unlocked.
    @inline(never)
    final func longWait(of next: Waiter, waited: UInt32, endedSite: KeptCallSite) -> QueueMonitor.Event? {
        guard QueueMonitor.active != nil else { return nil }
        return QueueMonitor.Event(
            kind: .longWait, value: displayName, duration: Double(waited) / 1e3, callSite: next.keptSite.shown,
            priority: next.issuedPriority, heldBy: endedSite.shown, time: SyncPoints.now())
    }

    /// Under the lock: a hold reported as long ended after `nanoseconds`; the words still name it.
    final func longHoldEnded(nanoseconds: UInt64) -> QueueMonitor.Event? {
        guard QueueMonitor.active != nil else { return nil }
        let (site, priority) = holderSite
        return QueueMonitor.Event(
            kind: .longHoldEnded, value: displayName, duration: Double(nanoseconds) / 1e9, callSite: site.shown,
            priority: priority, time: SyncPoints.now())
    }

    final func report(_ event: QueueMonitor.Event) {
        QueueMonitor.active?.report(event, of: self)
    }

    /// A command was refused after it waited: a timeout or a deadlock is counted and reported to
    /// the running monitor. Returns `error`.
    @discardableResult
    final func reportingRefusal(
        _ error: QueueSafeValueError, site: KeptCallSite, priority: CommandPriority
    ) -> QueueSafeValueError {
        let kind: QueueMonitor.Event.Kind
        let diagnostics: QueueDiagnostics
        var deadlock: DeadlockReport?
        switch error {
        case .timedOut(let snapshot): (kind, diagnostics) = (.timedOut, snapshot)
        case .deadlock(let report): (kind, diagnostics, deadlock) = (.deadlock, report.diagnostics, report)
        default: return error
        }
        machine.withLock { $0.noteRefusal(deadlock: kind == .deadlock) }
        QueueMonitor.active?.report(
            QueueMonitor.Event(
                kind: kind, value: displayName, duration: diagnostics.holder?.heldFor ?? 0, callSite: site.shown,
                priority: priority, heldBy: diagnostics.holder?.callSite, diagnostics: diagnostics, deadlock: deadlock,
                time: SyncPoints.now()),
            of: self)
        return error
    }
}

// MARK: - Taking the snapshot

extension CommandEngine {
    /// How many waiting commands a snapshot lists, and how many blocking ones it names by their
    /// thread (a system call each, under the engine lock).
    static let listedWaiters = 100
    static let namedWaitingThreads = 16

    /// The section's holder and waiters now. A snapshot *watches* an exclusive holder, so that its
    /// thread can be named while it surely holds.
    @usableFromInline
    final var diagnostics: QueueDiagnostics {
        machine.withLock { machine in
            transition(announcing: EngineWord.slowRelease, &machine) { machine, word in
                _ = machine.watch(word: &word, now: machineNow())
            }
            return snapshot(machine, word: state.loadAcquire())
        }.namingQueue()
    }

    /// The snapshot of `machine` and `word`, under the lock. Queues are named after unlocking
    /// (``QueueDiagnostics/namingQueue()``): the detector's lock is never taken inside this one.
    final func snapshot(_ machine: Machine, word: Int) -> QueueDiagnostics {
        var diagnostics = QueueDiagnostics(
            name: displayName, holder: holder(machine, word: word), waiting: machine.waitingCountsByPriority(),
            isContainerReleased: machine.isClosed)
        diagnostics.waiters = waiters(machine)
        return diagnostics
    }

    /// The holder, named as far as the words and the machine tell.
    private func holder(_ machine: Machine, word: Int) -> QueueDiagnostics.Holder? {
        let since = machine.holderSince == 0 ? nil : DispatchTime(uptimeNanoseconds: machine.holderSince)
        var holder: QueueDiagnostics.Holder
        if EngineWord.readersHold(word) {
            // The machine keeps no record of reads that took the idle path: blocking ones, and at
            // most one awaiting read, named in `taskReader`.
            let idleKind: CommandKind = self.word(.taskReader).loadRelaxed() > 1 ? .awaiting : .blocking
            holder = QueueDiagnostics.Holder(
                kind: QueueDiagnostics.HolderKind(machine.firstReaderKind ?? idleKind), awaitsCompletion: false,
                since: since,
                sinceIsExact: machine.firstReaderKind != nil || machine.holderSinceIsExact, queue: nil,
                isWaitingForItsQueue: false,
                sharedReads: machine.readers.count + EngineWord.idleReaders(word))
            if let first = machine.firstReaderHandle {
                holder.callSite = first.keptSite.shown
                holder.priority = first.issuedPriority
            }
        } else {
            let kind: QueueDiagnostics.HolderKind
            switch word & EngineWord.holderMask {
            case 0: return nil
            case CommandKind.blocking.wordBits: kind = .blocking
            case CommandKind.dispatched.wordBits: kind = .dispatch
            default: kind = machine.trackedHolderKind == .operation ? .operation : .awaiting
            }
            let queueIdentity = kind == .dispatch ? self.word(.dispatchedHolderQueue).loadRelaxed() : nil
            // A retained address: published and not claimed by its block (or a helper) yet.
            let waitingForQueue = kind == .dispatch && pendingDispatch.loadAcquire() > Self.dispatchStarted
            holder = QueueDiagnostics.Holder(
                kind: kind, awaitsCompletion: machine.holderAwaitsCompletion, since: since,
                // mutant(lock-order-inversion): sinceIsExact: machine.holderSinceIsExact, queue: queueIdentity.flatMap { DeadlockDetector.shared.label(ofQueue: $0) }, isWaitingForItsQueue: waitingForQueue,
                sinceIsExact: machine.holderSinceIsExact, queue: nil, isWaitingForItsQueue: waitingForQueue,
                sharedReads: 0, queueIdentity: queueIdentity)
            // Read once: a releasing holder clears it before it takes the lock this snapshot holds.
            let thread = kind == .blocking || kind == .dispatch ? ownerThread.loadAcquire() : 0
            if holderSiteIsCurrent(kind, thread: thread) {
                let kept = holderSite
                holder.callSite = kept.site.shown
                holder.priority = kept.priority
            }
            holder.party = holderParty(kind, thread: thread, word: word)
        }
        let urgency = machine.holdUrgency
        if !urgency.isNone {
            holder.raisedTo =
                urgency.task != 0
                ? "task priority \(TaskPriority(rawValue: urgency.task))" : "thread priority \(urgency.thread)"
        }
        return holder
    }

    /// Whether the holder words name the current exclusive holder of `kind`: a holder that took a
    /// free value stores its call site, then its owner word, releasing it; until a report sees the
    /// owner, the words may still name the previous holder.
    private func holderSiteIsCurrent(_ kind: QueueDiagnostics.HolderKind, thread: Int) -> Bool {
        switch kind {
        // mutant(stale-holder-site-trusted): case .blocking: true
        case .blocking: thread != 0
        case .awaiting, .operation: ownerTask.loadAcquire() != 0
        case .dispatch: thread != 0 || pendingDispatch.loadAcquire() != 0
        }
    }

    /// Who holds exclusively: a blocking command's thread, named only while its release must take
    /// the lock the caller holds (so the thread is alive); a task.
    private func holderParty(_ kind: QueueDiagnostics.HolderKind, thread: Int, word: Int) -> String? {
        switch kind {
        case .blocking:
            guard thread != 0, word & (EngineWord.slowRelease | EngineWord.closed) != 0 else { return nil }
            return DeadlockDetector.describe(.thread(thread), name: DeadlockDetector.threadName(thread), queue: nil)
        case .awaiting, .operation:
            let task = ownerTask.loadRelaxed()
            return task == 0 ? "a task" : DeadlockDetector.describe(.task(task))
        case .dispatch:
            return nil  // its queue names it
        }
    }

    private func waiters(_ machine: Machine) -> [QueueDiagnostics.Waiter] {
        let now = machineNow()
        let nowMilliseconds = UInt32(truncatingIfNeeded: now / 1_000_000)
        var namedThreads = 0
        return machine.waitingInGrantOrder(limit: Self.listedWaiters).map { entry, kind, handle in
            let waited = UInt64(nowMilliseconds &- entry.arrivedAt) * 1_000_000
            var party = "a task"
            var queueIdentity: Int?
            switch kind {
            case .blocking:
                // A waiting thread is alive: it leaves the queue under this lock.
                let thread = handle?.threadToBoost ?? 0
                let name = namedThreads < Self.namedWaitingThreads ? DeadlockDetector.threadName(thread) : nil
                namedThreads += 1
                party = DeadlockDetector.describe(.thread(thread), name: name, queue: nil)
            case .dispatched:
                queueIdentity = handle?.targetQueueID
                party = "queue #\(queueIdentity ?? 0)"
            case .awaiting, .operation:
                break
            }
            return QueueDiagnostics.Waiter(
                kind: QueueDiagnostics.HolderKind(kind), priority: CommandHeap.priority(of: entry.key),
                callSite: handle?.keptSite.shown, party: party,
                since: DispatchTime(uptimeNanoseconds: now >= waited ? now - waited : 0), queueIdentity: queueIdentity)
        }
    }
}

// MARK: - Statistics

extension CommandEngine {
    final func collectStatistics(_ on: Bool) {
        let now = machineNow()
        machine.withLock { $0.collectStatistics(on, now: now) }
    }

    /// `nil` while statistics are off.
    final func statistics(reset: Bool) -> QueueStatistics? {
        let now = machineNow()
        return machine.withLock { $0.readStatistics(reset: reset, now: now) }.map { QueueStatistics($0, now: now) }
    }
}
