import Dispatch
import QueueSafeValueShims

// Shared reads: the storage half (Architecture.md, "Shared reads"). The words that name a single
// holder (`ownerThread`, `ownerTask`) stay 0 while readers hold.

/// One shared read running its closure: its thread or its task, and its token.
struct ReaderParty: Hashable {
    let thread: Int
    let task: Int
    let token: UInt64
}

extension CommandEngine {
    // MARK: Taking and giving back a share

    /// The shared read `ticket` gives its share back; the last reader hands the section on.
    final func releaseReader(_ ticket: Ticket) {
        SyncPoints.commandPoint("read releases", self)
        perform { machine in
            transitionWhileHeld(&machine) { machine, word in
                machine.releaseReader(ticket, word: &word, now: machineNow())
            }
        }
    }

    // MARK: Reader parties

    /// Lists the shared read `ticket`, about to run its closure on this thread or in this task.
    final func enterReader(_ ticket: Ticket, thread: Int, task: Int) {
        let party = ReaderParty(thread: thread, task: task, token: ticket.packed)
        var escalations = Escalations()
        boosts.withLock { record in
            record.readers.append(party)
            raiseJoiningReader(party, record: &record, &escalations)
        }
        escalations.make()
    }

    /// The shared read `ticket` no longer runs its closure.
    final func exitReader(_ ticket: Ticket) {
        let token = ticket.packed
        boosts.withLock { record in
            if let index = record.readers.firstIndex(where: { $0.token == token }) { record.readers.remove(at: index) }
        }
    }

    /// Whether the calling thread (`thread`; 0: ask only about the task), or the current task, runs
    /// a shared read of this engine now.
    final func isInsideSharedRead(thread: Int) -> Bool {
        guard EngineWord.readersHold(state.loadAcquire()) else { return false }
        if thread != 0 && qsv_idle_reads_holds(idleReadIdentity) != 0 { return true }
        let tokens = CriticalSectionContext.sections.get().readerTokens(of: ObjectIdentifier(self))
        return boosts.withLock { record in
            listTaskReader(&record)
            return record.readers.contains { party in
                (thread != 0 && party.thread == thread) || tokens.contains(party.token)
            }
        }
    }

    /// The parties of the listed shared reads running their closures now, in an array of its own
    /// (`map`): a shared copy would be changed in place by the next read to enter or leave.
    final var readerParties: [ReaderParty] {
        boosts.withLock { record in
            listTaskReader(&record)
            return record.readers.map { $0 }
        }
    }

    /// The threads that hold a shared read of this engine on the idle path: after `slowRelease` is
    /// set, every one that joined before (one just joining or leaving may appear too: harmless, it
    /// is not waiting).
    final func idleReaderThreads() -> [Int] {
        var capacity = 16
        while true {
            var threads = [UInt](repeating: 0, count: capacity)
            let found = Int(qsv_idle_readers_of(idleReadIdentity, &threads, Int32(capacity)))
            if found <= capacity { return threads.prefix(found).map { Int(bitPattern: $0) } }
            capacity = found + 16
        }
    }

    /// Idle join of a blocking shared read: listed in its thread's record of idle reads, then
    /// counted in the word.
    /// - Returns: where the read is listed, if it holds a share now; `nil` sends it through the lock.
    @inlinable
    @inline(__always)
    final func tryJoinReadersIdleOnThread() -> IdleRead? {
        SyncPoints.commandPoint("read arrives at", self, .blocking)
        let record = qsv_idle_reads_current()!
        let place = qsv_idle_reads_push(record, idleReadIdentity)
        guard place != 0 else { return nil }
        if tryJoinReadersIdle() { return IdleRead(record: record, place: place) }
        qsv_idle_reads_pop(record, place)
        // Listed but not joined: a raise may have found it there, and nothing it holds would end it.
        endBoostOfCurrentThread()
        return nil
    }

    /// Ends a blocking shared read that joined on the idle path: off its thread's record, then off
    /// the word while nobody waits.
    @inlinable
    @inline(__always)
    final func leaveIdleRead(_ read: IdleRead) {
        SyncPoints.commandPoint("read releases", self, .blocking)
        qsv_idle_reads_pop(read.record, read.place)
        if !tryLeaveReadersIdle() { releaseIdleReaderSlow() }
    }

