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

    /// Places a dispatched command in the queue at the moment of the call (after its idle
    /// compare-and-swap failed), so commands issued one after another from one thread keep their
    /// order.
    /// - Returns: `true` if the section was free after all and the command holds it now (the caller
    ///   starts it); `false` if it waits (the engine starts it when its turn comes).
    /// - Throws: `.valueContainerDeinited` if the container is gone.
    /// - Complexity: O(log n)
    final func enqueueDispatched(_ command: Contender, priority: CommandPriority) throws(QueueSafeValueError) -> Bool {
        switch enqueue(command, kind: .dispatched, priority: priority) {
        case .granted: return true
        case .queued: return false
        case .refused(let error): throw error
        }
    }

    // MARK: Helping

    /// The dispatched holder's slot (word 4): 0 while no dispatched command holds the section (or
    /// one took a free section and is about to publish itself), its retained address while it is
    /// granted and its block has not started, and `dispatchStarted` once its block or a waiter
    /// runs it (or it was handed to a waiter). A dispatched command granted by the machine is
    /// published in the same lock section as its grant; one that took a free section publishes
    /// itself right after. A blocking waiter that runs on the command's queue, where the block
    /// could never run while the waiter blocks the queue, takes it over.
    static let dispatchStarted = 1

    /// Publishes `command`, just granted, as the dispatched holder whose block has not started.
    /// (A release that grants it also notes its queue, under the lock; one that took a free
    /// section notes it itself, see `DispatchedCommand`.)
    final func publishPendingDispatch(_ command: Contender) {
        pendingDispatch.storeRelease(Int(bitPattern: Unmanaged.passRetained(command).toOpaque()))
    }

    /// The block of `command`, or its predecessor's block running it inline, claims it: `true` if
    /// it was still published, `false` if a waiter took it over. Only `command` itself.
    final func claimPendingDispatch(_ command: Contender) -> Bool {
        let raw = Int(bitPattern: Unmanaged.passUnretained(command).toOpaque())
        guard pendingDispatch.compareExchange(expected: raw, desired: Self.dispatchStarted) else { return false }
        Unmanaged.passUnretained(command).release()  // the reference the slot held
        return true
    }

    /// Takes over the published dispatched holder, if the holder is one and its block has not
    /// started: the taker runs it, and its block, which finds it gone, does not. Waits the moment
    /// it takes a command that took a free section to publish itself.
    final func takePendingDispatch() -> Contender? {
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
            return Unmanaged<Contender>.fromOpaque(pointer).takeRetainedValue()
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
    /// Called again when a queue is tagged while the waiter is parked without knowing its queue.
    /// - Returns: the tagging epoch read before the queues were, if the thread's innermost queue is
    ///   unknown (it may be a queue nothing has tagged yet): the waiter then asks to be told of new
    ///   tags (see ``DeadlockDetector/tagQueue(_:)``). `nil` if it knows its queue.
    final func becomeHelper(_ ticket: Ticket) -> Int? {
        let epoch = DeadlockDetector.shared.tagEpoch
        let (queues, innermostKnown) = QueueTag.currentIdentities
        if !queues.isEmpty {
            takeOverPendingDispatch(runningOn: queues)
            // Shared reads granted for these queues whose blocks have not started are taken in the
            // same lock section as the registration: later ones are handed over as jobs.
            let readers = machine.withLock { machine in
                machine.registerHelper(ticket, queues: queues)
                return machine.takeUnstartedReaders(forQueues: queues)
            }
            if !readers.isEmpty {
                BlockingWaiter.withoutThreadWaiter {
                    for reader in readers { reader.runOnHelper() }
                }
            }
            takeOverPendingDispatch(runningOn: queues)
        }
        return innermostKnown ? nil : epoch
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
    private func republish(_ command: Contender) {
        apply { $0.returnTakenOver(command) }
    }
}
