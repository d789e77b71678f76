// The machine's records and the waiting order over them: one typed part of `EngineStateMachine`,
// whose fields only this file touches.

extension EngineStateMachine {
    /// What a record knows beyond its place in the queue: the part that only some kinds of command
    /// use, as that kind's payload. One byte (each payload is a small enum, whose spare bits hold
    /// the case), so a record stays two words (`MemoryLayoutTests` checks both).
    enum Role: Hashable {
        /// A blocking, awaiting or dispatched command that holds alone, with the phase of its manual
        /// completion (``ManualPhase/notManual`` for most).
        case exclusive(ManualPhase)
        /// A ``CommandQueue`` operation that holds alone (a queue of width 1), with where its task
        /// stands.
        case operation(TaskAttachment)
        /// A ``CommandQueue`` operation that holds one of the queue's slots beside others (a queue
        /// of width above 1, see `EngineStateMachine+Width.swift`): held like a shared read, with
        /// where its task stands.
        case sharedOperation(TaskAttachment)
        /// A shared read whose closure has not been started, with its manual completion's phase.
        case reader(ManualPhase)
        /// A granted dispatched shared read whose closure has been started (by its block or by a
        /// helper): nobody else may start it.
        case startedReader(ManualPhase)
    }

    /// Where the task of an operation stands.
    enum TaskAttachment: UInt8, Hashable {
        /// Not attached yet: the record outlives the command until it is, so ``attach(_:)`` can tell
        /// what happened.
        case unattached
        /// Not attached yet, and ``cancelAll()`` reached it: it is cancelled when attached.
        case unattachedCancelRequested
        /// Attached: ``cancelAll()`` cancels it through the record's handle.
        case attached
        /// Attached and cancelled at once, or attached after the operation ended: nothing more to do.
        case done
    }

    /// What the machine knows of one command: with its heap entry, all a waiting command costs the
    /// machine, which `MemoryLayoutTests.aWaitingCommandCostsTheMachine32Bytes` keeps small.
    struct Record {
        var generation: UInt32 = 0
        var state: RecordState = .free
        var kind: CommandKind = .blocking
        /// Its entry is (still) in the heap; it may give up before its turn; it has not begun. One
        /// byte for the three (see ``Flags``).
        var flags: Flags = []
        var role = Role.exclusive(.notManual)
        var handle: Handle?

        /// A record's yes-or-no facts, in the one byte a record has for them.
        struct Flags: OptionSet, Hashable {
            let rawValue: UInt8
            /// Its entry is (still) in the heap.
            static let inHeap = Flags(rawValue: 1)
            /// While it waits, it may give up before its turn (a deadline, or the cancelled task of
            /// an operation): a grant asks its waiter first (``Waiter/givesUp(at:)``).
            static let mayGiveUp = Flags(rawValue: 2)
            /// An operation with a handle, granted or waiting, whose body has not begun: until it
            /// begins (``EngineStateMachine/beginOperation(_:)``), a cancellation gives its turn
            /// back (``EngineStateMachine/cancelOperation(_:word:now:)``).
            static let unbegun = Flags(rawValue: 4)
        }

        /// Its entry is (still) in the heap.
        var inHeap: Bool {
            get { flags.contains(.inHeap) }
            set { if newValue { flags.insert(.inHeap) } else { flags.remove(.inHeap) } }
        }

        init() {}

        init(generation: UInt32, state: RecordState, kind: CommandKind, role: Role, handle: Handle) {
            self.generation = generation
            self.state = state
            self.kind = kind
            self.role = role
            self.handle = handle
        }

        /// A shared read: it holds the section together with the other shared reads granted with
        /// it (see `EngineStateMachine+Shared.swift`).
        var isShared: Bool {
            switch role {
            case .reader, .startedReader, .sharedOperation: true
            case .exclusive, .operation: false
            }
        }

        /// Where the task of an operation stands; `nil` for other commands.
        var attachment: TaskAttachment? {
            get {
                switch role {
                case .operation(let attachment), .sharedOperation(let attachment): attachment
                case .exclusive, .reader, .startedReader: nil
                }
            }
            set {
                guard let newValue else { return }
                switch role {
                case .operation: role = .operation(newValue)
                case .sharedOperation: role = .sharedOperation(newValue)
                case .exclusive, .reader, .startedReader: preconditionFailure("only an operation has a task")
                }
            }
        }

