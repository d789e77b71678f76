import Dispatch
import QueueSafeValueShims

#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

// MARK: - SyncPoints

/// The seam between the engine and the threads that run it: every point where what one
/// thread does can change what another does next — an atomic operation on a shared word, taking or
/// giving up a lock, parking and waking a thread, a busy-wait, `queue.async`, resuming a task.
///
/// In release builds each of these is the plain primitive, inlined: the seam costs nothing. In debug
/// builds a thread that a *controlled scheduler* runs hands each point to it, and the scheduler
/// decides which thread goes next. The seam has two clients, one scheduler
/// (`Sources/QueueSafeValueTesting/ControlledWorld.swift`): the test suite's checker, which explores
/// the interleavings of the real engine (not of a copy of it) at every sync point, and the
/// `QueueSafeValueTesting` library, which explores a user's code at its commands
/// (``commandPoint(_:_:_:)``). Every other thread (of the app, of the other tests) finds no scheduler and
/// goes straight to the primitive.
@usableFromInline
enum SyncPoints {
    #if DEBUG
        /// The scheduler that runs the calling thread, if any (read at every sync point: a C
        /// thread-local, see `qsv_thread_scheduler`).
        static var scheduler: (any ControlledScheduler)? {
            guard let raw = qsv_thread_scheduler() else { return nil }
            return (Unmanaged<AnyObject>.fromOpaque(raw).takeUnretainedValue() as! any ControlledScheduler)
        }

        /// Makes `scheduler` the scheduler of the calling thread (`nil`: none), for the scheduler's own
        /// threads. The scheduler must outlive the thread's use of it.
        static func install(_ scheduler: (any ControlledScheduler)?) {
            qsv_set_thread_scheduler(scheduler.map { Unmanaged.passUnretained($0 as AnyObject).toOpaque() })
        }
    #endif

    /// A command arrives, is released or changes the section's state (each of the state word's six
    /// operations, see `CommandEngine+Word.swift`), or a user's own point: where a user's code can
    /// be interleaved with another party's (the testing library explores these; the checker, every
    /// sync point).
    /// - Parameters:
    ///   - event: what happens, for a report: "command arrives at", "read releases", …
    ///   - engine: the value or queue it happens to.
    ///   - kind: the command's kind, if it is known here.
    @inlinable
    @inline(__always)
    static func commandPoint(_ event: StaticString, _ engine: CommandEngine, _ kind: CommandKind? = nil) {
        #if DEBUG
            commandPointSlow(event, engine, kind)
        #endif
    }

    #if DEBUG
        @usableFromInline
        static func commandPointSlow(_ event: StaticString, _ engine: CommandEngine, _ kind: CommandKind?) {
            // "a blocking command arrives at 'balance'": built only if the scheduler reports it.
            scheduler?.commandPoint {
                let what = "\(kind.map { "\($0) " } ?? "")\(event)"
                let article = what.first.map { "aeiou".contains($0) } == true ? "an" : "a"
                return "\(article) \(what) \(engine.traceName)"
            }
        }
    #endif

    /// Now, on the calling thread's clock: the scheduler's virtual clock under the testing library,
    /// else `DispatchTime.now()`. Every deadline a command computes reads it.
    @inlinable
    @inline(__always)
    static func now() -> DispatchTime {
        #if DEBUG
            if let virtual = virtualNow() { return virtual }
        #endif
        return .now()
    }

    /// The eventually fair mode's clock, in nanoseconds: under a controlled scheduler its own
    /// clock (the checker's advances a microsecond at each step, so that an exploration sees time
    /// pass), else `DispatchTime.now()`.
    @inline(__always)
    static func fairnessNow() -> UInt64 {
        #if DEBUG
            if let scheduler { return scheduler.fairnessNow }
        #endif
        return DispatchTime.now().uptimeNanoseconds
    }

    /// The engine's coarse clock (``coarseNow()``), on the scheduler's clock under a controlled
    /// scheduler (as ``fairnessNow()``), so that deadlines computed with ``now()`` compare with it.
    @inline(__always)
    static func coarseNow() -> UInt64 {
        #if DEBUG
            if let scheduler { return scheduler.fairnessNow }
        #endif
        return qsv_coarse_now_ns()
    }

