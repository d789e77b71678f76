import Dispatch
import Foundation

@_spi(Testing) @testable import QueueSafeValue
@testable import QueueSafeValueTesting

// The commands the checker's scenarios issue, each through the public API, each telling the run
// when its closure begins and ends (exclusivity), how it ended (exactly once), and when its
// completion arrived (exactly once). Every successful `set` adds 1, so a value's final count is the
// number of commands that ran.

/// A shared handle on what a run's threads pass each other (a task, a completion).
final class Mailbox<T>: @unchecked Sendable {  // @unchecked Sendable: every access takes `lock`
    private let lock = NSLock()
    private var stored: T?
    /// Woken whenever a value is put in (a parker of the world, which the engine's parking uses too).
    private let arrival: Parker?

    init(_ arrival: Parker? = nil) {
        self.arrival = arrival
    }

    var value: T? {
        get { lock.withLock { stored } }
        set {
            lock.withLock { stored = newValue }
            if newValue != nil { arrival?.unpark() }
        }
    }

    /// Takes the value out (a completion that is called or dropped once).
    func take() -> T? {
        lock.withLock {
            defer { stored = nil }
            return stored
        }
    }
}

/// Lets a manual completion's `done` go: calls it, or drops it (releases it uncalled).
final class HeldCompletion: @unchecked Sendable {  // @unchecked Sendable: handed to one thread at a time
    private var done: CommandCompletionClosure?
    private let released: () -> Void

    init(_ done: @escaping CommandCompletionClosure, released: @escaping () -> Void) {
        self.done = done
        self.released = released
    }

    func call() {
        released()
        done?()
        done = nil
    }

    func drop() {
        released()
        done = nil  // the last reference: the command ends with a dropped completion
    }
}

extension CheckerRun {
    /// How a result reads in a run's record.
    static func describe<V>(_ result: Result<V, QueueSafeValueError>) -> String {
        switch result {
        case .success: return "ran"
        case .failure(let error): return Self.describe(error)
        }
    }

    static func describe(_ error: any Error) -> String {
        guard let error = error as? QueueSafeValueError else { return "\(error)" }
        switch error {
        case .timedOut: return "timed out"
        case .cancelled: return "cancelled"
        case .deadlock: return "deadlock"
        case .valueContainerDeinited: return "refused: released"
        case .reentrantAccess: return "refused: reentrant"
        default: return "\(error)"
        }
    }

