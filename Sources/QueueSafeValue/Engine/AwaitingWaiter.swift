import QueueSafeValueShims

// MARK: - AwaitingWaiter

/// What a suspended task waits on. It is resumed when its command was granted the critical section
/// or left the queue; the task then reads which under the engine lock (see
/// ``CommandEngine/waitForTurn(_:isolation:)``).
@usableFromInline
typealias TurnContinuation = UnsafeContinuation<Void, Never>

/// A Swift task's place in the queue. The place is taken when the command is issued (so the order
/// is the order of the calls), and the task suspends on it only if it is not granted by then.
///
/// A task that is cancelled while its waiter is still pending leaves the heap and is resumed at
/// once with `cancelled`; see ``CommandEngine/abandon(_:)``.
@usableFromInline
final class AwaitingWaiter: PendingCommand, @unchecked Sendable {
    /// Set under the engine lock by ``CommandEngine/park(_:continuation:)`` while pending.
    var continuation: TurnContinuation?
    /// Moved out of `continuation` under the lock when the waiter is granted; resumed by `start()`.
    private var grantedContinuation: TurnContinuation?
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

    override func didCancelLocked() -> TurnContinuation? {
        let continuation = self.continuation
        self.continuation = nil
        return continuation
    }

    override func takeTaskLocked() -> (any CancellableTask)? {
        let task = self.task
        self.task = nil
        return task
    }

    override func start() {
        let continuation = grantedContinuation
        grantedContinuation = nil
        continuation?.resumeFromAnotherThread()
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
    /// lock it takes after resuming (``CommandEngine/waitForTurn(_:isolation:)``). Outside
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

/// Runs `body` with ThreadSanitizer ignoring the calling thread's memory accesses (its
/// synchronization is still tracked). Only for resuming continuations; see
/// `UnsafeContinuation.resumeFromAnotherThread()`.
@inline(__always)
private func ignoringSanitizerAccesses(_ body: () -> Void) {
    qsv_sanitizer_ignore_accesses_begin()
    body()
    qsv_sanitizer_ignore_accesses_end()
}

/// A task handle that can be cancelled without knowing its result type.
@usableFromInline
protocol CancellableTask: Sendable {
    func cancel()
}

extension Task: CancellableTask {}

// MARK: - Critical sections of the current task

/// One critical section a task is inside: which engine, and which of its sections.
@usableFromInline
struct SectionEntry: Sendable, Equatable {
    @usableFromInline let engine: ObjectIdentifier
    @usableFromInline let generation: Int

    @inlinable
    init(engine: ObjectIdentifier, generation: Int) {
        self.engine = engine
        self.generation = generation
    }
}

/// The critical sections the current task (and its child tasks) run inside.
///
/// A value type with room for three entries inline, so entering a section costs a task-local push
/// and no heap allocation; deeper nesting spills into an array.
@usableFromInline
struct SectionStack: Sendable {
    @usableFromInline var first: SectionEntry?
    @usableFromInline var second: SectionEntry?
    @usableFromInline var third: SectionEntry?
    @usableFromInline var more: [SectionEntry] = []

    @inlinable
    init() {}

    /// This stack with `entry` added.
    @inlinable
    func pushing(_ entry: SectionEntry) -> SectionStack {
        var copy = self
        if copy.first == nil {
            copy.first = entry
        } else if copy.second == nil {
            copy.second = entry
        } else if copy.third == nil {
            copy.third = entry
        } else {
            copy.more.append(entry)
        }
        return copy
    }

    func contains(_ entry: SectionEntry) -> Bool {
        first == entry || second == entry || third == entry || more.contains(entry)
    }
}

/// The sections the current task runs inside; child tasks inherit it.
@usableFromInline
enum CriticalSectionContext {
    /// A plain `TaskLocal` (not the property wrapper) so that inlinable code can push onto it.
    @usableFromInline
    static let sections = TaskLocal(wrappedValue: SectionStack())
}
