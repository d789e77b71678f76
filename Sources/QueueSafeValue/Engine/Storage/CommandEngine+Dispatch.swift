import Dispatch
import QueueSafeValueShims

// Dispatched commands, and helping: a blocking waiter on a command's target queue runs the command
// itself, since its block could not run meanwhile.
extension CommandEngine {
    /// A dispatched command arrives, its one call into the storage: tagged with its queue's
    /// identity (a waiter on that queue may block it even before a free section's block runs), it
    /// takes the section or its place at the moment of the call, so one thread's commands keep
    /// their order.
    /// - Returns: `true` if it holds the section (the caller starts its block); `false` if it waits.
    /// - Throws: `.valueContainerDeinited` if the container is gone.
    /// - Complexity: O(log n)
    final func admitDispatched(
        _ command: Waiter, on queue: DispatchQueue, priority: CommandPriority, shared: Bool = false
    ) throws(QueueSafeValueError) -> Bool {
        command.adoptQueueID(queueIdentity(of: queue))
        var holds = !shared && tryAcquireIdleDispatched(command, priority: priority)
        if !holds {
            switch enqueue(command, kind: .dispatched, priority: priority, shared: shared) {
            case .granted: holds = true
            case .queued: holds = false
            case .refused(let error): throw error
            }
        }
        // mutant(dispatch-before-publish): if holds && !shared { command.start(); publishGrantedDispatch(command, helper: nil); return false }
        if holds && !shared { publishGrantedDispatch(command, helper: nil) }
        return holds
    }

    // MARK: Queue identities

    /// The identity of `queue`, tagging it if it has no tag yet, through a one-entry cache: reading
    /// a queue's tag was the largest item of a dispatch command's cost
    /// (<doc:Benchmarks#Why-the-code-is-shaped-this-way>). The entry is a sequence lock (an even
    /// version unchanged around the reads); the caller holds `queue`, so equal addresses mean the
    /// same queue. A writer that loses the version's compare-and-swap does not cache.
    final func queueIdentity(of queue: DispatchQueue) -> Int {
        let address = Int(bitPattern: ObjectIdentifier(queue))
        let version = word(.queueCacheVersion).loadAcquire()
        if version & 1 == 0, word(.queueCacheAddress).loadAcquire() == address {
            let identity = word(.queueCacheID).loadAcquire()
            if word(.queueCacheVersion).loadAcquire() == version { return identity }
        }
        let identity = QueueTag.identity(of: queue)
        cacheQueueIdentity(identity, of: queue, address: address, version: version)
        return identity
    }

    private func cacheQueueIdentity(_ identity: Int, of queue: DispatchQueue, address: Int, version: Int) {
        guard version & 1 == 0, word(.queueCacheVersion).compareExchange(expected: version, desired: version + 1) else {
            return
        }
        word(.queueCacheAddress).storeRelease(address)
        word(.queueCacheID).storeRelease(identity)
        let previous = word(.queueCacheOwner).exchange(Int(bitPattern: Unmanaged.passRetained(queue).toOpaque()))
        word(.queueCacheVersion).storeRelease(version + 2)
        // Released only now: until the version moved on, a reader could still match its address.
        Self.releaseCachedQueue(previous)
    }

    /// Lets go of a queue the identity cache retained (`raw`: its address, or 0).
    static func releaseCachedQueue(_ raw: Int) {
        if let pointer = UnsafeRawPointer(bitPattern: raw) {
            Unmanaged<DispatchQueue>.fromOpaque(pointer).release()
        }
    }

    // MARK: Helping

    /// The dispatched holder's slot (the `pendingDispatch` word): 0 while no dispatched command
    /// holds (or one that took a free section is about to publish itself), its retained address
    /// while granted and not started, and `dispatchStarted` once its block or a waiter runs it.
    static let dispatchStarted = 1

