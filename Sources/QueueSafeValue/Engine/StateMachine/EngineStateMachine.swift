// MARK: - EngineStateMachine

/// Every decision of the command engine, as a plain value: who holds the critical section, who
/// waits and in which order, who left, when the value may be freed, and what ``CommandQueue``'s
/// `cancelAll()` and manual completions do.
///
/// No locks, atomics, semaphores, continuations or dispatch live here. ``CommandEngine`` owns one
/// machine, calls a transition with its lock held and performs the returned action after unlocking:
/// wake a thread, dispatch a block, resume a task, cancel a task, free the value. `Handle` is what
/// the engine needs to start a command (its waiter object); the machine only stores and returns it,
/// so the tests drive the very same transitions with plain integers.
///
/// Transitions that race with the lock-free idle path take the state word the engine observed
/// (`observed`) and return the word to store; see ``EngineWord``.
struct EngineStateMachine<Handle: EngineHandle> {
    /// Identifies a command's record while it waits or holds the section. A ticket of a command
    /// that has ended no longer matches its slot: the generation moved on.
    struct Ticket: Hashable, Sendable {
        let slot: UInt32
        let generation: UInt32

        /// A ticket that matches no command.
        static var none: Ticket { Ticket(slot: .max, generation: 0) }
    }

    /// What ``enqueue(_:kind:priority:reentrant:observed:)`` decided.
    enum Admission {
        /// The section was free: the command holds it now. The ticket is its holder record, for an
        /// operation.
        case granted(Ticket?)
        /// The command waits in the queue; it is started when its turn comes.
        case queued(Ticket)
        /// The command never runs.
        case refused(QueueSafeValueError)
    }

    /// What ``attach(_:)`` decided about the task of an operation.
    enum Attachment: Equatable {
        /// Keep the task: ``cancelAll()`` may need it.
        case keep
        /// `cancelAll()` ran before the task was attached: cancel it now.
        case cancelNow
        /// The operation ended already: drop the task.
        case drop
    }

    /// What the closure of a manual-completion command does once it returned (see
    /// ``manualClosureReturned(_:)``).
    enum ManualStep {
        /// The completion arrived already: the caller releases the section now.
        case release
        /// The completion has not arrived: wait until it does (its arrival finishes the command).
        case waitForCompletion
        /// Nothing to do (the ticket is stale).
        case none
    }

    /// The phases of a manual-completion command, between its two parties.
    enum ManualPhase: UInt8, Hashable {
        case notManual
        /// The closure runs and `done` has not been called.
        case running
        /// The closure returned; the command waits for `done`.
        case closureReturned
        /// `done` was called (or dropped) while the closure still ran.
        case completionArrived
    }

    enum RecordState: UInt8, Hashable {
        case free
        /// In the heap, waiting for its turn.
        case waiting
        /// Holds the section (tracked holders only).
        case holding
        /// Left the queue before its turn (timed out, cancelled); its heap entry may remain.
        case left
        /// Ended, kept only until its task is attached.
        case ended
    }

    /// What the machine knows of one command: 16 bytes, so a waiting command costs the machine 32
    /// (this record and its heap entry).
    struct Record {
        var generation: UInt32 = 0
        var state: RecordState = .free
        var kind: CommandKind = .blocking
        private var flags: UInt8 = 0
        var manual: ManualPhase = .notManual
        var handle: Handle?

        init() {}

        init(generation: UInt32, state: RecordState, kind: CommandKind, handle: Handle) {
            self.generation = generation
            self.state = state
            self.kind = kind
            self.handle = handle
        }

