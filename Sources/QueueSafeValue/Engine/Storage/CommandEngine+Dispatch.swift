import Dispatch
import QueueSafeValueShims

#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

// Dispatched commands: their place in the queue, and helping — a blocking waiter that runs on
// a command's target queue runs the command itself, since its block could not run meanwhile.
extension CommandEngine {
    // MARK: Dispatched commands

    /// A dispatched command arrives: the command's one call into the storage. Tags it with its
    /// queue's identity (so that a waiter running on that queue knows it does, even if the command
    /// takes a free section: that waiter may block the queue before the command's block runs),
    /// takes a free section on the idle path or places the command in the queue through the lock
    /// at the moment of the call (so commands issued one after another from one thread keep their
    /// order), and publishes it if it holds the section now, for its block to claim.
    /// - Returns: `true` if the command holds the section (the caller starts its block); `false`
    ///   if it waits (the engine starts it when its turn comes).
    /// - Throws: `.valueContainerDeinited` if the container is gone.
    /// - Complexity: O(log n)
    final func admitDispatched(
        _ command: Waiter, on queue: DispatchQueue, priority: CommandPriority
    ) throws(QueueSafeValueError) -> Bool {
        command.adoptQueueID(queueIdentity(of: queue))
        var holds = tryAcquireIdleDispatched(command, priority: priority)
        if !holds {
            switch enqueue(command, kind: .dispatched, priority: priority) {
            case .granted: holds = true
            case .queued: holds = false
            case .refused(let error): throw error
            }
        }
        // mutant(dispatch-before-publish): if holds { command.start(); publishGrantedDispatch(command, helper: nil); return false }
        if holds { publishGrantedDispatch(command, helper: nil) }
        return holds
    }

    // MARK: Queue identities

    /// The identity of `queue` (see ``QueueTag/identity(of:in:)``), tagging it if it has no tag
    /// yet. A value's dispatch commands usually target one queue, so the last queue's identity is
    /// kept in a one-entry cache: a hit costs four loads, where reading the queue's tag costs a
    /// lookup in Dispatch's queue-specific list and a generic metadata lookup, the largest single
    /// item of a dispatch command's cost (<doc:Benchmarks#Why-the-code-is-shaped-this-way>). The cache keeps the
    /// last queue alive until another queue replaces it or the engine goes.
    ///
    /// The entry is a sequence lock: a reader that sees the same even version before and after
    /// reading the address and the identity read an entry that was current in between, when the
    /// entry retained its queue; `queue` is alive too (the caller holds it), so equal addresses
    /// mean the same queue. Writers take the version from even to odd with a compare-and-swap; a
    /// writer that loses simply does not cache.
    final func queueIdentity(of queue: DispatchQueue) -> Int {
        let address = Int(bitPattern: ObjectIdentifier(queue))
        let version = queueCacheVersion.loadAcquire()
        if version & 1 == 0, queueCacheAddress.loadAcquire() == address {
            let identity = queueCacheID.loadAcquire()
            if queueCacheVersion.loadAcquire() == version { return identity }
        }
        let identity = QueueTag.identity(of: queue)
        cacheQueueIdentity(identity, of: queue, address: address, version: version)
        return identity
    }

    private func cacheQueueIdentity(_ identity: Int, of queue: DispatchQueue, address: Int, version: Int) {
        guard version & 1 == 0, queueCacheVersion.compareExchange(expected: version, desired: version + 1) else {
            return
        }
        queueCacheAddress.storeRelease(address)
        queueCacheID.storeRelease(identity)
        let previous = queueCacheOwner.exchange(Int(bitPattern: Unmanaged.passRetained(queue).toOpaque()))
        queueCacheVersion.storeRelease(version + 2)
        // Released only now: until the version moved on, a reader could still match its address.
        if let pointer = UnsafeRawPointer(bitPattern: previous) {
            Unmanaged<DispatchQueue>.fromOpaque(pointer).release()
        }
    }

