import Dispatch

// What the running `QueueMonitor` asks of an engine, and what the engine tells it. Nothing here
// runs on the idle path: a command that takes a free value never reads the clock. The watchdog
// samples holders under the engine lock (`sampleHold`); contended commands report long waits,
// timeouts and deadlocks after unlocking.
extension CommandEngine {
    /// ``noteContention()`` while a monitor runs.
    @inline(never)
    final func watchFromNowOn() {
        if monitoredWord.peekForAssertion() == 0, let monitor = QueueMonitor.active { monitor.watch(self) }
    }

    /// The watchdog looks at the holder: under the lock, an exclusive holder is *watched*
    /// (``EngineStateMachine/watch(word:now:)``: its release goes through the lock, where its end
    /// is seen) and, once it has held for `threshold` nanoseconds, reported, once.
    /// - Returns: the `longHold` event, if the hold is to be reported now.
    final func sampleHold(longHold threshold: UInt64) -> QueueMonitor.Event? {
        // A free value costs the watchdog one load.
        guard EngineWord.isHeld(state.loadRelaxed()) else { return nil }
        let now = machineNow()
        let found = withMachineLocked { machine -> (UInt64, QueueDiagnostics)? in
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

    /// Under the lock, at a grant: the waiter `next` was granted the section after waiting
    /// `waited` milliseconds, past its threshold; `endedSite` is the holder that handed it on. The
    /// event to report once unlocked, if a monitor still runs.
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

    /// After unlocking: hands `event` to the running monitor.
    final func report(_ event: QueueMonitor.Event) {
        QueueMonitor.active?.report(event, of: self)
    }

    /// A command issued at `site` with `priority` was refused after it waited: a timeout or a
    /// deadlock is counted (if statistics are on) and reported to the running monitor. Returns
    /// `error`.
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
        withMachineLocked { $0.noteRefusal(deadlock: kind == .deadlock) }
        QueueMonitor.active?.report(
            QueueMonitor.Event(
                kind: kind, value: displayName, duration: diagnostics.holder?.heldFor ?? 0, callSite: site.shown,
                priority: priority, heldBy: diagnostics.holder?.callSite, diagnostics: diagnostics, deadlock: deadlock,
                time: SyncPoints.now()),
            of: self)
        return error
    }
}
