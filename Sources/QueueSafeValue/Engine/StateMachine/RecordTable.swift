// The records and the waiting order: a typed part of `EngineStateMachine`.

extension EngineStateMachine {
    /// The kind-specific part of a record, in one byte (its payloads' spare bits hold the case), so a
    /// record stays two words (`MemoryLayoutTests`).
    enum Role: Hashable {
        /// Holds alone, with its manual completion's phase.
        case exclusive(ManualPhase)
        /// A ``CommandQueue`` operation of a queue of width 1.
        case operation(TaskAttachment)
        /// An operation holding one slot of a wider queue, as a shared read does.
        case sharedOperation(TaskAttachment)
        case reader(ManualPhase)
        /// A dispatched read whose closure was started (by its block or a helper): nobody else may.
        case startedReader(ManualPhase)
    }

    /// Where an operation's task stands.
    enum TaskAttachment: UInt8, Hashable {
        /// The record outlives the command until then, so ``attach(_:)`` can tell what happened.
        case unattached
        /// ``cancelAll()`` reached it before: it is cancelled when attached.
        case unattachedCancelRequested
        case attached
        /// Nothing more to do.
        case done
    }

    /// With its heap entry, all a waiting command costs the machine (`MemoryLayoutTests`).
    struct Record {
        var generation: UInt32 = 0
        var state: RecordState = .free
        var kind: CommandKind = .blocking
        var flags: Flags = []
        var role = Role.exclusive(.notManual)
        var handle: Handle?

        struct Flags: OptionSet, Hashable {
            let rawValue: UInt8
            static let inHeap = Flags(rawValue: 1)
            /// A deadline, or an operation's task that may be cancelled: a grant asks its waiter first.
            static let mayGiveUp = Flags(rawValue: 2)
            /// An operation with a handle whose body has not begun: a cancellation gives its turn back.
            static let unbegun = Flags(rawValue: 4)
        }

        var inHeap: Bool {
            get { flags.contains(.inHeap) }
            set { if newValue { flags.insert(.inHeap) } else { flags.remove(.inHeap) } }
        }

        var isShared: Bool {
            switch role {
            case .reader, .startedReader, .sharedOperation: true
            case .exclusive, .operation: false
            }
        }

        /// `nil` unless it is an operation.
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

        var taskUnattached: Bool {
            attachment == .unattached || attachment == .unattachedCancelRequested
        }

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

/// A record per command that waits, holds tracked, or left but may still be named (by its heap entry
/// or unattached task); the heap; the helpers. Its methods keep the counts in step.
struct RecordTable {
    typealias Handle = Waiter
    typealias Machine = EngineStateMachine
    typealias Record = Machine.Record
    typealias Ticket = Machine.Ticket

    private var records: [Record] = []
    private var freeSlots: [UInt32] = []
    private var heap = CommandHeap()
    /// When the command ``popWaiting()`` returned last began to wait, and its priority.
    private(set) var lastPoppedArrival: UInt32 = 0
    private(set) var lastPoppedPriority = CommandPriority.medium

    /// A command was granted without ``popWaiting()``: ``lastPoppedArrival`` is not its.
    mutating func forgetPoppedArrival() { lastPoppedArrival = 0 }
    /// The arrival number the next waiting command gets.
    private(set) var sequence: UInt64 = 0
    private(set) var waitingCount = 0
    /// Waiting dispatch commands and operations: their issuer went on, and its next command must
    /// not barge past them.
    private(set) var waitingDetachedCount = 0
    /// While 0, a grant asks no waiter whether it gave up.
    private(set) var waitingMayGiveUp = 0
    /// Entries whose command left (or was granted ahead of the order).
    private var deadEntries = 0
    /// The queues each waiting blocking command's thread runs on, by slot: it runs a dispatched
    /// command granted for one of them.
    private var helpers: [UInt32: [Int]] = [:]

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

    func isWaiting(_ ticket: Ticket) -> Bool {
        isCurrent(ticket) && records[Int(ticket.slot)].state == .waiting
    }

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