    /// Lets go of the queue the identity cache retains (the engine's deinit).
    final func releaseCachedQueue() {
        if let pointer = UnsafeRawPointer(bitPattern: queueCacheOwner.exchange(0)) {
            Unmanaged<DispatchQueue>.fromOpaque(pointer).release()
        }
    }

    // MARK: Helping

    /// The dispatched holder's slot (the `pendingDispatch` word): 0 while no dispatched command holds the section (or
    /// one took a free section and is about to publish itself), its retained address while it is
    /// granted and its block has not started, and `dispatchStarted` once its block or a waiter
    /// runs it (or it was handed to a waiter). A dispatched command granted by the machine is
    /// published in the same lock section as its grant; one that took a free section publishes
    /// itself right after. A blocking waiter that runs on the command's queue, where the block
    /// could never run while the waiter blocks the queue, takes it over.
    static let dispatchStarted = 1

    /// The one start of a granted exclusive dispatched command, whichever path granted it: under
    /// the engine lock in the grant's lock section when the machine granted it (``prepare(_:)``),
    /// or right after the idle compare-and-swap when it took a free section (`DispatchedCommand`).
    /// Notes its queue for diagnostics, then hands it to `helper`, a waiting thread that runs on
    /// its queue (the slot then says started: nobody else may take it), or publishes it in the
    /// dispatched holder's slot for its block to claim (or a waiter on its queue to take over).
    /// Its block, or the helper's wake-up, follows after unlocking (``perform(_:)``).
    final func publishGrantedDispatch(_ command: Waiter, helper: Waiter?) {
        dispatchedHolderQueue.storeRelaxed(command.targetQueueID)
        guard let helper else { return publishPendingDispatch(command) }
        // Handed over in this lock section: a helper that gives up takes the lock to leave, and
        // then finds the job (see `BlockingWaiter`).
        pendingDispatch.storeRelease(Self.dispatchStarted)
        // mutant(helper-job-after-unlock): _ = helper
        helper.assignJob(command)
    }

    /// Publishes `command`, just granted, as the dispatched holder whose block has not started.
    /// (A release that grants it also notes its queue, under the lock; one that took a free
    /// section notes it itself, see `DispatchedCommand`.)
    final func publishPendingDispatch(_ command: Waiter) {
        pendingDispatch.storeRelease(Int(bitPattern: Unmanaged.passRetained(command).toOpaque()))
    }

    /// The block of `command`, or its predecessor's block running it inline, claims it: `true` if
    /// it was still published (the calling thread is then the one running the section's closure,
    /// see ``setOwnerThread(_:)``), `false` if a waiter took it over. Only `command` itself.
    final func claimPendingDispatch(_ command: Waiter) -> Bool {
        let raw = Int(bitPattern: Unmanaged.passUnretained(command).toOpaque())
        guard pendingDispatch.compareExchange(expected: raw, desired: Self.dispatchStarted) else { return false }
        Unmanaged.passUnretained(command).release()  // the reference the slot held
        setOwnerThread(currentThreadID())
        return true
    }

    /// Marks the calling thread as running a synchronous closure in the section (or not, with 0):
    /// a dispatched command's block or helper, and a manual completion's closure returning.
    final func setOwnerThread(_ thread: Int) {
        ownerThread.storeRelaxed(thread)
    }

    /// Takes over the published dispatched holder, if the holder is one and its block has not
    /// started: the taker runs it, and its block, which finds it gone, does not. Waits the moment
    /// it takes a command that took a free section to publish itself.
    final func takePendingDispatch() -> Waiter? {
        while state.loadAcquire() & EngineWord.holderMask == CommandKind.dispatched.wordBits {
            let raw = pendingDispatch.loadAcquire()
            if raw == Self.dispatchStarted { return nil }
            if raw == 0 {
                SyncPoints.yield()  // granted on the idle path, publishing itself
                continue
            }
            guard pendingDispatch.compareExchange(expected: raw, desired: Self.dispatchStarted),
                let pointer = UnsafeRawPointer(bitPattern: raw)
            else { continue }
            return Unmanaged<Waiter>.fromOpaque(pointer).takeRetainedValue()
        }
        return nil
    }

