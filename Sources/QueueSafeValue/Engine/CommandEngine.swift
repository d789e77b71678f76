import Dispatch
import QueueSafeValueShims

#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

// MARK: - CommandEngine

/// The priority command queue behind every value container and ``CommandQueue``: the storage half
/// of the engine.
///
/// Every decision is made by an ``EngineStateMachine`` that this class keeps behind its lock. A
/// method here calls one transition with the lock held and then, after unlocking, performs what the
/// transition returned: it wakes a parked thread, dispatches a block, resumes or cancels a task,
/// frees the value. No user code runs, no semaphore is signalled and no continuation is resumed
/// while the lock is held (and no reference whose release could run user code is dropped there).
///
/// The one exception to "every decision in the machine" is the idle path: taking a free section and
/// releasing one that nobody waits for are single compare-and-swaps on the state word, without the
/// lock. ``EngineWord`` states the invariant that makes this safe.
///
/// `ValueEngine` subclasses it to add the value, which the engine frees through ``freeValue()``
/// when the state machine says so.
// @unchecked Sendable: mutable state is the locked machine and atomic words
@usableFromInline
class CommandEngine: @unchecked Sendable {
    typealias Machine = EngineStateMachine<Contender>
    typealias Ticket = Machine.Ticket

    /// Word 0: the state word (``EngineWord``). Word 1: the thread running a synchronous closure in
    /// the section (or waiting for its `done()`), or 0. Word 2: the task section's generation, with
    /// its sign saying whether a task section is held: positive `g` while the `g`th task section is
    /// held, `-g` once it ended (so the next one is `g + 1`, and a task-local record of an ended
    /// section never matches the word); only the holder writes it (see `Reentrancy.swift`). Word 3: the task holding the section, or 0 (for
    /// deadlock detection). Word 4: the dispatched holder's slot for helping (see
    /// ``publishPendingDispatch(_:)``). Word 5: the identity of the dispatched holder's queue (see
    /// `QueueTag`), for diagnostics; meaningful only while a dispatched command holds the section.
    @usableFromInline final let words = AtomicWords.make(count: 6)
    private let machine: LockedState<Machine>
    /// The boost lock and what it guards (see `PriorityInheritance.swift`).
    final let boosts = LockedState.make(BoostRecord())

    @inlinable @inline(__always) final var state: AtomicWord { AtomicWord(words, index: 0) }
    @inlinable @inline(__always) final var ownerThread: AtomicWord { AtomicWord(words, index: 1) }
    @inline(__always) final var taskSection: AtomicWord { AtomicWord(words, index: 2) }
    @inline(__always) final var ownerTask: AtomicWord { AtomicWord(words, index: 3) }
    @inline(__always) final var pendingDispatch: AtomicWord { AtomicWord(words, index: 4) }
    @inline(__always) final var dispatchedHolderQueue: AtomicWord { AtomicWord(words, index: 5) }

    /// The name the user gave the container or queue, if any; see ``displayName``.
    final let label: String?

    @usableFromInline
    init(label: String?, fairness: CommandFairness = .strictPriority) {
        self.label = label
        machine = LockedState.make(Machine(maxOvertakes: fairness.maxOvertakes))
    }

    /// How diagnostics and deadlock reports name this engine: its label in quotes, or a short
    /// identity (`CommandQueue #3fa0`).
    var displayName: String {
        label.map { "'\($0)'" } ?? "CommandQueue #\(shortIdentity)"
    }

    /// The low 16 bits of the engine's address, in hex: enough to tell two engines apart in a report.
    final var shortIdentity: String {
        String((UInt(bitPattern: ObjectIdentifier(self)) >> 4) & 0xFFFF, radix: 16)
    }

    /// Frees the guarded value. Called once, outside the lock, when the state machine decides that
    /// the container is gone and nothing holds or waits for the value. The engine of a
    /// ``CommandQueue`` guards no value.
    func freeValue() {}