        /// An operation whose task has not been attached yet: the record outlives the command
        /// until it is, so ``attach(_:)`` can tell what happened.
        var taskUnattached: Bool {
            get { flag(0) }
            set { setFlag(0, newValue) }
        }
        /// The operation's task is attached.
        var hasTask: Bool {
            get { flag(1) }
            set { setFlag(1, newValue) }
        }
        /// Its entry is (still) in the heap.
        var inHeap: Bool {
            get { flag(2) }
            set { setFlag(2, newValue) }
        }
        /// `cancelAll()` reached it before its task was attached.
        var cancelRequested: Bool {
            get { flag(3) }
            set { setFlag(3, newValue) }
        }
        /// A discardable operation, granted but not begun, that a later operation discarded.
        var discarded: Bool {
            get { flag(4) }
            set { setFlag(4, newValue) }
        }
        /// A shared read: it holds the section together with the other shared reads granted with
        /// it (see `EngineStateMachine+Shared.swift`).
        var shared: Bool {
            get { flag(5) }
            set { setFlag(5, newValue) }
        }
        /// A granted dispatched shared read whose closure has been started (by its block or by a
        /// helper): nobody else may start it.
        var started: Bool {
            get { flag(6) }
            set { setFlag(6, newValue) }
        }

        private func flag(_ bit: UInt8) -> Bool { flags & (1 << bit) != 0 }

        private mutating func setFlag(_ bit: UInt8, _ value: Bool) {
            if value { flags |= 1 << bit } else { flags &= ~(1 << bit) }
        }
    }

    // The machine's state below is internal, not private, only so that its extensions in the
    // `EngineStateMachine+….swift` files reach it: nothing but the machine's own transitions writes it.

    var heap = CommandHeap()
    var records: [Record] = []
    var freeSlots: [UInt32] = []
    var sequence: UInt64 = 0
    /// The slot of the holder's record, when the machine tracks the holder.
    var holderSlot: UInt32?
    /// Heap entries whose command left the queue.
    var deadEntries = 0
    /// Waiting blocking commands whose threads run on dispatch queues, by slot: the identities of
    /// those queues. A dispatched command granted for one of them is handed to that thread.
    var helpers: [UInt32: [Int]] = [:]

    /// Commands waiting for their turn.
    var waitingCount = 0
    /// The container was released.
    var isClosed = false
    /// The value was freed (or the machine guards no value and was closed).
    var isValueFreed = false
    /// Manual completions released without being called.
    var droppedCompletions = 0
    /// When the holder got the section (`holderSinceIsExact`), or when the first command began to
    /// wait for it, on the clock the engine passes in as `now`; 0 when unknown. Kept only while
    /// `slowRelease` is set: a holder that may release on the idle path could end unseen. While
    /// shared reads hold: when the first of them got the section.
    var holderSince: UInt64 = 0
    var holderSinceIsExact = false
    /// The newest discardable operation (a ``CommandQueue`` policy) that has not begun, if any.
    var discardable: Ticket?
    /// Under a bounded-overtaking policy (``CommandFairness``), how many commands that arrived after
    /// a waiting one may be granted the section before it; `nil` for strict priority.
    let maxOvertakes: Int?
    /// The waiting commands in arrival order, under a bounded-overtaking policy only (commands that
    /// left or were granted are dropped when they reach the front).
    var arrivals: [Arrival] = []
    var arrivalsStart = 0
    /// An upper bound of how many commands that arrived after the oldest waiting command have been
    /// granted the section while it waited: it is granted next once this reaches `maxOvertakes`.
    var oldestOvertakes = 0
    /// The actions of the transition in progress, which the storage takes (``takeOutbox()``, or
    /// field by field) in the same lock section. Transitions on the contended path leave their
    /// actions here instead of returning them: a returned `Actions`, a generic struct holding
    /// references, was copied and destroyed through its value witnesses, hundreds of instructions
    /// per release. Empty between transitions.
    var outbox = Actions()
    /// The urgencies of parked waiters, by slot (a side table: most waiting commands never park).
    /// Changed only through ``setUrgency(_:to:)`` and ``clearUrgency(_:)``, which keep
    /// ``urgencyTally`` in step.
    private(set) var urgencies: [UInt32: Urgency] = [:]
    /// How many parked waiters have each urgency: what a hand-on merges, so that it costs the number
    /// of distinct urgencies (a few), not the number of parked waiters (every task waiting in a
    /// deep `CommandQueue` parks with its priority: merging them all made draining n operations
    /// cost n² steps).
    private(set) var urgencyTally: [Urgency: Int] = [:]
    /// The parked waiters that inherit an urgency from a section they hold elsewhere (a link of a
    /// chain), by slot: their own urgency and the inherited one, kept apart so that the inherited
    /// part can go down again when its reason leaves. ``urgencies`` holds the two merged.
    private(set) var chained: [UInt32: ChainedUrgency] = [:]
    /// The urgency the current holder inherits now: what its parked waiters ask for
    /// (``requiredHoldUrgency``), kept equal to it by every transition that changes them, so that
    /// a waiter that asks for no more asks nothing, and a raise that lost its reason is seen.
    var holdUrgency = Urgency.none
    /// The holder bits (``CommandKind/wordBits``) of the current holder, as last seen by a
    /// transition that knew them: which axis of an urgency it inherits.
    var holdBits = 0
    /// A transition lowered ``holdUrgency`` while a boost may be in effect: the storage brings the
    /// raised parties down (and clears this) in the same lock section.
    var boostSyncNeeded = false
    /// Whether a boost may have been applied to the current holder: its release (or the end of its
    /// closure) must end it. While shared reads hold, it stays set until the last of them released
    /// (each reader's release ends its own thread's boost).
    var isHoldBoosted = false
    /// The slots of the shared reads that hold the section, in grant order; empty while an
    /// exclusive command holds it or it is free.
    var readers: [UInt32] = []

