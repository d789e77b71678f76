import Dispatch

// MARK: - DispatchedCommand

/// A command whose closures run on a `DispatchQueue`.
///
/// It takes its place in the engine at the moment of the call; only its execution is dispatched.
/// While it waits it is a record in the queue, not a blocked thread or a queued block. When granted
/// it is dispatched onto its queue; when it finishes there and the next granted command targets the
/// same queue, that command runs in the same block (up to ``batchLimit`` in a row), which saves a
/// dispatch per command when a queue drains a backlog.
// @unchecked Sendable: runs on one queue at a time; fields immutable
class DispatchedCommand<Value>: Waiter, @unchecked Sendable {
    enum Operation {
        /// `get(completion:)`: the closure is the critical section.
        case read(@Sendable (Result<Value, QueueSafeValueError>) -> Void)
        /// `get(manualCompletion:)`.
        case readManual(@Sendable (Result<Value, QueueSafeValueError>, @escaping CommandCompletionClosure) -> Void)
        /// `set(accessClosure:completion:)`.
        case access(@Sendable (inout Value) -> Void)
        /// `set(manualCompletion:completion:)`.
        case accessManual(@Sendable (inout Value, @escaping CommandCompletionClosure) -> Void)
        /// `map(_:completion:)`: computes inside the section, returns the delivery to run after it.
        case map(@Sendable (Result<Value, QueueSafeValueError>) -> @Sendable () -> Void)
        /// `read(_:)`: a shared read; the closure runs beside other shared reads.
        case sharedRead(@Sendable (Result<Value, QueueSafeValueError>) -> Void)
        /// `read(manualCompletion:)`.
        case sharedReadManual(
            @Sendable (Result<Value, QueueSafeValueError>, @escaping CommandCompletionClosure) -> Void)
    }

    /// How many granted commands for the same queue one dispatched block runs back to back.
    static var batchLimit: Int { 64 }

    // The fields are in this order so that the object fits the allocation the memory-layout test
    // `aDispatchedCommandIsOneAllocationOf96BytesAtMost` allows (the benchmark's memory per
    // pending command): `Waiter` ends at a word boundary (its flags and call site), the operation
    // comes first, the flag and the queue's identity share the word of the operation's tag byte.
    // Put anywhere else, they spill into words of their own and every command takes the next
    // larger allocation.

    private let operation: Operation
    /// A shared read (see `CommandEngine+Shared.swift`; always a ``DispatchedSharedRead``): it
    /// takes and gives back its share through the lock, by ``Waiter/readerTicket``, and is never
    /// published in the dispatched holder's slot nor run inline by a releasing block.
    private let isShared: Bool
    /// The queue's identity (see `QueueTag`): a waiter running on the queue compares it with its own.
    /// Given by the storage when the command arrives, before anyone else can see the command.
    /// 32 bits, to share a word (identities count queues tagged, one by one, from 1).
    private var queueID: Int32 = 0
    private let engine: ValueEngine<Value>
    private let queue: DispatchQueue
    private let completion: (@Sendable (Result<Value, QueueSafeValueError>) -> Void)?

    required init(
        engine: ValueEngine<Value>,
        queue: DispatchQueue,
        operation: Operation,
        completion: (@Sendable (Result<Value, QueueSafeValueError>) -> Void)?,
        shared: Bool = false
    ) {
        self.engine = engine
        self.queue = queue
        self.operation = operation
        self.completion = completion
        // Passed in, not read from `operation`: switching over the generic enum in unspecialized
        // code costs a metadata lookup per command (see `ValueEngine.dispatchedCommandType`).
        self.isShared = shared
    }

    /// Places the command in the queue now and arranges for it to run on `queue`.
    /// If the container is gone, the failure is delivered on `queue` and nothing else runs.
    static func submit(
        engine: ValueEngine<Value>,
        queue: DispatchQueue,
        priority: CommandPriority,
        site: CallSite,
        operation: Operation,
        completion: (@Sendable (Result<Value, QueueSafeValueError>) -> Void)?
    ) {
        let command = Self(engine: engine, queue: queue, operation: operation, completion: completion)
        command.keptSite = site.kept
        do {
            if try engine.admitDispatched(command, on: queue, priority: priority) { command.start() }
        } catch {
            SyncPoints.async(queue) { command.deliverFailure(error) }
        }
    }

