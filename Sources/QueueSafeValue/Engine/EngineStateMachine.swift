// MARK: - EngineWord

/// The engine's state word: what the lock-free idle path reads and writes.
///
/// | bits | meaning |
/// | --- | --- |
/// | 0–1 | the kind of command holding the section (``CommandKind/wordBits``), 0 when it is free |
/// | 2 | `slowRelease`: the holder must release under the lock (commands wait, or the state machine keeps a record of the holder) |
/// | 3 | `closed`: the container was released; new commands are refused |
///
/// The idle path is exactly two compare-and-swaps: `0 → kind` to take a free section and
/// `kind → 0` to release one that nobody waits for. Either fails as soon as any other bit is set,
/// and every other change of the word happens under the engine lock. That gives the one invariant
/// the idle path relies on:
///
/// > While no holder bits are set, no command waits in the queue and the state machine keeps no
/// > holder record.
///
/// A locked transition that may race with the idle path first sets a bit with one atomic
/// read-modify-write (`slowRelease` to enqueue, `closed` to close): from then on neither
/// compare-and-swap can succeed, so the transition decides on the value it read and stores its
/// result without a retry loop.
@usableFromInline
enum EngineWord {
    /// The bits that say which kind of command holds the section.
    @usableFromInline static let holderMask = 0b0011
    /// The holder must release under the lock.
    static let slowRelease = 0b0100
    /// The container was released.
    static let closed = 0b1000

    /// Whether a command holds the section.
    @inline(__always)
    static func isHeld(_ word: Int) -> Bool { word & holderMask != 0 }
}

// MARK: - CommandKind

/// How a command waits for its turn and where its closure runs.
@usableFromInline
enum CommandKind: UInt8, Hashable, Sendable, CustomStringConvertible {
    /// `wait` / `wait(timeout:)`: a thread blocks; the closure runs on it.
    case blocking
    /// `async(performIn:)`: nothing waits; the closure runs on a dispatch queue.
    case dispatched
    /// `value.async`: a task suspends; the closure runs in the caller's isolation.
    case awaiting
    /// A ``CommandQueue`` operation: a task of its own, which ``CommandQueue/cancelAll()`` reaches.
    case operation

    /// The holder bits of ``EngineWord`` for a holder of this kind: 1, 2, or 3 for a task (an
    /// awaiting command or an operation; the machine's record tells the two apart).
    @inline(__always)
    @inlinable
    var wordBits: Int {
        switch self {
        case .blocking: return 0b01
        case .dispatched: return 0b10
        case .awaiting, .operation: return 0b11
        }
    }

    @usableFromInline
    var description: String {
        switch self {
        case .blocking: return "blocking"
        case .dispatched: return "dispatch"
        case .awaiting: return "awaiting"
        case .operation: return "CommandQueue operation"
        }
    }
}

// MARK: - Urgency

/// How urgently a waiting party must run, which the holder of the section inherits while it waits:
/// `thread`, as the operating system schedules threads (on Linux a real-time priority, on Apple
/// platforms a QoS class; 0 for nothing to inherit), and `task`, a `TaskPriority` raw value (0 for
/// nothing). Each axis is compared on its own.
struct Urgency: Hashable, Sendable {
    var thread: Int32
    var task: UInt8

    init(thread: Int32 = 0, task: UInt8 = 0) {
        self.thread = thread
        self.task = task
    }

    static let none = Urgency()

    var isNone: Bool { self == .none }

    /// The higher of the two on each axis.
    func merged(_ other: Urgency) -> Urgency {
        Urgency(thread: max(thread, other.thread), task: max(task, other.task))
    }
}

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
struct EngineStateMachine<Handle> {
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

    /// What a release decided.
    struct Release {
        /// The command granted the section, to be started by the releaser after unlocking.
        var next: Handle?
        /// The kind of `next`.
        var nextKind: CommandKind?
        /// The released holder, when the machine kept a record of it (its task may be dropped).
        var ended: Handle?
        /// The container is gone and nothing waits: free the value now.
        var freeValue = false
        /// A waiter raised the released holder's urgency during its hold: the releasing thread
        /// ends the boost it may have been given (see ``Urgency``).
        var endBoost = false
        /// Parked waiters remain: `next`, the new holder, inherits this urgency (the releaser raises
        /// it before starting it).
        var nextUrgency: Urgency?
    }