    mutating func end(_ slot: UInt32) {
        records[Int(slot)].state = .ended
        records[Int(slot)].handle = nil
        freeIfUnused(slot)
    }

    /// Frees a record that left or ended once neither its heap entry nor an unattached task names it.
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

    /// The record `slot`, just allocated as waiting, takes its place; returns its arrival number.
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

    /// The waiting command in `slot` takes the place of a command of `priority` arriving now; its
    /// old entry goes at once, so it never surfaces there.
    /// - Complexity: O(n)
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

    /// A queue's width crossed 1: its waiting operations become shared, or exclusive.
    mutating func convertWaitingOperations(shared: Bool) {
        for index in records.indices where records[index].state == .waiting && records[index].kind == .operation {
            guard let attachment = records[index].attachment else { continue }
            records[index].role = shared ? .sharedOperation(attachment) : .operation(attachment)
        }
    }

    /// Pops the next command that still waits (dropping dead entries); the caller grants it.
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

    /// The spinning waiters' hint (`CommandEngine.Word.head`); 0 if none.
    var firstWaitingAddress: Int {
        guard let entry = heap.first, let handle = records[Int(entry.slot)].handle else { return 0 }
        return Int(bitPattern: UInt(bitPattern: ObjectIdentifier(handle)))
    }

    /// The first live entry, dropping the dead ones before it.
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

    /// The waiting command in `slot` left (its entry stays until it surfaces); returns its handle.
    mutating func markLeft(_ slot: UInt32) -> Handle? {
        stopsWaiting(slot)
        deadEntries += 1
        return markLeftPopped(slot)
    }

    /// ``markLeft(_:)`` for a command ``popWaiting()`` popped (`cancelAll()`).
    mutating func markLeftPopped(_ slot: UInt32) -> Handle? {
        let waiter = records[Int(slot)].handle
        records[Int(slot)].state = .left
        records[Int(slot)].handle = nil
        if !helpers.isEmpty { helpers[slot] = nil }
        return waiter
    }

    /// Granted ahead of the order (the overtaking bound): its entry is dead; its record stays,
    /// ended, with its handle for the grant, until the entry surfaces.
    mutating func grantAhead(_ slot: UInt32) {
        stopsWaiting(slot)
        records[Int(slot)].state = .ended
        deadEntries += 1
    }

    @inline(__always)
    private mutating func stopsWaiting(_ slot: UInt32) {
        waitingCount -= 1
        if records[Int(slot)].kind.isDetached { waitingDetachedCount -= 1 }
        if records[Int(slot)].flags.contains(.mayGiveUp) {
            records[Int(slot)].flags.remove(.mayGiveUp)
            waitingMayGiveUp -= 1
        }
    }

    /// One O(n) sweep once dead entries outnumber the live ones.
    mutating func sweepIfMostlyDead() {
        guard deadEntries > 32 && deadEntries > heap.count / 2 else { return }
        var swept = heap
        heap = CommandHeap()  // one owner while sweeping, so the sweep does not copy it
        swept.removeAll { entry in
            guard records[Int(entry.slot)].state != .waiting else { return false }
            records[Int(entry.slot)].inHeap = false
            freeIfUnused(entry.slot)
            return true
        }
        heap = swept
        deadEntries = 0
    }

    // MARK: Helpers

    mutating func registerHelper(_ ticket: Ticket, queues: [Int]) {
        guard isWaiting(ticket) else { return }
        helpers[ticket.slot] = queues
    }

    var hasHelpers: Bool { !helpers.isEmpty }

    /// The waiting command whose thread runs on `queue`: that queue cannot run a block meanwhile.
    func helper(forQueue queue: Int) -> Handle? {
        guard queue != 0 else { return nil }
        for (slot, queues) in helpers where queues.contains(queue) && records[Int(slot)].state == .waiting {
            return records[Int(slot)].handle
        }
        return nil
    }

    // MARK: Views

    /// In no order.
    var waitingEntries: [CommandHeap.Entry] {
        heap.unordered.filter { records[Int($0.slot)].state == .waiting }
    }

    /// The heap is a heap and its counts match the records; the free list names the free records;
    /// each role fits its kind; helpers wait.
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