    #if DEBUG
        @usableFromInline
        static func virtualNow() -> DispatchTime? {
            scheduler?.now
        }
    #endif

    /// Suspends the calling task for `nanoseconds` (`Task.sleep`), on the scheduler's virtual clock
    /// under the testing library.
    static func sleep(nanoseconds: UInt64) async throws {
        #if DEBUG
            if let scheduler, let virtual = scheduler.virtualSleep {
                try await virtual(nanoseconds)
                return
            }
        #endif
        try await Task.sleep(nanoseconds: nanoseconds)
    }

    /// An unstructured task that the library starts for its own work (`Task {}`, or `Task.detached {}`
    /// when `detached`): under a controlled scheduler it prefers the scheduler as its executor, so the
    /// scheduler runs it too (an unstructured task inherits no executor preference).
    @discardableResult
    static func task<T: Sendable>(
        detached: Bool = false, _ operation: sending @escaping () async -> T
    ) -> Task<T, Never> {
        #if DEBUG
            if #available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *),
                let executor = controlledTaskExecutor()
            {
                return detached
                    ? Task.detached(executorPreference: executor, operation: operation)
                    : Task(executorPreference: executor, operation: operation)
            }
        #endif
        return detached ? Task.detached(operation: operation) : Task(operation: operation)
    }

    /// ``task(detached:_:)`` for an operation that throws.
    @discardableResult
    static func throwingTask<T: Sendable>(
        detached: Bool = false, _ operation: sending @escaping () async throws -> T
    ) -> Task<T, any Error> {
        #if DEBUG
            if #available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *),
                let executor = controlledTaskExecutor()
            {
                return detached
                    ? Task.detached(executorPreference: executor, operation: operation)
                    : Task(executorPreference: executor, operation: operation)
            }
        #endif
        return detached ? Task.detached(operation: operation) : Task(operation: operation)
    }

    /// Before an atomic operation on a word another thread may touch.
    @inlinable
    @inline(__always)
    static func atomic() {
        #if DEBUG
            atomicPoint()
        #endif
    }

    #if DEBUG
        @usableFromInline
        static func atomicPoint() {
            scheduler?.atomicPoint()
        }

