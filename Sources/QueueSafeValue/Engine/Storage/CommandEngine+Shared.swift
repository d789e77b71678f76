import Dispatch
import QueueSafeValueShims

// Shared reads: the storage half (the machine's half, and the order, are in
// `EngineStateMachine+Shared.swift`).
//
// A blocking shared read that finds no exclusive holder, nobody waiting and the container open
// joins and leaves on the idle path (`tryJoinReadersIdle`, `tryLeaveReadersIdle`): one
// compare-and-swap on the word each way, and its thread's record of idle reads (in the C shim) says
// which engine it reads, so that deadlock detection, priority inheritance and reentrancy checks can
// find it (`idleReaderThreads`, `qsv_idle_reads_holds`). Every other shared read goes through the
// lock: to take its share, and to give it back by its ticket; while it runs its closure it is listed
// as a *reader party* under the boost lock. The words that name a single holder (`ownerThread`,
// `ownerTask`) stay 0 while readers hold.

/// One shared read running its closure: its thread (a blocking read, or a dispatched read's
/// block or helper), or its task (an awaiting read), and its token (see
/// ``CommandEngine/readerToken(_:)``).
struct ReaderParty: Hashable {
    let thread: Int
    let task: Int
    let token: UInt64
}

extension CommandEngine {
    /// The token of the shared read `ticket`: its ticket packed in 64 bits on every platform
    /// (``EngineStateMachine/Ticket/packed``), which the inlinable command layer holds in place of
    /// the ticket (an internal type) and which the task-local stack of sections records as a shared
    /// read's (see `Reentrancy.swift`).
    @inline(__always)
    static func readerToken(_ ticket: Ticket) -> UInt64 {
        ticket.packed
    }

    /// The ticket of the shared read with this token.
    @inline(__always)
    static func readerTicket(_ token: UInt64) -> Ticket {
        Ticket(packed: token)
    }

    // MARK: Taking and giving back a share

    /// Asks the machine for a shared read on behalf of `waiter` (its ticket is stored in the
    /// waiter under the lock, before any release can grant it).
    /// - Parameter deadline: as for ``enqueue(_:kind:priority:reentrant:deadline:)``.
    final func enqueueReader(
        _ waiter: Waiter,
        kind: CommandKind,
        priority: CommandPriority,
        reentrant: Bool,
        deadline: UInt64 = 0
    ) -> Placement {
        SyncPoints.commandPoint("read arrives at", self, kind)
        waiter.issuedPriority = priority
        let placed = machine.withLock { machine in
            transition(announcing: EngineWord.slowRelease, &machine) { machine, word in
                let admission = machine.enqueue(
                    waiter, kind: kind, priority: priority, reentrant: reentrant, word: &word,
                    now: machineNow(precise: deadline != 0), shared: true, deadline: deadline)
                switch admission {
                case .granted(let ticket?), .queued(let ticket): waiter.readerTicket = ticket
                case .granted(nil), .refused, .expired: break
                }
                return placement(admission, machine, word: word)
            }
        }
        if case .queued = placed { noteContention() }
        return placed
    }

    /// The shared read `ticket` ends: it gives its share back; the last reader hands the section
    /// on (the actions are performed after unlocking).
    final func releaseReader(_ ticket: Ticket) {
        SyncPoints.commandPoint("read releases", self)
        perform { machine in
            // The word says `shared | slowRelease`: only locked transitions change it now.
            transitionWhileHeld(&machine) { machine, word in
                machine.releaseReader(ticket, word: &word, now: machineNow())
            }
        }
    }

    /// The block of a granted dispatched shared read claims it: `false` if a helper runs it.
    final func claimReaderStart(_ ticket: Ticket) -> Bool {
        machine.withLock { $0.claimReaderStart(ticket) }
    }

    /// A shared read holding the section starts a manual completion.
    final func beginReaderManual(_ ticket: Ticket) {
        machine.withLock { $0.beginReaderManual(ticket) }
    }

    /// The closure of the manual-completion shared read `ticket` returned: `.release` if its
    /// completion arrived already, `.waitForCompletion` if not (its arrival finishes the read).
    final func readerManualClosureReturned(_ ticket: Ticket) -> Machine.ManualStep {
        machine.withLock { $0.manualClosureReturned(ticket) }
    }

    // MARK: Reader parties

    /// Lists the shared read `ticket`, about to run its closure on this thread or in this task.
    final func enterReader(_ ticket: Ticket, thread: Int, task: Int) {
        let party = ReaderParty(thread: thread, task: task, token: Self.readerToken(ticket))
        var escalations = Escalations()
        boosts.withLock { record in
            record.readers.append(party)
            raiseJoiningReader(party, record: &record, &escalations)
        }
        escalations.make()
    }

    /// The shared read `ticket` no longer runs its closure (it is about to release, or it waits for
    /// its manual completion with no party of its own).
    final func exitReader(_ ticket: Ticket) {
        let token = Self.readerToken(ticket)
        boosts.withLock { record in
            if let index = record.readers.firstIndex(where: { $0.token == token }) { record.readers.remove(at: index) }
        }
    }

