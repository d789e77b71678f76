import Dispatch
import QueueSafeValueShims

// MARK: - CommandEngine

/// The priority command queue behind every value container and ``CommandQueue``: the storage half
/// of the engine. It calls one ``EngineStateMachine`` transition under its lock and performs the
/// result after unlocking; the idle path alone (one compare-and-swap on the state word, see
/// ``EngineWord``) decides without the machine. `ValueEngine` subclasses it to add the value.
///
/// ## Lock order
///
/// A thread that holds one of these locks takes only locks further down the list, and never two of
/// the same kind. One exception: a waiting task's escalation handler escalates the holder it waits
/// for, a task's lock inside another's, as the runtime does for a task that awaits another.
///
/// 1. **A task's lock in the concurrency runtime**, held while it escalates or cancels a task and
///    while the task's handlers run. So a boost decided under a boost lock is made after releasing
///    it (`Escalations`).
/// 2. **The deadlock detector's lock** (one per process). A snapshot taken under an engine lock
///    names a dispatch holder's queue after unlocking (`QueueDiagnostics.namingQueue()`).
/// 3. **An engine's boost lock** (`boosts`): the raised parties, the running shared reads and the
///    observers.
/// 4. **An engine's lock** (`machine`): every transition.
/// 5. **Leaves**, which take nothing inside: the boost registry's lock, a parked waiter's helper
///    jobs, each observer's delivery lock, and the locks of `RefreshingValue`, `RecurringExecutor`
///    and the lost-update handler.
// @unchecked Sendable: mutable state is the locked machine and atomic words
@usableFromInline
class CommandEngine: @unchecked Sendable {
    typealias Machine = EngineStateMachine
    typealias Ticket = Machine.Ticket

    @usableFromInline final let words = AtomicWords.make(count: Word.allCases.count)

    /// The engine's atomic words, one per case, in this order in ``words``.
    @usableFromInline
    enum Word: Int, CaseIterable {
        /// The state word (``EngineWord``).
        case state
        /// The thread running a synchronous closure in the section (or waiting for its `done()`), or 0.
        case ownerThread
        /// The exclusive holder's call site (``keepHolder(thread:site:)``), read by reports only
        /// while the state word shows an exclusive holder, so never cleared.
        case holderFile
        case holderLine  // right after `holderFile`, and both after `ownerThread`: see `keepHolder(thread:site:)`
        /// `g` while the `g`th task section is held, `-g` once it ended, so that a stale task-local
        /// record never matches (see `Reentrancy.swift`).
        case taskSection
        /// The task holding the section, or 0 (for deadlock detection).
        case ownerTask
        /// The dispatched holder's slot for helping (see ``publishGrantedDispatch(_:helper:)``).
        case pendingDispatch
        /// The identity of the dispatched holder's queue, for diagnostics.
        case dispatchedHolderQueue
        /// How many observers a value has (see `Observation.swift`).
        case observing
        /// 1 while the running ``QueueMonitor`` watches this engine.
        case monitored
        /// This engine's own long-wait threshold in milliseconds; 0: the monitor's.
        case ownLongWait
        // The queue identity cache (see ``queueIdentity(of:)``): a version, odd while written; the
        // queue's address; its identity; the queue, retained so no other queue can take its address.
        case queueCacheVersion
        case queueCacheAddress
        case queueCacheID
        case queueCacheOwner
        /// The address of the waiter the next grant goes to, or 0: a hint for spinning waiters,
        /// never a decision (a leave does not update it).
        case head
        /// The waiter the last release through the lock handed the section to: still the head for
        /// its own spin until it sees its grant.
        case handedTo
        /// The task of the one awaiting shared read that holds on the idle path, or 0; 1 while a read
        /// takes the place; the task's address with bit 0 set once the boost lock lists it (see
        /// ``tryJoinReadersIdle(outside:)``).
        case taskReader
        /// The number of the idle awaiting read in `taskReader`, so that a stale task-local record
        /// of an earlier one never matches.
        case taskReadNumber
    }