    /// A blocking shared read that joined on the idle path leaves through the lock.
    @usableFromInline
    final func releaseIdleReaderSlow() {
        perform { machine in
            // The last listed reader's release may have cleared `slowRelease` since this one saw
            // it, and idle readers move the word again: announce it, as an enqueue does.
            // mutant(idle-release-while-word-moves): transitionWhileHeld(&machine) { machine, word in
            transition(announcing: EngineWord.slowRelease, &machine) { machine, word in
                machine.releaseReader(nil, word: &word, now: machineNow())
            }
        }
    }

    // MARK: Blocking shared reads

    /// Waits through the lock until the calling thread holds a share of the section (the idle path
    /// is the caller's; errors as ``acquireBlocking(priority:timeout:site:)``).
    /// - Returns: the read's token, for ``releaseReaderBlocking(_:)``, or why it does not run.
    @usableFromInline
    final func acquireReaderBlocking(
        priority: CommandPriority,
        site: CallSite,
        deadline: DispatchTime?
    ) -> Result<UInt64, QueueSafeValueError> {
        let thread = currentThreadID()
        return acquireThroughLock(shared: true, priority: priority, deadline: deadline, thread: thread, site: site)
            .map { ticket in
                guard let ticket else { preconditionFailure("a shared read is granted with a ticket") }
                enterReader(ticket, thread: thread, task: 0)
                return ticket.packed
            }
    }

    @usableFromInline
    final func releaseReaderBlocking(_ token: UInt64) {
        let ticket = Ticket(packed: token)
        exitReader(ticket)
        releaseReader(ticket)
    }

    /// ``holdUntilCompleted(_:)`` for the shared read with this token.
    @usableFromInline
    final func holdReaderUntilCompleted(_ token: UInt64, _ body: (@escaping CommandCompletionClosure) -> Void) {
        let ticket = Ticket(packed: token)
        machine.withLock { $0.beginReaderManual(ticket) }
        CompletionToken.withCompletion(engine: self, ticket: ticket, body)
        if case .waitForCompletion = machine.withLock({ $0.manualClosureReturned(ticket) }) {
            BlockingWaiter.forCurrentThread().waitForManualCompletion()
        }
    }

    // MARK: Awaiting shared reads

    /// Idle join of an awaiting shared read: it takes the engine's one place for a task read on the
    /// idle path (`taskReader`), then is counted in the word. Not when `sections` names this engine:
    /// the lock's path decides whether it is reentrant.
    /// - Returns: the read's entry in the task's stack of sections, if it holds a share now; `nil`
    ///   sends it through the lock.
    @inlinable
    @inline(__always)
    final func tryJoinReadersIdle(outside sections: SectionStack) -> SectionEntry? {
        let identity = ObjectIdentifier(self)
        guard !sections.mayName(identity) else { return nil }
        SyncPoints.commandPoint("read arrives at", self, .awaiting)
        let reader = word(.taskReader)
        guard reader.compareExchange(expected: 0, desired: 1) else { return nil }
        // Only the read that holds the place writes its number, before it names its task.
        let number = word(.taskReadNumber).loadRelaxed() &+ 1
        word(.taskReadNumber).storeRelaxed(number)
        reader.storeRelease(currentTaskID())
        if tryJoinReadersIdle() { return SectionEntry(engine: identity, readerToken: Self.taskReadToken(number)) }
        leaveTaskReaderPlace()
        return nil
    }

    /// Ends an awaiting shared read that joined with ``tryJoinReadersIdle(outside:)``: it gives the
    /// place up, then leaves the word while nobody waits.
    @inlinable
    @inline(__always)
    final func leaveIdleTaskRead() {
        SyncPoints.commandPoint("read releases", self, .awaiting)
        leaveTaskReaderPlace()
        if !tryLeaveReadersIdle() { releaseIdleReaderSlow() }
    }

    /// The idle task read gives its place up; if the boost lock listed it meanwhile, it leaves the
    /// list under that lock, so whoever raised it from the list did so while it was alive.
    @inlinable
    @inline(__always)
    final func leaveTaskReaderPlace() {
        let listed = word(.taskReader).exchange(0)
        if listed & 1 != 0 { unlistTaskReader(task: listed & ~1) }
    }

