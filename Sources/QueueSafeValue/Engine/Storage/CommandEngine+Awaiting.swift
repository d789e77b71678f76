import Dispatch
import QueueSafeValueShims

#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

// Awaiting commands and CommandQueue operations: a task takes its place when the command is
// issued and suspends until its turn; timeouts, cancellation and cancelAll().
extension CommandEngine {
    // MARK: Awaiting commands and operations

    /// The part of an awaiting command's acquisition after the idle compare-and-swap failed: joins
    /// the queue and suspends until the command's turn.
    ///
    /// A task cancelled while it waits leaves the queue and throws `.cancelled`; one granted at the
    /// same instant it was cancelled releases at once and throws `.cancelled` too: its closure never
    /// starts.
    ///
    /// It keeps an `isolated` parameter, where the functions it calls are `nonisolated(nonsending)`:
    /// called `nonisolated(nonsending)` from the inlined command, it cost the uncontended command,
    /// which never calls it, instructions of its own (the `await set uncontended` row;
    /// <doc:Benchmarks#Why-the-code-is-shaped-this-way> has the count).
    /// With `cancellable` false (`AwaitSchedule.evenIfCancelled`), the task's cancellation changes
    /// nothing: the command keeps its place and runs when its turn comes.
    /// - Throws: `.cancelled`, `.reentrantAccess` (the task is inside this section already),
    ///   `.valueContainerDeinited`, `.timedOut` (`deadline` passed first), `.deadlock`.
    @usableFromInline
    final func acquireAwaitingSlow(
        priority: CommandPriority,
        site: CallSite,
        deadline: DispatchTime? = nil,
        cancellable: Bool = true,
        isolation: isolated (any Actor)?
    ) async throws(QueueSafeValueError) {
        let waiter = AwaitingWaiter()
        waiter.keptSite = site.kept
        waiter.deadline = deadline?.uptimeNanoseconds ?? 0
        let reentrant = isInsideRunningSection() || isInsideSharedRead(thread: 0)
        switch enqueue(waiter, kind: .awaiting, priority: priority, reentrant: reentrant, deadline: waiter.deadline) {
        case .granted:
            return
        case .refused(let error):
            throw reportingRefusal(error.namingQueue(), site: site.kept, priority: priority)
        case .queued(let ticket):
            waiter.ticket = ticket
            try await waitForTurn(waiter, deadline: deadline, cancellable: cancellable)
            if cancellable && Task.isCancelled {
                // Granted, but the task was cancelled before its closure began: it never starts.
                release(.awaiting)
                throw .cancelled
            }
        }
    }

    /// Places a ``CommandQueue`` operation in the queue, even when the section is free (then it is
    /// granted at once), so its place is taken synchronously, before the task that runs it starts.
    /// A discardable operation that had not begun is discarded first (see
    /// ``EngineStateMachine/enqueueOperation(_:priority:discardable:observed:now:)``); if it was
    /// waiting, its task is resumed here, after unlocking, and throws `.cancelled`.
    /// - Returns: the operation's waiter, and whether it holds the section already. When it does
    ///   not, the task calls ``waitForTurn(_:deadline:holdsNothing:startedLater:cancellable:)``.
    /// - Parameters:
    ///   - handled: the operation has a handle that may cancel it (``QueuedOperation``): it begins
    ///     through ``beginOperation(_:progress:)``.
    ///   - deadline: when it gives up waiting, if ever. If it has passed and the queue is busy, the
    ///     operation is refused: its task throws `.timedOut` without waiting.
    @usableFromInline
    final func enqueueOperation(
        priority: CommandPriority,
        site: CallSite,
        discardable: Bool = false,
        handled: Bool = false,
        deadline: DispatchTime? = nil
    ) -> (waiter: AwaitingWaiter, granted: Bool) {
        SyncPoints.commandPoint("operation arrives at", self)
        let waiter = AwaitingWaiter()
        waiter.keptSite = site.kept
        waiter.issuedPriority = priority
        waiter.deadline = deadline?.uptimeNanoseconds ?? 0
        // A discarded operation that was parked may have been a reason for a boost: `perform`
        // lowers it.
        let placed = perform { machine, actions in
            actions = machine.discardPending()
            let placed = transition(announcing: EngineWord.slowRelease, &machine) { machine, word in
                let admission = machine.enqueueOperation(
                    waiter, priority: priority, discardable: discardable, handled: handled, word: &word,
                    now: machineNow(precise: waiter.deadline != 0), deadline: waiter.deadline)
                return placement(admission, machine, word: word)
            }
            // Granted at once, to a queue of width above 1: it holds one slot, as a shared holder.
            if case .granted = placed, machine.operationsShare { waiter.isGrantedShared = true }
            SyncPoints.note(discardable ? "a discardable operation is enqueued" : "an operation is enqueued")
            return placed
        }.answer
        switch placed {
        case .granted(let ticket):
            guard let ticket else { preconditionFailure("a command queue tracks its operations") }
            waiter.ticket = ticket
            if !waiter.isGrantedShared { keepHolderSite(waiter.keptSite, priority: priority) }
            return (waiter, true)
        case .queued(let ticket):
            waiter.ticket = ticket
            noteContention()
            return (waiter, false)
        case .refused(let error):
            // Its deadline had passed: its task finds the refusal as it waits (its ticket matches
            // nothing, so it never suspends).
            waiter.refusal = error.namingQueue()
            return (waiter, false)
        }
    }