    /// A command in ``arrivals``.
    struct Arrival {
        let ticket: Ticket
        let sequence: UInt64
    }

    /// - Parameter maxOvertakes: `nil` for strict priority (the default), or how many commands that
    ///   arrived after a waiting command may be granted before it (see ``CommandFairness``).
    init(maxOvertakes: Int? = nil) {
        self.maxOvertakes = maxOvertakes
    }

    // MARK: Enqueue

    /// A command asks for the section. The machine keeps a record of an operation while it holds
    /// the section (for `cancelAll()`), so an operation's release goes through the lock.
    ///
    /// - Parameters:
    ///   - reentrant: the caller is inside this section already, so waiting would wait for itself.
    ///   - observed: the word before the engine set `slowRelease` on it.
    ///   - now: the time, for ``holderSince``.
    /// - Returns: the decision and the word to store.
    mutating func enqueue(
        _ waiter: Handle,
        kind: CommandKind,
        priority: CommandPriority,
        reentrant: Bool,
        observed: Int,
        now: UInt64 = 0,
        shared: Bool = false
    ) -> (Admission, word: Int) {
        if isClosed { return (.refused(.valueContainerDeinited), observed) }
        // mutant(double-grant): guard EngineWord.isHeld(observed), waitingCount > 0 else {
        guard EngineWord.isHeld(observed) else {
            assert(waitingCount == 0 && holderSlot == nil, "a free section with waiters or a holder record")
            if shared {
                (holderSince, holderSinceIsExact) = (now, true)
                return (
                    .granted(grantReader(allocateReader(waiter, kind: kind))),
                    EngineWord.shared | EngineWord.slowRelease
                )
            }
            guard kind == .operation else { return (.granted(nil), kind.wordBits) }
            let ticket = allocate(waiter, kind: kind, state: .holding)
            records[Int(ticket.slot)].taskUnattached = true
            holderSlot = ticket.slot
            (holderSince, holderSinceIsExact) = (now, true)
            // mutant(stale-holder-record): return (.granted(ticket), kind.wordBits)
            return (.granted(ticket), kind.wordBits | EngineWord.slowRelease)
        }
        if reentrant { return (.refused(.reentrantAccess), observed) }
        if observed & EngineWord.slowRelease == 0 {
            // The holder took a free section unseen: it has held it at least since now.
            (holderSince, holderSinceIsExact) = (now, false)
        }
        if shared && observed & EngineWord.shared != 0 && mayJoinReaders(priority: priority) {
            return (.granted(grantReader(allocateReader(waiter, kind: kind))), observed | EngineWord.slowRelease)
        }
        let ticket = allocate(waiter, kind: kind, state: .waiting)
        records[Int(ticket.slot)].taskUnattached = kind == .operation
        records[Int(ticket.slot)].shared = shared
        records[Int(ticket.slot)].inHeap = true
        heap.insert(.init(key: CommandHeap.key(priority: priority, sequence: sequence), slot: ticket.slot))
        if maxOvertakes != nil { arrivals.append(Arrival(ticket: ticket, sequence: sequence)) }
        sequence &+= 1
        waitingCount += 1
        return (.queued(ticket), observed | EngineWord.slowRelease)
    }

