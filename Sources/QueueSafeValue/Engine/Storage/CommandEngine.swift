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
///
/// ## Lock order
///
/// A thread that holds one of these locks takes only locks further down the list, and never two of
/// the same kind (no order between two engines' locks is defined, so neither is taken inside the
/// other). One exception: a waiting task's escalation handler escalates the holder it waits for, a
/// task's lock inside another's along the wait-for graph, as the runtime does for a task that
/// awaits another. The checker (`LockOrder` in the tests) records every nesting that any run of any
/// scenario takes, by kind, and fails on a cycle.
///
/// 1. **A task's lock in the concurrency runtime.** The runtime holds it while it escalates or
///    cancels a task and while the task's escalation or cancellation handler runs; those handlers
///    take the locks below. So no lock below is held while a task is escalated: a boost decided
///    under a boost lock is made after releasing it (`Escalations`).
/// 2. **The deadlock detector's lock** (one per process). Registration reads who holds an engine:
///    its shared reads, under that engine's boost lock. The chain walk takes it alone, between links.
///    It also keeps queue labels: a snapshot taken under an engine lock names a dispatch holder's
///    queue after unlocking (`QueueDiagnostics.namingQueue()`).
/// 3. **An engine's boost lock** (`boosts`): the raised parties, the running shared reads and the
///    observers. Priority inheritance reads the machine's decision under it.
/// 4. **An engine's lock** (`machine`): every transition.
/// 5. **Leaves**, which take nothing inside: the boost registry's lock (one per process), a parked
///    waiter's helper jobs, each observer's delivery lock, and the locks of `RefreshingValue`,
///    `RecurringExecutor` and the lost-update handler. The queue-identity cache (the `queueCache…` words) takes
///    no lock.
// @unchecked Sendable: mutable state is the locked machine and atomic words
@usableFromInline
class CommandEngine: @unchecked Sendable {
    typealias Machine = EngineStateMachine
    typealias Ticket = Machine.Ticket

    /// The engine's atomic words, by ``Word`` (each word's meaning is there).
    @usableFromInline final let words = AtomicWords.make(count: Word.allCases.count)

    /// The engine's atomic words, one per case, in this order in ``words``.
    @usableFromInline
    enum Word: Int, CaseIterable {
        /// The state word (``EngineWord``).
        case state
        /// The thread running a synchronous closure in the section (or waiting for its `done()`),
        /// or 0.
        case ownerThread
        /// The call site of the exclusive holder (``keepHolder(thread:site:)``): the address of
        /// its `#fileID` and its line, written by the holder when it takes a free section and by
        /// the storage when it grants one; read by reports only. Not cleared on release: a report
        /// reads them only while the state word shows an exclusive holder.
        case holderFile
        case holderLine  // right after `holderFile`, and both after `ownerThread`: see `keepHolder(thread:site:)`
        /// The task section's generation, with its sign saying whether a task section is held:
        /// positive `g` while the `g`th task section is held, `-g` once it ended (so the next one is
        /// `g + 1`, and a task-local record of an ended section never matches the word); only the
        /// holder writes it (see `Reentrancy.swift`).
        case taskSection
        /// The task holding the section, or 0 (for deadlock detection).
        case ownerTask
        /// The dispatched holder's slot for helping (see ``publishPendingDispatch(_:)``).
        case pendingDispatch
        /// The identity of the dispatched holder's queue (see `QueueTag`), for diagnostics;
        /// meaningful only while a dispatched command holds the section.
        case dispatchedHolderQueue
        /// How many observers a value has (see `Observation.swift`); 0 for a command queue. Read
        /// relaxed by every command that may change the value, before its release.
        case observing
        /// 1 while the running ``QueueMonitor`` watches this engine, else 0 (read on the slow path only).
        case monitored
        /// This engine's own long-wait threshold in the running monitor, in milliseconds; 0: the
        /// monitor's (read at a hand-off while a monitor runs).
        case ownLongWait
        // The one-entry queue identity cache (see ``queueIdentity(of:)``): a version, odd while it
        // is written; the cached queue's address; its identity; and the cached queue itself,
        // retained, so that no other queue can have that address while the entry names it.
        case queueCacheVersion
        case queueCacheAddress
        case queueCacheID
        case queueCacheOwner
        /// The waiting order's head: the address of the waiter it serves next, or 0. A hint for
        /// spinning waiters (`BlockingWaiter`), never a decision: written under the lock by the
        /// enqueue and the release through the lock (a leave does not update it), read relaxed.
        case head
        /// The waiter the last release through the lock handed the section to (the head before
        /// it), or 0: it is still "the head" for its own spin until it sees its grant.
        case handedTo
    }