    /// What ``cancelAll()`` decided.
    struct CancelAll {
        /// Commands that left the queue: resume each with "cancelled", and cancel its task if it
        /// has one.
        var left: [Handle] = []
        /// The holder, if its task must be cancelled now.
        var holder: Handle?
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

    /// What to do next in a manual-completion command.
    enum ManualStep {
        /// Both parties have arrived: the caller releases the section now.
        case release
        /// The closure returned first: wait until the completion arrives.
        case waitForCompletion
        /// The completion arrived after the closure returned: finish the command held by this
        /// waiter (wake its blocked thread, or release and deliver its dispatch completion).
        case finish(Handle)
        /// Nothing to do (the closure is still running; it will see the completion).
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

        private func flag(_ bit: UInt8) -> Bool { flags & (1 << bit) != 0 }

        private mutating func setFlag(_ bit: UInt8, _ value: Bool) {
            if value { flags |= 1 << bit } else { flags &= ~(1 << bit) }
        }
    }

    private var heap = CommandHeap()
    private var records: [Record] = []
    private var freeSlots: [UInt32] = []
    private var sequence: UInt64 = 0
    /// The slot of the holder's record, when the machine tracks the holder.
    private var holderSlot: UInt32?
    /// Heap entries whose command left the queue.
    private var deadEntries = 0
    /// Waiting blocking commands whose threads run on dispatch queues, by slot: the identities of
    /// those queues. A dispatched command granted for one of them is handed to that thread.
    private var helpers: [UInt32: [Int]] = [:]

    /// Commands waiting for their turn.
    private(set) var waitingCount = 0
    /// The container was released.
    private(set) var isClosed = false
    /// The value was freed (or the machine guards no value and was closed).
    private(set) var isValueFreed = false
    /// Manual completions released without being called.
    private(set) var droppedCompletions = 0
    /// When the holder got the section (`holderSinceIsExact`), or when the first command began to
    /// wait for it, on the clock the engine passes in as `now`; 0 when unknown. Kept only while
    /// `slowRelease` is set: a holder that may release on the idle path could end unseen.
    private(set) var holderSince: UInt64 = 0
    private(set) var holderSinceIsExact = false
    /// The newest discardable operation (a ``CommandQueue`` policy) that has not begun, if any.
    private var discardable: Ticket?
    /// Under a bounded-overtaking policy (``CommandFairness``), how many commands that arrived after
    /// a waiting one may be granted the section before it; `nil` for strict priority.
    let maxOvertakes: Int?
    /// The waiting commands in arrival order, under a bounded-overtaking policy only (commands that
    /// left or were granted are dropped when they reach the front).
    private var arrivals: [Arrival] = []
    private var arrivalsStart = 0
    /// An upper bound of how many commands that arrived after the oldest waiting command have been
    /// granted the section while it waited: it is granted next once this reaches `maxOvertakes`.
    private(set) var oldestOvertakes = 0
    /// The urgencies of parked waiters, by slot (a side table: most waiting commands never park).
    private var urgencies: [UInt32: Urgency] = [:]
    /// The urgency the current holder was asked to inherit during this hold (the highest of the
    /// parked waiters'), so that a waiter that asks for no more asks nothing.
    private(set) var holdUrgency = Urgency.none
    /// Whether a boost may have been applied to the current holder: its release (or the end of its
    /// closure) must end it.
    private(set) var isHoldBoosted = false