        /// An operation whose task has not been attached yet.
        var taskUnattached: Bool {
            attachment == .unattached || attachment == .unattachedCancelRequested
        }

        /// The phase of its manual completion (``ManualPhase/notManual`` for an operation).
        var manual: ManualPhase {
            get {
                switch role {
                case .exclusive(let phase), .reader(let phase), .startedReader(let phase): phase
                case .operation, .sharedOperation: .notManual
                }
            }
            set {
                switch role {
                case .exclusive: role = .exclusive(newValue)
                case .reader: role = .reader(newValue)
                case .startedReader: role = .startedReader(newValue)
                case .operation, .sharedOperation: preconditionFailure("an operation has no manual completion")
                }
            }
        }
    }
}

/// The machine's records and the waiting order over them: a record per command that waits, holds
/// as a tracked holder or a shared read, or left but may still be named (by its heap entry or its
/// unattached task); the heap of the waiting commands' entries; and the helpers registered among
/// them. Its fields are private: the machine's transitions change them only through these methods,
/// which keep the counts in step.
///
/// Invariant (``violation()``): the heap is a heap; ``waitingCount`` is the number of its entries
/// whose record waits, and every other entry is counted dead; every record that waits is in the
/// heap; the free list names only free records, as many as there are; every record's role fits its
/// kind; every registered helper waits.
struct RecordTable {
    typealias Handle = Waiter
    typealias Machine = EngineStateMachine
    typealias Record = Machine.Record
    typealias Ticket = Machine.Ticket

    private var records: [Record] = []
    private var freeSlots: [UInt32] = []
    private var heap = CommandHeap()
    /// When the command ``popWaiting()`` returned last began to wait (``CommandHeap/Entry/arrivedAt``).
    private(set) var lastPoppedArrival: UInt32 = 0
    /// Its priority.
    private(set) var lastPoppedPriority = CommandPriority.medium

    /// A command was granted without ``popWaiting()``: ``lastPoppedArrival`` is not its.
    mutating func forgetPoppedArrival() { lastPoppedArrival = 0 }
    /// The arrival number the next waiting command gets.
    private(set) var sequence: UInt64 = 0
    /// Commands waiting for their turn.
    private(set) var waitingCount = 0
    /// Of those, the dispatch commands and ``CommandQueue`` operations: commands whose issuer went
    /// on after issuing them, so that the issuer's next command must not pass them (the
    /// eventually fair mode asks, see ``EngineStateMachine/mayBarge(priority:now:)``).
    private(set) var waitingDetachedCount = 0
    /// Of those, the commands that may give up before their turn (``Record/Flags/mayGiveUp``): while
    /// there are none, a grant asks no waiter whether it gave up.
    private(set) var waitingMayGiveUp = 0
    /// Heap entries whose command left the queue (or was granted ahead of the waiting order).
    private var deadEntries = 0
    /// Waiting blocking commands whose threads run on dispatch queues, by slot: the identities of
    /// those queues. A dispatched command granted for one of them is handed to that thread.
    private var helpers: [UInt32: [Int]] = [:]

    /// The record in `slot`.
    @inline(__always)
    subscript(slot: UInt32) -> Record {
        _read { yield records[Int(slot)] }
        _modify { yield &records[Int(slot)] }
    }

    // MARK: Records

    func isCurrent(_ ticket: Ticket) -> Bool {
        // Compared as `UInt`: `Int(ticket.slot)` traps where `Int` has 32 bits and the ticket is
        // `Ticket.none` (slot `UInt32.max`). Every slot below `records.count` fits an `Int`.
        UInt(ticket.slot) < UInt(records.count) && records[Int(ticket.slot)].generation == ticket.generation
            && records[Int(ticket.slot)].state != .free
    }

    /// Whether the command is still waiting for its turn.
    func isWaiting(_ ticket: Ticket) -> Bool {
        isCurrent(ticket) && records[Int(ticket.slot)].state == .waiting
    }

    /// The ticket of the record in `slot`.
    func ticket(of slot: UInt32) -> Ticket {
        Ticket(slot: slot, generation: records[Int(slot)].generation)
    }

