import Dispatch
import Foundation
import XCTest

@testable import QueueSafeValue

/// An access token with an expiry flag.
private struct SchedulingToken: Sendable, Equatable {
    var value: String
    var isExpired: Bool

    static let expired = SchedulingToken(value: "expired", isExpired: true)
}

/// A completion-handler authentication API: every `refresh` call waits until the test answers it.
private final class SchedulingTestAuthServer: @unchecked Sendable {
    private let state = Locked<(calls: Int, pending: [@Sendable (Result<String, any Error>) -> Void])>(
        (0, []))

    func refresh(completion: @escaping @Sendable (Result<String, any Error>) -> Void) {
        state.withLock {
            $0.calls += 1
            $0.pending.append(completion)
        }
    }

    var calls: Int { state.value.calls }
    var waitingCalls: Int { state.value.pending.count }

    /// Answers the oldest waiting call, from a dispatch queue as a network library would.
    func answer(_ result: Result<String, any Error>) {
        let completion = state.withLock { $0.pending.removeFirst() }
        DispatchQueue.global().async { completion(result) }
    }
}

/// Issues `count` concurrent calls of `body` and returns their results.
private func schedulingConcurrently<T: Sendable>(
    _ count: Int,
    _ body: @escaping @Sendable () async throws -> T
) async -> [Result<T, any Error>] {
    await withTaskGroup(of: Result<T, any Error>.self) { group in
        for _ in 0..<count {
            group.addTask {
                do {
                    return .success(try await body())
                } catch {
                    return .failure(error)
                }
            }
        }
        var results: [Result<T, any Error>] = []
        for await result in group { results.append(result) }
        return results
    }
}

/// The shared refresh: one token refresh for many concurrent requests, inside one critical section.
final class SharedRefreshTests: XCTestCase {

    // MARK: The pattern with QueueSafeValue alone

    func test_tokenStoreInQueueSafeValue_hundredConcurrentRequestsFindItExpired_refreshOnce() async throws {
        let store = QueueSafeValue(value: SchedulingToken.expired)
        let refreshes = Locked(0)
        let othersQueuedDuringRefresh = Locked(false)

        @Sendable func validToken() async throws -> String {
            // One critical section: check, refresh across the `await`, and read.
            try await store.async.highestPriority.set { token in
                guard token.isExpired else { return }
                let number = refreshes.withLock {
                    $0 += 1
                    return $0
                }
                // The refresh takes a while: every other request queues behind it meanwhile.
                let queued = await schedulingWait { store.storage.engine.pendingCount == 99 }
                othersQueuedDuringRefresh.withLock { $0 = queued }
                token = SchedulingToken(value: "fresh-\(number)", isExpired: false)
            }.value
        }

        let results = await schedulingConcurrently(100) { try await validToken() }
        XCTAssertEqual(refreshes.value, 1)
        XCTAssertTrue(othersQueuedDuringRefresh.value, "all 99 other requests waited behind the refresh")
        XCTAssertEqual(try results.map { try $0.get() }, Array(repeating: "fresh-1", count: 100))
    }

    // MARK: RefreshingValue

    func test_refreshingValue_hundredConcurrentCallers_shareOneRefreshOfACompletionHandlerAPI() async throws {
        let server = SchedulingTestAuthServer()
        let tokens = RefreshingValue(
            value: SchedulingToken.expired, needsRefresh: { $0.isExpired },
            refresh: { _ in
                // Bridges the completion-handler API into the refresh.
                let value = try await withCheckedThrowingContinuation { continuation in
                    server.refresh { continuation.resume(with: $0) }
                }
                return SchedulingToken(value: value, isExpired: false)
            })
        let answering = Task {
            _ = await schedulingWait { server.waitingCalls == 1 && tokens.store.storage.engine.pendingCount == 99 }
            server.answer(.success("fresh"))
        }

        let results = await schedulingConcurrently(100) { try await tokens.get().value }
        await answering.value
        XCTAssertEqual(server.calls, 1)
        XCTAssertEqual(try results.map { try $0.get() }, Array(repeating: "fresh", count: 100))
        let stored = try await tokens.store.async.highestPriority.get()
        XCTAssertEqual(stored, SchedulingToken(value: "fresh", isExpired: false))
    }

