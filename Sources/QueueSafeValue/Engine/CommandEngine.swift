import Dispatch

// MARK: - CommandEngine

/// The priority command queue behind every value container and ``CommandQueue``.
///
/// One command holds the critical section at a time. Waiting commands are kept in a
/// ``CommandHeap``: highest priority first, first-come-first-served within a priority. When the
/// holder releases, the engine grants the next live command and hands it off *after* unlocking:
/// it wakes a parked thread, dispatches onto a queue, or resumes a continuation. No user code runs,
/// no semaphore is signalled and no continuation is resumed while the lock is held.
///
/// ## The state word
/// `running`, `queued` and `closed` live in one atomic word, so the idle path is a single
/// compare-and-swap to acquire (`0 → running`) and one to release (`running → 0`): no lock, no
/// allocation. Every other transition happens under the lock, and `queued` is set (under the lock)
/// before a command enters the heap, so a releaser that finds more than `running` in the word takes
/// the lock and hands off. Invariant: while `running` is clear the heap holds no live command.
@usableFromInline
final class CommandEngine: @unchecked Sendable {
    private static let running = 1
    private static let queued = 2
    private static let closed = 4

    private let state = AtomicWord(0)
    private let lock = Lock()

    // Guarded by `lock`.
    private var heap = CommandHeap()
    private var nextSequence: UInt64 = 0
    /// The awaiting command holding the section, when it has a task (``CommandQueue``).
    private var runningWaiter: AwaitingWaiter?
    private var abandonedCompletions = 0

    /// The thread running a synchronous closure inside the section, or 0. Written only by the
    /// section's holder (or by the releaser at grant time), so a thread that reads its own id is
    /// inside.
    private let ownerThread = AtomicWord(0)
    /// The generation of the task section being held (> 0), or minus the last one (≤ 0) when no
    /// task section is held; see ``runInSection(isolation:_:)``. Written only by the holder.
    private let taskSection = AtomicWord(0)

    @usableFromInline
    init() {}

    deinit {
        heap.releaseAll()
        state.deallocate()
        ownerThread.deallocate()
        taskSection.deallocate()
        lock.deallocate()
    }

    // MARK: Lifetime

    /// Refuses every command issued from now on with `.valueContainerDeinited`. Queued commands
    /// still run.
    @usableFromInline
    func close() {
        lock.lock()
        var current = state.loadAcquire()
        while !state.compareExchange(expected: current, desired: current | Self.closed) {
            current = state.loadAcquire()
        }
        lock.unlock()
    }

    /// How many manual-completion closures were released without being called.
    @usableFromInline
    var abandonedCompletionCount: Int {
        lock.withLock { abandonedCompletions }
    }

    func recordAbandonedCompletion() {
        lock.withLock { abandonedCompletions += 1 }
    }

    /// The number of live pending commands (for tests and diagnostics).
    var pendingCount: Int {
        lock.withLock { heap.count }
    }

    // MARK: Acquire (shared by every front door)

    /// The outcome of an attempt to get the section, decided under the lock.
    private enum Attempt {
        case acquired
        case enqueued
        case failed(QueueSafeValueError)
    }

    /// Takes the section if it is free; otherwise (after `admit` agreed) puts `command` in the heap.
    /// Called with the lock held.
    /// - Parameter admit: checks that run only when the command would have to wait (reentrancy).
    private func acquireOrEnqueueLocked(
        _ command: PendingCommand?,
        priority: CommandPriority,
        admit: () -> QueueSafeValueError?
    ) -> Attempt {
        var current = state.loadAcquire()
        while true {
            if current & Self.closed != 0 { return .failed(.valueContainerDeinited) }
            if current & Self.running == 0 {
                if state.compareExchange(expected: current, desired: current | Self.running) { return .acquired }
            } else {
                if let error = admit() { return .failed(error) }
                guard let command else { return .failed(.reentrantAccess) }
                if state.compareExchange(expected: current, desired: current | Self.queued) {
                    command.key = CommandHeap.key(priority: priority, sequence: nextSequence)
                    nextSequence &+= 1
                    heap.insert(command)
                    return .enqueued
                }
            }
            current = state.loadAcquire()
        }
    }

    // MARK: Blocking commands

