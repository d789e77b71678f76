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
        case .expired:
            preconditionFailure("enqueue refuses an expired command")
        case .queued(let ticket):
            if let error = waiter.waitForGrant(engine: self, ticket: ticket, deadline: deadline) {
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