    /// Places a shared read (`.sharedRead` or `.sharedReadManual`) in the queue now, or grants it
    /// its share at once, through the lock, and arranges for it to run on `queue`. If the container
    /// is gone, the failure is delivered on `queue`. Called on ``DispatchedSharedRead``, which
    /// keeps the ticket (see `ValueEngine.sharedReadCommandType`).
    static func submitShared(
        engine: ValueEngine<Value>,
        queue: DispatchQueue,
        priority: CommandPriority,
        site: CallSite,
        operation: Operation
    ) {
        let command = Self(engine: engine, queue: queue, operation: operation, completion: nil, shared: true)
        command.keptSite = site.kept
        // Tagged before it takes its place: see `CommandEngine.admitDispatched(_:on:priority:)`.
        command.queueID = Int32(truncatingIfNeeded: engine.queueIdentity(of: queue))
        switch engine.enqueue(command, kind: .dispatched, priority: priority, shared: true) {
        case .granted:
            command.start()
        case .queued:
            break
        case .refused(let error):
            SyncPoints.async(queue) { command.deliverFailure(error) }
        }
    }

    /// Runs a granted shared read on this thread (its block, or a helper running on its queue),
    /// listed as a reader party while its closure runs, and gives its share back.
    private func executeShared() {
        let ticket = readerTicket
        engine.enterReader(ticket, thread: currentThreadID(), task: 0)
        switch operation {
        case .sharedRead(let body):
            read(body)
            engine.exitReader(ticket)
            engine.releaseReader(ticket)
        case .sharedReadManual(let body):
            engine.beginReaderManual(ticket)
            let value = engine.pointer.pointee
            CompletionToken.withCompletion(engine: engine, ticket: ticket) { done in body(.success(value), done) }
            engine.exitReader(ticket)
            if case .release = engine.readerManualClosureReturned(ticket) {
                engine.releaseReader(ticket)
            } else {
                // Held until the completion arrives, by no thread: this one ends any boost it had.
                engine.endBoostOfCurrentThread()
            }
        case .read, .readManual, .access, .accessManual, .map:
            preconditionFailure("an exclusive command run as a shared read")
        }
    }

    override var targetQueue: DispatchQueue? { queue }

    override var targetQueueID: Int { Int(queueID) }

    override func adoptQueueID(_ identity: Int) {
        queueID = Int32(truncatingIfNeeded: identity)
    }

    /// Dispatches the block of the granted (and published) command. Until the block claims it, a
    /// blocking waiter that runs on `queue` may take it over (see
    /// ``CommandEngine/publishPendingDispatch(_:)``).
    override func start() {
        if isShared {
            SyncPoints.async(queue) {
                guard self.engine.claimReaderStart(self.readerTicket) else { return }  // a helper runs it
                self.executeShared()
            }
            return
        }
        SyncPoints.async(queue) {
            guard self.engine.claimPendingDispatch(self) else { return }  // taken over
            self.runBatch()
        }
    }

    /// Runs on a waiting thread that runs on `queue`: this command only; its completion is
    /// delivered in a block of its own, after the thread's current block (the waiter) ends.
    override func runOnHelper() {
        if isShared { return executeShared() }
        engine.ownerThread.storeRelaxed(currentThreadID())
        if let delivery = execute(inlineQueue: 0, deliverHere: false).delivery {
            let box = UncheckedSendable(delivery)
            SyncPoints.async(queue) { box.value() }
        }
    }