    /// A task of the world (it prefers the world as its executor, so the world runs its jobs).
    /// Task executors need macOS 15 / iOS 18: a scenario that starts one says so
    /// (``CheckerScenario/needsTaskExecutors``, checked on every platform), and is skipped below.
    @discardableResult
    func worldTask(_ body: sending @escaping @isolated(any) () async -> Void) -> Task<Void, Never> {
        StorageChecker.startedTask(in: world)
        guard #available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *) else {
            preconditionFailure(
                "a scenario that starts tasks must be marked needsTaskExecutors (skipped below macOS 15)")
        }
        return Task(executorPreference: world, operation: body)
    }

    /// `set` on the blocking schedule, on the calling thread (of the world).
    func blocking(_ name: String, _ value: WaitSchedule<Int>, _ priority: CommandPriority) {
        let result = value.priority(priority).set { [self] count in
            enter(name)
            count += 1
            exit(name)
        }
        end(name, Self.describe(result))
    }

    /// A manual-completion `set` on the blocking schedule: `done` is called inside the closure,
    /// dropped inside it, or handed to `later` (whoever takes it calls or drops it).
    func blockingManual(
        _ name: String, _ value: WaitSchedule<Int>, _ priority: CommandPriority, done: ManualDone,
        later: Mailbox<HeldCompletion>? = nil
    ) {
        let result = value.priority(priority).set(manualCompletion: { [self] count, completion in
            enter(name)
            count += 1
            handle(completion, name, done: done, later: later)
        })
        end(name, Self.describe(result))
    }

    /// What a manual-completion closure does with its `done`.
    enum ManualDone {
        case inside
        case droppedInside
        /// Put in the mailbox; a later step of the scenario calls it (or drops it).
        case later
    }

    private func handle(
        _ done: @escaping CommandCompletionClosure, _ name: String, done how: ManualDone,
        later: Mailbox<HeldCompletion>?
    ) {
        let held = HeldCompletion(done) { [self] in exit(name) }
        switch how {
        case .inside: held.call()
        case .droppedInside: held.drop()
        case .later: later!.value = held
        }
    }

    /// `set(accessClosure:completion:)` on the dispatch schedule (without a completion: a silent
    /// command, which may run its successor inline).
    func dispatch(
        _ name: String, _ value: QueueSafeValue<Int>, _ priority: CommandPriority, on queue: DispatchQueue,
        completion: Bool = true
    ) {
        let commands = value.async(performIn: queue).priority(priority)
        let access: @Sendable (inout Int) -> Void = { [self] count in
            enter(name)
            count += 1
            exit(name)
            if !completion { end(name, "ran") }
        }
        if completion {
            commands.set(accessClosure: access) { [self] result in
                deliver(name)
                end(name, Self.describe(result))
            }
        } else {
            commands.set(accessClosure: access)
        }
    }

    /// A manual-completion `set` on the dispatch schedule.
    func dispatchManual(
        _ name: String, _ value: QueueSafeValue<Int>, _ priority: CommandPriority, on queue: DispatchQueue,
        done: ManualDone, later: Mailbox<HeldCompletion>? = nil
    ) {
        value.async(performIn: queue).priority(priority).set(
            manualCompletion: { [self] count, completion in
                enter(name)
                count += 1
                handle(completion, name, done: done, later: later)
            },
            completion: { [self] result in
                deliver(name)
                end(name, Self.describe(result))
            })
    }

    // MARK: Shared reads and writers that can be seen to overlap

    // A closure without a sync point runs atomically in the world, so these hold the section across
    // one (a turn of a bounded busy-wait, a plain sync point): a command that ran beside them is seen.

    /// A shared `read` on the blocking schedule.
    func readBlocking(_ name: String, _ value: WaitSchedule<Int>, _ priority: CommandPriority) {
        let result = value.priority(priority).readResult { [self] _ in
            enterShared(name)
            SyncPoints.relax()
            exitShared(name)
        }
        end(name, Self.describe(result))
    }

    /// A manual-completion shared `read` on the blocking schedule; `done` as in
    /// ``blockingManual(_:_:_:done:later:)``.
    func readBlockingManual(
        _ name: String, _ value: WaitSchedule<Int>, _ priority: CommandPriority, done: ManualDone,
        later: Mailbox<HeldCompletion>? = nil
    ) {
        let result = value.priority(priority).read(manualCompletion: { [self] _, completion in
            enterShared(name)
            let held = HeldCompletion(completion) { [self] in exitShared(name) }
            switch done {
            case .inside: held.call()
            case .droppedInside: held.drop()
            case .later: later!.value = held
            }
        })
        end(name, Self.describe(result))
    }

    /// A shared `read` on the dispatch schedule; checks that it runs on its queue.
    func readDispatch(
        _ name: String, _ value: QueueSafeValue<Int>, _ priority: CommandPriority, on queue: DispatchQueue
    ) {
        value.async(performIn: queue).priority(priority).read { [self] result in
            if case .success = result {
                enterShared(name)
                if QueueTag.current?.label != queue.label { report("\(name) ran off its queue") }
                SyncPoints.relax()
                exitShared(name)
            }
            end(name, Self.describe(result))
        }
    }

    /// A shared `read` on the awaiting schedule, in a task of the world.
    @discardableResult
    func readAwaiting(
        _ name: String, _ value: AwaitSchedule<Int>, _ priority: CommandPriority,
        tasks: Mailbox<Task<Void, Never>>? = nil
    ) -> Task<Void, Never> {
        let task = worldTask { [self] in
            do {
                try await value.priority(priority).read { _ in
                    enterShared(name)
                    SyncPoints.relax()
                    exitShared(name)
                }
                end(name, "ran")
            } catch {
                end(name, Self.describe(error))
            }
        }
        tasks?.value = task
        return task
    }

    /// A blocking `set` that holds the section across a sync point.
    func writeBlocking(_ name: String, _ value: WaitSchedule<Int>, _ priority: CommandPriority) {
        let result = value.priority(priority).set { [self] count in
            enter(name)
            count += 1
            SyncPoints.relax()
            exit(name)
        }
        end(name, Self.describe(result))
    }

    /// `set` on the awaiting schedule, in a task of the world; returns the task.
    @discardableResult
    func awaiting(
        _ name: String, _ value: AwaitSchedule<Int>, _ priority: CommandPriority,
        tasks: Mailbox<Task<Void, Never>>? = nil
    ) -> Task<Void, Never> {
        let task = worldTask { [self] in
            do {
                try await value.priority(priority).set { count in
                    enter(name)
                    count += 1
                    exit(name)
                }
                end(name, "ran")
            } catch {
                end(name, Self.describe(error))
            }
        }
        tasks?.value = task
        return task
    }

    /// On this thread: `set` on `outer` (blocking, highest priority), and inside its closure
    /// ``blocking(_:_:_:)`` on `inner` at `priority`; each records how it ended under its name.
    func blockingNested(
        _ outerName: String, _ outer: QueueSafeValue<Int>, _ innerName: String, _ inner: QueueSafeValue<Int>,
        _ priority: CommandPriority = .highest
    ) {
        let result = outer.wait.highestPriority.set { [self] _ in blocking(innerName, inner.wait, priority) }
        end(outerName, Self.describe(result))
    }

    /// In a task of the world: `set` on `outer` (awaiting; a shared `read` if `outerReads`), and
    /// inside its closure `set` on `inner` (awaiting, `+= 1`); each records how it ended under its
    /// name.
    func awaitingNested(
        _ outerName: String, _ outer: QueueSafeValue<Int>, _ innerName: String, _ inner: QueueSafeValue<Int>,
        outerReads: Bool = false
    ) {
        worldTask { [self] in
            let innerSet: () async -> Void = { [self] in
                do {
                    try await inner.async.highestPriority.set { $0 += 1 }
                    end(innerName, "ran")
                } catch {
                    end(innerName, Self.describe(error))
                }
            }
            do {
                if outerReads {
                    try await outer.async.highestPriority.read { _ in await innerSet() }
                } else {
                    try await outer.async.highestPriority.set { _ in await innerSet() }
                }
                end(outerName, "ran")
            } catch {
                end(outerName, Self.describe(error))
            }
        }
    }

    /// An operation of `queue` (from the calling thread of the world), and a task of the world that
    /// records how it ended. Returns the operation's task.
    @discardableResult
    func operation(
        _ name: String, _ queue: CommandQueue, _ priority: CommandPriority, policy: CommandQueue.Policy = .standard,
        begins: (@Sendable () -> Void)? = nil
    ) -> Task<Void, any Error> {
        let task = queue.enqueue(priority: priority, policy: policy) { [self] in
            begins?()
            enter(name)
            exit(name)
        }
        worldTask { [self] in
            switch await task.result {
            case .success: end(name, "ran")
            case .failure(let error): end(name, Self.describe(error))
            }
        }
        return task
    }

    /// Submits an operation to a queue of width above 1: its closure holds one slot, beside other
    /// operations of the queue (``enterShared(_:)``).
    @discardableResult
    func submitted(_ name: String, _ queue: CommandQueue, _ priority: CommandPriority) -> QueuedOperation<Void> {
        let operation = queue.submit(priority: priority) { [self] in
            enterShared(name)
            exitShared(name)
        }
        worldTask { [self] in
            switch await operation.task.result {
            case .success: end(name, "ran")
            case .failure(let error): end(name, Self.describe(error))
            }
        }
        return operation
    }
}
