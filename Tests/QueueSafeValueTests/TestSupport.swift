import Dispatch
import Foundation
import XCTest

@testable import QueueSafeValue

#if canImport(CDispatch)
    import CDispatch
#endif

// Shared helpers for the core test suite: lock-protected boxes for state captured across threads,
// bounded waits that turn a hang into a failure, thread spawning, a seeded random generator, and a
// way to hold a value's critical section until the test lets go of it.

// MARK: - Timeouts

/// How long any single wait in the tests may take before it counts as a hang. Generous on purpose:
/// the tests never assert on speed, only on what happened.
let hangTimeout: TimeInterval = 30

// MARK: - Locked

/// A value guarded by an `NSLock`, shareable across threads and dispatch queues.
final class Locked<Wrapped>: @unchecked Sendable {
    private let lock = NSLock()
    private var wrapped: Wrapped

    init(_ value: Wrapped) {
        wrapped = value
    }

    /// A copy of the current value.
    var value: Wrapped {
        lock.lock()
        defer { lock.unlock() }
        return wrapped
    }

    /// Runs `body` with exclusive access to the value.
    @discardableResult
    func withLock<R>(_ body: (inout Wrapped) throws -> R) rethrows -> R {
        lock.lock()
        defer { lock.unlock() }
        return try body(&wrapped)
    }

    func set(_ newValue: Wrapped) {
        withLock { $0 = newValue }
    }
}

extension Locked where Wrapped == Int {
    /// Adds `delta` and returns the new value.
    @discardableResult
    func add(_ delta: Int) -> Int {
        withLock {
            $0 += delta
            return $0
        }
    }
}

/// An append-only log shared across threads.
final class Recorder<Element>: @unchecked Sendable {
    private let lock = NSLock()
    private var elements: [Element] = []

    init() {}

    func append(_ element: Element) {
        lock.lock()
        elements.append(element)
        lock.unlock()
    }

    var snapshot: [Element] {
        lock.lock()
        defer { lock.unlock() }
        return elements
    }

    var count: Int {
        lock.lock()
        defer { lock.unlock() }
        return elements.count
    }
}

// MARK: - Exclusivity probe

/// Counts how many closures are inside a critical section at once. Any value above 1 is a
/// violation of the queue's one-command-at-a-time guarantee.
final class SectionProbe: @unchecked Sendable {
    private let lock = NSLock()
    private var inside = 0
    private var maximum = 0
    private var entries = 0

    func enter() {
        lock.lock()
        inside += 1
        entries += 1
        maximum = max(maximum, inside)
        lock.unlock()
    }

    func leave() {
        lock.lock()
        inside -= 1
        lock.unlock()
    }

    /// Enters, gives other threads a chance to run (so an overlap would show), and leaves.
    func pass() {
        enter()
        sched_yield()
        leave()
    }

    /// The most closures ever seen inside at the same time.
    var maximumInside: Int {
        lock.lock()
        defer { lock.unlock() }
        return maximum
    }

    var entryCount: Int {
        lock.lock()
        defer { lock.unlock() }
        return entries
    }

    /// How many closures are inside right now.
    var insideCount: Int {
        lock.lock()
        defer { lock.unlock() }
        return inside
    }
}

// MARK: - Waiting with a timeout

/// Polls `condition` until it holds or `timeout` passes, running the main run loop meanwhile (so
/// work dispatched to the main queue keeps going while the test's main thread waits).
/// - Returns: whether the condition held in time.
@discardableResult
func waitUntil(timeout: TimeInterval = hangTimeout, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while !condition() {
        if Date() >= deadline { return false }
        if Thread.isMainThread {
            RunLoop.main.run(until: Date().addingTimeInterval(0.001))
        } else {
            usleep(500)
        }
    }
    return true
}

/// Waits for `condition`, failing the test if it does not hold within the hang timeout.
/// - Returns: whether the condition held in time (loops stop at the first hang).
@discardableResult
func expectEventually(
    _ message: @autoclosure () -> String,
    timeout: TimeInterval = hangTimeout,
    file: StaticString = #filePath,
    line: UInt = #line,
    _ condition: () -> Bool
) -> Bool {
    if !waitUntil(timeout: timeout, condition) {
        XCTFail("Timed out after \(timeout) s waiting for: \(message())", file: file, line: line)
        return false
    }
    return true
}

/// Waits on `semaphore`, failing the test on a hang.
/// - Returns: whether the semaphore was signalled in time.
@discardableResult
func waitOrFail(
    _ semaphore: DispatchSemaphore,
    _ message: @autoclosure () -> String = "semaphore",
    timeout: TimeInterval = hangTimeout,
    file: StaticString = #filePath,
    line: UInt = #line
) -> Bool {
    failOnTimeout(semaphore.wait(timeout: .now() + timeout), timeout, message(), file: file, line: line)
}

/// Waits for `group`, failing the test on a hang.
@discardableResult
func waitOrFail(
    _ group: DispatchGroup,
    _ message: @autoclosure () -> String = "dispatch group",
    timeout: TimeInterval = hangTimeout,
    file: StaticString = #filePath,
    line: UInt = #line
) -> Bool {
    failOnTimeout(group.wait(timeout: .now() + timeout), timeout, message(), file: file, line: line)
}

/// Fails the test if a bounded dispatch wait timed out.
/// - Returns: whether the wait succeeded.
private func failOnTimeout(
    _ result: DispatchTimeoutResult,
    _ timeout: TimeInterval,
    _ message: @autoclosure () -> String,
    file: StaticString,
    line: UInt
) -> Bool {
    guard result == .timedOut else { return true }
    XCTFail("Timed out after \(timeout) s waiting for: \(message())", file: file, line: line)
    return false
}