    /// Waits until the calling thread holds the critical section.
    ///
    /// On an idle queue this is one compare-and-swap. Otherwise the thread joins the heap, spins
    /// briefly and then parks.
    /// - Returns: `nil` once the section is held (release it with ``release()``), or why not:
    ///   `.valueContainerDeinited`, `.reentrantAccess` (the caller is inside this queue's section
    ///   already), `.timedOut`.
    @usableFromInline
    func acquireBlocking(priority: CommandPriority, deadline: DispatchTime?) -> QueueSafeValueError? {
        let thread = currentThreadID()
        if state.compareExchange(expected: 0, desired: Self.running) {
            ownerThread.storeRelaxed(thread)
            return nil
        }
        return acquireBlockingSlow(priority: priority, deadline: deadline, thread: thread)
    }

    private func acquireBlockingSlow(
        priority: CommandPriority,
        deadline: DispatchTime?,
        thread: Int
    ) -> QueueSafeValueError? {
        let waiter = BlockingWaiter.forCurrentThread(thread)
        lock.lock()
        let attempt = acquireOrEnqueueLocked(waiter, priority: priority) {
            ownerThread.loadRelaxed() == thread || isInsideRunningSection() ? .reentrantAccess : nil
        }
        lock.unlock()
        switch attempt {
        case .acquired:
            ownerThread.storeRelaxed(thread)
            return nil
        case .failed(let error):
            return error
        case .enqueued:
            return waiter.waitForGrant(engine: self, deadline: deadline)
        }
    }

    /// Marks the calling thread as running a synchronous closure in the section (or not, with 0).
    @usableFromInline
    func setOwnerThread(_ thread: Int) {
        ownerThread.storeRelaxed(thread)
    }

    // MARK: Dispatched commands

    /// What ``submit(_:priority:)`` decided.
    enum Submission {
        /// The queue was idle: the command holds the section; call its `start()`.
        case granted
        /// The command waits in the heap; the engine starts it when its turn comes.
        case queued
        /// The container is gone; the command was refused.
        case refused
    }

    /// Places a command in the queue at the moment of the call, so commands issued one after another
    /// from one thread keep their order.
    /// - Complexity: O(log n)
    func submit(_ command: PendingCommand, priority: CommandPriority) -> Submission {
        if state.compareExchange(expected: 0, desired: Self.running) {
            command.status = .granted
            return .granted
        }
        lock.lock()
        let attempt = acquireOrEnqueueLocked(command, priority: priority) { nil }
        lock.unlock()
        switch attempt {
        case .acquired:
            command.status = .granted
            return .granted
        case .enqueued:
            return .queued
        case .failed:
            return .refused
        }
    }

    // MARK: Awaiting commands

    /// Takes the critical section for the current task, suspending while other commands hold it.
    ///
    /// Runs in the caller's isolation (no executor hop) and does not suspend when the queue is idle.
    /// A task that is cancelled before the command starts — before the call, or while it waits —
    /// gets `.cancelled` and the command never runs; once the closure has begun, cancellation is the
    /// closure's business (it sees `Task.isCancelled`).
    /// - Throws: `.cancelled`, `.reentrantAccess` (the task is inside this queue's section already),
    ///   `.valueContainerDeinited`.
    @usableFromInline
    func acquireAwaiting(
        priority: CommandPriority,
        isolation: isolated (any Actor)?
    ) async throws(QueueSafeValueError) {
        if Task.isCancelled { throw .cancelled }
        if state.compareExchange(expected: 0, desired: Self.running) { return }
        try await acquireAwaitingSlow(priority: priority, isolation: isolation)
    }

    /// The part of ``acquireAwaiting(priority:isolation:)`` after the idle check failed.
    @usableFromInline
    func acquireAwaitingSlow(
        priority: CommandPriority,
        isolation: isolated (any Actor)?
    ) async throws(QueueSafeValueError) {
        let waiter = AwaitingWaiter()
        lock.lock()
        let attempt = acquireOrEnqueueLocked(waiter, priority: priority) {
            isInsideRunningSection() ? .reentrantAccess : nil
        }
        lock.unlock()
        switch attempt {
        case .acquired:
            return
        case .failed(let error):
            throw error
        case .enqueued:
            try await waitForTurn(waiter, isolation: isolation)
            if Task.isCancelled {
                // Granted, but the task was cancelled before its closure began: it never starts.
                release()
                throw .cancelled
            }
        }
    }

