import Dispatch

// MARK: - DispatchedCommand

/// A command whose closures run on a `DispatchQueue`. It takes its place at the moment of the call
/// and waits as a record in the queue; granted, it is dispatched onto its queue, where a finished
/// command may run the next granted one for the same queue in the same block (up to ``batchLimit``).
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

    // In this order so that the object fits the allocation `aDispatchedCommandIsOneAllocationOf96BytesAtMost`
    // allows: the flag and the queue's identity share the word of the operation's tag byte.

    private let operation: Operation
    /// A shared read (always a ``DispatchedSharedRead``): its share goes through the lock, never
    /// through the dispatched holder's slot or a releasing block.
    private let isShared: Bool
    /// The queue's identity (see `QueueTag`), given as the command arrives; 32 bits to share a word
    /// (identities count tagged queues from 1).
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
        // Not read from `operation`: switching over the generic enum costs a metadata lookup.
        self.isShared = shared
    }

    /// Places the command in the queue now, or a shared read (`shared`), and arranges for it to run
    /// on `queue`. If the container is gone, the failure is delivered on `queue` and nothing runs.
    static func submit(
        engine: ValueEngine<Value>,
        queue: DispatchQueue,
        priority: CommandPriority,
        site: CallSite,
        operation: Operation,
        completion: (@Sendable (Result<Value, QueueSafeValueError>) -> Void)?,
        shared: Bool = false
    ) {
        let command = Self(engine: engine, queue: queue, operation: operation, completion: completion, shared: shared)
        command.keptSite = site.kept
        do {
            if try engine.admitDispatched(command, on: queue, priority: priority, shared: shared) { command.start() }
        } catch {
            SyncPoints.async(queue) { command.deliverFailure(error) }
        }
    }

    /// ``submit(engine:queue:priority:site:operation:completion:shared:)`` for a shared read, called
    /// on ``DispatchedSharedRead``, which keeps the ticket.
    static func submitShared(
        engine: ValueEngine<Value>,
        queue: DispatchQueue,
        priority: CommandPriority,
        site: CallSite,
        operation: Operation
    ) {
        submit(
            engine: engine, queue: queue, priority: priority, site: site, operation: operation, completion: nil,
            shared: true)
    }

    /// Runs a granted shared read on this thread (its block, or a helper on its queue), listed as a
    /// reader party while its closure runs, and gives its share back.
    private func executeShared() {
        let ticket = readerTicket
        engine.enterReader(ticket, thread: currentThreadID(), task: 0)
        switch operation {
        case .sharedRead(let body):
            engine.resultType.call(body, with: engine.pointer.pointee)
            engine.exitReader(ticket)
            engine.releaseReader(ticket)
        case .sharedReadManual(let body):
            engine.machine.withLock { $0.beginReaderManual(ticket) }
            let value = engine.pointer.pointee
            CompletionToken.withCompletion(engine: engine, ticket: ticket) { done in
                engine.resultType.call({ body($0, done) }, with: value)
            }
            engine.exitReader(ticket)
            if case .release = engine.machine.withLock({ $0.manualClosureReturned(ticket) }) {
                engine.releaseReader(ticket)
            } else {
                // Held by no thread until the completion arrives.
                engine.endBoostOfCurrentThread()
            }
        case .read, .readManual, .access, .accessManual, .map:
            preconditionFailure("an exclusive command run as a shared read")
        }
    }

    override var targetQueueID: Int { Int(queueID) }

    override func adoptQueueID(_ identity: Int) {
        queueID = Int32(truncatingIfNeeded: identity)
    }

    /// Dispatches the block of the granted command; until the block claims it, a blocking waiter on
    /// `queue` may take it over.
    override func start() {
        if isShared {
            SyncPoints.async(queue) {
                // `false` if a helper runs it.
                guard self.engine.machine.withLock({ $0.claimReaderStart(self.readerTicket) }) else { return }
                self.executeShared()
            }
            return
        }
        SyncPoints.async(queue) {
            guard self.engine.claimPendingDispatch(self) else { return }  // taken over
            self.runBatch()
        }
    }

    /// Runs on a waiting thread on `queue`: this command only; its completion in a block of its own.
    override func runOnHelper() {
        if isShared { return executeShared() }
        engine.ownerThread.storeRelaxed(currentThreadID())
        deliverOnQueue(execute(inlineQueue: 0, deliverHere: false).delivery)
    }

    private func deliverOnQueue(_ delivery: Delivery?) {
        guard let delivery else { return }
        let box = UncheckedSendable(delivery)
        SyncPoints.async(queue) { box.value() }
    }

    /// Runs on `queue`: this command, then the granted successors the machine lets it run inline
    /// (``EngineStateMachine/Starter``) while its budget lasts.
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

    /// Runs the command on its queue while it holds the section (parameters as
    /// ``finish(changed:inlineQueue:deliverHere:)``).
    /// - Returns: the successor to run inline, and the delivery to run after the release.
    private func execute(inlineQueue: Int, deliverHere: Bool) -> (next: DispatchedCommand?, delivery: Delivery?) {
        switch operation {
        case .read(let body):
            engine.resultType.call(body, with: engine.pointer.pointee)
        case .access(let body):
            body(&engine.pointer.pointee)
            return finish(changed: true, inlineQueue: inlineQueue, deliverHere: deliverHere)
        case .map(let transform):
            let deliver = engine.resultType.call(transform, with: engine.pointer.pointee)  // before the release
            _ = engine.releaseInline(.dispatched)
            return (nil, deliver)
        case .readManual(let body):
            let value = engine.pointer.pointee
            return (nil, executeManual { done in engine.resultType.call({ body($0, done) }, with: value) })
        case .accessManual(let body):
            return (nil, executeManual { done in body(&engine.pointer.pointee, done) })
        case .sharedRead, .sharedReadManual:
            preconditionFailure("a shared read run as an exclusive command")
        }
        return finish(changed: false, inlineQueue: inlineQueue, deliverHere: deliverHere)
    }

    /// The one end of an exclusive command's hold, however it ran: captures the change for
    /// observers and reads the result in the section, releases, then offers the change and
    /// delivers the completion here or returns it.
    /// - Parameters:
    ///   - changed: the command may have changed the value.
    ///   - inlineQueue: this block's queue, if it may run a granted successor inline; 0 if not. A
    ///     command that delivers something or offers a change never does: the delivery may wait
    ///     for that successor, and running it behind the delivery could deadlock.
    ///   - deliverHere: the caller is the command's own block: the completion is called here, with
    ///     no closure allocated to carry it.
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
        let resultType = engine.resultType
        if deliverHere {
            resultType.call(completion, with: result)
            return (nil, nil)
        }
        return (nil, { resultType.call(completion, with: result) })
    }

    /// The successor the machine chose this block to run inline: of this value and queue, so of this type.
    @inline(__always)
    private func successor(_ next: Waiter?) -> DispatchedCommand? {
        next.map { unsafeDowncast($0, to: Self.self) }
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

    /// ``finish(changed:inlineQueue:deliverHere:)`` for a manual completion.
    private func finishManual() -> Delivery? {
        let changed = if case .accessManual = operation { true } else { false }
        return finish(changed: changed, inlineQueue: 0, deliverHere: false).delivery
    }

    /// The manual completion arrived after the closure returned: release, and deliver on `queue`.
    override func finishManualCompletion() {
        if isShared { return engine.releaseReader(readerTicket) }
        deliverOnQueue(finishManual())
    }

    /// Reports a command that never ran to the closures that receive a `Result`.
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
final class DispatchedSharedRead<Value>: DispatchedCommand<Value>, @unchecked Sendable {
    // @unchecked Sendable: the ticket is written under the engine lock before the read can be
    // granted, and read by the read's own block or helper once granted.
    private var ticket = CommandEngine.Ticket.none

    override var readerTicket: CommandEngine.Ticket {
        get { ticket }
        set { ticket = newValue }
    }
}

/// A result a dispatched command builds from its value: `Result<Value, QueueSafeValueError>`.
protocol SucceedingResult {
    associatedtype Success
    static func success(_ value: Success) -> Self
}

extension Result: SucceedingResult where Failure == QueueSafeValueError {}

/// Calls a closure with `.success(value)`. Called on ``ValueEngine/resultType``, whose class
/// metadata carries the result's type: unspecialized code that names
/// `Result<Value, QueueSafeValueError>` itself asks the runtime for it, a hash-table lookup per
/// command.
// Out of line: inlined, its caller would name the result's type again. Two functions, not one
// generic over what `body` returns: that one takes a completion through a thunk.
final class Succeeding<Outcome: SucceedingResult> {
    @inline(never)
    static func call(_ body: (Outcome) -> Void, with value: Outcome.Success) {
        body(.success(value))
    }

    @inline(never)
    static func call(
        _ body: (Outcome) -> @Sendable () -> Void, with value: Outcome.Success
    ) -> @Sendable () -> Void {
        body(.success(value))
    }
}
