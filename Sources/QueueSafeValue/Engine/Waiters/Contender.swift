import Dispatch

// MARK: - Contender

/// A command's representative in the engine: what ``CommandEngine`` starts when the command's
/// turn comes. One kind per way of waiting, side by side in this folder:
///
/// | waiter | waits by | started by |
/// | --- | --- | --- |
/// | ``BlockingWaiter`` | its thread spinning, then parking on a semaphore | a store into its word, and a signal if it parked |
/// | ``DispatchedCommand`` | nothing: it is a record in the queue | `queue.async` of its block |
/// | ``AwaitingWaiter`` | its task suspending on a continuation | resuming the continuation |
///
/// The engine's state machine decides when a waiter starts; the waiter only knows how.
// @unchecked Sendable: `isGranted` is touched only under the engine lock
@usableFromInline
class Contender: @unchecked Sendable {
    /// The engine's verdict for the waiting party, written under the engine lock when the state
    /// machine grants the command. Read under the same lock (see
    /// ``CommandEngine/waitForTurn(_:isolation:)``).
    final var isGranted = false

    /// The queue a dispatched command runs on; `nil` for the other kinds.
    var targetQueue: DispatchQueue? { nil }

    /// The identity of ``targetQueue`` (see `QueueTag`) for a dispatched command; 0 otherwise.
    var targetQueueID: Int { 0 }

    /// The thread that runs this command once it is granted, if it is known and alive until then
    /// (a blocking waiter's own thread); 0 otherwise. Priority inheritance raises it.
    var threadToBoost: Int { 0 }

    /// The task that runs this command once it is granted, if it is known and alive until then (a
    /// suspended task); 0 otherwise. Priority inheritance escalates it.
    var taskToEscalate: Int { 0 }

    /// Runs a granted dispatched command on the calling thread, which runs on its queue and waits
    /// for the same section (see *helping* in ``BlockingWaiter``): the command's block is not run.
    func runOnHelper() {
        preconditionFailure("only dispatched commands run on a helper")
    }

    /// Starts the command after the engine granted it the section. Called once per grant, by the
    /// releasing thread, outside the engine lock.
    @usableFromInline
    func start() {
        preconditionFailure("Contender.start() must be overridden")
    }

    /// The manual completion of the command arrived after its closure had returned: finish the
    /// command. Called outside the engine lock, on the thread that called (or dropped) `done`.
    func finishManualCompletion() {
        preconditionFailure("Contender.finishManualCompletion() must be overridden by manual-completion waiters")
    }
}