    /// The granted operation `waiter`, which has a handle, is about to begin its body, in its own
    /// task: it begins unless it was cancelled (its task, or ``QueuedOperation/cancel()``, which
    /// gave its turn back already) or discarded; then it gives its turn back, if it still held it.
    /// - Returns: whether it begins (`false`: it never runs, and must not release).
    @usableFromInline
    final func beginOperation(_ waiter: AwaitingWaiter, progress: OperationProgress) -> Bool {
        perform { machine in
            transition(announcing: EngineWord.slowRelease, &machine) { machine, word in
                let actions = machine.beginOperation(
                    waiter.ticket, taskCancelled: Task.isCancelled, word: &word, now: machineNow())
                // In the same lock section, so that a handle never sees it begin and not run.
                if actions.found == .holding { progress.hasBegun = true }
                SyncPoints.note("an operation with a handle asks to begin")
                return actions
            }
        }.found == .holding
    }

    /// ``QueuedOperation/cancel()``: the operation `waiter` leaves the queue or gives its turn back
    /// if it has not begun, and its task is cancelled (see
    /// ``EngineStateMachine/cancelOperation(_:word:now:)``).
    /// - Returns: what the machine found.
    final func cancelOperation(_ waiter: AwaitingWaiter) -> Machine.Found {
        perform { machine in
            transition(announcing: EngineWord.slowRelease, &machine) { machine, word in
                let actions = machine.cancelOperation(waiter.ticket, word: &word, now: machineNow())
                SyncPoints.note("an operation is cancelled")
                return actions
            }
        }.found
    }

    /// Where the operation `waiter` of `progress`, whose task is `task`, stands now (see
    /// ``QueuedOperationState``): read under the lock, with the machine's record of it.
    final func operationState(
        _ waiter: AwaitingWaiter, progress: OperationProgress, task: some CancellableTask
    ) -> QueuedOperationState {
        machine.withLock { machine in
            progress.state(live: machine.isLive(waiter.ticket), taskCancelled: task.isCancelled)
        }
    }

    /// Why the current task must not await the result of the operation `waiter` (issued at
    /// `site`), if it must not: it would wait forever. Either the current task runs an operation
    /// that holds this queue's only turn (a one-at-a-time queue of width 1) and `waiter` has not
    /// begun, so it can begin only once the current one ends; or the current task is that
    /// operation's own task (`task`, its address), which would wait for its own end.
    /// - Returns: `.deadlock`, naming both operations; `nil` if the wait can end.
    final func refusalToAwait(_ waiter: AwaitingWaiter, progress: OperationProgress, task: Int) -> QueueSafeValueError?
    {
        let current = currentTaskID()
        guard current != 0 else { return nil }
        let (live, begun, finished) = machine.withLock { machine in
            (machine.isLive(waiter.ticket), progress.hasBegun, progress.hasFinished)
        }
        let awaited = "the operation issued at \(waiter.keptSite.shown.map { "\($0)" } ?? "an unknown site")"
        let me = DeadlockDetector.describe(.task(current), name: DeadlockDetector.currentTaskName(), queue: nil)
        let cycle: [DeadlockReport.Link]
        if begun && !finished && task == current {
            cycle = [DeadlockReport.Link(waiter: "\(me) (\(awaited))", value: "its own result", holder: me)]
        } else if live && !begun && isInsideRunningSection() {
            cycle = [
                DeadlockReport.Link(waiter: me, value: "the result of \(awaited)", holder: awaited),
                DeadlockReport.Link(waiter: awaited, value: "its turn on \(displayName)", holder: me),
            ]
        } else {
            return nil
        }
        let report = DeadlockReport(kind: .waitCycle, cycle: cycle, diagnostics: diagnostics, parkedPoolThreads: nil)
        return reportingRefusal(.deadlock(report), site: waiter.keptSite, priority: waiter.issuedPriority ?? .medium)
    }

