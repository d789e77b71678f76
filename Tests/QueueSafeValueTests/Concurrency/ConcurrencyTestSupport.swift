import Dispatch
import Foundation
import XCTest

@testable import QueueSafeValue

// Helpers for the Swift-concurrency tests. Every type is prefixed with `Concurrency` so it cannot
// clash with the helpers of the other test files in this module.

// MARK: - Timeouts

/// Thrown by ``concurrencyWithTimeout(seconds:_:)`` when the operation did not finish in time.
struct ConcurrencyTimeoutError: Error, CustomStringConvertible {
    let seconds: Double
    let what: String
    var description: String { "timed out after \(seconds) s: \(what)" }
}

/// Resumes a continuation exactly once, from whichever party comes first.
private final class ConcurrencyOnceContinuation<T: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var continuation: CheckedContinuation<T, any Error>?

    init(_ continuation: CheckedContinuation<T, any Error>) {
        self.continuation = continuation
    }

    func resume(with result: Result<T, any Error>) {
        lock.lock()
        let continuation = self.continuation
        self.continuation = nil
        lock.unlock()
        continuation?.resume(with: result)
    }
}

/// Runs `operation` in a new task and returns its result, or throws ``ConcurrencyTimeoutError`` if
/// it has not finished after `seconds`. A hang becomes a test failure instead of a stuck suite:
/// unlike a task group, this does not wait for a stuck operation (it is left behind, cancelled).
func concurrencyWithTimeout<T: Sendable>(
    seconds: Double = 30,
    _ what: String = #function,
    _ operation: @escaping @Sendable () async throws -> T
) async throws -> T {
    try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
        let once = ConcurrencyOnceContinuation(continuation)
        let work = Task {
            do {
                once.resume(with: .success(try await operation()))
            } catch {
                once.resume(with: .failure(error))
            }
        }
        let timer = Task {
            try? await Task.sleep(nanoseconds: UInt64(seconds * 1_000_000_000))
            once.resume(with: .failure(ConcurrencyTimeoutError(seconds: seconds, what: what)))
            work.cancel()
        }
        Task {
            _ = await work.result
            timer.cancel()
        }
    }
}

/// Polls `condition` every millisecond until it holds; throws ``ConcurrencyTimeoutError`` after
/// `seconds`. Used to wait until a command has taken its place in a queue (`pendingCount`).
func concurrencyWaitUntil(
    isolation: isolated (any Actor)? = #isolation,
    seconds: Double = 30,
    _ what: @autoclosure () -> String,
    _ condition: () -> Bool
) async throws {
    let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(seconds * 1_000_000_000)
    while !condition() {
        if DispatchTime.now().uptimeNanoseconds > deadline {
            throw ConcurrencyTimeoutError(seconds: seconds, what: what())
        }
        try await Task.sleep(nanoseconds: 1_000_000)
    }
}

/// Blocks the calling thread until `condition` holds (polling every millisecond), or fails after
/// `seconds`. For code that runs on plain threads.
@discardableResult
func concurrencySpinUntil(seconds: Double = 30, _ condition: () -> Bool) -> Bool {
    let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(seconds * 1_000_000_000)
    while !condition() {
        if DispatchTime.now().uptimeNanoseconds > deadline { return false }
        usleep(1_000)
    }
    return true
}

// MARK: - Gate

/// A one-shot async gate: tasks that `wait()` suspend until `open()` is called (and pass at once
/// afterwards). Waiting ignores cancellation, so a test decides exactly when work proceeds.
final class ConcurrencyGate: @unchecked Sendable {
    private let lock = NSLock()
    private var isOpen = false
    private var waiters: [CheckedContinuation<Void, Never>] = []

    /// How many tasks are suspended in `wait()` now.
    var waiterCount: Int {
        lock.lock()
        defer { lock.unlock() }
        return waiters.count
    }

    func wait() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            lock.lock()
            if isOpen {
                lock.unlock()
                continuation.resume()
            } else {
                waiters.append(continuation)
                lock.unlock()
            }
        }
    }

    func open() {
        lock.lock()
        isOpen = true
        let waiters = self.waiters
        self.waiters = []
        lock.unlock()
        for waiter in waiters { waiter.resume() }
    }
}

// MARK: - Recorder

/// A thread-safe log of events plus an "inside the critical section" counter that remembers the
/// highest overlap it ever saw.
final class ConcurrencyRecorder<Event: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var storedEvents: [Event] = []
    private var inside = 0
    private var storedMaxInside = 0

    var events: [Event] {
        lock.lock()
        defer { lock.unlock() }
        return storedEvents
    }

    var count: Int {
        lock.lock()
        defer { lock.unlock() }
        return storedEvents.count
    }

    /// The largest number of sections that were ever entered and not yet left at the same time.
    var maxInside: Int {
        lock.lock()
        defer { lock.unlock() }
        return storedMaxInside
    }

    func append(_ event: Event) {
        lock.lock()
        storedEvents.append(event)
        lock.unlock()
    }

    func enter() {
        lock.lock()
        inside += 1
        storedMaxInside = max(storedMaxInside, inside)
        lock.unlock()
    }

    func leave() {
        lock.lock()
        inside -= 1
        lock.unlock()
    }
}

/// A thread-safe flag / counter.
final class ConcurrencyCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var storedValue = 0

    var value: Int {
        lock.lock()
        defer { lock.unlock() }
        return storedValue
    }

    @discardableResult
    func increment() -> Int {
        lock.lock()
        defer { lock.unlock() }
        storedValue += 1
        return storedValue
    }
}

// MARK: - Threads

/// Runs `body` on a new plain thread (not a dispatch or cooperative-pool thread), so blocking
/// commands can wait there without starving Swift concurrency or GCD.
func concurrencyStartThread(_ body: @escaping @Sendable () -> Void) {
    let thread = Thread(block: body)
    thread.start()
}

/// An error an operation throws on purpose.
struct ConcurrencyTestError: Error, Equatable {
    let code: Int
}

/// The `QueueSafeValueError` an awaiting command threw, or `nil` if it succeeded. Any other error
/// comes back as `.invalidArgument` naming it, so it fails an equality check loudly.
func concurrencyError<T>(
    isolation: isolated (any Actor)? = #isolation,
    _ body: () async throws -> T
) async -> QueueSafeValueError? {
    do {
        _ = try await body()
        return nil
    } catch let error as QueueSafeValueError {
        return error
    } catch {
        return .invalidArgument("unexpected error \(error)")
    }
}