    /// The state machine behind its lock. Internal only for the engine's own extensions (`CommandEngine+…`).
    let machine: LockedState<Machine>
    /// The boost lock and what it guards (see `PriorityInheritance.swift`).
    final let boosts = LockedState.make(BoostRecord())

    @inlinable @inline(__always) final func word(_ word: Word) -> AtomicWord { AtomicWord(words, index: word.rawValue) }

    @inlinable @inline(__always) final var state: AtomicWord { word(.state) }
    @inlinable @inline(__always) final var ownerThread: AtomicWord { word(.ownerThread) }
    @inline(__always) final var taskSection: AtomicWord { word(.taskSection) }
    @inline(__always) final var ownerTask: AtomicWord { word(.ownerTask) }
    @inline(__always) final var pendingDispatch: AtomicWord { word(.pendingDispatch) }
    @inline(__always) final var dispatchedHolderQueue: AtomicWord { word(.dispatchedHolderQueue) }
    @inlinable @inline(__always) final var observing: AtomicWord { word(.observing) }
    @inlinable @inline(__always) final var holderFile: AtomicWord { word(.holderFile) }
    @inlinable @inline(__always) final var holderLine: AtomicWord { word(.holderLine) }
    @inline(__always) final var monitoredWord: AtomicWord { word(.monitored) }
    @inline(__always) final var ownLongWaitWord: AtomicWord { word(.ownLongWait) }
    @inline(__always) final var queueCacheVersion: AtomicWord { word(.queueCacheVersion) }
    @inline(__always) final var queueCacheAddress: AtomicWord { word(.queueCacheAddress) }
    @inline(__always) final var queueCacheID: AtomicWord { word(.queueCacheID) }
    @inline(__always) final var queueCacheOwner: AtomicWord { word(.queueCacheOwner) }

    /// The name the user gave the container or queue, if any; see ``displayName``.
    final let label: String?

    /// The value was made with ``CommandFairness/eventual``: the machine's clock is precise (the
    /// bound is a millisecond), not the coarse one diagnostics need.
    final let isEventuallyFair: Bool

    @usableFromInline
    init(label: String?, fairness: CommandFairness = .strictPriority) {
        self.label = label
        isEventuallyFair = fairness.bargingBound != nil
        machine = LockedState.make(Machine(maxOvertakes: fairness.maxOvertakes, bargingBound: fairness.bargingBound))
        // Created while a monitor runs: watched from the start (one load otherwise).
        QueueMonitor.active?.watch(self)
    }

    /// The time the machine's transitions are given (``Hold/since``, and the eventually fair mode's
    /// bound): the coarse clock, or in the eventually fair mode the precise one (on a controlled
    /// scheduler's clock under the testing library).
    ///
    /// A timed command's arrival reads the precise clock (`precise`), so that a deadline that has
    /// just passed (a zero timeout) is seen as passed; every other transition reads the coarse one,
    /// and may see a deadline as passed up to one tick of it late (1 to 4 ms on Linux,
    /// `clock_getres(CLOCK_MONOTONIC_COARSE)`; about a millisecond on Apple platforms).
    @inline(__always)
    final func machineNow(precise: Bool = false) -> UInt64 {
        isEventuallyFair || precise ? SyncPoints.fairnessNow() : SyncPoints.coarseNow()
    }

    deinit {
        releaseCachedQueue()
    }

    /// How diagnostics and deadlock reports name this engine: its label in quotes, or a short
    /// identity (`CommandQueue #3fa0`).
    var displayName: String {
        label.map { "'\($0)'" } ?? "CommandQueue #\(shortIdentity)"
    }

    /// How a schedule's trace names this engine: its label in quotes, or its type (no identity, so
    /// that a replay's trace reads the same as the run it replays; label the values to tell them
    /// apart).
    var traceName: String {
        label.map { "'\($0)'" } ?? "a CommandQueue"
    }

    /// The low 16 bits of the engine's address, in hex: enough to tell two engines apart in a report.
    final var shortIdentity: String {
        String((UInt(bitPattern: ObjectIdentifier(self)) >> 4) & 0xFFFF, radix: 16)
    }

    /// Frees the guarded value. Called once, outside the lock, when the state machine decides that
    /// the container is gone and nothing holds or waits for the value. The engine of a
    /// ``CommandQueue`` guards no value.
    func freeValue() {}

    /// Releases the section of a `kind` holder that may have changed the value while the value has
    /// observers: captures the change first and offers it after the release. A value's engine
    /// overrides it (see `Observation.swift`); a command queue has no value and no observers.
    @usableFromInline
    func releaseObservedChange(_ kind: CommandKind) {
        release(kind)
    }

    // MARK: Idle path