/// Waits until `engine` has exactly `count` live pending commands, failing the test on a hang.
/// - Returns: whether it got there in time (loops stop at the first hang).
@discardableResult
func waitForPending(
    _ engine: CommandEngine,
    count: Int,
    file: StaticString = #filePath,
    line: UInt = #line
) -> Bool {
    expectEventually("\(count) pending commands (now \(engine.pendingCount))", file: file, line: line) {
        engine.pendingCount == count
    }
}

/// Sleeps the calling thread briefly, giving other threads a chance to do something they must
/// not do (used only before asserting that something did *not* happen, never to time anything).
func sleepBriefly(milliseconds: Int = 50) {
    usleep(useconds_t(milliseconds * 1000))
}

// MARK: - Threads

/// Dedicated threads for blocking commands (a blocked thread must not starve a dispatch pool).
final class ThreadGroup: @unchecked Sendable {
    private let group = DispatchGroup()

    /// Starts a new thread running `body`.
    func spawn(_ body: @escaping @Sendable () -> Void) {
        group.enter()
        let thread = Thread { [group] in
            body()
            group.leave()
        }
        thread.stackSize = 1 << 20
        thread.start()
    }

    /// Waits for every spawned thread to finish, failing the test on a hang.
    @discardableResult
    func join(file: StaticString = #filePath, line: UInt = #line) -> Bool {
        waitOrFail(group, "spawned threads to finish", file: file, line: line)
    }
}

// MARK: - Holding a value

/// Holds a value's critical section through a manual-completion dispatch command until
/// ``release()`` is called, so a test can line up waiting commands behind it.
final class SectionHolder: @unchecked Sendable {
    private let done = Locked<CommandCompletionClosure?>(nil)
    private let granted = DispatchSemaphore(value: 0)
    private static let queue = DispatchQueue(label: "SectionHolder")

    /// Issues the holding command at `priority` and waits until it holds the section.
    init<Value: Sendable>(
        _ value: QueueSafeValue<Value>,
        priority: CommandPriority = .highest,
        file: StaticString = #filePath,
        line: UInt = #line
    ) {
        value.async(performIn: Self.queue).priority(priority).get { [done, granted] _, completion in
            done.set(completion)
            granted.signal()
        }
        waitOrFail(granted, "the holder to get the section", file: file, line: line)
    }

    /// Ends the holding command (from the calling thread); the next pending command starts.
    func release() {
        let completion = done.withLock { closure -> CommandCompletionClosure? in
            defer { closure = nil }
            return closure
        }
        completion?()
    }
}

// MARK: - Bounded blocking reads

extension QueueSafeValue {
    /// Blocking commands that give up with `.timedOut` after the hang timeout, so a value that is
    /// never freed fails the test instead of hanging it.
    var waitBounded: WaitSchedule<Value> {
        wait(timeout: .seconds(Int(hangTimeout)))
    }
}

// MARK: - Queues

/// The label of the dispatch queue the caller runs on.
func currentQueueLabel() -> String {
    #if canImport(Darwin)
        return String(cString: __dispatch_queue_get_label(nil))
    #else
        return String(cString: dispatch_queue_get_label(nil))
    #endif
}

/// A serial queue that can tell whether the caller runs on it.
final class TaggedQueue: @unchecked Sendable {
    let queue: DispatchQueue
    private let key = DispatchSpecificKey<Int>()
    private let tag: Int

    init(label: String, tag: Int = 1, attributes: DispatchQueue.Attributes = []) {
        queue = DispatchQueue(label: label, attributes: attributes)
        self.tag = tag
        queue.setSpecific(key: key, value: tag)
    }

    /// Whether the calling code runs on this queue.
    var isCurrent: Bool {
        DispatchQueue.getSpecific(key: key) == tag
    }
}

// MARK: - Randomness

/// A tiny seeded generator (SplitMix64), so randomized tests replay exactly from a printed seed.
struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) {
        state = seed
    }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

// MARK: - Environment

enum TestEnvironment {
    /// Whether the test process runs under ThreadSanitizer (much slower: use fewer iterations).
    static let isThreadSanitizerActive: Bool = {
        guard let handle = dlopen(nil, RTLD_NOW) else { return false }
        return dlsym(handle, "__tsan_init") != nil
    }()

    /// `normal`, or the smaller `sanitized` count under ThreadSanitizer.
    static func iterations(_ normal: Int, sanitized: Int) -> Int {
        isThreadSanitizerActive ? sanitized : normal
    }
}

/// The order the engine promises for commands issued in index order with these priorities:
/// priority descending, issue order within a priority.
func expectedRunOrder(_ priorities: [CommandPriority]) -> [Int] {
    priorities.indices.sorted { lhs, rhs in
        priorities[lhs] != priorities[rhs] ? priorities[lhs] > priorities[rhs] : lhs < rhs
    }
}

/// The priorities the tests draw from: the five named levels and two unnamed ones.
let allTestPriorities: [CommandPriority] = [
    .lowest, .low, .medium, .high, .highest, CommandPriority(rawValue: 1), CommandPriority(rawValue: 200),
]

// MARK: - Errors to compare with

extension QueueSafeValueError {
    /// A `.timedOut` to compare results with: errors compare by case, not by the diagnostics they
    /// carry.
    static let anyTimedOut = QueueSafeValueError.timedOut(.placeholder)
    /// A `.deadlock` to compare results with.
    static let anyDeadlock = QueueSafeValueError.deadlock(
        DeadlockReport(kind: .waitCycle, cycle: [], diagnostics: .placeholder, parkedPoolThreads: nil))
}

extension QueueDiagnostics {
    /// An empty snapshot, for errors built in tests.
    static let placeholder = QueueDiagnostics(name: "", holder: nil, waiting: [:], isContainerReleased: false)
}