    /// The operation of `progress` ran to its end.
    @usableFromInline
    final func operationFinished(_ progress: OperationProgress) {
        machine.withLock { _ in progress.hasFinished = true }
    }

    /// An operation that holds the section (alone, or one slot of a queue of width above 1) gives
    /// it back without having run: it was cancelled or discarded after its grant.
    @usableFromInline
    final func releaseOperation(_ waiter: AwaitingWaiter) {
        if holdsSlot(waiter) {
            releaseReader(waiter.ticket)
        } else {
            release(.operation)
        }
    }

    /// Whether the operation's grant made it the holder of one slot of a queue of width above 1
    /// (rather than the only holder). Read by the operation's own task once it is granted: the flag
    /// was written under the engine lock before the task read its grant under that lock (or, for
    /// a grant at once, before the task was created), so no lock is needed here.
    @usableFromInline
    final func holdsSlot(_ waiter: AwaitingWaiter) -> Bool {
        waiter.isGrantedShared
    }

    /// A ``CommandQueue``'s width changes; the operations it lets start now are started.
    final func setWidth(_ width: Int) {
        perform { $0.setWidth(width) }
    }

    /// The queue's width.
    final var width: Int {
        machine.withLock { $0.width }
    }

    /// The waiting operation `waiter` moves to the place of a `priority` operation arriving now;
    /// its handle's `progress` keeps the new priority (if it moved, or is raised while it holds).
    /// - Returns: what the machine found: ``EngineStateMachine/Found/moved``,
    ///   ``EngineStateMachine/Found/holding`` (it holds the section, begun or not) or
    ///   ``EngineStateMachine/Found/gone``.
    final func reprioritize(
        _ waiter: AwaitingWaiter, to priority: CommandPriority, progress: OperationProgress
    ) -> Machine.Found {
        perform { machine in
            let actions = machine.reprioritize(waiter.ticket, to: priority)
            switch actions.found {
            case .moved: progress.priority = priority
            case .holding: progress.priority = max(progress.priority, priority)
            default: break
            }
            SyncPoints.note("an operation is re-prioritized")
            return actions
        }.found
    }

    /// Escalates a running operation's task (kept alive by the caller) for its new `priority`:
    /// `.high` and above to `TaskPriority.high`, `.medium` and above to `.medium`, `.low` and above
    /// to `.utility`, below that `.background`. The runtime never lowers a task's priority.
    static func escalate(task: Int, to priority: CommandPriority) {
        let taskPriority: TaskPriority =
            priority >= .high ? .high : priority >= .medium ? .medium : priority >= .low ? .utility : .background
        SyncPoints.willTouchTask()
        BoostRegistry.shared.backend.escalate(task: task, to: taskPriority.rawValue)
    }

    /// A discardable operation that holds the section is about to begin.
    /// - Returns: `false` if a later operation discarded it after it was granted: it must release
    ///   the section and throw `.cancelled` without running.
    @usableFromInline
    final func beginDiscardable(_ waiter: AwaitingWaiter) -> Bool {
        machine.withLock { machine in
            SyncPoints.note("a discardable operation asks to begin")
            return machine.beginDiscardable(waiter.ticket)
        }
    }

    /// Records the task that runs an operation, so ``cancelAll()`` can cancel it. If `cancelAll()`
    /// ran in the meantime, the task is cancelled at once; if the operation ended already, the task
    /// is not kept.
    @usableFromInline
    final func attach(_ task: any CancellableTask, to waiter: AwaitingWaiter) {
        let attachment = machine.withLock { machine in
            let attachment = machine.attach(waiter.ticket)
            if attachment == .keep { waiter.task = task }
            return attachment
        }
        if attachment == .cancelNow { task.cancel() }
    }