    /// The state machine behind its lock. Internal only for the engine's own extensions (`CommandEngine+…`).
    let machine: LockedState<Machine>
    /// The boost lock and what it guards (see `PriorityInheritance.swift`).
    final let boosts = LockedState.make(BoostRecord(), inheritsPriority: true)

    @inlinable @inline(__always) final func word(_ word: Word) -> AtomicWord { AtomicWord(words, index: word.rawValue) }

    @inlinable @inline(__always) final var state: AtomicWord { word(.state) }
    @inlinable @inline(__always) final var ownerThread: AtomicWord { word(.ownerThread) }
    @inline(__always) final var taskSection: AtomicWord { word(.taskSection) }
    @inline(__always) final var ownerTask: AtomicWord { word(.ownerTask) }
    @inline(__always) final var pendingDispatch: AtomicWord { word(.pendingDispatch) }
    @inlinable @inline(__always) final var observing: AtomicWord { word(.observing) }
    @inlinable @inline(__always) final var holderFile: AtomicWord { word(.holderFile) }
    @inlinable @inline(__always) final var holderLine: AtomicWord { word(.holderLine) }
    @inline(__always) final var monitoredWord: AtomicWord { word(.monitored) }
    @inline(__always) final var ownLongWaitWord: AtomicWord { word(.ownLongWait) }

    final let label: String?

    /// Made with ``CommandFairness/eventual``: the machine needs the precise clock for the bound.
    final let isEventuallyFair: Bool

    @usableFromInline
    init(label: String?, fairness: CommandFairness = .strictPriority) {
        self.label = label
        isEventuallyFair = fairness.bargingBound != nil
        machine = LockedState.make(Machine(maxOvertakes: fairness.maxOvertakes, bargingBound: fairness.bargingBound))
        QueueMonitor.active?.watch(self)
    }

    /// The time the machine's transitions are given: the coarse clock, or the precise one in the
    /// eventually fair mode and for a timed command's arrival (so that a zero timeout is seen as
    /// passed); elsewhere a deadline may be seen up to one coarse tick late.
    @inline(__always)
    final func machineNow(precise: Bool = false) -> UInt64 {
        isEventuallyFair || precise ? SyncPoints.fairnessNow() : SyncPoints.coarseNow()
    }

    deinit {
        Self.releaseCachedQueue(word(.queueCacheOwner).exchange(0))
    }

    /// How diagnostics and deadlock reports name this engine (`CommandQueue #3fa0` without a label).
    var displayName: String {
        label.map { "'\($0)'" } ?? "CommandQueue #\(shortIdentity)"
    }

    /// How a schedule's trace names this engine: without an identity, so a replay's trace reads
    /// the same as its run.
    var traceName: String {
        label.map { "'\($0)'" } ?? "a CommandQueue"
    }

    final var shortIdentity: String {
        String((UInt(bitPattern: ObjectIdentifier(self)) >> 4) & 0xFFFF, radix: 16)
    }

    /// Frees the guarded value, once, outside the lock (a ``CommandQueue`` guards none).
    func freeValue() {}

    /// Releases a holder that may have changed an observed value; `ValueEngine` overrides it to
    /// capture the change (see `Observation.swift`).
    @usableFromInline
    func releaseObservedChange(_ kind: CommandKind) {
        release(kind)
    }

    // MARK: Idle path

    /// ``releaseInline(_:releaserQueue:)`` behind a call, for async code, where the inlined release
    /// made every command slower.
    @usableFromInline
    final func release(_ kind: CommandKind) {
        releaseInline(kind)
    }

