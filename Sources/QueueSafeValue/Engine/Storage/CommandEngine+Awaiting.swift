import Dispatch
import QueueSafeValueShims

// Awaiting commands and CommandQueue operations.
extension CommandEngine {

    /// An awaiting command's acquisition after the idle compare-and-swap failed. A task cancelled
    /// while it waits, or granted as it was cancelled, throws `.cancelled` unless not `cancellable`.
    /// It keeps an `isolated` parameter: `nonisolated(nonsending)`, it cost the uncontended command
    /// instructions (<doc:Benchmarks#Why-the-code-is-shaped-this-way>).
    /// - Throws: `.cancelled`, `.reentrantAccess`, `.valueContainerDeinited`, `.timedOut`, `.deadlock`.
    @usableFromInline
    final func acquireAwaitingSlow(
        priority: CommandPriority,
        site: CallSite,
        deadline: DispatchTime? = nil,
        cancellable: Bool = true,
        isolation: isolated (any Actor)?
    ) async throws(QueueSafeValueError) {
        _ = try await awaitTurn(
            shared: false, priority: priority, site: site, deadline: deadline, cancellable: cancellable)
    }

    /// An awaiting command, or shared read (`shared`), joins the queue through the lock and
    /// suspends until its turn (see ``acquireAwaitingSlow(priority:site:deadline:cancellable:isolation:)``).
    /// - Returns: its ticket (a read's, or `nil`).
    nonisolated(nonsending) final func awaitTurn(
        shared: Bool, priority: CommandPriority, site: CallSite, deadline: DispatchTime?, cancellable: Bool
    ) async throws(QueueSafeValueError) -> Ticket? {
        let waiter = AwaitingWaiter()
        waiter.keptSite = site.kept
        waiter.deadline = deadline?.uptimeNanoseconds ?? 0
        let reentrant = isInsideRunningSection() || isInsideSharedRead(thread: 0)
        switch enqueue(
            waiter, kind: .awaiting, priority: priority, reentrant: reentrant, shared: shared, deadline: waiter.deadline
        )
        {
        case .granted(let ticket):
            return ticket
        case .refused(let error):
            throw reportingRefusal(error.namingQueue(), site: site.kept, priority: priority)
        case .queued(let ticket):
            waiter.ticket = ticket
            try await waitForTurn(waiter, deadline: deadline, cancellable: cancellable)
            if cancellable && Task.isCancelled {
                // Granted, but cancelled before its closure began: it never starts.
                if shared { releaseReader(ticket) } else { release(.awaiting) }
                throw .cancelled
            }
            return ticket
        }
    }