        /// The executor a task that the calling thread starts prefers: one its controlled scheduler
        /// makes for the task (and names, for its reports).
        @available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *)
        @usableFromInline
        static func controlledTaskExecutor() -> (any TaskExecutor)? {
            scheduler?.executorForNewTask()
        }
    #endif

    /// One turn of a busy-wait that gives the processor away (`sched_yield`): under a controlled
    /// scheduler, the thread waits until another thread has taken a step.
    static func yield() {
        #if DEBUG
            if let scheduler {
                scheduler.spin()
                return
            }
        #endif
        sched_yield()
    }

    /// The processor the calling thread runs on, or -1 if unknown: always under a controlled
    /// scheduler (a hint that differs from run to run must not steer a schedule being replayed),
    /// and on platforms without a cheap way to tell (see `qsv_current_processor`).
    @inline(__always)
    static func currentProcessor() -> Int {
        #if DEBUG
            if scheduler != nil { return -1 }
        #endif
        return Int(qsv_current_processor())
    }

    /// One turn of a bounded busy-wait: a pause hint on the processor, or with `givingProcessorAway`
    /// a `sched_yield` (a `BlockingWaiter` that is not the next to be served). Under a controlled
    /// scheduler either is a plain sync point (the loop ends on its own, the waiter is not stuck).
    @inline(__always)
    static func relax(givingProcessorAway: Bool = false) {
        #if DEBUG
            if let scheduler {
                scheduler.atomicPoint()
                return
            }
        #endif
        if givingProcessorAway { sched_yield() } else { cpuRelax() }
    }

    /// How many times a waiter polls before it parks: `polls`, or a couple under a controlled
    /// scheduler (each poll is a step to explore, and a parked waiter's path is the one to cover).
    static func spinLimit(_ polls: Int) -> Int {
        #if DEBUG
            if scheduler != nil { return 2 }
        #endif
        return polls
    }

    /// `queue.async(execute: block)`.
    static func async(_ queue: DispatchQueue, _ block: @escaping @Sendable () -> Void) {
        #if DEBUG
            if let scheduler {
                scheduler.async(on: queue, block)
                return
            }
        #endif
        queue.async(execute: block)
    }

    /// Runs `item` at `deadline` on a global queue, unless it was cancelled first.
    static func asyncAfter(_ deadline: DispatchTime, _ item: DispatchWorkItem) {
        #if DEBUG
            if let scheduler {
                scheduler.asyncAfter(deadline, item)
                return
            }
        #endif
        DispatchQueue.global().asyncAfter(deadline: deadline, execute: item)
    }

    /// A task's continuation is about to be resumed from this thread (or the task escalated).
    @inline(__always)
    static func willResume() {
        #if DEBUG
            scheduler?.willResume()
        #endif
    }

    /// Records that a transition happened, in the order transitions happen, for a controlled
    /// scheduler's checks (nothing outside one).
    @inline(__always)
    static func note(_ event: StaticString) {
        #if DEBUG
            scheduler?.note(event)
        #endif
    }

    /// The calling thread is about to escalate a task (under the boost lock, which serializes it
    /// with the end of the hold: see `PriorityInheritance.swift`).
    @inline(__always)
    static func willTouchTask() {
        #if DEBUG
            scheduler?.willTouchTask()
        #endif
    }

    /// Runs `body`, code that the concurrency runtime calls while it holds a lock of its own (a
    /// cancellation or escalation handler): under a controlled scheduler, no task may be started
    /// meanwhile (it could block on that lock, outside the scheduler's sight).
    @inline(__always)
    static func insideRuntimeLock<R>(_ body: () -> R) -> R {
        #if DEBUG
            if let scheduler {
                scheduler.enterRuntimeLock()
                defer { scheduler.leaveRuntimeLock() }
                return body()
            }
        #endif
        return body()
    }

    /// The queues the calling thread runs on (see ``QueueTag/currentIdentities``): under a
    /// controlled scheduler, the virtual queue whose block it runs.
    static var queueOverride: QueueTag?? {
        #if DEBUG
            if let scheduler { return .some(scheduler.currentQueue) }
        #endif
        return nil
    }

    /// The deadlock detector of the calling thread: the process's, or a controlled scheduler's own.
    static var detectorOverride: DeadlockDetector? {
        #if DEBUG
            if let scheduler { return scheduler.detector }
        #endif
        return nil
    }

    /// The boost registry of the calling thread: the process's, or a controlled scheduler's own
    /// (virtual: it changes no real thread's scheduling).
    static var registryOverride: BoostRegistry? {
        #if DEBUG
            if let scheduler { return scheduler.boostRegistry }
        #endif
        return nil
    }

    /// The calling thread starts (`true`) or ends (`false`) passing a change of urgency along a
    /// chain: until it ends, the raised parties may lag behind what the machines decided, so a
    /// controlled scheduler checks the chains only while no thread is doing this.
    @inline(__always)
    static func inheritance(_ begins: Bool) {
        #if DEBUG
            scheduler?.inheritance(begins)
        #endif
    }
}