    /// Ends the running command of `kind` and starts the next one, if any: ``releaseInline(_:releaserQueue:)``
    /// behind a call, for async code, where the inlined release made every command slower.
    @usableFromInline
    final func release(_ kind: CommandKind) {
        releaseInline(kind)
    }

    /// The one release, inlined into the caller: on the idle path a store and a compare-and-swap,
    /// with no call, else ``releaseSlow(releaserQueue:)``. A dispatched command's block first
    /// clears the dispatched holder's slot (while the word still says held), so the blocking
    /// release pays nothing for helping.
    /// - Parameter releaserQueue: a dispatched block's queue, if it could run a granted successor
    ///   for that queue inline (0: it cannot).
    /// - Returns: the successor the machine chose the releasing dispatched block to run inline
    ///   (see ``EngineStateMachine/Starter/releasingBlock``); every other grant was started already.
    @inlinable
    @inline(__always)
    @discardableResult
    final func releaseInline(_ kind: CommandKind, releaserQueue: Int = 0) -> Waiter? {
        if kind == .dispatched { word(.pendingDispatch).storeRelaxed(0) }
        // Cleared first: once the word says free, another thread may take the section and set them.
        // The words are loaded once for both (the store would make the compiler load them again).
        let words = self.words
        AtomicWord(words, index: Word.ownerThread.rawValue).storeRelaxed(0)
        if tryReleaseIdle(kind, in: words) { return nil }
        return releaseSlow(releaserQueue: releaserQueue)
    }

    // MARK: Transitions

    /// Where a command that asked for the section through the lock stands: the machine's
    /// ``EngineStateMachine/Admission``, with an expired command refused (see ``placement(_:_:word:)``).
    enum Placement {
        /// It holds the section now (the ticket is an operation's holder record).
        case granted(Ticket?)
        /// It waits in the queue, and is started when its turn comes.
        case queued(Ticket)
        /// It never runs.
        case refused(QueueSafeValueError)
    }

    /// Asks the machine for the section on behalf of `waiter`.
    /// - Parameter deadline: when a timed command gives up (`uptimeNanoseconds`; 0: never).
    final func enqueue(
        _ waiter: Waiter,
        kind: CommandKind,
        priority: CommandPriority,
        reentrant: Bool = false,
        deadline: UInt64 = 0
    ) -> Placement {
        waiter.issuedPriority = priority
        let placed = machine.withLock { machine in
            transition(announcing: EngineWord.slowRelease, &machine) { machine, word in
                let admission = machine.enqueue(
                    waiter, kind: kind, priority: priority, reentrant: reentrant, word: &word,
                    now: machineNow(precise: deadline != 0), deadline: deadline)
                // Granted at once: it holds the section now, as if it had taken it on the idle path.
                if case .granted = admission { keepHolderSite(waiter.keptSite, priority: priority) }
                if case .queued = admission { noteHead(machine) }
                return placement(admission, machine, word: word)
            }
        }
        noteContention()
        return placed
    }

    /// Under the lock: the placement of `admission`; one the machine found
    /// ``EngineStateMachine/Admission/expired`` (the command's deadline had passed and the section
    /// is held) is a `.timedOut` refusal with a snapshot of the queue.
    @inline(__always)
    final func placement(_ admission: Machine.Admission, _ machine: Machine, word: Int) -> Placement {
        switch admission {
        case .granted(let ticket): .granted(ticket)
        case .queued(let ticket): .queued(ticket)
        case .refused(let error): .refused(error)
        case .expired: .refused(.timedOut(snapshot(machine, word: word)))
        }
    }

    /// Under the lock, after a transition that may have changed the waiting order's head: stores
    /// it in the ``Word/head`` hint if it changed (the spinning waiters read that cache line).
    @inline(__always)
    final func noteHead(_ machine: borrowing Machine) {
        let head = machine.table.firstWaitingAddress
        if word(.head).loadRelaxed() != head { word(.head).storeRelaxed(head) }
    }

    /// A command asked for the section through the lock: if a monitor runs and does not watch this
    /// engine yet, it does from now on (so that its long holds are sampled; see `CommandEngine+Reports.swift`). One load of a C global
    /// (`qsv_monitor_word`) when no monitor runs.
    @inline(__always)
    final func noteContention() {
        if qsv_monitor_load() != 0 { watchFromNowOn() }
    }

    /// A release the idle path could not take: the machine decides, and the actions are performed
    /// after unlocking.
    /// - Returns: the granted command the releasing block runs inline, if the machine chose it.
    @usableFromInline
    @discardableResult
    final func releaseSlow(releaserQueue: Int = 0) -> Waiter? {
        perform { machine in
            transitionWhileHeld(&machine) { machine, word in
                self.word(.handedTo).storeRelaxed(machine.table.firstWaitingAddress)
                let actions = machine.release(word: &word, now: machineNow(), releaserQueue: releaserQueue)
                noteHead(machine)
                return actions
            }
        }.inline
    }