    /// Takes the listed idle task read off the list, and ends what this engine raised its task by
    /// (a read that could not join was raised for nothing).
    @usableFromInline
    final func unlistTaskReader(task: Int) {
        boosts.withLock { record in
            record.readers.removeAll { $0.task == task && $0.thread == 0 && $0.token & Self.taskReadMark != 0 }
            endBoost(of: .task(task), source: ObjectIdentifier(self), &record)
        }
    }

    /// Under the boost lock: lists the idle task read, if one holds, as a shared read running its
    /// closure, for whatever raises, names or checks the readers; it then leaves through
    /// ``unlistTaskReader(task:)``.
    final func listTaskReader(_ record: inout BoostRecord) {
        let reader = word(.taskReader)
        let task = reader.loadAcquire()
        // mutant(idle-task-read-never-listed): guard false, reader.compareExchange(expected: task, desired: task | 1) else { return }
        guard task & 1 == 0 && task != 0, reader.compareExchange(expected: task, desired: task | 1) else { return }
        let number = word(.taskReadNumber).loadRelaxed()
        record.readers.append(ReaderParty(thread: 0, task: task, token: Self.taskReadToken(number)))
    }

    /// Bit 63 marks the token of an idle task read: a ticket's slot never reaches it.
    @usableFromInline static var taskReadMark: UInt64 { 1 << 63 }

    @inlinable
    @inline(__always)
    static func taskReadToken(_ number: Int) -> UInt64 {
        taskReadMark | UInt64(UInt(bitPattern: number)) & ~taskReadMark
    }

    @usableFromInline
    final func enterTaskReader(_ token: UInt64) {
        enterReader(Ticket(packed: token), thread: 0, task: currentTaskID())
    }

    /// The part of an awaiting shared read's acquisition that waits (errors as
    /// ``acquireAwaitingSlow(priority:site:deadline:cancellable:isolation:)``).
    /// - Returns: the read's token.
    @usableFromInline
    final func acquireReaderAwaiting(
        priority: CommandPriority,
        site: CallSite,
        deadline: DispatchTime?,
        cancellable: Bool = true,
        isolation: isolated (any Actor)?
    ) async throws(QueueSafeValueError) -> UInt64 {
        let ticket = try await awaitTurn(
            shared: true, priority: priority, site: site, deadline: deadline, cancellable: cancellable)
        guard let ticket else { preconditionFailure("a shared read is granted with a ticket") }
        return ticket.packed
    }

    /// Runs `body` as the operation `waiter`, which holds one slot of a queue of width above 1, then
    /// gives the slot back, whether `body` returns or throws.
    @inlinable
    final func runHeldOperationSlot<R>(
        _ waiter: AwaitingWaiter,
        isolation: isolated (any Actor)?,
        _ body: nonisolated(nonsending) () async throws -> R
    ) async rethrows -> R {
        try await runHeldReaderSection(slotToken(waiter), isolation: isolation, body)
    }

    @usableFromInline
    final func isInsideOperationSlot() -> Bool {
        isInsideSharedRead(thread: 0)
    }

    @usableFromInline
    final func slotToken(_ waiter: AwaitingWaiter) -> UInt64 {
        waiter.ticket.packed
    }

    /// Runs `body` as the shared read with this token that the current task holds, in the caller's
    /// isolation, then gives its share back, whether `body` returns or throws.
    @inlinable
    final func runHeldReaderSection<R>(
        _ token: UInt64,
        isolation: isolated (any Actor)?,
        _ body: nonisolated(nonsending) () async throws -> R
    ) async rethrows -> R {
        let entry = SectionEntry(engine: ObjectIdentifier(self), readerToken: token)
        let sections = CriticalSectionContext.sections.get().pushing(entry)
        enterTaskReader(token)
        // mutant(cancelled-slot-kept): defer { if !Task.isCancelled { releaseReaderBlocking(token) } }
        defer { releaseReaderBlocking(token) }
        return try await withSections(sections, entry, isolation: isolation, body)
    }
}