    // MARK: Idle path

    /// Takes the section if it is free: one compare-and-swap, no lock.
    @inlinable
    @inline(__always)
    final func tryAcquireIdle(_ kind: CommandKind) -> Bool {
        state.compareExchange(expected: 0, desired: kind.wordBits)
    }

    /// Ends the running command of `kind` and starts the next one, if any.
    @usableFromInline
    final func release(_ kind: CommandKind) {
        releaseReturningNext(kind)?.start()
    }

    /// ``release(_:)`` of a blocking command, inlined into the caller: on the idle path it is the
    /// store and the compare-and-swap of ``releaseReturningNext(_:)``, with no call.
    @inlinable
    @inline(__always)
    final func releaseBlocking() {
        releaseReturningNext(.blocking)?.start()
    }

    /// Ends the running command of `kind`. The command granted next, if any, is returned: the caller
    /// must call its `start()` (outside any lock).
    @inlinable
    @inline(__always)
    final func releaseReturningNext(_ kind: CommandKind) -> Contender? {
        // Cleared first: once the word says free, another thread may take the section and set them.
        ownerThread.storeRelaxed(0)
        if state.compareExchange(expected: kind.wordBits, desired: 0) { return nil }
        return releaseSlow()
    }

    // MARK: Transitions

    /// Asks the machine for the section on behalf of `waiter`.
    private func enqueue(
        _ waiter: Contender,
        kind: CommandKind,
        priority: CommandPriority,
        reentrant: Bool = false
    ) -> Machine.Admission {
        machine.withLock { machine in
            // From here on neither idle compare-and-swap can succeed; see `EngineWord`.
            // mutant(enqueue-without-slow-release): let observed = state.loadAcquire()
            let observed = state.fetchOr(EngineWord.slowRelease)
            let (admission, word) = machine.enqueue(
                waiter, kind: kind, priority: priority, reentrant: reentrant, observed: observed, now: coarseNow())
            state.storeRelease(word)
            return admission
        }
    }

    /// ``releaseReturningNext(_:)`` for a dispatched command: clears the dispatched holder's slot
    /// first (while the word still says held), so the blocking release pays nothing for helping.
    @inline(__always)
    final func releaseDispatched() -> Contender? {
        pendingDispatch.storeRelaxed(0)
        return releaseReturningNext(.dispatched)
    }

    @usableFromInline
    final func releaseSlow() -> Contender? {
        var heir = (thread: 0, task: 0)
        let (release, helper) = machine.withLock { machine -> (Machine.Release, BlockingWaiter?) in
            // The holder is the caller, and `slowRelease` or `closed` is set: only locked
            // transitions change the word now.
            let (release, word) = machine.release(observed: state.loadAcquire(), now: coarseNow())
            state.storeRelease(word)
            guard let next = release.next else { return (release, nil) }
            next.isGranted = true
            if release.nextUrgency != nil { heir = (next.threadToBoost, next.taskToEscalate) }
            guard release.nextKind == .dispatched else { return (release, nil) }
            dispatchedHolderQueue.storeRelaxed(next.targetQueueID)
            // A dispatched command for a queue whose thread waits here: that thread runs it.
            // Otherwise it is published, in this same lock section, for a waiter that comes later.
            if machine.hasHelpers, let helper = machine.helper(forQueue: next.targetQueueID) as? BlockingWaiter {
                pendingDispatch.storeRelease(Self.dispatchStarted)
                // mutant(helper-job-after-unlock): _ = helper
                helper.job = next
                return (release, helper)
            }
            publishPendingDispatch(next)
            return (release, nil)
        }
        if release.freeValue { freeValue() }
        if let ended = release.ended as? AwaitingWaiter { ended.task = nil }
        // The new holder inherits the urgency of the waiters still parked before it is started.
        if let urgency = release.nextUrgency { raiseHeir(heir, to: urgency) }
        if release.endBoost {
            // A boosted holder hands the section on while still boosted, and only then goes back
            // to its own priority: at its own priority it might not get the processor to hand it on.
            if let helper {
                // mutant(helper-job-after-unlock): helper.job = release.next; helper.postJob()
                helper.postJob()
            } else {
                release.next?.start()
            }
            endBoostOfCurrentThread()
            return nil
        }
        if let helper {
            // mutant(helper-job-after-unlock): helper.job = release.next; helper.postJob()
            helper.postJob()
            return nil
        }
        return release.next
    }