    func test_refreshingValue_failedRefresh_isReportedToEveryWaiter_andRetriedByTheNextCaller() async throws {
        let server = SchedulingTestAuthServer()
        let tokens = RefreshingValue(
            value: SchedulingToken.expired, needsRefresh: { $0.isExpired },
            refresh: { _ in
                let value = try await withCheckedThrowingContinuation { continuation in
                    server.refresh { continuation.resume(with: $0) }
                }
                return SchedulingToken(value: value, isExpired: false)
            })
        let failing = Task {
            _ = await schedulingWait { server.waitingCalls == 1 && tokens.store.storage.engine.pendingCount == 99 }
            server.answer(.failure(SchedulingTestError(id: 401)))
        }
        let results = await schedulingConcurrently(100) { try await tokens.get().value }
        await failing.value
        XCTAssertEqual(server.calls, 1, "the waiters share the failure instead of retrying one after another")
        for result in results {
            XCTAssertThrowsError(try result.get()) {
                XCTAssertEqual($0 as? SchedulingTestError, SchedulingTestError(id: 401))
            }
        }

        let succeeding = Task {
            _ = await schedulingWait { server.waitingCalls == 1 }
            server.answer(.success("retried"))
        }
        let retried = try await tokens.get()
        await succeeding.value
        XCTAssertEqual(retried.value, "retried")
        XCTAssertEqual(server.calls, 2)
    }

    func test_refreshingValue_cancelledRefresher_doesNotFailTheWaiters() async throws {
        let attempts = Locked(0)
        let tokens = RefreshingValue(
            value: SchedulingToken.expired, needsRefresh: { $0.isExpired },
            refresh: { _ in
                let attempt = attempts.withLock {
                    $0 += 1
                    return $0
                }
                if attempt == 1 {
                    _ = await schedulingWaitForCancellation()
                    throw CancellationError()
                }
                return SchedulingToken(value: "fresh-\(attempt)", isExpired: false)
            })
        let first = Task { try await tokens.get() }
        let refreshing = await schedulingWait { attempts.value == 1 }
        XCTAssertTrue(refreshing)
        let waiters = Task { await schedulingConcurrently(10) { try await tokens.get().value } }
        let queued = await schedulingWait { tokens.store.storage.engine.pendingCount == 10 }
        XCTAssertTrue(queued)

        first.cancel()
        let firstResult = await first.result
        XCTAssertThrowsError(try firstResult.get()) { XCTAssertTrue($0 is CancellationError) }
        let results = await waiters.value
        XCTAssertEqual(try results.map { try $0.get() }, Array(repeating: "fresh-2", count: 10))
        XCTAssertEqual(attempts.value, 2)
    }

    func test_refreshingValue_completionHandlerCallers_getTheSharedValue() async {
        let refreshes = Locked(0)
        let tokens = RefreshingValue(
            value: SchedulingToken.expired, needsRefresh: { $0.isExpired },
            refresh: { _ in
                let number = refreshes.withLock {
                    $0 += 1
                    return $0
                }
                try await Task.sleep(nanoseconds: 1_000_000)
                return SchedulingToken(value: "fresh-\(number)", isExpired: false)
            })
        let received = Locked<[String]>([])
        for _ in 0..<20 {
            tokens.get { result in
                received.withLock { $0.append((try? result.get().value) ?? "error") }
            }
        }
        let all = await schedulingWait { received.value.count == 20 }
        XCTAssertTrue(all)
        XCTAssertEqual(received.value, Array(repeating: "fresh-1", count: 20))
        XCTAssertEqual(refreshes.value, 1)
    }

    func test_refreshingValue_invalidateIfStillEqual_refreshesOnceForManyRejections() async throws {
        let refreshes = Locked(0)
        let tokens = RefreshingValue(
            value: SchedulingToken(value: "v0", isExpired: false), needsRefresh: { $0.isExpired },
            refresh: { _ in
                let number = refreshes.withLock {
                    $0 += 1
                    return $0
                }
                return SchedulingToken(value: "v\(number)", isExpired: false)
            })
        let rejected = try await tokens.get()
        let results = await schedulingConcurrently(50) { () async throws -> String in
            // Each request was rejected with the same token ("401"): mark it, then fetch again.
            try await tokens.invalidate(ifStillEqualTo: rejected)
            return try await tokens.get().value
        }
        XCTAssertEqual(refreshes.value, 1)
        XCTAssertEqual(try results.map { try $0.get() }, Array(repeating: "v1", count: 50))

        try await tokens.invalidate()
        let forced = try await tokens.get()
        XCTAssertEqual(forced.value, "v2")
    }
}