    /// Always queues a waiter, even when the queue is idle (then it is granted at once). Used by
    /// ``CommandQueue`` so the place is taken synchronously before the task that uses it starts.
    /// - Returns: the waiter, and whether it holds the section already. When it does not, the task
    ///   calls ``waitForTurn(_:isolation:)``, which returns at once if the grant came meanwhile.
    @usableFromInline
    func reserveWaiter(priority: CommandPriority) -> (waiter: AwaitingWaiter, granted: Bool) {
        let waiter = AwaitingWaiter()
        lock.lock()
        let attempt = acquireOrEnqueueLocked(waiter, priority: priority) { nil }
        let granted: Bool
        if case .acquired = attempt {
            waiter.status = .granted
            runningWaiter = waiter
            granted = true
        } else {
            granted = false
        }
        lock.unlock()
        return (waiter, granted)
    }

    /// Records the task that will use `waiter`, so ``cancelAll()`` can cancel it. If the waiter was
    /// cancelled in the meantime, the task is cancelled at once.
    @usableFromInline
    func attach(_ task: any CancellableTask, to waiter: AwaitingWaiter) {
        lock.lock()
        let cancelNow = waiter.status == .cancelled || waiter.cancelRequested
        if !cancelNow { waiter.task = task }
        lock.unlock()
        if cancelNow { task.cancel() }
    }

    /// Suspends the current task until `waiter` is granted, or until it leaves the queue because the
    /// task was cancelled (then it throws `.cancelled`). Does not suspend if already settled.
    ///
    /// The outcome is read under the lock after the resumption, not passed through the
    /// continuation: a continuation resumed before its task finished suspending lets the task go on
    /// ordered only by the concurrency runtime's own atomics, which ThreadSanitizer does not see.
    /// The lock orders everything the task does next after the releaser's critical section, for
    /// the sanitizer as for the hardware. (Passing the outcome in the continuation, one lock section
    /// fewer, drew sanitizer reports on the value itself.)
    @usableFromInline
    func waitForTurn(
        _ waiter: AwaitingWaiter,
        isolation: isolated (any Actor)?
    ) async throws(QueueSafeValueError) {
        await withTaskCancellationHandler {
            await withUnsafeContinuation(isolation: isolation) { (continuation: TurnContinuation) in
                park(waiter, continuation: continuation)
            }
        } onCancel: {
            abandon(waiter)
        }
        lock.lock()
        let granted = waiter.status == .granted
        lock.unlock()
        if !granted { throw .cancelled }
    }

    /// Stores the continuation of a pending waiter, or resumes it at once if it was already
    /// granted or cancelled.
    private func park(_ waiter: AwaitingWaiter, continuation: TurnContinuation) {
        lock.lock()
        let pending = waiter.status == .pending
        if pending { waiter.continuation = continuation }
        lock.unlock()
        if !pending { continuation.resume() }
    }

    // MARK: Critical sections of tasks

    /// Marks the current task as inside this engine's section; returns the task-local stack to
    /// run the section's body with (see ``ValueStorage/withAwaitingAccess(priority:isolation:_:)``),
    /// so a nested command on the same engine from this task or its child tasks is recognised as
    /// reentrant instead of waiting for itself. Call it while holding the section, and
    /// ``leaveTaskSection()`` before releasing.
    @usableFromInline
    func enterTaskSection() -> SectionStack {
        // Only the holder writes `taskSection`, so a load and a store do.
        let generation = -taskSection.loadRelaxed() + 1
        taskSection.storeRelease(generation)
        return CriticalSectionContext.sections.get().pushing(
            SectionEntry(engine: ObjectIdentifier(self), generation: generation))
    }

    /// Ends the task section begun by ``enterTaskSection()``.
    @usableFromInline
    func leaveTaskSection() {
        taskSection.storeRelease(-taskSection.loadRelaxed())
    }

    /// Runs `body` as the section's body of a task (see ``enterTaskSection()``). Not inlinable
    /// callers (``CommandQueue``) use this.
    @usableFromInline
    func runInSection(isolation: isolated (any Actor)?, _ body: nonisolated(nonsending) () async -> Void) async {
        let sections = enterTaskSection()
        await CriticalSectionContext.sections.withValue(sections) {
            _ = isolation  // keeps this closure on the caller's executor
            await body()
        }
        leaveTaskSection()
    }