    /// A command in ``arrivals``.
    private struct Arrival {
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
        now: UInt64 = 0
    ) -> (Admission, word: Int) {
        if isClosed { return (.refused(.valueContainerDeinited), observed) }
        // mutant(double-grant): guard EngineWord.isHeld(observed), waitingCount > 0 else {
        guard EngineWord.isHeld(observed) else {
            assert(waitingCount == 0 && holderSlot == nil, "a free section with waiters or a holder record")
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
        let ticket = allocate(waiter, kind: kind, state: .waiting)
        records[Int(ticket.slot)].taskUnattached = kind == .operation
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
    mutating func release(observed: Int, now: UInt64 = 0) -> (Release, word: Int) {
        assert(EngineWord.isHeld(observed), "release of a free section")
        var release = Release()
        if let slot = holderSlot {
            holderSlot = nil
            release.ended = records[Int(slot)].handle
            end(slot)
        }
        let closedBit = observed & EngineWord.closed
        (holderSince, holderSinceIsExact) = (0, false)
        release.endBoost = isHoldBoosted
        (holdUrgency, isHoldBoosted) = (.none, false)
        guard let (slot, kind) = popNext() else {
            // mutant(value-outlives-container): if isClosed && !isValueFreed && false {
            if isClosed && !isValueFreed {
                isValueFreed = true
                release.freeValue = true
            }
            return (release, closedBit)
        }
        release.next = records[Int(slot)].handle
        release.nextKind = kind
        if !urgencies.isEmpty {
            urgencies[slot] = nil
            // The waiters still parked are now waiting for `next`: it inherits their urgency.
            let inherited = urgencies.values.reduce(Urgency.none) { $0.merged($1) }
            if !inherited.isNone {
                (holdUrgency, isHoldBoosted) = (inherited, true)
                release.nextUrgency = inherited
            }
        }
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
        return (release, word)
    }

    /// The command to grant next: the first in the waiting order, unless a bounded-overtaking policy
    /// says the oldest waiting command has been overtaken enough.
    private mutating func popNext() -> (slot: UInt32, kind: CommandKind)? {
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
    private mutating func oldestWaiting() -> Arrival? {
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
    private mutating func dropOldest() {
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
    private mutating func popWaiting() -> (slot: UInt32, kind: CommandKind)? {
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

    /// A waiting command leaves the queue (its deadline passed, or its task was cancelled).
    /// - Returns: its waiter if it was still waiting (it never runs now), or `nil` if its turn came
    ///   first (it holds the section, or is about to) or it already left.
    /// - Complexity: O(1) amortized: the heap entry is dropped when it surfaces, or in one O(n)
    ///   sweep once such entries outnumber the live ones.
    mutating func leave(_ ticket: Ticket) -> Handle? {
        guard isCurrent(ticket), records[Int(ticket.slot)].state == .waiting else { return nil }
        let waiter = markLeft(ticket.slot)
        sweepIfMostlyDead()
        return waiter
    }

    /// Whether the command is still waiting for its turn.
    func isWaiting(_ ticket: Ticket) -> Bool {
        isCurrent(ticket) && records[Int(ticket.slot)].state == .waiting
    }

    // MARK: Priority inheritance

    /// The waiting command `ticket` is about to park its thread or suspend its task, which runs at
    /// `urgency`: while it waits, the holder must run at least that urgently.
    /// - Returns: the urgency the holder must be raised to now, or `nil` if it already inherits at
    ///   least that much, or the command no longer waits.
    mutating func park(_ ticket: Ticket, urgency: Urgency) -> Urgency? {
        guard !urgency.isNone, isWaiting(ticket) else { return nil }
        urgencies[ticket.slot] = (urgencies[ticket.slot] ?? .none).merged(urgency)
        let raised = holdUrgency.merged(urgency)
        guard raised != holdUrgency else { return nil }
        holdUrgency = raised
        return raised
    }

    /// The engine is about to raise the current holder on behalf of the waiting command
    /// `ticket`: allowed only while that command still waits, so the holder cannot change without
    /// a release that sees ``isHoldBoosted`` and ends the boost.
    /// - Returns: whether to raise the holder.
    mutating func beginBoost(for ticket: Ticket) -> Bool {
        // mutant(boost-outlives-hold): guard isWaiting(ticket) || true else { return false }
        guard isWaiting(ticket) else { return false }
        isHoldBoosted = true
        return true
    }

    // MARK: Helpers

    /// The waiting command `ticket` runs on these dispatch queues: dispatched commands granted for
    /// them while it waits go to it (see ``helper(forQueue:)``).
    mutating func registerHelper(_ ticket: Ticket, queues: [Int]) {
        guard isWaiting(ticket) else { return }
        helpers[ticket.slot] = queues
    }

    /// Whether any waiting command helps with dispatched commands.
    var hasHelpers: Bool { !helpers.isEmpty }

    /// The waiting command that runs on the queue `queue`, if any: it runs a dispatched command
    /// granted for that queue, which could not run its block while that command waits.
    func helper(forQueue queue: Int) -> Handle? {
        guard queue != 0 else { return nil }
        for (slot, queues) in helpers where queues.contains(queue) && records[Int(slot)].state == .waiting {
            return records[Int(slot)].handle
        }
        return nil
    }

    private mutating func markLeft(_ slot: UInt32) -> Handle? {
        if !urgencies.isEmpty { urgencies[slot] = nil }
        let waiter = records[Int(slot)].handle
        records[Int(slot)].state = .left
        records[Int(slot)].handle = nil
        if !helpers.isEmpty { helpers[slot] = nil }
        waitingCount -= 1
        deadEntries += 1
        return waiter
    }

    private mutating func sweepIfMostlyDead() {
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

    // MARK: Discardable operations

    /// An operation of a ``CommandQueue`` asks for the section. Before it takes its place, the
    /// discardable operation that has not begun, if any, is discarded: a waiting one leaves the
    /// queue (its waiter is returned, to be resumed with "cancelled"); one that was granted but has
    /// not begun is marked, and ``beginDiscardable(_:)`` then refuses it. Both happen in this one
    /// transition, so "enqueued later" and "discarded" are the same instant.
    /// - Parameter isDiscardable: the new operation is itself discardable: it is discarded in turn
    ///   if another operation is enqueued before it begins.
    mutating func enqueueOperation(
        _ waiter: Handle,
        priority: CommandPriority,
        discardable isDiscardable: Bool,
        observed: Int,
        now: UInt64 = 0
    ) -> (Admission, word: Int, discarded: Handle?) {
        var discarded: Handle?
        if let pending = discardable {
            discardable = nil
            if isCurrent(pending) {
                switch records[Int(pending.slot)].state {
                case .waiting:
                    discarded = markLeft(pending.slot)
                    sweepIfMostlyDead()
                case .holding:
                    // mutant(discard-forgets-granted): break
                    records[Int(pending.slot)].discarded = true
                case .left, .ended, .free:
                    break
                }
            }
        }
        let (admission, word) = enqueue(
            waiter, kind: .operation, priority: priority, reentrant: false, observed: observed, now: now)
        // mutant(discard-standard): if true {
        if isDiscardable {
            switch admission {
            case .granted(let ticket?), .queued(let ticket): discardable = ticket
            case .granted(nil), .refused: break
            }
        }
        return (admission, word, discarded)
    }

    /// A discardable operation that holds the section is about to begin. It no longer counts as
    /// waiting: operations enqueued from now on leave it alone.
    /// - Returns: `false` if it was discarded after it was granted: it must not begin, and
    ///   releases the section instead.
    mutating func beginDiscardable(_ ticket: Ticket) -> Bool {
        if discardable == ticket { discardable = nil }
        return !(isCurrent(ticket) && records[Int(ticket.slot)].discarded)
    }

    /// The newest discardable operation that has not begun, if any.
    var pendingDiscardable: Ticket? { discardable }

    // MARK: Operations and cancelAll

    /// Every waiting command leaves the queue, and the holder's task is cancelled (now, or as soon
    /// as it is attached). All in one transition, so the holder's release cannot hand the section
    /// to work that was meant to be cancelled.
    mutating func cancelAll() -> CancelAll {
        var result = CancelAll()
        while let entry = heap.popFirst() {
            let slot = entry.slot
            records[Int(slot)].inHeap = false
            if records[Int(slot)].state == .waiting {
                waitingCount -= 1
                if !urgencies.isEmpty { urgencies[slot] = nil }
                if let waiter = records[Int(slot)].handle { result.left.append(waiter) }
                records[Int(slot)].handle = nil
                records[Int(slot)].state = .left
                records[Int(slot)].cancelRequested = true
            } else {
                deadEntries -= 1
            }
            freeIfUnused(slot)
        }
        assert(deadEntries == 0 && waitingCount == 0)
        (arrivals, arrivalsStart, oldestOvertakes) = ([], 0, 0)
        if let slot = holderSlot, records[Int(slot)].kind == .operation {
            if records[Int(slot)].hasTask {
                result.holder = records[Int(slot)].handle
            } else {
                records[Int(slot)].cancelRequested = true
            }
        }
        return result
    }

    /// The task that runs an operation exists now (it is created after the operation took its
    /// place, and may even have run to the end already).
    mutating func attach(_ ticket: Ticket) -> Attachment {
        guard isCurrent(ticket), records[Int(ticket.slot)].taskUnattached else { return .drop }
        let slot = Int(ticket.slot)
        records[slot].taskUnattached = false
        switch records[slot].state {
        case .waiting, .holding:
            if records[slot].cancelRequested { return .cancelNow }
            records[slot].hasTask = true
            return .keep
        case .left, .ended, .free:
            let cancel = records[slot].cancelRequested
            freeIfUnused(ticket.slot)
            return cancel ? .cancelNow : .drop
        }
    }

    // MARK: Manual completion

    /// The holder starts a manual-completion command: the machine keeps a record of it until both
    /// its closure has returned and its completion arrived. The holder's release then goes
    /// through the lock.
    /// - Parameter observed: the word (the caller holds the section).
    mutating func beginManual(
        _ waiter: Handle,
        kind: CommandKind,
        observed: Int,
        now: UInt64 = 0
    ) -> (Ticket, word: Int) {
        assert(EngineWord.isHeld(observed) && holderSlot == nil, "manual completion without a plain holder")
        let ticket = allocate(waiter, kind: kind, state: .holding)
        records[Int(ticket.slot)].manual = .running
        holderSlot = ticket.slot
        if observed & EngineWord.slowRelease == 0 { (holderSince, holderSinceIsExact) = (now, false) }
        return (ticket, observed | EngineWord.slowRelease)
    }

    /// The closure of a manual-completion command returned.
    mutating func manualClosureReturned(_ ticket: Ticket) -> ManualStep {
        guard isCurrent(ticket) else { return .none }
        switch records[Int(ticket.slot)].manual {
        case .running:
            records[Int(ticket.slot)].manual = .closureReturned
            return .waitForCompletion
        case .completionArrived:
            return .release
        case .notManual, .closureReturned:
            return .none
        }
    }

    /// The completion of a manual-completion command was called, or dropped uncalled. Arrives once
    /// per command (the completion closure lets only its first call through).
    mutating func manualCompletionArrived(_ ticket: Ticket, dropped: Bool) -> ManualStep {
        guard isCurrent(ticket) else { return .none }
        if dropped { droppedCompletions += 1 }
        switch records[Int(ticket.slot)].manual {
        case .running:
            records[Int(ticket.slot)].manual = .completionArrived
            return .none
        case .closureReturned:
            records[Int(ticket.slot)].manual = .completionArrived
            guard let waiter = records[Int(ticket.slot)].handle else { return .none }
            return .finish(waiter)
        case .notManual, .completionArrived:
            return .none
        }
    }

    // MARK: Container release

    /// The container was released: refuse every new command, and free the value as soon as nothing
    /// holds or waits for it.
    /// - Parameter observed: the word before the engine set `closed` on it.
    /// - Returns: whether to free the value now, and the word to store.
    mutating func close(observed: Int) -> (freeValue: Bool, word: Int) {
        guard !isClosed else { return (false, observed | EngineWord.closed) }
        isClosed = true
        if EngineWord.isHeld(observed) { return (false, observed | EngineWord.closed) }
        assert(waitingCount == 0)
        isValueFreed = true
        return (true, EngineWord.closed)
    }

    // MARK: Diagnostics

    /// The kind of the tracked holder, if the machine tracks one.
    var trackedHolderKind: CommandKind? {
        holderSlot.map { records[Int($0)].kind }
    }

    /// Whether the tracked holder waits for its manual completion.
    var holderAwaitsCompletion: Bool {
        guard let slot = holderSlot else { return false }
        let phase = records[Int(slot)].manual
        return phase == .running || phase == .closureReturned
    }

    /// The ticket of the holder's record, if the machine tracks the holder.
    var trackedHolder: Ticket? {
        holderSlot.map { Ticket(slot: $0, generation: records[Int($0)].generation) }
    }

    /// What the machine knows of one command, for the interleaving explorer and diagnostics.
    struct Summary: Hashable {
        var state: RecordState
        var kind: CommandKind
        var manual: ManualPhase
        var taskUnattached: Bool
        var hasTask: Bool
        var inHeap: Bool
        var cancelRequested: Bool
        var discarded: Bool
    }

    /// What the machine knows of the command with `ticket`, or `nil` once its record is gone.
    func summary(of ticket: Ticket) -> Summary? {
        guard isCurrent(ticket) else { return nil }
        let record = records[Int(ticket.slot)]
        return Summary(
            state: record.state, kind: record.kind, manual: record.manual, taskUnattached: record.taskUnattached,
            hasTask: record.hasTask, inHeap: record.inHeap, cancelRequested: record.cancelRequested,
            discarded: record.discarded)
    }

    /// The waiting commands in the order they will get the section, with their priorities.
    /// - Complexity: O(n log n)
    func waitingInOrder() -> [(waiter: Handle, priority: CommandPriority, kind: CommandKind)] {
        heap.unordered.sorted { $0.key < $1.key }.compactMap { entry in
            let record = records[Int(entry.slot)]
            guard record.state == .waiting, let handle = record.handle else { return nil }
            return (handle, CommandHeap.priority(of: entry.key), record.kind)
        }
    }

    /// How many commands wait, per priority.
    /// - Complexity: O(n)
    func waitingCountsByPriority() -> [CommandPriority: Int] {
        var counts: [CommandPriority: Int] = [:]
        for entry in heap.unordered where records[Int(entry.slot)].state == .waiting {
            counts[CommandHeap.priority(of: entry.key), default: 0] += 1
        }
        return counts
    }

    /// Checks the machine's bookkeeping against itself and the word; traps on a violation.
    /// - Complexity: O(n)
    func checkInvariants(word: Int) {
        if let violation = invariantViolation(word: word) { preconditionFailure(violation) }
    }

    /// What is wrong with the machine's bookkeeping, or with the word it left, if anything.
    /// - Complexity: O(n)
    func invariantViolation(word: Int) -> String? {
        heap.checkInvariants()
        let waitingInHeap = heap.unordered.filter { records[Int($0.slot)].state == .waiting }.count
        if waitingInHeap != waitingCount { return "waiting count \(waitingCount) but \(waitingInHeap) in the heap" }
        if heap.count - waitingInHeap != deadEntries { return "dead entry count is off" }
        if !EngineWord.isHeld(word) {
            if waitingCount != 0 { return "commands wait while the section is free" }
            if holderSlot != nil { return "a holder record while the section is free" }
        }
        if (waitingCount > 0 || holderSlot != nil) && word & EngineWord.slowRelease == 0 {
            return "the holder could release without the lock while the machine needs it to"
        }
        if (word & EngineWord.closed != 0) != isClosed { return "closed bit and state disagree" }
        if isValueFreed && (EngineWord.isHeld(word) || waitingCount > 0) { return "value freed while in use" }
        if urgencies.keys.contains(where: { records[Int($0)].state != .waiting }) {
            return "an urgency kept for a command that no longer waits"
        }
        if !EngineWord.isHeld(word) && (isHoldBoosted || !holdUrgency.isNone) { return "a boost outlived its hold" }
        if maxOvertakes != nil {
            let live = arrivals[arrivalsStart...].filter { isWaiting($0.ticket) }.count
            if live != waitingCount { return "\(waitingCount) commands wait but \(live) are in the arrival order" }
        }
        return nil
    }

    // MARK: Records

    private func isCurrent(_ ticket: Ticket) -> Bool {
        Int(ticket.slot) < records.count && records[Int(ticket.slot)].generation == ticket.generation
            && records[Int(ticket.slot)].state != .free
    }

    private mutating func allocate(_ handle: Handle, kind: CommandKind, state: RecordState) -> Ticket {
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
    private mutating func end(_ slot: UInt32) {
        records[Int(slot)].state = .ended
        records[Int(slot)].handle = nil
        freeIfUnused(slot)
    }

    /// Frees the record of a command that left or ended once neither the heap nor an unattached
    /// task can still refer to it.
    private mutating func freeIfUnused(_ slot: UInt32) {
        let record = records[Int(slot)]
        guard record.state == .left || record.state == .ended, !record.inHeap, !record.taskUnattached else { return }
        free(slot)
    }

    private mutating func free(_ slot: UInt32) {
        if !helpers.isEmpty { helpers[slot] = nil }
        records[Int(slot)].state = .free
        records[Int(slot)].handle = nil
        freeSlots.append(slot)
    }
}
