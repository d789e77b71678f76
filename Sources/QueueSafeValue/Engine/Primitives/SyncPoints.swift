import Dispatch
import QueueSafeValueShims

#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// The seam between the engine and the threads that run it: every point where what one thread does
/// can change what another does next. In release builds each is the plain primitive, inlined. In
/// debug builds a thread that a *controlled scheduler* (`ControlledWorld.swift`) runs hands each
/// point to it, and the scheduler decides which thread goes next: the checker explores the real
/// engine at every sync point, the `QueueSafeValueTesting` library a user's code at its commands.
/// Every other thread finds no scheduler and goes straight to the primitive.
@usableFromInline
enum SyncPoints {
    #if DEBUG
        /// The scheduler that runs the calling thread, if any (a C thread-local: a Swift global's
        /// lazy access takes a lock ThreadSanitizer sees).
        static var scheduler: (any ControlledScheduler)? {
            guard let raw = qsv_thread_scheduler() else { return nil }
            return (Unmanaged<AnyObject>.fromOpaque(raw).takeUnretainedValue() as! any ControlledScheduler)
        }
    #endif

    /// Every sync point: `controlled` hands it to the calling thread's scheduler, if any; `otherwise`
    /// is the plain primitive, and in release builds all that is left.
    @inline(__always)
    static func controlled<R>(_ controlled: (any ControlledScheduler) -> R, otherwise: () -> R) -> R {
        #if DEBUG
            if let scheduler { return controlled(scheduler) }
        #endif
        return otherwise()
    }

    /// A command arrives, is released or changes the section's state: where a user's code can be
    /// interleaved with another party's. `event` ("command arrives at", …) and `kind` are for reports.
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
            // Built only if the scheduler reports it.
            scheduler?.commandPoint {
                let what = "\(kind.map { "\($0) " } ?? "")\(event)"
                let article = what.first.map { "aeiou".contains($0) } == true ? "an" : "a"
                return "\(article) \(what) \(engine.traceName)"
            }
        }
    #endif

    /// Now, on the calling thread's clock (virtual under the testing library); every deadline reads it.
    @inlinable
    @inline(__always)
    static func now() -> DispatchTime {
        #if DEBUG
            if let virtual = virtualNow() { return virtual }
        #endif
        return .now()
    }

    /// The eventually fair mode's clock, in nanoseconds: a controlled scheduler's own (the checker's
    /// advances at each step, so an exploration sees time pass).
    @inline(__always)
    static func fairnessNow() -> UInt64 {
        controlled({ $0.fairnessNow }, otherwise: { DispatchTime.now().uptimeNanoseconds })
    }

    /// The engine's coarse clock, on the scheduler's clock as ``fairnessNow()``.
    @inline(__always)
    static func coarseNow() -> UInt64 {
        controlled({ $0.fairnessNow }, otherwise: { qsv_coarse_now_ns() })
    }

    #if DEBUG
        @usableFromInline
        static func virtualNow() -> DispatchTime? {
            scheduler?.now
        }
    #endif

    /// `Task.sleep`, on the virtual clock under the testing library.
    static func sleep(nanoseconds: UInt64) async throws {
        if let virtual = controlled({ $0.virtualSleep }, otherwise: { nil }) {
            try await virtual(nanoseconds)
        } else {
            try await Task.sleep(nanoseconds: nanoseconds)
        }
    }

    /// An unstructured task the library starts for its own work: under a controlled scheduler it
    /// prefers the scheduler as its executor (an unstructured task inherits no preference).
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

    /// ``task(detached:_:)`` for an operation that throws; inlinable, as it starts every ``CommandQueue`` operation.
    @inlinable
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

        /// The executor a task that the calling thread starts prefers.
        @available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *)
        @usableFromInline
        static func controlledTaskExecutor() -> (any TaskExecutor)? {
            scheduler?.executorForNewTask()
        }
    #endif

    /// `sched_yield`: under a controlled scheduler, waits until another thread has taken a step.
    static func yield() {
        controlled({ $0.spin() }, otherwise: { _ = sched_yield() })
    }

    /// The processor the calling thread runs on, or -1 if unknown: always under a controlled
    /// scheduler, so that a hint that differs from run to run does not steer a replay.
    @inline(__always)
    static func currentProcessor() -> Int {
        controlled({ _ in -1 }, otherwise: { Int(qsv_current_processor()) })
    }

    /// One turn of a bounded busy-wait: a pause hint, or a `sched_yield`; under a controlled
    /// scheduler a plain sync point (the loop ends on its own).
    @inline(__always)
    static func relax(givingProcessorAway: Bool = false) {
        controlled(
            { $0.atomicPoint() },
            otherwise: {
                if givingProcessorAway { _ = sched_yield() } else { qsv_cpu_relax() }
            })
    }

    /// How many times a waiter polls before it parks: a couple under a controlled scheduler (each poll
    /// is a step to explore, and a parked waiter's path is the one to cover).
    static func spinLimit(_ polls: Int) -> Int {
        controlled({ _ in 2 }, otherwise: { polls })
    }

    /// `queue.async(execute: block)`.
    static func async(_ queue: DispatchQueue, _ block: @escaping @Sendable () -> Void) {
        // Written out: through `controlled`, the block's closure added a call and a file to a
        // dispatch command's walk.
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
        controlled(
            { $0.asyncAfter(deadline, item) },
            otherwise: { DispatchQueue.global().asyncAfter(deadline: deadline, execute: item) })
    }

    /// A task's continuation is about to be resumed from this thread (or the task escalated).
    @inline(__always)
    static func willResume() {
        controlled({ $0.willResume() }, otherwise: {})
    }

    /// Records that a transition happened, for a controlled scheduler's checks.
    @inline(__always)
    static func note(_ event: StaticString) {
        controlled({ $0.note(event) }, otherwise: {})
    }

    /// The calling thread is about to escalate a task.
    @inline(__always)
    static func willTouchTask() {
        controlled({ $0.willTouchTask() }, otherwise: {})
    }

    /// Runs `body`, which the runtime calls under a lock of its own: a controlled scheduler starts
    /// no task meanwhile (it could block on that lock, outside the scheduler's sight).
    @inline(__always)
    static func insideRuntimeLock<R>(_ body: () -> R) -> R {
        controlled { scheduler in
            scheduler.enterRuntimeLock()
            defer { scheduler.leaveRuntimeLock() }
            return body()
        } otherwise: {
            body()
        }
    }

    /// Under a controlled scheduler, the virtual queue whose block the calling thread runs.
    static var queueOverride: QueueTag?? {
        controlled({ .some($0.currentQueue) }, otherwise: { nil })
    }

    /// A controlled scheduler's own deadlock detector, and boost registry (virtual).
    static var detectorOverride: DeadlockDetector? {
        controlled({ $0.detector }, otherwise: { nil })
    }

    static var registryOverride: BoostRegistry? {
        controlled({ $0.boostRegistry }, otherwise: { nil })
    }

    /// The calling thread starts or ends passing a change of urgency along a chain: meanwhile the
    /// raised parties may lag, so a controlled scheduler checks chains only when no thread does.
    @inline(__always)
    static func inheritance(_ begins: Bool) {
        controlled({ $0.inheritance(begins) }, otherwise: {})
    }
}