    /// The one release, inlined into the caller. A dispatched block clears its slot first (while
    /// the word still says held), so the blocking release pays nothing for helping.
    /// - Parameter releaserQueue: a dispatched block's queue, if it could run a granted successor
    ///   for that queue inline (0: it cannot).
    /// - Returns: the successor the releasing block runs inline
    ///   (``EngineStateMachine/Starter/releasingBlock``); every other grant was started already.
    @inlinable
    @inline(__always)
    @discardableResult
    final func releaseInline(_ kind: CommandKind, releaserQueue: Int = 0) -> Waiter? {
        if kind == .dispatched { word(.pendingDispatch).storeRelaxed(0) }
        // Cleared first: once the word says free, another thread may set it. Loaded once: the
        // store would make the compiler load the words again.
        let words = self.words
        AtomicWord(words, index: Word.ownerThread.rawValue).storeRelaxed(0)
        if tryReleaseIdle(kind, in: words) { return nil }
        return releaseSlow(releaserQueue: releaserQueue)
    }

    // MARK: Transitions

    /// Where a command that asked for the section through the lock stands.
    enum Placement {
        /// The ticket is an operation's holder record.
        case granted(Ticket?)
        case queued(Ticket)
        case refused(QueueSafeValueError)
    }

    /// Asks the machine for the section, or a share of it (`shared`), on behalf of `waiter`; a
    /// read's ticket is stored in the waiter under the lock, before any release can grant it.
    /// - Parameter deadline: when a timed command gives up (`uptimeNanoseconds`; 0: never).
    final func enqueue(
        _ waiter: Waiter,
        kind: CommandKind,
        priority: CommandPriority,
        reentrant: Bool = false,
        shared: Bool = false,
        deadline: UInt64 = 0
    ) -> Placement {
        if shared { SyncPoints.commandPoint("read arrives at", self, kind) }
        waiter.issuedPriority = priority
        let placed = machine.withLock { machine in
            transition(announcing: EngineWord.slowRelease, &machine) { machine, word in
                let admission = machine.enqueue(
                    waiter, kind: kind, priority: priority, reentrant: reentrant, word: &word,
                    now: machineNow(precise: deadline != 0), shared: shared, deadline: deadline)
                switch admission {
                case .granted(let ticket?) where shared, .queued(let ticket) where shared: waiter.readerTicket = ticket
                // It holds the section now, as if it had taken it on the idle path.
                case .granted where !shared: keepHolderSite(waiter.keptSite, priority: priority)
                case .queued where !shared: noteHead(machine)
                default: break
                }
                return placement(admission, machine, word: word)
            }
        }
        // A read through the lock is not contention unless it waits.
        if case .queued = placed { noteContention() } else if !shared { noteContention() }
        return placed
    }

    /// Under the lock: the placement of `admission`; an expired one becomes a `.timedOut` refusal
    /// with a snapshot of the queue.
    @inline(__always)
    final func placement(_ admission: Machine.Admission, _ machine: Machine, word: Int) -> Placement {
        switch admission {
        case .granted(let ticket): .granted(ticket)
        case .queued(let ticket): .queued(ticket)
        case .refused(let error): .refused(error)
        case .expired: .refused(.timedOut(snapshot(machine, word: word)))
        }
    }

    /// Under the lock: updates the ``Word/head`` hint only if it changed (spinning waiters read
    /// that cache line).
    @inline(__always)
    final func noteHead(_ machine: borrowing Machine) {
        let head = machine.table.firstWaitingAddress
        if word(.head).loadRelaxed() != head { word(.head).storeRelaxed(head) }
    }

    /// A command went through the lock: a running monitor watches this engine from now on, so its
    /// long holds are sampled. One load when no monitor runs.
    @inline(__always)
    final func noteContention() {
        if qsv_monitor_load() != 0 { watchFromNowOn() }
    }

    /// A release the idle path could not take.
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

    /// Takes a waiting command out of the queue (a cancellation), if it still waits; its suspended
    /// task is resumed and finds out under the lock that it was not granted.
    /// - Complexity: O(1) amortized.
    final func leave(_ ticket: Ticket) {
        perform { leave(ticket, &$0) ?? .init() }
    }