    /// Places a ``CommandQueue`` operation in the queue, even when the section is free, so that its
    /// place is taken before its task starts; a pending discardable operation is discarded first.
    /// - Parameter handled: it has a ``QueuedOperation`` handle, and begins through ``beginOperation(_:progress:)``.
    /// - Returns: its waiter, and whether it holds the section already.
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
        // `perform` lowers a boost the discarded operation was a reason for.
        let placed = perform { machine, actions in
            actions = machine.discardPending()
            let placed = transition(announcing: EngineWord.slowRelease, &machine) { machine, word in
                let admission = machine.enqueueOperation(
                    waiter, priority: priority, discardable: discardable, handled: handled, word: &word,
                    now: machineNow(precise: waiter.deadline != 0), deadline: waiter.deadline)
                return placement(admission, machine, word: word)
            }
            // Granted at once on a queue of width above 1: it holds one slot, as a shared holder.
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
            // Its task finds the refusal (its ticket matches nothing, so it never suspends).
            waiter.refusal = error.namingQueue()
            return (waiter, false)
        }
    }

    /// The granted, handled operation `waiter` is about to begin in its own task: it begins unless
    /// cancelled or discarded, and then gives its turn back if it still held it.
    /// - Returns: whether it begins (`false`: it never runs, and must not release).
    @usableFromInline
    final func beginOperation(_ waiter: AwaitingWaiter, progress: OperationProgress) -> Bool {
        perform { machine in
            transition(announcing: EngineWord.slowRelease, &machine) { machine, word in
                let actions = machine.beginOperation(
                    waiter.ticket, taskCancelled: Task.isCancelled, word: &word, now: machineNow())
                // In the same section: a handle never sees it begin and not run.
                if actions.found == .holding { progress.hasBegun = true }
                SyncPoints.note("an operation with a handle asks to begin")
                return actions
            }
        }.found == .holding
    }

    /// ``QueuedOperation/cancel()``.
    final func cancelOperation(_ waiter: AwaitingWaiter) -> Machine.Found {
        perform { machine in
            transition(announcing: EngineWord.slowRelease, &machine) { machine, word in
                let actions = machine.cancelOperation(waiter.ticket, word: &word, now: machineNow())
                SyncPoints.note("an operation is cancelled")
                return actions
            }
        }.found
    }

    final func operationState(
        _ waiter: AwaitingWaiter, progress: OperationProgress, task: some CancellableTask
    ) -> QueuedOperationState {
        machine.withLock { machine in
            progress.state(live: machine.isLive(waiter.ticket), taskCancelled: task.isCancelled)
        }
    }

    /// Why the current task must not await the operation `waiter`'s result, if it would wait
    /// forever: it holds the only turn `waiter` needs to begin, or it is `waiter`'s own task.
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

    @usableFromInline
    final func operationFinished(_ progress: OperationProgress) {
        machine.withLock { _ in progress.hasFinished = true }
    }

    /// An operation that holds the section (or a slot) gives it back without having run.
    @usableFromInline
    final func releaseOperation(_ waiter: AwaitingWaiter) {
        if holdsSlot(waiter) {
            releaseReader(waiter.ticket)
        } else {
            release(.operation)
        }
    }

    /// Whether the operation's grant made it the holder of one slot (width above 1). Read by its
    /// own task after reading its grant under the lock, or before the task existed: no lock needed.
    @usableFromInline
    final func holdsSlot(_ waiter: AwaitingWaiter) -> Bool {
        waiter.isGrantedShared
    }

    final func setWidth(_ width: Int) {
        perform { $0.setWidth(width) }
    }

    final var width: Int {
        machine.withLock { $0.width }
    }

    /// The waiting operation `waiter` moves to the place of a `priority` operation arriving now;
    /// `progress` keeps the new priority if it moved, or is raised while it holds.
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

    /// Escalates a running operation's task (kept alive by the caller) for its new `priority`.
    static func escalate(task: Int, to priority: CommandPriority) {
        let taskPriority: TaskPriority =
            priority >= .high ? .high : priority >= .medium ? .medium : priority >= .low ? .utility : .background
        SyncPoints.willTouchTask()
        BoostRegistry.shared.backend.escalate(task: task, to: taskPriority.rawValue)
    }

    /// A discardable operation that holds the section is about to begin.
    /// - Returns: `false` if a later one discarded it: it releases and throws `.cancelled`.
    @usableFromInline
    final func beginDiscardable(_ waiter: AwaitingWaiter) -> Bool {
        machine.withLock { machine in
            SyncPoints.note("a discardable operation asks to begin")
            return machine.beginDiscardable(waiter.ticket)
        }
    }

    /// Records the task that runs an operation, for ``cancelAll()``; it is cancelled at once if
    /// `cancelAll()` ran meanwhile, and not kept if the operation ended.
    @usableFromInline
    final func attach(_ task: any CancellableTask, to waiter: AwaitingWaiter) {
        let attachment = machine.withLock { machine in
            let attachment = machine.attach(waiter.ticket)
            if attachment == .keep { waiter.task = task }
            return attachment
        }
        if attachment == .cancelNow { task.cancel() }
    }

    /// Suspends the current task until `waiter` is granted, or it leaves because the task was
    /// cancelled (`.cancelled`), `deadline` passed (`.timedOut`) or suspending would close a wait
    /// cycle (`.deadlock`). `nonisolated(nonsending)`, like its callees: an `isolated` parameter
    /// switches executors at every function boundary. A task that holds no section and that no
    /// other task awaits does not register for deadlock detection: a cycle passes only through holders.
    /// - Parameters:
    ///   - holdsNothing: an operation's own task that has run none of it yet, whatever its
    ///     inherited task-locals say.
    ///   - startedLater: queued before this task started (an operation's task): may be granted already.
    ///   - cancellable: whether cancellation takes the waiter out of the queue.
    @usableFromInline
    nonisolated(nonsending) final func waitForTurn(
        _ waiter: AwaitingWaiter,
        deadline: DispatchTime? = nil,
        holdsNothing: Bool = false,
        startedLater: Bool = false,
        cancellable: Bool = true
    ) async throws(QueueSafeValueError) {
        // Granted already (a backlog drained by one pool thread): no handlers, no suspension. A
        // command this task has only just queued finds a grant when storing its continuation.
        if startedLater && machine.withLock({ _ in waiter.isGranted }) { return }
        let ticket = waiter.ticket
        let taskNodes = DeadlockDetector.taskNodes(currentTaskID())
        // mutant(holding-task-not-registered): let holdsNone = true
        let holdsNone = holdsNothing || CriticalSectionContext.sections.get().depth == 0
        let nodes = holdsNone && taskNodes.count == 1 ? [] : taskNodes
        // Like a cancellation, it leaves the deadlock graph before it leaves the queue.
        let timer = deadline.map { _ in
            DispatchWorkItem { [self] in
                if !nodes.isEmpty { DeadlockDetector.shared.unregister(nodes) }
                leaveWithSnapshot(waiter.ticket) { waiter.refusal = .timedOut($0) }
            }
        }
        if cancellable {
            await withTaskCancellationHandler {
                await suspendForTurnPassingOnEscalations(waiter, nodes: nodes, deadline: deadline, timer: timer)
            } onCancel: {
                // Out of the deadlock graph, then out of the queue.
                SyncPoints.insideRuntimeLock {
                    if !nodes.isEmpty { DeadlockDetector.shared.unregister(nodes) }
                    leave(ticket)
                }
            }
        } else {
            await suspendForTurnPassingOnEscalations(waiter, nodes: nodes, deadline: deadline, timer: timer)
        }
        timer?.cancel()
        if !nodes.isEmpty { DeadlockDetector.shared.unregister(nodes) }
        // Read under the lock, not passed through the continuation: a task resumed before it
        // finished suspending is ordered only by the runtime's atomics, which ThreadSanitizer does
        // not see. `holdsSlot` relies on it too.
        let (granted, refusal) = machine.withLock { _ in (waiter.isGranted, waiter.refusal) }
        if !granted {
            guard let refusal else { throw .cancelled }
            throw reportingRefusal(
                refusal.namingQueue(), site: waiter.keptSite, priority: waiter.issuedPriority ?? .medium)
        }
    }

    /// ``suspendForTurn(_:nodes:deadline:timer:)``, passing the waiting task's escalations on to
    /// the holder where the runtime can tell (macOS 26 / iOS 26 onwards).
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
        await withTaskPriorityEscalationHandler {
            await suspendForTurn(waiter, nodes: nodes, deadline: deadline, timer: timer)
        } onPriorityEscalated: { [self] _, escalated in
            // No chain walk under the runtime's lock.
            SyncPoints.insideRuntimeLock {
                _ = park(ticket, .ofTask(escalated), party: nodes, walks: false) { _ in }
            }
        }
    }

    /// Registers `nodes`, stores the continuation unless the wait is over, raises the holder and
    /// arms the deadline.
    nonisolated(nonsending) private func suspendForTurn(
        _ waiter: AwaitingWaiter,
        nodes: [DeadlockDetector.Node],
        deadline: DispatchTime?,
        timer: DispatchWorkItem?
    ) async {
        let ticket = waiter.ticket
        await withUnsafeContinuation(isolation: #isolation) { (continuation: TurnContinuation) in
            // Registered before the continuation is stored: a cancellation unregisters, then leaves.
            // Until it has raised the holder, the chains it may extend lag.
            SyncPoints.inheritance(true)
            defer { SyncPoints.inheritance(false) }
            let registration =
                nodes.isEmpty
                ? DeadlockDetector.Registration(verdict: .wait, names: [:])
                : DeadlockDetector.shared.register(nodes, waitingFor: self, ticket: ticket, poolThread: false)
            // The holder runs at least at this task's priority and what it inherits (read after
            // registering, so no raise is missed). A wait that would deadlock parks nothing.
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
                    // Already past: gives up now, like `wait(timeout:)`.
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

    /// Every waiting operation leaves (its task throws `.cancelled`), and every running one's task
    /// is cancelled.
    final func cancelAll() {
        perform { $0.cancelAll() }
    }
}