    /// The one start of a granted exclusive dispatched command: in the grant's lock section
    /// (``prepare(_:)``), or right after the idle compare-and-swap. Hands it to `helper`, a waiting
    /// thread that runs on its queue, or publishes it for its block to claim (or a waiter on its
    /// queue to take over).
    final func publishGrantedDispatch(_ command: Waiter, helper: Waiter?) {
        word(.dispatchedHolderQueue).storeRelaxed(command.targetQueueID)
        guard let helper else {
            return pendingDispatch.storeRelease(Int(bitPattern: Unmanaged.passRetained(command).toOpaque()))
        }
        // In this lock section: a helper that gives up takes the lock to leave, and finds the job.
        pendingDispatch.storeRelease(Self.dispatchStarted)
        // mutant(helper-job-after-unlock): _ = helper
        helper.assignJob(command)
    }

    /// The block of `command`, or its predecessor's block running it inline, claims it: `true` if
    /// it was still published (the calling thread now runs the section's closure), `false` if a
    /// waiter took it over.
    final func claimPendingDispatch(_ command: Waiter) -> Bool {
        let raw = Int(bitPattern: Unmanaged.passUnretained(command).toOpaque())
        guard pendingDispatch.compareExchange(expected: raw, desired: Self.dispatchStarted) else { return false }
        Unmanaged.passUnretained(command).release()  // the reference the slot held
        ownerThread.storeRelaxed(currentThreadID())
        return true
    }

    /// A blocking waiter is about to park (a hand-off its spin catches pays nothing for helping):
    /// it takes over a dispatched holder for a queue it runs on, and registers for the ones granted
    /// while it waits; the holder is checked again after registering. With `party`, it parks in
    /// the same lock section. Called again, without a party, when a queue is tagged.
    /// - Returns: the tagging epoch read first if the thread's innermost queue is unknown (the waiter
    ///   then asks to be told of new tags), else `nil`; and what the party inherited as it parked.
    final func becomeHelper(_ ticket: Ticket, parking party: [Node]? = nil) -> (tagEpoch: Int?, inherited: Urgency) {
        let epoch = DeadlockDetector.shared.tagEpoch
        let (queues, innermostKnown) = QueueTag.currentIdentities
        if !queues.isEmpty { takeOverPendingDispatch(runningOn: queues) }
        // Unstarted shared reads for these queues are taken in the registration's section: later
        // ones are handed over as jobs.
        let register = { (machine: inout Machine) -> [Waiter] in
            guard !queues.isEmpty else { return [] }
            machine.registerHelper(ticket, queues: queues)
            return machine.takeUnstartedReaders(forQueues: queues)
        }
        var readers: [Waiter] = []
        var inherited = Urgency.none
        // Ended by the waiter, once registered for deadlock detection.
        if party != nil { SyncPoints.inheritance(true) }
        let urgency = party == nil ? Urgency.none : .ofCurrentThread()
        // Into the boost lock only if the park may raise anything.
        if let party, !queues.isEmpty || !urgency.isNone || (!party.isEmpty && !BoostRegistry.shared.isEmpty) {
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

    /// If the holder is a dispatched command whose block has not started, takes it over (its block
    /// then finds it gone): runs it here if this thread runs on its queue; otherwise puts it back,
    /// and the machine decides who starts it (``EngineStateMachine/returnTakenOver(_:)``).
    private func takeOverPendingDispatch(runningOn queues: [Int]) {
        while state.loadAcquire() & EngineWord.holderMask == CommandKind.dispatched.wordBits {
            let raw = pendingDispatch.loadAcquire()
            if raw == Self.dispatchStarted { return }
            if raw == 0 {
                SyncPoints.yield()  // granted on the idle path, publishing itself
                continue
            }
            guard pendingDispatch.compareExchange(expected: raw, desired: Self.dispatchStarted),
                let pointer = UnsafeRawPointer(bitPattern: raw)
            else { continue }
            let command = Unmanaged<Waiter>.fromOpaque(pointer).takeRetainedValue()
            if queues.contains(command.targetQueueID) {
                BlockingWaiter.withoutThreadWaiter { command.runOnHelper() }
            } else {
                perform { $0.returnTakenOver(command) }
            }
            return
        }
    }
}
