import Foundation
import QueueSafeValue
import QueueSafeValueShims

// MARK: - Atomics

/// A counter shared by every thread and task of the soak.
// @unchecked Sendable: every access is a C11 atomic
final class AtomicCounter: @unchecked Sendable {
    private let word = UnsafeMutablePointer<Int>.allocate(capacity: 1)

    init(_ value: Int = 0) {
        word.initialize(to: value)
    }

    deinit {
        word.deallocate()
    }

    var value: Int { qsv_atomic_load_acquire(word) }

    /// Adds `delta`; returns the value before.
    @discardableResult
    func add(_ delta: Int = 1) -> Int { qsv_atomic_fetch_add(word, delta) }
}

/// What happened to each command, by number: it ran, or it was reported as not run. The two are
/// exclusive, and whichever comes second finds the first.
// @unchecked Sendable: every access is a C11 atomic
final class CommandRecord: @unchecked Sendable {
    private static let ran = 1
    private static let failed = 2
    private let states: UnsafeMutablePointer<Int>
    private let capacity: Int
    /// Commands that ran although they were reported as timed out, cancelled or refused (or the
    /// other way round).
    let ranAfterFailure = AtomicCounter()

    init(capacity: Int) {
        self.capacity = capacity
        states = .allocate(capacity: capacity)
        states.initialize(repeating: 0, count: capacity)
    }

    deinit {
        states.deallocate()
    }

    /// Called inside the critical section by a command that runs.
    func markRan(_ command: Int) {
        guard command < capacity else { return }
        if qsv_atomic_compare_exchange(states + command, 0, Self.ran) == 0 { ranAfterFailure.add() }
    }

    /// Called by the issuer when the command reported that it did not run.
    func markFailed(_ command: Int) {
        guard command < capacity else { return }
        if qsv_atomic_compare_exchange(states + command, 0, Self.failed) == 0 { ranAfterFailure.add() }
    }
}

// MARK: - The value under test

/// The bookkeeping a value carries: touched only inside its critical section, read by the soak
/// after every command of its generation has reported.
// @unchecked Sendable: touched only by the section's holder, or after every command reported
final class Book: @unchecked Sendable {
    /// Increments that ran.
    var count = 0
    /// Sections that found the value's own counter different from the book's: an update was lost.
    var lostUpdates = 0
    /// Commands that ran before an earlier command of the same issuer and priority.
    var orderViolations = 0
    private var lastSequence: [Int]

    init(issuers: Int) {
        lastSequence = Array(repeating: -1, count: issuers * Stress.priorities.count)
    }

    /// Checks and records that the command `sequence` of `issuer` at priority `level` runs now.
    func observe(issuer: Int, level: Int, sequence: Int) {
        let slot = issuer * Stress.priorities.count + level
        if sequence <= lastSequence[slot] { orderViolations += 1 }
        lastSequence[slot] = sequence
    }
}

/// Tells whether the value was freed.
final class LifetimeToken: Sendable {}

/// The value under test: a plain counter next to the book that audits it.
struct Ledger: Sendable {
    var counter = 0
    /// Equal to `counter` except in the middle of an increment: a shared read that finds them
    /// different saw a half-applied write.
    var mirror = 0
    let book: Book
    let token: LifetimeToken

    /// One increment in the critical section: audited, ordered, counted. The counter and its mirror
    /// disagree while the increment runs.
    mutating func increment(issuer: Int, level: Int, sequence: Int, command: Int, record: CommandRecord) {
        record.markRan(command)
        if counter != book.count { book.lostUpdates += 1 }
        counter += 1
        book.observe(issuer: issuer, level: level, sequence: sequence)
        book.count += 1
        mirror = counter
    }

    /// What a shared read checks: no write is half applied.
    var isWhole: Bool { counter == mirror }
}

// MARK: - Randomness

/// A tiny seeded generator (SplitMix64), so a run replays from its printed seed.
struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) {
        state = seed
    }

    /// SplitMix64's constants: the golden-ratio increment and the two multipliers of its mix.
    private static let increment: UInt64 = 0x9E37_79B9_7F4A_7C15
    private static let multipliers: (UInt64, UInt64) = (0xBF58_476D_1CE4_E5B9, 0x94D0_49BB_1331_11EB)

    mutating func next() -> UInt64 {
        state &+= Self.increment
        var z = state
        z = (z ^ (z >> 30)) &* Self.multipliers.0
        z = (z ^ (z >> 27)) &* Self.multipliers.1
        return z ^ (z >> 31)
    }
}

// MARK: - Late completions

/// Manual completions handed over to be called a little later, from another thread.
// @unchecked Sendable: `pending` is guarded by `lock`
final class LateCompletions: @unchecked Sendable {
    private let lock = NSLock()
    private var pending: [CommandCompletionClosure] = []

    func add(_ done: @escaping CommandCompletionClosure) {
        lock.lock()
        pending.append(done)
        lock.unlock()
    }

    /// Calls every completion handed over so far; returns how many.
    @discardableResult
    func callAll() -> Int {
        lock.lock()
        let due = pending
        pending.removeAll()
        lock.unlock()
        for done in due { done() }
        return due.count
    }
}

/// Writes to standard error.
func printError(_ text: String) {
    FileHandle.standardError.write(Data((text + "\n").utf8))
}

// MARK: - Observers

/// What one observer of a value saw: the counters of the values delivered to it. Each must be above
/// the one before (the counter goes up by one per commit, so commit order is counter order, and a
/// value seen twice or out of order shows), and the last must be the value's final counter.
// @unchecked Sendable: every access takes `lock`
final class ObserverLog: @unchecked Sendable {
    private let lock = NSLock()
    private var seen: [Int] = []
    private var ended = false

    func append(_ counter: Int) {
        lock.withLock { seen.append(counter) }
    }

    func end() {
        lock.withLock { ended = true }
    }

    var hasEnded: Bool { lock.withLock { ended } }
    var last: Int? { lock.withLock { seen.last } }
    var count: Int { lock.withLock { seen.count } }

    /// Values out of commit order or seen twice, plus one if the last is not `finalValue`.
    func violations(finalValue: Int) -> Int {
        lock.withLock {
            var violations = zip(seen, seen.dropFirst()).filter { $0.0 >= $0.1 }.count
            if seen.last != finalValue { violations += 1 }
            return violations
        }
    }
}
