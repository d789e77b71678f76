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
/// The idle path is two short lock sections and no allocation: acquire (idle → running) and
/// release (running → idle).
@usableFromInline
final class CommandEngine: @unchecked Sendable {
    private let lock = Lock()

    // State below is guarded by `lock`.
    private var isRunning = false
    private var isClosed = false
    private var heap = CommandHeap()
    private var nextSequence: UInt64 = 0
    /// Changes at every grant, so a task-local record of a past section never matches a new one.
    private var grantNumber: UInt64 = 0
    /// The awaiting command holding the section, when it has a task (``CommandQueue``).
    private var runningWaiter: AwaitingWaiter?
    private var abandonedCompletions = 0

    /// The thread running a synchronous closure inside the section, or 0. Written only by that
    /// thread (or under the lock at grant time), so a thread that reads its own id is inside.
    private let ownerThread = AtomicWord(0)

    @usableFromInline
    init() {}

    deinit {
        ownerThread.deallocate()
        lock.deallocate()
    }

    // MARK: Lifetime

    /// Refuses every command issued from now on with `.valueContainerDeinited`. Queued commands
    /// still run.
    @usableFromInline
    func close() {
        lock.withLock { isClosed = true }
    }

    /// How many manual-completion closures were released without being called.
    @usableFromInline
    var abandonedCompletionCount: Int {
        lock.withLock { abandonedCompletions }
    }

    func recordAbandonedCompletion() {
        lock.withLock { abandonedCompletions += 1 }
    }

    // MARK: Blocking commands

    /// Waits until the calling thread holds the critical section.
    ///
    /// Runs inline with no allocation when the queue is idle. Otherwise the thread joins the heap,
    /// spins briefly and then parks.
    /// - Returns: `nil` once the section is held (release it with ``release()``), or why not:
    ///   `.valueContainerDeinited`, `.reentrantAccess` (the caller is inside this queue's section
    ///   already), `.timedOut`.
    @usableFromInline
    func acquireBlocking(priority: CommandPriority, deadline: DispatchTime?) -> QueueSafeValueError? {
        let thread = currentThreadID()
        lock.lock()
        if !isRunning && !isClosed {
            isRunning = true
            grantNumber &+= 1
            ownerThread.storeRelaxed(thread)
            lock.unlock()
            return nil
        }
        return acquireBlockingSlow(priority: priority, deadline: deadline, thread: thread)
    }

    /// The contended half of ``acquireBlocking(priority:deadline:)``. Called with the lock held.
    private func acquireBlockingSlow(priority: CommandPriority, deadline: DispatchTime?, thread: Int)
        -> QueueSafeValueError?
    {
        if isClosed {
            lock.unlock()
            return .valueContainerDeinited
        }
        if ownerThread.loadRelaxed() == thread || isInsideRunningSectionLocked() {
            lock.unlock()
            return .reentrantAccess
        }
        let waiter = BlockingWaiter(thread: thread)
        enqueueLocked(waiter, priority: priority)
        lock.unlock()
        return waiter.waitForGrant(engine: self, deadline: deadline)
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
        lock.lock()
        defer { lock.unlock() }
        if isClosed { return .refused }
        if !isRunning {
            isRunning = true
            grantNumber &+= 1
            command.status = .granted
            return .granted
        }
        enqueueLocked(command, priority: priority)
        return .queued
    }

    // MARK: Awaiting commands

    /// Takes a place in the queue for a task. When the queue is idle (and `reserveOnly` is false)
    /// the caller gets the section at once and no waiter is allocated.
    ///
    /// - Returns: `.acquired(grant)` when the section is held now; `.waiting(waiter)` when the caller
    ///   must ``park(_:continuation:)`` (or ``waitForTurn(_:)``) on the waiter.
    func reserve(priority: CommandPriority, checkReentrancy: Bool) -> Reservation {
        lock.lock()
        defer { lock.unlock() }
        if isClosed { return .failed(.valueContainerDeinited) }
        if !isRunning {
            isRunning = true
            grantNumber &+= 1
            return .acquired(grantNumber)
        }
        if checkReentrancy && isInsideRunningSectionLocked() {
            return .failed(.reentrantAccess)
        }
        let waiter = AwaitingWaiter()
        enqueueLocked(waiter, priority: priority)
        return .waiting(waiter)
    }

    enum Reservation {
        case acquired(UInt64)
        case waiting(AwaitingWaiter)
        case failed(QueueSafeValueError)
    }

    /// Always queues a waiter, even when the queue is idle (then it is granted at once). Used by
    /// ``CommandQueue`` so the place is taken synchronously before the task that uses it starts.
    func reserveWaiter(priority: CommandPriority) -> AwaitingWaiter? {
        let waiter = AwaitingWaiter()
        lock.lock()
        defer { lock.unlock() }
        if isClosed { return nil }
        if !isRunning {
            isRunning = true
            grantNumber &+= 1
            waiter.status = .granted
            runningWaiter = waiter
            return waiter
        }
        enqueueLocked(waiter, priority: priority)
        return waiter
    }

    /// Records the task that will use `waiter`, so ``cancelAll()`` can cancel it. If the waiter was
    /// cancelled in the meantime, the task is cancelled at once.
    func attach(_ task: any CancellableTask, to waiter: AwaitingWaiter) {
        lock.lock()
        let cancelNow = waiter.status == .cancelled || waiter.cancelRequested
        if !cancelNow { waiter.task = task }
        lock.unlock()
        if cancelNow { task.cancel() }
    }