    // MARK: Release

    /// The holder ends its command: grant the next waiting command, or free the section.
    /// - Parameters:
    ///   - observed: the word (it has holder bits, and `slowRelease` or `closed`).
    ///   - now: the time, for ``holderSince``.
    ///   - releaserQueue: the queue of a dispatched block that may run a successor for the same queue
    ///     inline (see ``Starter/releaser``); 0 otherwise.
    /// - Returns: the actions and the word to store.
    mutating func release(observed: Int, now: UInt64 = 0, releaserQueue: Int = 0) -> (Actions, word: Int) {
        let word = releaseIntoOutbox(observed: observed, now: now, releaserQueue: releaserQueue)
        return (takeOutbox(), word)
    }

    /// ``release(observed:now:releaserQueue:)``, leaving its actions in ``outbox``: the storage's
    /// form, on every contended release.
    /// - Returns: the word to store.
    mutating func releaseIntoOutbox(observed: Int, now: UInt64, releaserQueue: Int) -> Int {
        assert(EngineWord.isHeld(observed), "release of a free section")
        assert(outbox.isEmpty, "the outbox of an earlier transition was not taken")
        if let slot = holderSlot {
            holderSlot = nil
            outbox.ended = records[Int(slot)].handle.take()
            end(slot)
        }
        return handOn(closedBit: observed & EngineWord.closed, now: now, releaserQueue: releaserQueue)
    }

    /// The section's last holder (an exclusive command, or the last shared read) released it: grant
    /// the next waiting command (with the shared reads directly behind it, if it is one), or free
    /// the section. Leaves its actions in ``outbox``.
    /// - Returns: the word to store.
    mutating func handOn(closedBit: Int, now: UInt64, releaserQueue: Int) -> Int {
        (holderSince, holderSinceIsExact) = (0, false)
        outbox.endBoost = isHoldBoosted
        (holdUrgency, isHoldBoosted, boostSyncNeeded) = (.none, false, false)
        guard let (slot, kind) = popNext() else {
            // mutant(value-outlives-container): if isClosed && !isValueFreed && false {
            if isClosed && !isValueFreed {
                isValueFreed = true
                outbox.freeValue = true
            }
            return closedBit
        }
        if records[Int(slot)].shared { return grantReaders(first: slot, kind: kind, closedBit: closedBit, now: now) }
        // popNext() left the record's handle in place: the grant takes it, unless the record stays
        // as the holder's (an operation's, for cancelAll); the others' records go below.
        let next = kind == .operation ? records[Int(slot)].handle! : records[Int(slot)].handle.take()!
        if !urgencies.isEmpty {
            clearUrgency(slot)
            // The waiters still parked are now waiting for `next`: it inherits their urgency.
            holdBits = kind.wordBits
            let inherited = requiredHoldUrgency
            if !inherited.isNone {
                (holdUrgency, isHoldBoosted) = (inherited, true)
                outbox.urgency = inherited
            }
        }
        // Decided before the record goes: a helper is found among the records still waiting.
        grantInOutbox(next, kind: kind, releaserQueue: releaserQueue, boosted: outbox.endBoost)
        var word = closedBit | kind.wordBits
        if kind == .operation {
            records[Int(slot)].state = .holding
            holderSlot = slot
        } else if records[Int(slot)].inHeap {
            end(slot)  // promoted past the heap: its entry is dropped when it surfaces
        } else {
            free(slot)
        }
        // mutant(stall-with-waiters): if holderSlot != nil {
        if waitingCount > 0 || holderSlot != nil {
            word |= EngineWord.slowRelease
            (holderSince, holderSinceIsExact) = (now, true)
        }
        return word
    }