    /// Suspends the current task until `waiter` is granted, or until it leaves the queue because the
    /// task was cancelled (then it throws `.cancelled`), because `deadline` passed (then it throws
    /// `.timedOut`) or because suspending would close a wait cycle (then it throws `.deadlock`).
    /// Does not suspend if the wait is over already. Exactly one of "granted, runs" and "left, never
    /// runs" happens: the state machine decides under the lock.
    ///
    /// The verdict is read under the lock after the resumption, not passed through the
    /// continuation: a continuation resumed before its task finished suspending lets the task go on
    /// ordered only by the concurrency runtime's own atomics, which ThreadSanitizer does not see.
    /// The lock orders everything the task does next after the releaser's critical section, for the
    /// sanitizer as for the hardware.
    ///
    /// Runs on the caller's executor (`nonisolated(nonsending)`), like the functions it calls
    /// here: a function with an `isolated` parameter switches executors on entering and leaving it
    /// even when the task is there already, a call into the runtime that a contended command paid
    /// on every function boundary of this path.
    ///
    /// A task that holds no section (no awaiting command or shared read of the task is running its
    /// closure: its task-local stack of sections is empty) and that no other task awaits
    /// (`perform`) does not register its wait for deadlock detection: a cycle passes only through
    /// parties that hold what another waits for, and a walk looks only at holders' waits, so the
    /// registration could never take part in a cycle. (It cost every waiting command two trips
    /// through the process-wide detector lock.) Its own urgency is then
    /// parked in the same trip through the engine lock that stores its continuation.
    /// - Parameters:
    ///   - holdsNothing: the waiting task is an operation's own task that has run none of its
    ///     operation yet, so it holds no section whatever its task-locals say (it inherits them
    ///     from the task that enqueued it).
    ///   - startedLater: the waiter was queued before this task started (an operation's task), so
    ///     it may well be granted already.
    ///   - cancellable: whether the task's cancellation takes the waiter out of the queue; `false`
    ///     waits for the turn whatever happens to the task (`AwaitSchedule.evenIfCancelled`).
    @usableFromInline
    nonisolated(nonsending) final func waitForTurn(
        _ waiter: AwaitingWaiter,
        deadline: DispatchTime? = nil,
        holdsNothing: Bool = false,
        startedLater: Bool = false,
        cancellable: Bool = true
    ) async throws(QueueSafeValueError) {
        // Granted already (the task started after its predecessor released, as a backlog drained
        // by one pool thread always does): no handlers, no suspension and no second executor trip.
        // Under the lock, like the verdict after a resumption. A command this task has only just
        // queued does not look: a grant since then is found when the continuation would be stored.
        if startedLater && machine.withLock({ _ in waiter.isGranted }) { return }
        let ticket = waiter.ticket
        // The parties this wait registers for deadlock detection: none for a task that holds
        // nothing and that nobody awaits (see above).
        let taskNodes = DeadlockDetector.taskNodes(currentTaskID())
        // mutant(holding-task-not-registered): let holdsNone = true
        let holdsNone = holdsNothing || CriticalSectionContext.sections.get().depth == 0
        let nodes = holdsNone && taskNodes.count == 1 ? [] : taskNodes
        // Armed once the task waits; cancelled when the wait is over. Like a cancellation, it leaves
        // the deadlock graph before it leaves the queue.
        let timer = deadline.map { _ in
            DispatchWorkItem { [self] in
                if !nodes.isEmpty { DeadlockDetector.shared.unregister(nodes) }
                timeOut(waiter)
            }
        }
        if cancellable {
            await withTaskCancellationHandler {
                await suspendForTurnPassingOnEscalations(waiter, nodes: nodes, deadline: deadline, timer: timer)
            } onCancel: {
                // No longer a waiter for deadlock detection, then out of the queue; the continuation
                // was stored before `leave` (both under the lock), if the task suspended at all.
                SyncPoints.insideRuntimeLock {
                    if !nodes.isEmpty { DeadlockDetector.shared.unregister(nodes) }
                    leave(ticket)
                }
            }
        } else {
            // Cleanup that must run: cancellation does not take it out of the queue.
            await suspendForTurnPassingOnEscalations(waiter, nodes: nodes, deadline: deadline, timer: timer)
        }
        timer?.cancel()
        if !nodes.isEmpty { DeadlockDetector.shared.unregister(nodes) }
        // The verdict is read under the lock it was written under: a resumption alone does not
        // order the two for ThreadSanitizer, and the grant's other flags (`isGrantedShared`, read
        // by `holdsSlot`) rely on this read.
        let (granted, refusal) = machine.withLock { _ in (waiter.isGranted, waiter.refusal) }
        if !granted {
            guard let refusal else { throw .cancelled }
            throw reportingRefusal(
                refusal.namingQueue(), site: waiter.keptSite, priority: waiter.issuedPriority ?? .medium)
        }
    }