    /// Takes the critical section for the current task, suspending while other commands hold it.
    ///
    /// Runs in the caller's isolation (no executor hop); does not suspend when the queue is idle.
    /// - Returns: the grant number, for ``runInSection(grant:isolation:_:)``.
    /// - Throws: `.cancelled` if the task is cancelled before or while it waits (the command then
    ///   never runs), `.reentrantAccess` if the task is inside this queue's section already,
    ///   `.valueContainerDeinited` if the engine is closed.
    @usableFromInline
    func acquireAwaiting(
        priority: CommandPriority,
        isolation: isolated (any Actor)?
    ) async throws(QueueSafeValueError) -> UInt64 {
        if Task.isCancelled { throw .cancelled }
        switch reserve(priority: priority, checkReentrancy: true) {
        case .acquired(let grant): return grant
        case .waiting(let waiter):
            let grant = try await waitForTurn(waiter, isolation: isolation)
            if Task.isCancelled {
                // Granted, but the task was cancelled before its closure began: it never starts.
                release()
                throw .cancelled
            }
            return grant
        case .failed(let error): throw error
        }
    }

    /// Runs `body` marked (in a task local) as inside the section `grant` of this engine, so a
    /// nested command on the same engine from this task or its child tasks is recognised as
    /// reentrant instead of waiting for itself.
    @usableFromInline
    func runInSection(
        grant: UInt64,
        isolation: isolated (any Actor)?,
        _ body: () async -> Void
    ) async {
        let link = CriticalSectionLink(
            engine: ObjectIdentifier(self),
            grant: grant,
            outer: CriticalSectionContext.innermost
        )
        await CriticalSectionContext.$innermost.withValue(link) {
            await body()
        }
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

    /// Suspends the current task until `waiter` is granted, or it leaves the queue because the task
    /// was cancelled.
    /// - Returns: the grant number when granted; throws `.cancelled` otherwise.
    func waitForTurn(
        _ waiter: AwaitingWaiter,
        isolation: isolated (any Actor)?
    ) async throws(QueueSafeValueError) -> UInt64 {
        await withTaskCancellationHandler {
            await withUnsafeContinuation(isolation: isolation) { (continuation: UnsafeContinuation<Void, Never>) in
                park(waiter, continuation: continuation)
            }
        } onCancel: {
            _ = abandon(waiter)
        }
        return try grantOf(waiter)
    }

    private func grantOf(_ waiter: AwaitingWaiter) throws(QueueSafeValueError) -> UInt64 {
        lock.lock()
        defer { lock.unlock() }
        guard waiter.status == .granted else { throw .cancelled }
        return grantNumber
    }

    /// Stores the continuation of a pending waiter, or resumes it at once if it was already
    /// granted or cancelled.
    func park(_ waiter: AwaitingWaiter, continuation: UnsafeContinuation<Void, Never>) {
        lock.lock()
        if waiter.status == .pending {
            waiter.continuation = continuation
            lock.unlock()
        } else {
            lock.unlock()
            continuation.resume()
        }
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
        continuation?.resume()
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
        var continuations: [UnsafeContinuation<Void, Never>] = []
        var tasks: [any CancellableTask] = []
        for command in pending {
            command.status = .cancelled
            if let continuation = command.didCancelLocked() { continuations.append(continuation) }
            if let waiter = command as? AwaitingWaiter, let task = waiter.task {
                tasks.append(task)
                waiter.task = nil
            }
        }
        if let running = runningWaiter {
            if let task = running.task {
                tasks.append(task)
            } else {
                running.cancelRequested = true
            }
        }
        lock.unlock()
        for continuation in continuations { continuation.resume() }
        for task in tasks { task.cancel() }
    }

    // MARK: Release

    /// Ends the running command and hands the section to the next live command, if any.
    @usableFromInline
    func release() {
        releaseReturningNext()?.start()
    }

    /// Ends the running command. The next command, if any, is granted and returned; the caller
    /// must call its `start()` (outside any lock).
    func releaseReturningNext() -> PendingCommand? {
        lock.lock()
        runningWaiter = nil
        guard let next = heap.popFirst() else {
            isRunning = false
            ownerThread.storeRelaxed(0)
            lock.unlock()
            return nil
        }
        next.status = .granted
        grantNumber &+= 1
        ownerThread.storeRelaxed(next.ownerThread)
        if next.didGrantLocked() { runningWaiter = next as? AwaitingWaiter }
        lock.unlock()
        return next
    }

    // MARK: Helpers (lock held)

    private func enqueueLocked(_ command: PendingCommand, priority: CommandPriority) {
        command.key = CommandHeap.key(priority: priority, sequence: nextSequence)
        nextSequence &+= 1
        heap.insert(command)
    }

    /// Whether the current task is running inside the section this engine has granted now.
    private func isInsideRunningSectionLocked() -> Bool {
        guard isRunning else { return false }
        let me = ObjectIdentifier(self)
        var link = CriticalSectionContext.innermost
        while let current = link {
            if current.engine == me && current.grant == grantNumber { return true }
            link = current.outer
        }
        return false
    }

    /// Whether the current task runs inside the section this engine has granted now.
    func isInsideRunningSection() -> Bool {
        lock.withLock { isInsideRunningSectionLocked() }
    }

    /// The number of live pending commands (for tests and diagnostics).
    var pendingCount: Int {
        lock.withLock { heap.count }
    }

}