    /// Runs on `queue`: this command, then any granted successors for the same queue.
    ///
    /// A successor runs inline only after a command that delivers nothing once it released the
    /// value. A command with a completion (or a `map` delivery) starts its successor first and only
    /// then delivers: the delivery may wait for that successor (a blocking command on the same
    /// value, or work on another queue), and on a concurrent queue running the successor behind the
    /// delivery on this thread would deadlock where a plain dispatch would not.
    ///
    /// Whether a successor runs inline is the machine's decision (``EngineStateMachine/Starter``):
    /// the block offers its queue when it releases, while its budget lasts, and the machine takes
    /// the offer only for a successor on the same queue that no waiting thread must run.
    private func runBatch() {
        var command = self
        var budget = Self.batchLimit
        while true {
            budget -= 1
            let (next, delivery) = command.execute(inlineQueue: budget > 0 ? Int(queueID) : 0, deliverHere: true)
            if let delivery {
                delivery()
                return
            }
            // Run inline, unless a waiter took it over since its grant published it.
            guard let next, engine.claimPendingDispatch(next) else { return }
            command = next
        }
    }

    /// What runs after the command released the value: its completion or `map` delivery.
    private typealias Delivery = () -> Void

    /// Runs the command on its queue while it holds the section.
    /// - Parameter inlineQueue: this block's queue if it could run a granted successor inline; 0 if
    ///   not (it is not a batch, or its budget ran out). A command that delivers something never
    ///   offers: it starts its successor first and only then delivers, since the delivery may wait
    ///   for that successor (a blocking command on the same value, or work on another queue), and
    ///   on a concurrent queue running the successor behind the delivery on this thread would
    ///   deadlock where a plain dispatch would not.
    /// - Parameter deliverHere: the caller is the command's own block, which delivers right after
    ///   the release anyway: a plain `set`'s completion is then called here, with no closure
    ///   allocated to carry it (`nil, nil` is returned).
    /// - Returns: the successor the machine chose this block to run inline (`nil` if there is none,
    ///   it was started otherwise, or the release is left to a manual completion), and the delivery
    ///   to run after the release.
    private func execute(inlineQueue: Int, deliverHere: Bool) -> (next: DispatchedCommand?, delivery: Delivery?) {
        // The thread running it was marked by its claim, or as the helper.
        switch operation {
        case .read(let body):
            read(body)
        case .access(let body):
            body(&engine.pointer.pointee)
            return finish(changed: true, inlineQueue: inlineQueue, deliverHere: deliverHere)
        case .map(let transform):
            let deliver = map(transform)  // inside the section: before the release
            _ = engine.releaseInline(.dispatched)
            return (nil, deliver)
        case .readManual(let body):
            let value = engine.pointer.pointee
            return (nil, executeManual { done in body(.success(value), done) })
        case .accessManual(let body):
            return (nil, executeManual { done in body(&engine.pointer.pointee, done) })
        case .sharedRead, .sharedReadManual:
            preconditionFailure("a shared read run as an exclusive command")
        }
        return finish(changed: false, inlineQueue: inlineQueue, deliverHere: deliverHere)
    }

    /// The one end of an exclusive command's hold, whichever way it ran (its block, a helper, the
    /// arrival of its manual completion). In the section: captures the change for the observers
    /// (if `changed` and the value has any) and reads the result for the completion. Then
    /// releases: the machine grants the next command, which is started, or returned when it is
    /// this block's to run inline. After the release: offers the change, then delivers the
    /// completion here (`deliverHere`) or returns it.
    /// - Parameters:
    ///   - changed: the command may have changed the value.
    ///   - inlineQueue: this block's queue, if it may run a granted successor inline; 0 if not. A
    ///     command that delivers something or offers a change never does: it starts its successor
    ///     first, since the delivery may wait for that successor (see ``execute(inlineQueue:deliverHere:)``).
    ///   - deliverHere: the caller is the command's own block, which delivers right after the
    ///     release anyway: the completion is called here, with no closure allocated to carry it.
    /// - Returns: the successor to run inline, and the delivery to run (on this command's queue)
    ///   if it was not delivered here.
    private func finish(changed: Bool, inlineQueue: Int, deliverHere: Bool) -> (
        next: DispatchedCommand?, delivery: Delivery?
    ) {
        let change = changed && engine.observing.loadRelaxed() != 0 ? engine.captureChange() : nil
        guard let completion else {
            let next = engine.releaseInline(.dispatched, releaserQueue: change == nil ? inlineQueue : 0)
            guard let change else { return (successor(next), nil) }
            engine.deliverChange(change)
            return (nil, nil)
        }
        let result = engine.pointer.pointee
        // mutant(completion-offers-its-queue): _ = engine.releaseInline(.dispatched, releaserQueue: inlineQueue)
        _ = engine.releaseInline(.dispatched)
        if let change { engine.deliverChange(change) }
        if deliverHere {
            completion(.success(result))
            return (nil, nil)
        }
        return (nil, { completion(.success(result)) })
    }