#if DEBUG
    /// The seam's entry for a controlled scheduler in another module (debug builds only).
    @_spi(Testing)
    public enum ControlledSchedulers {
        /// Makes `scheduler` the scheduler of the calling thread (`nil`: none); it must outlive the
        /// thread's use of it.
        public static func install(_ scheduler: (any ControlledScheduler)?) {
            qsv_set_thread_scheduler(scheduler.map { Unmanaged.passUnretained($0 as AnyObject).toOpaque() })
        }

        /// The scheduler of the calling thread, if any.
        public static var current: (any ControlledScheduler)? { SyncPoints.scheduler }

        /// A nonzero identifier of the calling thread.
        public static var currentThread: Int { currentThreadID() }
    }
#endif

/// A scheduler that runs some threads one at a time and decides, at every sync point, which of
/// them goes next. Every call comes from one of its own threads. Declared in release builds too, so
/// that the seam type-checks there, though only a debug build ever installs one.
@_spi(Testing)
public protocol ControlledScheduler: AnyObject {
    /// Before an atomic operation on a shared word.
    func atomicPoint()
    /// A command point; `describe` says what it is, for the scheduler's report.
    func commandPoint(_ describe: () -> String)
    /// Before taking `lock` (of `role`) at `site`: returns once it may take it without blocking.
    func willLock(_ lock: ObjectIdentifier, role: Any.Type, site: LockSite)
    /// After giving up `lock`.
    func didUnlock(_ lock: ObjectIdentifier)
    /// Parks the calling thread on `parker` until an `unpark` (`true`) or its `deadline` (`false`).
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
    /// Around code the concurrency runtime calls under a lock of its own.
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
    /// The executor for a task the library starts on the calling thread: the scheduler runs its jobs.
    @available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *)
    func executorForNewTask() -> any TaskExecutor
}

/// Where a lock is taken, for the lock-order check.
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

// MARK: - Parker

/// Where a thread parks until another wakes it: a semaphore, behind the seam. A wake before the
/// park is kept: the park then returns at once.
// @unchecked Sendable: the semaphore is thread-safe
final class Parker: @unchecked Sendable {
    private let semaphore = DispatchSemaphore(value: 0)

    init() {}

    /// Parks until woken (`true`) or until `deadline` (`false`; `nil`: none).
    @discardableResult
    func park(until deadline: DispatchTime? = nil) -> Bool {
        SyncPoints.controlled(
            { $0.park(ObjectIdentifier(self), deadline: deadline) },
            otherwise: { semaphore.wait(timeout: deadline ?? .distantFuture) == .success })
    }

    /// Wakes the parked thread, or lets its next park return at once.
    func unpark() {
        SyncPoints.controlled({ $0.unpark(ObjectIdentifier(self)) }, otherwise: { _ = semaphore.signal() })
    }
}