    /// The command to grant next: the first in the waiting order, unless a bounded-overtaking policy
    /// says the oldest waiting command has been overtaken enough.
    mutating func popNext() -> (slot: UInt32, kind: CommandKind)? {
        guard let limit = maxOvertakes, let oldest = oldestWaiting() else { return popWaiting() }
        // mutant(bound-off-by-one): if oldestOvertakes > limit {
        // mutant(bound-never-promotes): if oldestOvertakes >= limit && false {
        if oldestOvertakes >= limit {
            // Granted ahead of the waiting order: its heap entry is now dead, and dropped when it
            // surfaces (its record stays until then).
            let slot = oldest.ticket.slot
            records[Int(slot)].state = .ended
            waitingCount -= 1
            deadEntries += 1
            dropOldest()
            return (slot, records[Int(slot)].kind)
        }
        guard let next = popWaiting() else { return nil }
        if next.slot == oldest.ticket.slot {
            dropOldest()
        } else {
            oldestOvertakes += 1  // it arrived after the oldest, which every later one waits behind
        }
        return next
    }

    /// The oldest command that still waits, under a bounded-overtaking policy; drops the ones ahead
    /// of it that no longer wait.
    mutating func oldestWaiting() -> Arrival? {
        while arrivalsStart < arrivals.count {
            let front = arrivals[arrivalsStart]
            if isWaiting(front.ticket) { return front }
            dropOldest()
        }
        return nil
    }

    /// The oldest arrival is gone (granted or left). The next one has been overtaken at most as
    /// often as it (every command granted ahead of the newer one was granted ahead of the older),
    /// and at most as often as commands arrived after it.
    mutating func dropOldest() {
        arrivalsStart += 1
        if arrivalsStart == arrivals.count {
            arrivals.removeAll(keepingCapacity: true)
            arrivalsStart = 0
            oldestOvertakes = 0
            return
        }
        if arrivalsStart >= 64 && arrivalsStart * 2 >= arrivals.count {
            arrivals.removeFirst(arrivalsStart)
            arrivalsStart = 0
        }
        let arrivedSince = Int(clamping: sequence &- 1 &- arrivals[arrivalsStart].sequence)
        oldestOvertakes = min(oldestOvertakes, arrivedSince)
    }

    /// Pops the next command that still waits, dropping entries of commands that left.
    mutating func popWaiting() -> (slot: UInt32, kind: CommandKind)? {
        while let entry = heap.popFirst() {
            records[Int(entry.slot)].inHeap = false
            if records[Int(entry.slot)].state == .waiting {
                waitingCount -= 1
                return (entry.slot, records[Int(entry.slot)].kind)
            }
            deadEntries -= 1
            freeIfUnused(entry.slot)
        }
        return nil
    }

    // MARK: Leave

    /// A waiting command leaves the queue (its deadline passed, its task was cancelled, or waiting
    /// would deadlock).
    /// - Returns: `nil` if its turn came first (it holds the section, or is about to) or it already
    ///   left; otherwise the actions for a command that will never run (its task, if suspended, is
    ///   resumed).
    /// - Complexity: O(1) amortized: the heap entry is dropped when it surfaces, or in one O(n)
    ///   sweep once such entries outnumber the live ones.
    mutating func leave(_ ticket: Ticket) -> Actions? {
        guard isCurrent(ticket), records[Int(ticket.slot)].state == .waiting else { return nil }
        if let waiter = markLeft(ticket.slot) { outbox.others.append(.left(waiter)) }
        // An exclusive command that left may have been all that kept shared reads behind it waiting.
        if !readers.isEmpty { admitWaitingReaders() }
        sweepIfMostlyDead()
        return takeOutbox()
    }

    /// Whether the command is still waiting for its turn.
    func isWaiting(_ ticket: Ticket) -> Bool {
        isCurrent(ticket) && records[Int(ticket.slot)].state == .waiting
    }

    /// Records that the parked waiter in `slot` runs at `urgency` (replacing what it had).
    mutating func setUrgency(_ slot: UInt32, to urgency: Urgency) {
        if let old = urgencies.updateValue(urgency, forKey: slot) { untally(old) }
        urgencyTally[urgency, default: 0] += 1
    }