    /// Under the lock: the machine's leave; in the eventually fair mode the one woken to claim a
    /// free section may leave, so the transition decides on the word.
    @inline(__always)
    final func leave(_ ticket: Ticket, _ machine: inout Machine) -> Machine.Actions? {
        guard isEventuallyFair else { return machine.leave(ticket) }
        return transition(announcing: EngineWord.slowRelease, &machine) { machine, word in
            machine.leave(ticket, word: &word, now: machineNow())
        }
    }

    /// Eventually fair mode: the blocking command `ticket`, woken to claim the section a release
    /// freed, claims it (see ``EngineStateMachine/claim(_:parking:word:now:)``).
    /// - Parameter parking: the claimer is about to park.
    final func claim(_ ticket: Ticket, parking: Bool) -> Machine.Found {
        perform { machine in
            transition(announcing: EngineWord.slowRelease, &machine) { machine, word in
                machine.claim(ticket, parking: parking, word: &word, now: machineNow())
            }
        }.found
    }

    /// A waiting command gives up (deadline, or deadlock): it leaves the queue if it still waits,
    /// and `left` is given the queue's snapshot under the lock.
    /// - Returns: that snapshot if it left; `nil` if it was granted first (then it runs).
    @discardableResult
    final func leaveWithSnapshot(
        _ ticket: Ticket, _ left: (QueueDiagnostics) -> Void = { _ in }
    ) -> QueueDiagnostics? {
        var diagnostics: QueueDiagnostics?
        perform { machine in
            guard let actions = leave(ticket, &machine) else { return .init() }
            diagnostics = snapshot(machine, word: state.loadAcquire())
            diagnostics.map(left)
            return actions
        }
        return diagnostics?.namingQueue()
    }

    /// Refuses every command issued from now on with `.valueContainerDeinited`, and frees the value
    /// once nothing holds or waits for it. Queued commands still run.
    @usableFromInline
    final func close() {
        perform { machine in
            transition(announcing: EngineWord.closed, &machine) { machine, word in machine.close(word: &word) }
        }
    }

    // MARK: Manual completion

    /// The holder starts a manual-completion command.
    final func beginManual(_ waiter: Waiter, kind: CommandKind) -> Ticket {
        machine.withLock { machine in
            transitionWhileHeld(&machine) { machine, word in
                machine.beginManual(waiter, kind: kind, word: &word, now: machineNow())
            }
        }
    }

    /// The closure of the manual-completion command `ticket` returned; a thread that stops
    /// holding while the command waits for its completion ends its inherited boost.
    final func manualClosureReturned(_ ticket: Ticket) -> Machine.ManualStep {
        let step = machine.withLock { $0.manualClosureReturned(ticket) }
        if case .waitForCompletion(boosted: true) = step, ownerThread.loadRelaxed() == 0 { endBoostOfCurrentThread() }
        return step
    }

    final func manualCompletionArrived(_ ticket: Ticket, dropped: Bool) {
        SyncPoints.commandPoint("manual completion is called for", self)
        perform { $0.manualCompletionArrived(ticket, dropped: dropped) }
    }

    // MARK: Observation

    /// For snapshots: the machine and the state word, under the lock.
    @inline(__always)
    final func withMachine<R>(file: StaticString = #fileID, line: UInt = #line, _ body: (Machine, Int) -> R) -> R {
        machine.withLock(file: file, line: line) { machine in body(machine, state.loadAcquire()) }
    }

    @usableFromInline
    final var droppedCompletionCount: Int {
        machine.withLock { $0.droppedCompletions }
    }

    final var pendingCount: Int {
        machine.withLock { $0.waitingCount }
    }

    final var isValueFreed: Bool {
        machine.withLock { $0.isValueFreed }
    }
}