    /// Takes a waiting command out of the queue (a cancellation), if it still waits: it never runs
    /// then, and its task, if suspended, is resumed. If it had been granted, or had left already,
    /// nothing changes.
    /// The resumed task then finds out under the lock that it was not granted.
    /// - Complexity: O(1) amortized.
    final func leave(_ ticket: Ticket) {
        perform { leave(ticket, &$0) ?? .init() }
    }

    /// Under the lock: the machine's leave. In the eventually fair mode a command may leave while the
    /// section is free (the one woken to claim it): the transition then decides on the word.
    @inline(__always)
    final func leave(_ ticket: Ticket, _ machine: inout Machine) -> Machine.Actions? {
        guard isEventuallyFair else { return machine.leave(ticket) }
        return transition(announcing: EngineWord.slowRelease, &machine) { machine, word in
            machine.leave(ticket, word: &word, now: machineNow())
        }
    }

    /// Eventually fair mode: the blocking command `ticket`, woken to claim the section a release
    /// freed, claims it (see ``EngineStateMachine/claim(_:parking:word:now:)``). If it is granted,
    /// its own start (the granted bit) is among the actions performed.
    /// - Parameter parking: the claimer is about to park.
    /// - Returns: what the machine decided: ``EngineStateMachine/Found/settled``,
    ///   ``EngineStateMachine/Found/stillHeld`` or ``EngineStateMachine/Found/passedOn``.
    final func claim(_ ticket: Ticket, parking: Bool) -> Machine.Found {
        perform { machine in
            transition(announcing: EngineWord.slowRelease, &machine) { machine, word in
                machine.claim(ticket, parking: parking, word: &word, now: machineNow())
            }
        }.found
    }

    /// A waiting command gives up (its deadline passed, or waiting would deadlock): it leaves the
    /// queue if it still waits.
    /// - Returns: what held the value and what waited, if it left (it never runs now); `nil` if it
    ///   was granted first (then it runs).
    final func leaveWithSnapshot(_ ticket: Ticket) -> QueueDiagnostics? {
        var diagnostics: QueueDiagnostics?
        perform { machine in
            guard let actions = leave(ticket, &machine) else { return .init() }
            diagnostics = snapshot(machine, word: state.loadAcquire())
            return actions
        }
        return diagnostics?.namingQueue()
    }

    /// Refuses every command issued from now on with `.valueContainerDeinited`, and frees the value
    /// as soon as nothing holds or waits for it (now, if that is already so). Queued commands still
    /// run.
    @usableFromInline
    final func close() {
        perform { machine in
            transition(announcing: EngineWord.closed, &machine) { machine, word in machine.close(word: &word) }
        }
    }

    // MARK: Manual completion

    /// The holder starts a manual-completion command.
    /// - Returns: the ticket its completion closure reports to.
    final func beginManual(_ waiter: Waiter, kind: CommandKind) -> Ticket {
        machine.withLock { machine in
            transitionWhileHeld(&machine) { machine, word in
                machine.beginManual(waiter, kind: kind, word: &word, now: machineNow())
            }
        }
    }

    /// The closure of the manual-completion command `ticket` returned. If the command goes on
    /// holding the section without the calling thread (it waits for its completion), that thread
    /// ends the boost it may have inherited.
    final func manualClosureReturned(_ ticket: Ticket) -> Machine.ManualStep {
        let step = machine.withLock { $0.manualClosureReturned(ticket) }
        if case .waitForCompletion(boosted: true) = step, ownerThread.loadRelaxed() == 0 { endBoostOfCurrentThread() }
        return step
    }

    /// The completion of the manual-completion command `ticket` was called, or dropped uncalled.
    final func manualCompletionArrived(_ ticket: Ticket, dropped: Bool) {
        SyncPoints.commandPoint("manual completion is called for", self)
        perform { $0.manualCompletionArrived(ticket, dropped: dropped) }
    }

    // MARK: Observation

    /// Runs `body` with the machine, under the lock: one transition or query, nothing else.
    @inline(__always)
    final func withMachineLocked<R>(
        file: StaticString = #fileID, line: UInt = #line, _ body: (inout Machine) -> R
    ) -> R {
        machine.withLock(file: file, line: line, body)
    }

    /// Runs `body` with the machine and the state word, under the lock (for snapshots).
    @inline(__always)
    final func withMachine<R>(file: StaticString = #fileID, line: UInt = #line, _ body: (Machine, Int) -> R) -> R {
        machine.withLock(file: file, line: line) { machine in body(machine, state.loadAcquire()) }
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