    // MARK: Helping

    /// The dispatched holder's slot (word 4): 0 while no dispatched command holds the section (or
    /// one took a free section and is about to publish itself), its retained address while it is
    /// granted and its block has not started, and `dispatchStarted` once its block or a waiter
    /// runs it (or it was handed to a waiter). A dispatched command granted by the machine is
    /// published in the same lock section as its grant; one that took a free section publishes
    /// itself right after. A blocking waiter that runs on the command's queue, where the block
    /// could never run while the waiter blocks the queue, takes it over.
    static let dispatchStarted = 1

    /// Publishes `command`, just granted, as the dispatched holder whose block has not started.
    /// (A release that grants it also notes its queue, under the lock; one that took a free
    /// section notes it itself, see `DispatchedCommand`.)
    final func publishPendingDispatch(_ command: Contender) {
        pendingDispatch.storeRelease(Int(bitPattern: Unmanaged.passRetained(command).toOpaque()))
    }

    /// The block of `command`, or its predecessor's block running it inline, claims it: `true` if
    /// it was still published, `false` if a waiter took it over. Only `command` itself.
    final func claimPendingDispatch(_ command: Contender) -> Bool {
        let raw = Int(bitPattern: Unmanaged.passUnretained(command).toOpaque())
        guard pendingDispatch.compareExchange(expected: raw, desired: Self.dispatchStarted) else { return false }
        Unmanaged.passUnretained(command).release()  // the reference the slot held
        return true
    }

    /// Takes over the published dispatched holder, if the holder is one and its block has not
    /// started: the taker runs it, and its block, which finds it gone, does not. Waits the moment
    /// it takes a command that took a free section to publish itself.
    final func takePendingDispatch() -> Contender? {
        while state.loadAcquire() & EngineWord.holderMask == CommandKind.dispatched.wordBits {
            let raw = pendingDispatch.loadAcquire()
            if raw == Self.dispatchStarted { return nil }
            if raw == 0 {
                SyncPoints.yield()  // granted on the idle path, publishing itself
                continue
            }
            guard pendingDispatch.compareExchange(expected: raw, desired: Self.dispatchStarted),
                let pointer = UnsafeRawPointer(bitPattern: raw)
            else { continue }
            return Unmanaged<Contender>.fromOpaque(pointer).takeRetainedValue()
        }
        return nil
    }

    /// A blocking waiter is about to park. A dispatched command that must run before it, for a
    /// queue this thread runs on, could never run its block while this thread waits. So this thread
    /// takes over the holder if it is such a command, and registers for the ones granted while it
    /// waits (they are handed to it as jobs). The holder is checked again after registering: a
    /// command granted in between was published, not handed over. A thread that runs on no tagged
    /// queue (every queue a dispatched command targets is tagged when the command is submitted)
    /// blocks no such command, and does none of this.
    ///
    /// Called when the waiter is about to park, not when it joins the queue: a hand-off that the
    /// spin catches pays nothing for helping, and a command of its queue waits at most one spin.
    /// Called again when a queue is tagged while the waiter is parked without knowing its queue.
    /// - Returns: the tagging epoch read before the queues were, if the thread's innermost queue is
    ///   unknown (it may be a queue nothing has tagged yet): the waiter then asks to be told of new
    ///   tags (see ``DeadlockDetector/tagQueue(_:)``). `nil` if it knows its queue.
    final func becomeHelper(_ ticket: Ticket) -> Int? {
        let epoch = DeadlockDetector.shared.tagEpoch
        let (queues, innermostKnown) = QueueTag.currentIdentities
        if !queues.isEmpty {
            takeOverPendingDispatch(runningOn: queues)
            machine.withLock { $0.registerHelper(ticket, queues: queues) }
            takeOverPendingDispatch(runningOn: queues)
        }
        return innermostKnown ? nil : epoch
    }