    /// Whether the calling thread (`thread`, its id, or 0 to ask only about the current task), or
    /// the current task, runs a shared read of this engine now.
    final func isInsideSharedRead(thread: Int) -> Bool {
        guard EngineWord.readersHold(state.loadAcquire()) else { return false }
        if thread != 0 && qsv_idle_reads_holds(idleReadIdentity) != 0 { return true }
        let tokens = CriticalSectionContext.sections.get().readerTokens(of: ObjectIdentifier(self))
        return boosts.withLock { record in
            record.readers.contains { party in
                (thread != 0 && party.thread == thread) || tokens.contains(party.token)
            }
        }
    }

    /// The parties of the listed shared reads running their closures now, in an array of its own:
    /// the caller reads it after the lock, while the next read to enter or leave changes the
    /// record's list in place (see ``Statistics/unshared`` for why a plain copy will not do).
    final var readerParties: [ReaderParty] {
        // `map` builds a new array, where returning the list would share its storage.
        boosts.withLock { $0.readers.map { $0 } }
    }

    /// The threads that hold a shared read of this engine on the idle path (see `qsv_idle_readers_of`:
    /// a caller that set `slowRelease` finds every one that joined before; a thread that is just
    /// joining or leaving may appear as well, which can raise it for a moment longer than needed,
    /// and cannot close a cycle of waits: it is not waiting).
    final func idleReaderThreads() -> [Int] {
        var capacity = 16
        while true {
            var threads = [UInt](repeating: 0, count: capacity)
            let found = Int(qsv_idle_readers_of(idleReadIdentity, &threads, Int32(capacity)))
            if found <= capacity { return threads.prefix(found).map { Int(bitPattern: $0) } }
            capacity = found + 16
        }
    }

    /// A blocking read listed itself in its thread's record of idle reads, but could not join: a
    /// priority raise may have found it there in between (see ``idleReaderThreads()``), and it
    /// holds nothing here that would end the raise later. It ends what this engine raised its
    /// thread by (under the boost lock, which the raise held while it looked), before it takes the
    /// lock's path.
    @usableFromInline
    final func endPhantomBoost() {
        endBoostOfCurrentThread()
    }

    /// Ends a blocking shared read that joined on the idle path at `read`: on the word while nobody
    /// waits, through the lock otherwise (``releaseIdleReaderSlow()``).
    @inlinable
    @inline(__always)
    final func leaveIdleRead(_ read: IdleRead) {
        if !tryLeaveReadersIdle(read) { releaseIdleReaderSlow() }
    }

    /// A blocking shared read that joined on the idle path leaves through the lock: a command
    /// waits for the section, or the container was released. The last reader hands the section on.
    @usableFromInline
    final func releaseIdleReaderSlow() {
        perform { machine in
            // The reader saw `slowRelease` or `closed`, but the release of the last listed reader
            // may have cleared `slowRelease` since (only idle readers hold, nobody waits), and then
            // other idle readers join and leave on the word: announce it again, as an enqueue does.
            // mutant(idle-release-while-word-moves): transitionWhileHeld(&machine) { machine, word in
            transition(announcing: EngineWord.slowRelease, &machine) { machine, word in
                machine.releaseIdleReader(word: &word, now: machineNow())
            }
        }
    }

    // MARK: Blocking shared reads

    /// Waits through the lock until the calling thread holds a share of the section (see
    /// ``acquireBlocking(priority:timeout:)`` for the errors; the idle path is the caller's, see
    /// ``tryJoinReadersIdle()``).
    /// - Parameter deadline: from `commandDeadline(after:)`.
    /// - Returns: the read's token (see ``readerToken(_:)``), for ``releaseReaderBlocking(_:)``, or
    ///   why it does not run.
    @usableFromInline
    final func acquireReaderBlocking(
        priority: CommandPriority,
        site: CallSite,
        deadline: DispatchTime?
    ) -> Result<UInt64, QueueSafeValueError> {
        let thread = currentThreadID()
        let waiter = BlockingWaiter.forCurrentThread()
        waiter.keptSite = site.kept
        waiter.deadline = deadline?.uptimeNanoseconds ?? 0
        let reentrant =
            ownerThread.loadRelaxed() == thread || isInsideRunningSection() || isInsideSharedRead(thread: thread)
        let ticket: Ticket
        switch enqueueReader(
            waiter, kind: .blocking, priority: priority, reentrant: reentrant, deadline: waiter.deadline)
        {
        case .granted(let granted?):
            ticket = granted
        case .granted(nil):
            preconditionFailure("a shared read is granted with a ticket")
        case .refused(let error):
            return .failure(reportingRefusal(error.namingQueue(), site: site.kept, priority: priority))
        case .queued(let queued):
            if let error = waitForGrant(waiter, ticket: queued, deadline: deadline) {
                return .failure(reportingRefusal(error, site: site.kept, priority: priority))
            }
            ticket = queued
        }
        enterReader(ticket, thread: thread, task: 0)
        return .success(Self.readerToken(ticket))
    }