    /// Takes the section if the queue is idle: one compare-and-swap, no lock.
    @usableFromInline
    func tryAcquireIdle() -> Bool {
        state.compareExchange(expected: 0, desired: Self.running)
    }

    /// Whether the current task runs inside the section this engine has granted now. A task-local
    /// record of an ended section never matches: the engine's generation has moved on.
    @usableFromInline
    func isInsideRunningSection() -> Bool {
        let generation = taskSection.loadAcquire()
        guard generation > 0 else { return false }
        return CriticalSectionContext.sections.get().contains(
            SectionEntry(engine: ObjectIdentifier(self), generation: generation))
    }

    /// Calls `body` with a completion closure on the thread that holds the section, then blocks
    /// that thread until the completion is called (from any thread) or released uncalled.
    @usableFromInline
    func holdUntilCompleted(_ body: (@escaping CommandCompletionClosure) -> Void) {
        let latch = BlockingLatch()
        CompletionToken.withCompletion(target: latch, engine: self, body)
        // The closure returned: the thread no longer runs code inside the section.
        ownerThread.storeRelaxed(0)
        latch.wait()
    }

    // MARK: Leaving the queue

    /// Takes a pending command out of the queue (timeout or cancellation).
    /// - Returns: `true` if it was still pending and will never run; `false` if it had already been
    ///   granted (or removed), in which case the caller owns the section or nothing at all.
    /// - Complexity: O(1) amortized (the heap entry is swept lazily).
    @discardableResult
    func abandon(_ command: PendingCommand) -> Bool {
        lock.lock()
        guard command.status == .pending else {
            lock.unlock()
            return false
        }
        command.status = .cancelled
        heap.noteRemoved()
        let continuation = command.didCancelLocked()
        lock.unlock()
        continuation?.resumeFromAnotherThread()
        return true
    }

    /// Cancels every pending waiter (they never start) and then the running one's task.
    ///
    /// The pending entries leave the heap in the same lock section that finds the running command,
    /// so the release of the running command cannot hand the section to work that was meant to be
    /// cancelled.
    func cancelAll() {
        lock.lock()
        let pending = heap.removeAll()
        var continuations: [TurnContinuation] = []
        var tasks: [any CancellableTask] = []
        for command in pending {
            command.status = .cancelled
            if let continuation = command.didCancelLocked() { continuations.append(continuation) }
            if let task = command.takeTaskLocked() { tasks.append(task) }
        }
        if let running = runningWaiter {
            if let task = running.task {
                tasks.append(task)
            } else {
                running.cancelRequested = true
            }
        }
        lock.unlock()
        for continuation in continuations { continuation.resumeFromAnotherThread() }
        for task in tasks { task.cancel() }
    }

    // MARK: Release

    /// Ends the running command and hands the section to the next live command, if any.
    @usableFromInline
    func release() {
        // Cleared first: once the word says idle, another thread may take the section and set it.
        ownerThread.storeRelaxed(0)
        if state.compareExchange(expected: Self.running, desired: 0) {
            return
        }
        releaseSlow()?.start()
    }

    /// Ends the running command. The next command, if any, is granted and returned; the caller
    /// must call its `start()` (outside any lock).
    func releaseReturningNext() -> PendingCommand? {
        ownerThread.storeRelaxed(0)
        if state.compareExchange(expected: Self.running, desired: 0) {
            return nil
        }
        return releaseSlow()
    }

    private func releaseSlow() -> PendingCommand? {
        lock.lock()
        runningWaiter = nil
        let next = heap.popFirst()
        // Clear `queued` when nothing is left, and `running` too when nothing was granted.
        var clear = heap.isEmpty ? Self.queued : 0
        if next == nil { clear |= Self.running }
        var current = state.loadAcquire()
        while !state.compareExchange(expected: current, desired: current & ~clear) {
            current = state.loadAcquire()
        }
        guard let next else {
            lock.unlock()
            return nil
        }
        next.status = .granted
        ownerThread.storeRelaxed(next.ownerThread)
        if next.didGrantLocked() { runningWaiter = next as? AwaitingWaiter }
        lock.unlock()
        return next
    }
}
