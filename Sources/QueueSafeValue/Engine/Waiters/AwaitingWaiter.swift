import QueueSafeValueShims

// MARK: - AwaitingWaiter

/// What a suspended task waits on. It is resumed when its command was granted the critical section
/// or left the queue; the task then reads which under the engine lock (see
/// ``CommandEngine/waitForTurn(_:deadline:holdsNothing:startedLater:cancellable:)``).
@usableFromInline
typealias TurnContinuation = UnsafeContinuation<Void, Never>

/// A Swift task's place in the queue: an awaiting value command (`value.async`) or a
/// ``CommandQueue`` operation. The place is taken when the command is issued (so the order is the
/// order of the calls), and the task suspends on it only if it is not granted by then.
///
/// A task that is cancelled while its command still waits leaves the queue and is resumed at once;
/// see ``CommandEngine/waitForTurn(_:deadline:holdsNothing:startedLater:cancellable:)``.
// @unchecked Sendable: fields are touched under the engine lock, except `ticket` (written once
// right after the enqueue, before a task, timer or cancellation handler is given the waiter; the
// machine never reads it), `refusal` (under the lock, or before the resume that publishes it) and
// `task`'s last write (by the release that ended the operation, after unlocking: that transition
// made the machine forget the operation, so no locked access follows)
@usableFromInline
final class AwaitingWaiter: Waiter, @unchecked Sendable {
    /// The suspended task, stored under the engine lock while the command waits. Resumed after the
    /// lock is released by whichever transition ends the wait (grant or leave): that transition
    /// happened under the lock after the store, so the read is ordered after it.
    var continuation: TurnContinuation?
    /// The task running an operation, for ``CommandQueue/cancelAll()``. Under the engine lock;
    /// dropped after the lock is released once the operation ended.
    var task: (any CancellableTask)?
    /// Why the command left the queue other than by cancellation (a deadlock), written before the
    /// task is resumed; read under the engine lock.
    var refusal: QueueSafeValueError?
    /// The command's ticket, once it took its place.
    var ticket = CommandEngine.Ticket.none
    /// The task that waits, while it waits (written before it suspends, read by the releaser under
    /// the engine's boost lock): priority inheritance escalates it when it is granted.
    var waitingTask = 0
    /// When the command gives up waiting (`uptimeNanoseconds`), or 0: set by its issuer before it
    /// is enqueued.
    var deadline: UInt64 = 0

    override func givesUp(at now: UInt64) -> EngineStateMachine.GiveUp {
        if Self.deadline(deadline, hasPassedAt: now) { return .timedOut }
        // An operation whose task was cancelled before it could take its turn (`task` is attached
        // under the engine lock, and only operations have one).
        if let task, task.isCancelled { return .cancelled }
        return .stays
    }

    override func expired(_ diagnostics: QueueDiagnostics) {
        refusal = .timedOut(diagnostics)
    }

    override var taskToEscalate: Int { waitingTask }

    @usableFromInline
    override init() {}

    override func start() {
        continuation?.resumeFromAnotherThread()
    }

    override var continuationToResume: TurnContinuation? { continuation }

    override var taskToCancel: (any CancellableTask)? { task }

    override func endHold() {
        task = nil
    }
}

extension UnsafeContinuation where T == Void, E == Never {
    /// Resumes the task waiting on this continuation from a thread other than its own: the
    /// engine's grant, a cancellation, or `cancelAll()`.
    ///
    /// The task may not have finished suspending yet. Then the runtime lets it go on at once,
    /// ordered by the runtime's own atomics, and ThreadSanitizer sees no ordering: the fast path of
    /// `swift_continuation_await` has no sanitizer annotation (swiftlang/swift#57803). It would pair
    /// this call's read of the task's continuation context with the task's next use of that memory
    /// and report a race that cannot happen. So the sanitizer is told to ignore this call's own
    /// memory accesses, and nothing else: what the resumed task does next is ordered by the engine
    /// lock it takes after resuming (``CommandEngine/waitForTurn(_:deadline:holdsNothing:startedLater:cancellable:)``). Outside
    /// ThreadSanitizer builds the two hooks are empty.
    @inline(__always)
    func resumeFromAnotherThread() {
        ignoringSanitizerAccesses { resume() }
    }
}

extension CheckedContinuation where T == Void, E == Never {
    /// Resumes the task waiting on this continuation from a thread other than its own, hiding the
    /// resume's own memory accesses from ThreadSanitizer: see
    /// `UnsafeContinuation.resumeFromAnotherThread()`. Only the resume's own accesses are hidden:
    /// anything else the resumed task shares with the resuming thread needs its own ordering (a
    /// lock), and the sanitizer still checks it.
    @inline(__always)
    func resumeFromAnotherThread() {
        ignoringSanitizerAccesses { resume() }
    }
}

extension CheckedContinuation where T: Sendable, E == any Error {
    /// Resumes the suspended task with `result` from a thread other than its own (the recurring
    /// executor's delivery queue, a cancellation handler, a refresh's task), hiding the resume's own
    /// memory accesses from ThreadSanitizer: see `UnsafeContinuation.resumeFromAnotherThread()`.
    /// What the resumed task reads next is ordered by the lock it was handed over under.
    @inline(__always)
    func resumeFromAnotherThread(with result: Result<T, any Error>) {
        ignoringSanitizerAccesses { resume(with: result) }
    }
}

/// Runs `body` with ThreadSanitizer ignoring the calling thread's memory accesses (its
/// synchronization is still tracked). Only for resuming continuations; see
/// `UnsafeContinuation.resumeFromAnotherThread()`.
@inline(__always)
private func ignoringSanitizerAccesses(_ body: () -> Void) {
    SyncPoints.willResume()
    qsv_sanitizer_ignore_accesses_begin()
    body()
    qsv_sanitizer_ignore_accesses_end()
}

/// A task handle that can be cancelled without knowing its result type.
@usableFromInline
protocol CancellableTask: Sendable {
    func cancel()
    var isCancelled: Bool { get }
}

extension Task: CancellableTask {}