    /// A blocking waiter is about to park. A dispatched command that must run before it, for a
    /// queue this thread runs on, could never run its block while this thread waits. So this thread
    /// takes over the holder if it is such a command, and registers for the ones granted while it
    /// waits (they are handed to it as jobs). The holder is checked again after registering: a
    /// command granted in between was published, not handed over. A thread that runs on no tagged
    /// queue (every queue a dispatched command targets is tagged when the command is submitted)
    /// blocks no such command, and does none of this.
    ///
    /// Called when the waiter is about to park, not when it joins the queue: a hand-off that the
    /// spin catches pays nothing for helping, and a command of its queue waits at most one spin.
    /// With `party`, the waiter parks in the same lock section (see ``park(_:_:party:walks:_:)``):
    /// its helper role and its urgency cost one section, or none when it has neither. Called
    /// again, without a party, when a queue is tagged while the waiter is parked without knowing
    /// its queue.
    /// - Returns: the tagging epoch read before the queues were, if the thread's innermost queue is
    ///   unknown (it may be a queue nothing has tagged yet): the waiter then asks to be told of new
    ///   tags (see ``DeadlockDetector/tagQueue(_:)``), `nil` if it knows its queue; and what the
    ///   party inherited as it parked.
    final func becomeHelper(_ ticket: Ticket, parking party: [Node]? = nil) -> (tagEpoch: Int?, inherited: Urgency) {
        let epoch = DeadlockDetector.shared.tagEpoch
        let (queues, innermostKnown) = QueueTag.currentIdentities
        if !queues.isEmpty { takeOverPendingDispatch(runningOn: queues) }
        // Shared reads granted for these queues whose blocks have not started are taken in the
        // same lock section as the registration: later ones are handed over as jobs.
        let register = { (machine: inout Machine) -> [Waiter] in
            guard !queues.isEmpty else { return [] }
            machine.registerHelper(ticket, queues: queues)
            return machine.takeUnstartedReaders(forQueues: queues)
        }
        var readers: [Waiter] = []
        var inherited = Urgency.none
        // Ended by the waiter, once registered for deadlock detection (see `BlockingWaiter`).
        if party != nil { SyncPoints.inheritance(true) }
        let urgency = party == nil ? Urgency.none : .ofCurrentThread()
        if let party, !queues.isEmpty || mayRaise(urgency, party: party) {
            (readers, inherited) = park(ticket, urgency, party: party, register)
        } else if !queues.isEmpty {
            readers = machine.withLock(register)
        }
        if !readers.isEmpty {
            BlockingWaiter.withoutThreadWaiter {
                for reader in readers { reader.runOnHelper() }
            }
        }
        if !queues.isEmpty { takeOverPendingDispatch(runningOn: queues) }
        return (innermostKnown ? nil : epoch, inherited)
    }

    /// If the holder is a dispatched command whose block has not started, takes it over: runs it
    /// here if this thread runs on its queue; otherwise puts it back (see ``republish(_:)``).
    private func takeOverPendingDispatch(runningOn queues: [Int]) {
        guard let command = takePendingDispatch() else { return }
        if queues.contains(command.targetQueueID) {
            BlockingWaiter.withoutThreadWaiter { command.runOnHelper() }
        } else {
            republish(command)
        }
    }

    /// Puts back a dispatched holder taken over by a thread that does not run on its queue. Under
    /// the lock, as a release does, the machine decides who starts it (see
    /// ``EngineStateMachine/returnTakenOver(_:)``): a waiter running on its queue that registered
    /// meanwhile (and saw the slot taken) gets it as a job; otherwise it is published again, for
    /// such a waiter to take over, and given a block that claims it (its first block may have run
    /// and found the slot taken; whichever block claims it first runs it).
    private func republish(_ command: Waiter) {
        perform { $0.returnTakenOver(command) }
    }
}