    /// Ends the blocking shared read with this token, begun by
    /// ``acquireReaderBlocking(priority:timeout:)``.
    @usableFromInline
    final func releaseReaderBlocking(_ token: UInt64) {
        let ticket = Self.readerTicket(token)
        exitReader(ticket)
        releaseReader(ticket)
    }

    /// Runs `body` with a completion closure while the calling thread holds the shared read
    /// `ticket`, then blocks until the completion is called (from any thread) or dropped.
    @usableFromInline
    final func holdReaderUntilCompleted(_ token: UInt64, _ body: (@escaping CommandCompletionClosure) -> Void) {
        let ticket = Self.readerTicket(token)
        beginReaderManual(ticket)
        CompletionToken.withCompletion(engine: self, ticket: ticket, body)
        if case .waitForCompletion = readerManualClosureReturned(ticket) {
            // The record's handle is this thread's waiter: the completion's arrival unparks it.
            BlockingWaiter.forCurrentThread().waitForManualCompletion()
        }
    }

    // MARK: Awaiting shared reads

    /// Lists the current task as the shared read with this token.
    @usableFromInline
    final func enterTaskReader(_ token: UInt64) {
        enterReader(Self.readerTicket(token), thread: 0, task: currentTaskID())
    }

    /// The part of an awaiting shared read's acquisition that waits: joins the queue (or the
    /// readers) and suspends until its turn. Errors as ``acquireAwaitingSlow(priority:deadline:isolation:)``.
    /// - Returns: the read's token (see ``readerToken(_:)``).
    @usableFromInline
    final func acquireReaderAwaiting(
        priority: CommandPriority,
        site: CallSite,
        deadline: DispatchTime?,
        cancellable: Bool = true,
        isolation: isolated (any Actor)?
    ) async throws(QueueSafeValueError) -> UInt64 {
        let waiter = AwaitingWaiter()
        waiter.keptSite = site.kept
        waiter.deadline = deadline?.uptimeNanoseconds ?? 0
        let reentrant = isInsideRunningSection() || isInsideSharedRead(thread: 0)
        switch enqueueReader(
            waiter, kind: .awaiting, priority: priority, reentrant: reentrant, deadline: waiter.deadline)
        {
        case .granted(let ticket?):
            return Self.readerToken(ticket)
        case .granted(nil):
            preconditionFailure("a shared read is granted with a ticket")
        case .refused(let error):
            throw reportingRefusal(error.namingQueue(), site: site.kept, priority: priority)
        case .queued(let ticket):
            waiter.ticket = ticket
            try await waitForTurn(waiter, deadline: deadline, cancellable: cancellable)
            if cancellable && Task.isCancelled {
                // Granted, but the task was cancelled before its closure began: it never starts.
                releaseReader(ticket)
                throw .cancelled
            }
            return Self.readerToken(ticket)
        }
    }

    /// Runs `body` as the operation `waiter` of a queue of width above 1, which holds one slot (as a
    /// shared holder), in the caller's isolation, then gives the slot back, whether `body` returns
    /// or throws.
    @inlinable
    final func runHeldOperationSlot<R>(
        _ waiter: AwaitingWaiter,
        isolation: isolated (any Actor)?,
        _ body: nonisolated(nonsending) () async throws -> R
    ) async rethrows -> R {
        try await runHeldReaderSection(slotToken(waiter), isolation: isolation, body)
    }

    /// Whether the current task runs an operation of this queue of width above 1 (it holds a slot).
    @usableFromInline
    final func isInsideOperationSlot() -> Bool {
        isInsideSharedRead(thread: 0)
    }

    /// The token of the slot the operation `waiter` holds (see ``readerToken(_:)``).
    @usableFromInline
    final func slotToken(_ waiter: AwaitingWaiter) -> UInt64 {
        Self.readerToken(waiter.ticket)
    }

    /// Runs `body` as the shared read (with this token) that the current task holds, in the
    /// caller's isolation, then gives its share back, whether `body` returns or throws.
    @inlinable
    final func runHeldReaderSection<R>(
        _ token: UInt64,
        isolation: isolated (any Actor)?,
        _ body: nonisolated(nonsending) () async throws -> R
    ) async rethrows -> R {
        let entry = SectionEntry(engine: ObjectIdentifier(self), readerToken: token)
        let sections = CriticalSectionContext.sections.get().pushing(entry)
        enterTaskReader(token)
        // Given back however the task ends: returning, throwing, or cancelled while it ran.
        // mutant(cancelled-slot-kept): defer { if !Task.isCancelled { releaseReaderBlocking(token) } }
        defer { releaseReaderBlocking(token) }
        return try await withSections(sections, entry, isolation: isolation, body)
    }
}