    /// The successor the machine chose this block to run inline: a command of this value (the engine
    /// of a value grants only its own commands) and on this queue (the releaser's), so of this type.
    @inline(__always)
    private func successor(_ next: Waiter?) -> DispatchedCommand? {
        next.map { unsafeDowncast($0, to: Self.self) }
    }

    // The `Result` cases live in functions of their own: in unspecialized code, naming
    // `Result<Value, QueueSafeValueError>` costs a runtime metadata lookup, which the compiler
    // would otherwise make on every `execute()`, whatever the case.

    @inline(never)
    private func read(_ body: @Sendable (Result<Value, QueueSafeValueError>) -> Void) {
        body(.success(engine.pointer.pointee))
    }

    @inline(never)
    private func map(
        _ transform: @Sendable (Result<Value, QueueSafeValueError>) -> @Sendable () -> Void
    ) -> @Sendable () -> Void {
        transform(.success(engine.pointer.pointee))
    }

    /// - Returns: the completion's delivery, if the command released here.
    private func executeManual(_ body: (@escaping CommandCompletionClosure) -> Void) -> Delivery? {
        let ticket = engine.beginManual(self, kind: .dispatched)
        CompletionToken.withCompletion(engine: engine, ticket: ticket, body)
        engine.ownerThread.storeRelaxed(0)
        guard case .release = engine.manualClosureReturned(ticket) else {
            return nil  // the completion will finish the command
        }
        return finishManual()
    }

    /// ``finish(changed:inlineQueue:deliverHere:)`` for a manual completion (from its closure's
    /// return or from the completion's arrival): no successor runs inline, and the delivery is
    /// returned.
    private func finishManual() -> Delivery? {
        let changed = if case .accessManual = operation { true } else { false }
        return finish(changed: changed, inlineQueue: 0, deliverHere: false).delivery
    }

    /// The manual completion arrived after the closure returned, on some thread (possibly not
    /// `queue`): release, hand off, and deliver the completion on `queue`.
    override func finishManualCompletion() {
        if isShared { return engine.releaseReader(readerTicket) }
        if let delivery = finishManual() {
            let box = UncheckedSendable(delivery)
            SyncPoints.async(queue) { box.value() }
        }
    }

    /// Reports a command that never ran: closures that receive a `Result` get the failure; access
    /// closures are not run.
    private func deliverFailure(_ error: QueueSafeValueError) {
        switch operation {
        case .read(let body), .sharedRead(let body): body(.failure(error))
        case .readManual(let body), .sharedReadManual(let body): body(.failure(error), {})
        case .map(let transform): transform(.failure(error))()
        case .access, .accessManual: break
        }
        completion?(.failure(error))
    }
}

// MARK: - DispatchedSharedRead

/// A dispatched shared read: a ``DispatchedCommand`` that keeps its ``Waiter/readerTicket``.
/// Exclusive dispatch commands, the common ones, do not carry the ticket.
final class DispatchedSharedRead<Value>: DispatchedCommand<Value>, @unchecked Sendable {
    // @unchecked Sendable: the ticket is written under the engine lock before the read can be
    // granted, and read by the read's own block or helper once granted.
    private var ticket = CommandEngine.Ticket.none

    override var readerTicket: CommandEngine.Ticket {
        get { ticket }
        set { ticket = newValue }
    }
}