    /// If the holder is a dispatched command whose block has not started, takes it over: runs it
    /// here if this thread runs on its queue; otherwise puts it back (see ``republish(_:)``).
    private func takeOverPendingDispatch(runningOn queues: [Int]) {
        guard let command = takePendingDispatch() else { return }
        if queues.contains(command.targetQueueID) {
            BlockingWaiter.withoutThreadWaiter { command.runOnHelper() }
        } else {
            republish(command)
        }
    }

    /// Puts back a dispatched holder taken over by a thread that does not run on its queue. Under
    /// the lock, as a release does: a waiter running on its queue that registered meanwhile (and
    /// saw the slot taken) gets it as a job; otherwise it is published again, for such a waiter to
    /// take over, and given a block that claims it (its first block may have run and found the
    /// slot taken; whichever block claims it first runs it).
    private func republish(_ command: Contender) {
        let helper = machine.withLock { machine -> BlockingWaiter? in
            if machine.hasHelpers, let helper = machine.helper(forQueue: command.targetQueueID) as? BlockingWaiter {
                helper.job = command
                return helper
            }
            publishPendingDispatch(command)
            return nil
        }
        if let helper { helper.postJob() } else { command.start() }
    }

    /// Takes a waiting command out of the queue (timeout or cancellation).
    /// - Returns: its waiter if it was still waiting and will never run; `nil` if it had been
    ///   granted (the caller owns the section, or is about to) or had left already.
    /// - Complexity: O(1) amortized.
    @discardableResult
    final func leave(_ ticket: Ticket) -> Contender? {
        machine.withLock { $0.leave(ticket) }
    }

    /// A waiting command gives up (its deadline passed, or waiting would deadlock): it leaves the
    /// queue if it still waits.
    /// - Returns: what held the value and what waited, if it left (it never runs now); `nil` if it
    ///   was granted first (then it runs).
    final func leaveWithSnapshot(_ ticket: Ticket) -> QueueDiagnostics? {
        machine.withLock { machine in
            // The waiter stays alive in its thread: nothing is released here.
            machine.leave(ticket).map { _ in snapshot(machine, word: state.loadAcquire()) }
        }
    }

    /// Refuses every command issued from now on with `.valueContainerDeinited`, and frees the value
    /// as soon as nothing holds or waits for it (now, if that is already so). Queued commands still
    /// run.
    @usableFromInline
    final func close() {
        let freeNow = machine.withLock { machine in
            // From here on neither idle compare-and-swap can succeed; see `EngineWord`.
            let observed = state.fetchOr(EngineWord.closed)
            let (freeNow, word) = machine.close(observed: observed)
            state.storeRelease(word)
            return freeNow
        }
        if freeNow { freeValue() }
    }

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
    final func acquireBlocking(priority: CommandPriority, timeout: DispatchTimeInterval?) -> QueueSafeValueError? {
        let deadline: DispatchTime?
        do { deadline = try commandDeadline(after: timeout) } catch { return error }
        let thread = currentThreadID()
        if tryAcquireIdle(.blocking) {
            ownerThread.storeRelaxed(thread)
            return nil
        }
        return acquireBlockingSlow(priority: priority, deadline: deadline, thread: thread)
    }

