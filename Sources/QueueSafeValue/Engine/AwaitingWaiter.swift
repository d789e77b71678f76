// MARK: - AwaitingWaiter

/// A Swift task's place in the queue. The place is taken when the command is issued (so the order
/// is the order of the calls), and the task suspends on it only if it is not granted by then.
///
/// A task that is cancelled while its waiter is still pending leaves the heap and is resumed at
/// once with `cancelled`; see ``CommandEngine/abandon(_:)``.
final class AwaitingWaiter: PendingCommand, @unchecked Sendable {
    /// Set under the engine lock by ``CommandEngine/park(_:continuation:)`` while pending.
    var continuation: UnsafeContinuation<Void, Never>?
    /// Moved out of `continuation` under the lock when the waiter is granted; resumed by `start()`.
    private var grantedContinuation: UnsafeContinuation<Void, Never>?
    /// The task running this command, for ``CommandQueue/cancelAll()``. Under the engine lock.
    var task: (any CancellableTask)?
    /// ``CommandEngine/cancelAll()`` ran while this waiter held the section but before its task was
    /// attached: the task is cancelled as soon as it is. Under the engine lock.
    var cancelRequested = false

    override func didGrantLocked() -> Bool {
        grantedContinuation = continuation
        continuation = nil
        return true
    }

    override func didCancelLocked() -> UnsafeContinuation<Void, Never>? {
        let continuation = self.continuation
        self.continuation = nil
        return continuation
    }

    override func start() {
        let continuation = grantedContinuation
        grantedContinuation = nil
        continuation?.resume()
    }
}

/// A task handle that can be cancelled without knowing its result type.
protocol CancellableTask: Sendable {
    func cancel()
}

extension Task: CancellableTask {}

// MARK: - Critical sections of the current task

/// One critical section the current task is inside: the engine and the grant it holds.
final class CriticalSectionLink: Sendable {
    let engine: ObjectIdentifier
    let grant: UInt64
    let outer: CriticalSectionLink?

    init(engine: ObjectIdentifier, grant: UInt64, outer: CriticalSectionLink?) {
        self.engine = engine
        self.grant = grant
        self.outer = outer
    }
}

/// The critical sections the current task (and its child tasks) run inside, innermost first.
enum CriticalSectionContext {
    @TaskLocal static var innermost: CriticalSectionLink?
}
