import QueueSafeValueShims

// MARK: - AwaitingWaiter

/// What a suspended task waits on; resumed, it reads its verdict under the engine lock.
@usableFromInline
typealias TurnContinuation = UnsafeContinuation<Void, Never>

/// A Swift task's place in the queue: an awaiting value command or a ``CommandQueue`` operation,
/// taken when it is issued; the task suspends on it only if it is not granted by then.
// @unchecked Sendable: fields are touched under the engine lock, except `ticket` (written once
// right after the enqueue, before a task, timer or cancellation handler is given the waiter; the
// machine never reads it), `refusal` (under the lock, or before the resume that publishes it) and
// `task`'s last write (by the release that ended the operation, after unlocking: that transition
// made the machine forget the operation, so no locked access follows)
@usableFromInline
final class AwaitingWaiter: Waiter, @unchecked Sendable {
    /// The suspended task, stored under the engine lock while the command waits.
    var continuation: TurnContinuation?
    /// The task running an operation, for ``CommandQueue/cancelAll()``.
    var task: (any CancellableTask)?
    /// Why the command left other than by cancellation, written before the task is resumed.
    var refusal: QueueSafeValueError?
    /// The command's ticket, once it took its place.
    var ticket = CommandEngine.Ticket.none
    /// The task that waits, while it waits: escalated when granted.
    var waitingTask = 0
    /// When the command gives up waiting (`uptimeNanoseconds`), or 0.
    var deadline: UInt64 = 0

    override func givesUp(at now: UInt64) -> EngineStateMachine.GiveUp {
        if Self.deadline(deadline, hasPassedAt: now) { return .timedOut }
        // An operation whose task was cancelled before its turn.
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
    /// Resumes the task waiting on this continuation from a thread other than its own.
    ///
    /// A task that had not finished suspending goes on ordered by the runtime's own atomics, which
    /// ThreadSanitizer does not see (swiftlang/swift#57803), so it would report a race on the
    /// continuation context that cannot happen. The sanitizer ignores this call's own accesses and
    /// nothing else: the resumed task orders what it does next by the engine lock.
    @inline(__always)
    func resumeFromAnotherThread() {
        ignoringSanitizerAccesses { resume() }
    }
}

extension CheckedContinuation where T == Void, E == Never {
    /// As `UnsafeContinuation.resumeFromAnotherThread()`: only the resume's own accesses are hidden.
    @inline(__always)
    func resumeFromAnotherThread() {
        ignoringSanitizerAccesses { resume() }
    }
}

extension CheckedContinuation where T: Sendable, E == any Error {
    /// As `UnsafeContinuation.resumeFromAnotherThread()`, with `result`; what the resumed task reads
    /// next is ordered by the lock it was handed over under.
    @inline(__always)
    func resumeFromAnotherThread(with result: Result<T, any Error>) {
        ignoringSanitizerAccesses { resume(with: result) }
    }
}

/// Runs `body` with ThreadSanitizer ignoring the calling thread's memory accesses (not its
/// synchronization). Only for resuming continuations.
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