    @usableFromInline
    final func acquireBlockingSlow(
        priority: CommandPriority,
        deadline: DispatchTime?,
        thread: Int
    ) -> QueueSafeValueError? {
        let waiter = BlockingWaiter.forCurrentThread()
        let reentrant = ownerThread.loadRelaxed() == thread || isInsideRunningSection()
        switch enqueue(waiter, kind: .blocking, priority: priority, reentrant: reentrant) {
        case .granted:
            break
        case .refused(let error):
            return error
        case .queued(let ticket):
            if let error = waiter.waitForGrant(engine: self, ticket: ticket, deadline: deadline) { return error }
        }
        ownerThread.storeRelaxed(thread)
        return nil
    }

    /// Marks the calling thread as running a synchronous closure in the section (or not, with 0).
    @usableFromInline
    final func setOwnerThread(_ thread: Int) {
        ownerThread.storeRelaxed(thread)
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

    // MARK: Dispatched commands

    /// Places a dispatched command in the queue at the moment of the call (after its idle
    /// compare-and-swap failed), so commands issued one after another from one thread keep their
    /// order.
    /// - Returns: `true` if the section was free after all and the command holds it now (the caller
    ///   starts it); `false` if it waits (the engine starts it when its turn comes).
    /// - Throws: `.valueContainerDeinited` if the container is gone.
    /// - Complexity: O(log n)
    final func enqueueDispatched(_ command: Contender, priority: CommandPriority) throws(QueueSafeValueError) -> Bool {
        switch enqueue(command, kind: .dispatched, priority: priority) {
        case .granted: return true
        case .queued: return false
        case .refused(let error): throw error
        }
    }

    // MARK: Manual completion

    /// The holder starts a manual-completion command.
    /// - Returns: the ticket its completion closure reports to.
    final func beginManual(_ waiter: Contender, kind: CommandKind) -> Ticket {
        machine.withLock { machine in
            // The caller holds the section, so only locked transitions change the word.
            let (ticket, word) = machine.beginManual(
                waiter, kind: kind, observed: state.loadAcquire(), now: coarseNow())
            state.storeRelease(word)
            return ticket
        }
    }

    /// The closure of the manual-completion command `ticket` returned. If the command goes on
    /// holding the section without the calling thread (it waits for its completion), that thread
    /// ends the boost it may have inherited.
    final func manualClosureReturned(_ ticket: Ticket) -> Machine.ManualStep {
        let (step, boosted) = machine.withLock { ($0.manualClosureReturned(ticket), $0.isHoldBoosted) }
        if boosted, case .waitForCompletion = step, ownerThread.loadRelaxed() == 0 { endBoostOfCurrentThread() }
        return step
    }

    /// The completion of the manual-completion command `ticket` was called, or dropped uncalled.
    final func manualCompletionArrived(_ ticket: Ticket, dropped: Bool) {
        let step = machine.withLock { $0.manualCompletionArrived(ticket, dropped: dropped) }
        if case .finish(let waiter) = step { waiter.finishManualCompletion() }
    }

    // MARK: Awaiting commands and operations

    /// The part of an awaiting command's acquisition after the idle compare-and-swap failed: joins
    /// the queue and suspends until the command's turn.
    ///
    /// A task cancelled while it waits leaves the queue and throws `.cancelled`; one granted at the
    /// same instant it was cancelled releases at once and throws `.cancelled` too: its closure never
    /// starts.
    /// - Throws: `.cancelled`, `.reentrantAccess` (the task is inside this section already),
    ///   `.valueContainerDeinited`, `.timedOut` (`deadline` passed first), `.deadlock`.
    @usableFromInline
    final func acquireAwaitingSlow(
        priority: CommandPriority,
        deadline: DispatchTime? = nil,
        isolation: isolated (any Actor)?
    ) async throws(QueueSafeValueError) {
        let waiter = AwaitingWaiter()
        switch enqueue(waiter, kind: .awaiting, priority: priority, reentrant: isInsideRunningSection()) {
        case .granted:
            return
        case .refused(let error):
            throw error
        case .queued(let ticket):
            waiter.ticket = ticket
            try await waitForTurn(waiter, deadline: deadline, isolation: isolation)
            if Task.isCancelled {
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
    ///   not, the task calls ``waitForTurn(_:isolation:)``.
    @usableFromInline
    final func enqueueOperation(
        priority: CommandPriority,
        discardable: Bool = false
    ) -> (waiter: AwaitingWaiter, granted: Bool) {
        let waiter = AwaitingWaiter()
        let (admission, discarded, continuation) = machine.withLock { machine in
            // From here on neither idle compare-and-swap can succeed; see `EngineWord`.
            let observed = state.fetchOr(EngineWord.slowRelease)
            let (admission, word, discarded) = machine.enqueueOperation(
                waiter, priority: priority, discardable: discardable, observed: observed, now: coarseNow())
            SyncPoints.note(discardable ? "a discardable operation is enqueued" : "an operation is enqueued")
            state.storeRelease(word)
            let awaiting = discarded as? AwaitingWaiter
            return (admission, awaiting, awaiting?.continuation)
        }
        // Released after unlocking, like every reference the machine lets go of.
        withExtendedLifetime(discarded) {}
        continuation?.resumeFromAnotherThread()
        switch admission {
        case .granted(let ticket?):
            waiter.ticket = ticket
            return (waiter, true)
        case .queued(let ticket):
            waiter.ticket = ticket
            return (waiter, false)
        case .granted(nil), .refused:
            preconditionFailure("a command queue never closes, and tracks its operations")
        }
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
    @usableFromInline
    final func waitForTurn(
        _ waiter: AwaitingWaiter,
        deadline: DispatchTime? = nil,
        isolation: isolated (any Actor)?
    ) async throws(QueueSafeValueError) {
        let ticket = waiter.ticket
        let nodes = DeadlockDetector.taskNodes(currentTaskID())
        // Armed once the task waits; cancelled when the wait is over. Like a cancellation, it leaves
        // the deadlock graph before it leaves the queue.
        let timer = deadline.map { _ in
            DispatchWorkItem { [self] in
                DeadlockDetector.shared.unregister(nodes)
                timeOut(waiter)
            }
        }
        await withTaskCancellationHandler {
            if #available(macOS 26.0, iOS 26.0, watchOS 26.0, tvOS 26.0, visionOS 26.0, *) {
                // A task escalated while it waits passes the escalation on to the holder.
                await withTaskPriorityEscalationHandler {
                    await suspendForTurn(waiter, nodes: nodes, deadline: deadline, timer: timer, isolation: isolation)
                } onPriorityEscalated: { [self] _, escalated in
                    SyncPoints.insideRuntimeLock { inheritUrgency(ticket, .ofTask(escalated)) }
                }
            } else {
                await suspendForTurn(waiter, nodes: nodes, deadline: deadline, timer: timer, isolation: isolation)
            }
        } onCancel: {
            // No longer a waiter for deadlock detection, then out of the queue; the continuation
            // was stored before `leave` (both under the lock), if the task suspended at all.
            SyncPoints.insideRuntimeLock {
                DeadlockDetector.shared.unregister(nodes)
                leave(ticket).map { ($0 as? AwaitingWaiter)?.continuation?.resumeFromAnotherThread() }
            }
        }
        timer?.cancel()
        DeadlockDetector.shared.unregister(nodes)
        let (granted, refusal) = machine.withLock { _ in (waiter.isGranted, waiter.refusal) }
        if !granted { throw refusal ?? .cancelled }
    }

    /// The suspension of ``waitForTurn(_:deadline:isolation:)``: registers for deadlock detection,
    /// stores the continuation unless the wait is over already, raises the holder to this task's
    /// priority and arms the deadline.
    private func suspendForTurn(
        _ waiter: AwaitingWaiter,
        nodes: [DeadlockDetector.Node],
        deadline: DispatchTime?,
        timer: DispatchWorkItem?,
        isolation: isolated (any Actor)?
    ) async {
        let ticket = waiter.ticket
        await withUnsafeContinuation(isolation: isolation) { (continuation: TurnContinuation) in
            // Registered before the continuation is stored, so that a cancellation (which
            // unregisters, then leaves) never leaves a stale registration behind.
            let registration = DeadlockDetector.shared.register(nodes, waitingFor: self, poolThread: false)
            let waiting = machine.withLock { machine in
                guard registration.verdict == .wait, machine.isWaiting(ticket) else { return false }
                waiter.continuation = continuation
                waiter.waitingTask = currentTaskID()
                return true
            }
            if waiting {
                // While it waits, the holder runs at least at this task's priority.
                inheritUrgency(ticket, .ofTask(Task.currentPriority))
                if let deadline, let timer {
                    // A deadline already past gives up now, like `wait(timeout:)`.
                    if deadline <= .now() {
                        timer.perform()
                    } else {
                        SyncPoints.asyncAfter(deadline, timer)
                    }
                }
                return
            }
            DeadlockDetector.shared.unregister(nodes)
            // Granted or left before it could suspend, or suspending would close a cycle.
            if registration.verdict != .wait, let diagnostics = leaveWithSnapshot(ticket) {
                waiter.refusal = .deadlock(
                    DeadlockDetector.report(
                        registration, diagnostics: diagnostics,
                        waiterDescription: DeadlockDetector.describe(nodes[0])))
            }
            continuation.resume()
        }
    }

    /// The deadline of a waiting awaiting command or operation passed: it leaves the queue and its
    /// task is resumed to throw `.timedOut` with a snapshot of the queue, unless it was granted (or
    /// left) first.
    private func timeOut(_ waiter: AwaitingWaiter) {
        let continuation = machine.withLock { machine -> TurnContinuation? in
            guard machine.leave(waiter.ticket) != nil else { return nil }
            waiter.refusal = .timedOut(snapshot(machine, word: state.loadAcquire()))
            return waiter.continuation
        }
        continuation?.resumeFromAnotherThread()
    }

    /// Every waiting operation leaves the queue (its task is resumed, cancelled and throws
    /// `.cancelled`), and the running operation's task is cancelled.
    final func cancelAll() {
        let (continuations, tasks, left) = machine.withLock { machine in
            let cancel = machine.cancelAll()
            var continuations: [TurnContinuation] = []
            var tasks: [any CancellableTask] = []
            for case let waiter as AwaitingWaiter in cancel.left {
                if let continuation = waiter.continuation { continuations.append(continuation) }
                if let task = waiter.task { tasks.append(task) }
            }
            if let holder = cancel.holder as? AwaitingWaiter, let task = holder.task { tasks.append(task) }
            return (continuations, tasks, cancel.left)
        }
        // Released after unlocking, like every reference the machine lets go of.
        withExtendedLifetime(left) {}
        for continuation in continuations { continuation.resumeFromAnotherThread() }
        for task in tasks { task.cancel() }
    }

    // MARK: Observation

    /// Runs `body` with the machine, under the lock: one transition or query, nothing else.
    final func withMachineLocked<R>(_ body: (inout Machine) -> R) -> R {
        machine.withLock(body)
    }

    /// Runs `body` with the machine and the state word, under the lock (for snapshots).
    final func withMachine<R>(_ body: (Machine, Int) -> R) -> R {
        machine.withLock { machine in body(machine, state.loadAcquire()) }
    }

    /// How many manual completions were released without being called.
    @usableFromInline
    final var droppedCompletionCount: Int {
        machine.withLock { $0.droppedCompletions }
    }

    /// The number of commands waiting for their turn (for tests and diagnostics).
    final var pendingCount: Int {
        machine.withLock { $0.waitingCount }
    }

    /// Whether the value has been freed.
    final var isValueFreed: Bool {
        machine.withLock { $0.isValueFreed }
    }
}