    /// ``suspendForTurn(_:nodes:deadline:timer:)``, passing an escalation of the waiting task on to
    /// the holder where the runtime can tell (`withTaskPriorityEscalationHandler`, macOS 26 and
    /// iOS 26 onwards; below, the holder keeps the priority the task had when it suspended).
    nonisolated(nonsending) private func suspendForTurnPassingOnEscalations(
        _ waiter: AwaitingWaiter,
        nodes: [DeadlockDetector.Node],
        deadline: DispatchTime?,
        timer: DispatchWorkItem?
    ) async {
        guard #available(macOS 26.0, iOS 26.0, watchOS 26.0, tvOS 26.0, visionOS 26.0, *) else {
            return await suspendForTurn(waiter, nodes: nodes, deadline: deadline, timer: timer)
        }
        let ticket = waiter.ticket
        // A task escalated while it waits passes the escalation on to the holder.
        await withTaskPriorityEscalationHandler {
            await suspendForTurn(waiter, nodes: nodes, deadline: deadline, timer: timer)
        } onPriorityEscalated: { [self] _, escalated in
            // No chain walk under the runtime's lock (see `park`).
            SyncPoints.insideRuntimeLock {
                _ = park(ticket, .ofTask(escalated), party: nodes, walks: false) { _ in }
            }
        }
    }

    /// The suspension of ``waitForTurn(_:deadline:holdsNothing:startedLater:cancellable:)``: registers `nodes` for
    /// deadlock detection (none: not registered), stores the continuation unless the wait is over
    /// already, raises the holder to this task's priority and arms the deadline.
    nonisolated(nonsending) private func suspendForTurn(
        _ waiter: AwaitingWaiter,
        nodes: [DeadlockDetector.Node],
        deadline: DispatchTime?,
        timer: DispatchWorkItem?
    ) async {
        let ticket = waiter.ticket
        await withUnsafeContinuation(isolation: #isolation) { (continuation: TurnContinuation) in
            // Registered before the continuation is stored, so that a cancellation (which
            // unregisters, then leaves) never leaves a stale registration behind.
            // From its registration until it has raised the holder, the chains it may extend lag.
            SyncPoints.inheritance(true)
            defer { SyncPoints.inheritance(false) }
            let registration =
                nodes.isEmpty
                ? DeadlockDetector.Registration(verdict: .wait, names: [:])
                : DeadlockDetector.shared.register(nodes, waitingFor: self, ticket: ticket, poolThread: false)
            // While it waits, the holder runs at least at this task's priority, and at what the
            // task inherits from sections it holds (read after its registration: a raise that
            // reached it before cannot be missed), decided in the section that stores the
            // continuation. A wait that would deadlock parks nothing: it leaves.
            let waits = registration.verdict == .wait
            let waiting =
                park(ticket, waits ? .ofTask(Task.currentPriority) : .none, party: waits ? nodes : []) { machine in
                    guard waits, machine.isWaiting(ticket) else { return false }
                    waiter.continuation = continuation
                    waiter.waitingTask = currentTaskID()
                    return true
                }.result
            if waiting {
                if let deadline, let timer {
                    // A deadline already past gives up now, like `wait(timeout:)`.
                    if deadline <= SyncPoints.now() {
                        timer.perform()
                    } else {
                        SyncPoints.asyncAfter(deadline, timer)
                    }
                }
                return
            }
            if !nodes.isEmpty { DeadlockDetector.shared.unregister(nodes) }
            // Granted or left before it could suspend, or suspending would close a cycle.
            if registration.verdict != .wait, let diagnostics = leaveWithSnapshot(ticket) {
                waiter.refusal = .deadlock(
                    DeadlockDetector.report(
                        registration, diagnostics: diagnostics,
                        waiterDescription: DeadlockDetector.describe(
                            nodes[0], name: DeadlockDetector.currentTaskName(), queue: nil)))
            }
            continuation.resume()
        }
    }

    /// The deadline of a waiting awaiting command or operation passed: it leaves the queue and its
    /// task is resumed to throw `.timedOut` with a snapshot of the queue, unless it was granted (or
    /// left) first.
    private func timeOut(_ waiter: AwaitingWaiter) {
        perform { machine in
            guard let actions = leave(waiter.ticket, &machine) else { return .init() }
            waiter.refusal = .timedOut(snapshot(machine, word: state.loadAcquire()))
            return actions
        }
    }

    /// Every waiting operation leaves the queue (its task is resumed, cancelled and throws
    /// `.cancelled`), and the running operation's task is cancelled.
    final func cancelAll() {
        perform { $0.cancelAll() }
    }
}