    /// Forgets the urgency of the waiter in `slot`, if it had one.
    mutating func clearUrgency(_ slot: UInt32) {
        if let old = urgencies.removeValue(forKey: slot) { untally(old) }
        if !chained.isEmpty { chained[slot] = nil }
    }

    /// Records the own and inherited urgency of the parked waiter in `slot` (see ``chained``).
    mutating func setChainedUrgency(_ slot: UInt32, _ urgency: ChainedUrgency) {
        let merged = urgency.own.merged(urgency.inherited)
        guard !merged.isNone else { return clearUrgency(slot) }
        chained[slot] = urgency.inherited.isNone ? nil : urgency
        setUrgency(slot, to: merged)
    }

    private mutating func untally(_ urgency: Urgency) {
        let remaining = urgencyTally[urgency, default: 0] - 1
        urgencyTally[urgency] = remaining > 0 ? remaining : nil
    }

    mutating func markLeft(_ slot: UInt32) -> Handle? {
        if !urgencies.isEmpty {
            clearUrgency(slot)
            // The boost it asked for ends with it: the holder drops to what still waits.
            // mutant(leave-keeps-boost): _ = ()
            lowerHoldUrgencyIfNeeded()
        }
        let waiter = records[Int(slot)].handle
        records[Int(slot)].state = .left
        records[Int(slot)].handle = nil
        if !helpers.isEmpty { helpers[slot] = nil }
        waitingCount -= 1
        deadEntries += 1
        return waiter
    }

    mutating func sweepIfMostlyDead() {
        guard deadEntries > 32 && deadEntries > heap.count / 2 else { return }
        var swept = heap
        heap = CommandHeap()  // one owner while sweeping, so the sweep does not copy it
        swept.removeAll { entry in
            // Entries of commands that left, or that a bounded-overtaking policy granted ahead.
            guard records[Int(entry.slot)].state != .waiting else { return false }
            records[Int(entry.slot)].inHeap = false
            freeIfUnused(entry.slot)
            return true
        }
        heap = swept
        deadEntries = 0
    }

    // MARK: Container release

    /// The container was released: refuse every new command, and free the value as soon as nothing
    /// holds or waits for it.
    /// - Parameter observed: the word before the engine set `closed` on it.
    /// - Returns: the actions (the value is freed now if nothing holds it), and the word to store.
    mutating func close(observed: Int) -> (Actions, word: Int) {
        var actions = Actions()
        guard !isClosed else { return (actions, observed | EngineWord.closed) }
        isClosed = true
        if EngineWord.isHeld(observed) { return (actions, observed | EngineWord.closed) }
        assert(waitingCount == 0)
        isValueFreed = true
        actions.freeValue = true
        return (actions, EngineWord.closed)
    }

    // MARK: Records

    func isCurrent(_ ticket: Ticket) -> Bool {
        Int(ticket.slot) < records.count && records[Int(ticket.slot)].generation == ticket.generation
            && records[Int(ticket.slot)].state != .free
    }

    mutating func allocate(_ handle: Handle, kind: CommandKind, state: RecordState) -> Ticket {
        let slot: UInt32
        if let reused = freeSlots.popLast() {
            slot = reused
        } else {
            slot = UInt32(records.count)
            records.append(Record())
        }
        let generation = records[Int(slot)].generation &+ 1
        records[Int(slot)] = Record(generation: generation, state: state, kind: kind, handle: handle)
        return Ticket(slot: slot, generation: generation)
    }

    /// A tracked holder ended.
    mutating func end(_ slot: UInt32) {
        records[Int(slot)].state = .ended
        records[Int(slot)].handle = nil
        freeIfUnused(slot)
    }

    /// Frees the record of a command that left or ended once neither the heap nor an unattached
    /// task can still refer to it.
    mutating func freeIfUnused(_ slot: UInt32) {
        let record = records[Int(slot)]
        guard record.state == .left || record.state == .ended, !record.inHeap, !record.taskUnattached else { return }
        free(slot)
    }

    mutating func free(_ slot: UInt32) {
        if !helpers.isEmpty { helpers[slot] = nil }
        records[Int(slot)].state = .free
        records[Int(slot)].handle = nil
        freeSlots.append(slot)
    }
}