#if DEBUG
    /// The seam's entry for a controlled scheduler in another module (the `QueueSafeValueTesting`
    /// library): debug builds only, as the seam.
    @_spi(Testing)
    public enum ControlledSchedulers {
        /// Makes `scheduler` the scheduler of the calling thread (`nil`: none).
        public static func install(_ scheduler: (any ControlledScheduler)?) {
            SyncPoints.install(scheduler)
        }

        /// The scheduler of the calling thread, if any.
        public static var current: (any ControlledScheduler)? { SyncPoints.scheduler }

        /// A nonzero identifier of the calling thread.
        public static var currentThread: Int { currentThreadID() }
    }

    /// A scheduler that runs some threads one at a time and decides, at every sync point, which of
    /// them goes next (the test suite's checker, and the `QueueSafeValueTesting` library). Every call
    /// comes from one of its own threads.
    @_spi(Testing)
    public protocol ControlledScheduler: AnyObject {
        /// Before an atomic operation on a shared word.
        func atomicPoint()
        /// A command point (see ``SyncPoints/commandPoint(_:_:_:)``); `describe` says what it is
        /// ("a blocking command arrives at 'balance'"), for the scheduler's report.
        func commandPoint(_ describe: () -> String)
        /// Before taking `lock`, whose role is the type of what it guards, at `site`: returns once
        /// the calling thread may take it without blocking.
        func willLock(_ lock: ObjectIdentifier, role: Any.Type, site: LockSite)
        /// After giving up `lock`.
        func didUnlock(_ lock: ObjectIdentifier)
        /// Parks the calling thread on `parker` until a `unpark` (returns `true`) or, with a
        /// `deadline`, until the scheduler lets it pass (returns `false`).
        func park(_ parker: ObjectIdentifier, deadline: DispatchTime?) -> Bool
        /// Wakes a thread parked on `parker`, or lets the next park on it return at once.
        func unpark(_ parker: ObjectIdentifier)
        /// A busy-wait turn.
        func spin()
        /// `queue.async(execute: block)`.
        func async(on queue: DispatchQueue, _ block: @escaping @Sendable () -> Void)
        /// A timer for `item`, which fires when the scheduler decides its deadline passed.
        func asyncAfter(_ deadline: DispatchTime, _ item: DispatchWorkItem)
        /// A task's continuation is about to be resumed.
        func willResume()
        /// A transition happened (see ``SyncPoints/note(_:)``); not a sync point.
        func note(_ event: StaticString)
        /// A task is about to be escalated (the runtime takes the task's lock).
        func willTouchTask()
        /// The calling thread runs code the concurrency runtime called under a lock of its own.
        func enterRuntimeLock()
        func leaveRuntimeLock()
        /// The virtual queue whose block the calling thread runs, if any.
        var currentQueue: QueueTag? { get }
        /// The deadlock detector of the scheduler's world.
        var detector: DeadlockDetector { get }
        /// The boost registry of the scheduler's world (virtual).
        var boostRegistry: BoostRegistry { get }
        /// See ``SyncPoints/inheritance(_:)``.
        func inheritance(_ begins: Bool)
        /// The virtual clock's now, or `nil` for the real clock.
        var now: DispatchTime? { get }
        /// The eventually fair mode's clock (see ``SyncPoints/fairnessNow()``), in nanoseconds.
        var fairnessNow: UInt64 { get }
        /// A sleep on the virtual clock, or `nil` for `Task.sleep`.
        var virtualSleep: (@Sendable (UInt64) async throws -> Void)? { get }
        /// The executor for a task the library starts on the calling thread (see
        /// ``SyncPoints/task(detached:_:)``): the scheduler runs its jobs, and tells them from other
        /// tasks' jobs by it.
        @available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *)
        func executorForNewTask() -> any TaskExecutor
    }

    /// Where a lock is taken (the caller of `LockedState.withLock`), for the lock-order check.
    @_spi(Testing)
    public struct LockSite: CustomStringConvertible {
        /// The file that takes the lock.
        public let file: StaticString
        /// The line that takes it.
        public let line: UInt

        /// The site at `file`:`line`.
        public init(file: StaticString, line: UInt) {
            self.file = file
            self.line = line
        }

        /// `file:line`.
        public var description: String { "\(file):\(line)" }
    }
#endif

// MARK: - Parker

/// Where a thread parks until another wakes it: a semaphore, behind the seam (see ``SyncPoints``).
/// A wake before the park is kept: the park then returns at once.
// @unchecked Sendable: the semaphore is thread-safe
final class Parker: @unchecked Sendable {
    private let semaphore = DispatchSemaphore(value: 0)

    init() {}

    /// Parks until woken.
    func park() {
        #if DEBUG
            if let scheduler = SyncPoints.scheduler {
                _ = scheduler.park(ObjectIdentifier(self), deadline: nil)
                return
            }
        #endif
        semaphore.wait()
    }

    /// Parks until woken (`true`) or until `deadline` (`false`).
    func park(until deadline: DispatchTime) -> Bool {
        #if DEBUG
            if let scheduler = SyncPoints.scheduler {
                return scheduler.park(ObjectIdentifier(self), deadline: deadline)
            }
        #endif
        return semaphore.wait(timeout: deadline) == .success
    }

    /// Wakes the parked thread, or lets its next park return at once.
    func unpark() {
        #if DEBUG
            if let scheduler = SyncPoints.scheduler {
                scheduler.unpark(ObjectIdentifier(self))
                return
            }
        #endif
        semaphore.signal()
    }
}