    mutating func allocate(_ handle: Handle, kind: CommandKind, state: Machine.RecordState, role: Machine.Role)
        -> Ticket
    {
        let slot: UInt32
        if let reused = freeSlots.popLast() {
            slot = reused
        } else {
            slot = UInt32(records.count)
            records.append(Record())
        }
        let generation = records[Int(slot)].generation &+ 1
        records[Int(slot)] = Record(generation: generation, state: state, kind: kind, role: role, handle: handle)
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

    // MARK: The waiting order

    /// The record `slot`, just allocated as waiting, takes its place in the waiting order.
    /// - Returns: its arrival number.
    /// - Parameter now: the machine's clock, in nanoseconds (kept to the millisecond, for diagnostics).
    /// - Parameter mayGiveUp: it may give up before its turn (see ``Record/Flags/mayGiveUp``).
    mutating func enqueue(_ slot: UInt32, priority: CommandPriority, now: UInt64 = 0, mayGiveUp: Bool = false)
        -> UInt64
    {
        let arrival = sequence
        records[Int(slot)].inHeap = true
        if mayGiveUp {
            records[Int(slot)].flags.insert(.mayGiveUp)
            waitingMayGiveUp += 1
        }
        heap.insert(
            .init(
                key: CommandHeap.key(priority: priority, sequence: arrival), slot: slot,
                arrivedAt: UInt32(truncatingIfNeeded: now / 1_000_000)))
        sequence &+= 1
        waitingCount += 1
        if records[Int(slot)].kind.isDetached { waitingDetachedCount += 1 }
        return arrival
    }

    /// The waiting command in `slot` takes a new place: the one a command of `priority` arriving now
    /// would take (behind every command already waiting at that priority). Its old entry is
    /// removed from the heap at once, so it can never surface in its old place.
    /// - Complexity: O(n) in the number of heap entries.
    mutating func requeue(_ slot: UInt32, priority: CommandPriority) {
        assert(
            records[Int(slot)].state == .waiting && records[Int(slot)].inHeap, "requeue of a command that does not wait"
        )
        // mutant(reprioritized-keeps-place): let old: CommandHeap.Entry? = nil; return ()
        let old = heap.remove(slot: slot)
        heap.insert(
            .init(
                key: CommandHeap.key(priority: priority, sequence: sequence), slot: slot,
                arrivedAt: old?.arrivedAt ?? 0))
        sequence &+= 1
    }

    /// The waiting operations become shared (a queue's width went above 1) or exclusive (it went
    /// back to 1): see `EngineStateMachine+Width.swift`.
    mutating func convertWaitingOperations(shared: Bool) {
        for index in records.indices where records[index].state == .waiting && records[index].kind == .operation {
            guard let attachment = records[index].attachment else { continue }
            records[index].role = shared ? .sharedOperation(attachment) : .operation(attachment)
        }
    }

    /// Pops the next command that still waits, dropping entries of commands that left. Its record
    /// still says it waits: the caller grants it.
    mutating func popWaiting() -> (slot: UInt32, kind: CommandKind)? {
        while let entry = heap.popFirst() {
            records[Int(entry.slot)].inHeap = false
            if records[Int(entry.slot)].state == .waiting {
                stopsWaiting(entry.slot)
                lastPoppedArrival = entry.arrivedAt
                lastPoppedPriority = CommandHeap.priority(of: entry.key)
                return (entry.slot, records[Int(entry.slot)].kind)
            }
            deadEntries -= 1
            freeIfUnused(entry.slot)
        }
        return nil
    }

    /// Pops the heap's first entry, whether its command waits or not: ``CommandQueue``'s
    /// `cancelAll()` empties the queue with it. A waiting command's record still says it waits: the
    /// caller marks it left (or grants it) before the transition ends.
    mutating func popAny() -> (slot: UInt32, waited: Bool)? {
        guard let entry = heap.popFirst() else { return nil }
        records[Int(entry.slot)].inHeap = false
        if records[Int(entry.slot)].state == .waiting {
            stopsWaiting(entry.slot)
            return (entry.slot, true)
        }
        deadEntries -= 1
        return (entry.slot, false)
    }

    /// The address of the first heap entry's handle (0 if the heap is empty or that command left):
    /// the command the waiting order serves next, for the spinning waiters' hint (see
    /// `CommandEngine.Word.head`). Reads only; a left entry is not dropped here.
    var firstWaitingAddress: Int {
        guard let entry = heap.first, let handle = records[Int(entry.slot)].handle else { return 0 }
        return Int(bitPattern: UInt(bitPattern: ObjectIdentifier(handle)))
    }

    /// The heap's first entry of a command that still waits; drops the entries before it of
    /// commands that left.
    mutating func firstWaitingEntry() -> CommandHeap.Entry? {
        while let entry = heap.first {
            if records[Int(entry.slot)].state == .waiting { return entry }
            _ = heap.popFirst()
            records[Int(entry.slot)].inHeap = false
            deadEntries -= 1
            freeIfUnused(entry.slot)
        }
        return nil
    }

    /// The waiting command in `slot` left the queue (its heap entry stays until it surfaces).
    /// - Returns: its handle, which the record forgets.
    mutating func markLeft(_ slot: UInt32) -> Handle? {
        stopsWaiting(slot)
        deadEntries += 1
        return markLeftPopped(slot)
    }

    /// The command in `slot`, which ``popAny()`` popped while it waited, leaves the queue.
    /// - Returns: its handle, which the record forgets.
    mutating func markLeftPopped(_ slot: UInt32) -> Handle? {
        let waiter = records[Int(slot)].handle
        records[Int(slot)].state = .left
        records[Int(slot)].handle = nil
        if !helpers.isEmpty { helpers[slot] = nil }
        return waiter
    }

    /// The waiting command in `slot` is granted ahead of the waiting order (a bounded-overtaking
    /// policy): its heap entry is now dead, and dropped when it surfaces; its record stays until
    /// then, marked ended, with its handle for the grant.
    mutating func grantAhead(_ slot: UInt32) {
        stopsWaiting(slot)
        records[Int(slot)].state = .ended
        deadEntries += 1
    }

    /// The waiting command in `slot` stops waiting (granted, or it left): the counts follow.
    @inline(__always)
    private mutating func stopsWaiting(_ slot: UInt32) {
        waitingCount -= 1
        if records[Int(slot)].kind.isDetached { waitingDetachedCount -= 1 }
        if records[Int(slot)].flags.contains(.mayGiveUp) {
            records[Int(slot)].flags.remove(.mayGiveUp)
            waitingMayGiveUp -= 1
        }
    }

    /// Drops the dead entries in one O(n) sweep once they outnumber the live ones.
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

    // MARK: Views

    /// The heap's entries whose command waits, in no order.
    var waitingEntries: [CommandHeap.Entry] {
        heap.unordered.filter { records[Int($0.slot)].state == .waiting }
    }

    /// What is wrong with the table's bookkeeping, if anything.
    /// - Complexity: O(n)
    func violation() -> String? {
        heap.checkInvariants()
        var waitingInHeap = 0
        for entry in heap.unordered where records[Int(entry.slot)].state == .waiting { waitingInHeap += 1 }
        if waitingInHeap != waitingCount { return "waiting count \(waitingCount) but \(waitingInHeap) in the heap" }
        if heap.count - waitingInHeap != deadEntries { return "dead entry count is off" }
        var (waiting, free) = (0, 0)
        for record in records {
            switch record.state {
            case .waiting: waiting += 1
            case .free: free += 1
            case .holding, .left, .ended: break
            }
            guard record.state != .free else { continue }
            let roleFits: Bool
            switch record.role {
            case .operation, .sharedOperation: roleFits = record.kind == .operation
            case .exclusive, .reader: roleFits = record.kind != .operation
            case .startedReader: roleFits = record.kind == .dispatched
            }
            if !roleFits { return "a \(record.kind) command with the role \(record.role)" }
        }
        if waiting != waitingCount { return "a waiting command outside the heap" }
        let detached = records.filter { $0.state == .waiting && $0.kind.isDetached }.count
        let mayGiveUp = records.filter { $0.state == .waiting && $0.flags.contains(.mayGiveUp) }.count
        if mayGiveUp != waitingMayGiveUp { return "\(waitingMayGiveUp) waiting commands may give up, \(mayGiveUp) do" }
        if records.contains(where: { $0.state != .waiting && $0.flags.contains(.mayGiveUp) }) {
            return "a command that no longer waits may still give up"
        }
        if detached != waitingDetachedCount {
            return "\(waitingDetachedCount) waiting dispatch commands and operations counted, \(detached) wait"
        }
        if free != freeSlots.count || freeSlots.contains(where: { records[Int($0)].state != .free }) {
            return "the free list and the free records disagree"
        }
        if helpers.keys.contains(where: { records[Int($0)].state != .waiting }) {
            return "a helper that no longer waits"
        }
        return nil
    }
}
