import Dispatch
import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

/// An access token with an expiry flag.
private struct Token: Sendable, Equatable {
    var value: String
    var isExpired: Bool

    static let expired = Token(value: "expired", isExpired: true)
}

/// A completion-handler authentication API: every `refresh` call waits until the test answers it.
private final class AuthServer: @unchecked Sendable {
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
private func concurrently<T: Sendable>(
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
@Suite(.runsAlongsideOthers) struct SharedRefreshTests {

    // MARK: The pattern with QueueSafeValue alone

    @Test func tokenStoreInQueueSafeValue_hundredConcurrentRequestsFindItExpired_refreshOnce() async throws {
        let store = QueueSafeValue(value: Token.expired)
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
                let queued = (try? await waitUntil { store.engine.pendingCount == 99 }) != nil
                othersQueuedDuringRefresh.withLock { $0 = queued }
                token = Token(value: "fresh-\(number)", isExpired: false)
            }.value
        }

        let results = await concurrently(100) { try await validToken() }
        #expect(refreshes.value == 1)
        #expect(othersQueuedDuringRefresh.value, "all 99 other requests waited behind the refresh")
        #expect((try results.map { try $0.get() }) == Array(repeating: "fresh-1", count: 100))
    }

    // MARK: RefreshingValue

    @Test func refreshingValue_hundredConcurrentCallers_shareOneRefreshOfACompletionHandlerAPI() async throws {
        let server = AuthServer()
        let tokens = RefreshingValue(
            value: Token.expired, needsRefresh: { $0.isExpired },
            refresh: { _ in
                // Bridges the completion-handler API into the refresh.
                let value = try await withCheckedThrowingContinuation { continuation in
                    server.refresh { continuation.resume(with: $0) }
                }
                return Token(value: value, isExpired: false)
            })
        let answering = Task {
            try? await waitUntil { server.waitingCalls == 1 && tokens.store.engine.pendingCount == 99 }
            server.answer(.success("fresh"))
        }

        let results = await concurrently(100) { try await tokens.get().value }
        await answering.value
        #expect(server.calls == 1)
        #expect((try results.map { try $0.get() }) == Array(repeating: "fresh", count: 100))
        let stored = try await tokens.store.async.highestPriority.get()
        #expect(stored == Token(value: "fresh", isExpired: false))
    }

    @Test func refreshingValue_failedRefresh_isReportedToEveryWaiter_andRetriedByTheNextCaller() async throws {
        let server = AuthServer()
        let tokens = RefreshingValue(
            value: Token.expired, needsRefresh: { $0.isExpired },
            refresh: { _ in
                let value = try await withCheckedThrowingContinuation { continuation in
                    server.refresh { continuation.resume(with: $0) }
                }
                return Token(value: value, isExpired: false)
            })
        let failing = Task {
            try? await waitUntil { server.waitingCalls == 1 && tokens.store.engine.pendingCount == 99 }
            server.answer(.failure(TestError.thrown(id: 401)))
        }
        let results = await concurrently(100) { try await tokens.get().value }
        await failing.value
        #expect(server.calls == 1, "the waiters share the failure instead of retrying one after another")
        for result in results {
            #expect(throws: TestError.thrown(id: 401)) { try result.get() }
        }

        let succeeding = Task {
            try? await waitUntil { server.waitingCalls == 1 }
            server.answer(.success("retried"))
        }
        let retried = try await tokens.get()
        await succeeding.value
        #expect(retried.value == "retried")
        #expect(server.calls == 2)
    }

    @Test func refreshingValue_cancelRefresh_cancelledRefresher_doesNotFailTheWaiters() async throws {
        let attempts = Locked(0)
        let tokens = RefreshingValue(
            value: Token.expired, cancellation: .cancelRefresh, needsRefresh: { $0.isExpired },
            refresh: { _ in
                let attempt = attempts.withLock {
                    $0 += 1
                    return $0
                }
                if attempt == 1 {
                    try? await waitUntil("cancellation") { Task.isCancelled }
                    throw CancellationError()
                }
                return Token(value: "fresh-\(attempt)", isExpired: false)
            })
        let first = Task { try await tokens.get() }
        try await waitUntil { attempts.value == 1 }
        let waiters = Task { await concurrently(10) { try await tokens.get().value } }
        try await waitUntil { tokens.store.engine.pendingCount == 10 }

        first.cancel()
        let firstResult = await first.result
        #expect(throws: CancellationError.self) { try firstResult.get() }
        let results = await waiters.value
        #expect((try results.map { try $0.get() }) == Array(repeating: "fresh-2", count: 10))
        #expect(attempts.value == 2)
    }

    // MARK: Cancelling the caller that refreshes

    @Test func refreshingValue_byDefault_cancellingTheRefreshingCaller_letsTheOneRefreshFinishForTheWaiters()
        async throws
    {
        let refreshes = Locked(0)
        let serverAnswered = Locked(false)
        let refreshInFlight = Locked(false)
        let tokens = RefreshingValue(
            value: Token.expired, needsRefresh: { $0.isExpired },
            refresh: { _ in
                // A network call that ends early when its task is cancelled, as URLSession does,
                // spending a single-use refresh token: a second refresh would be refused.
                let number = refreshes.increment()
                refreshInFlight.set(true)
                defer { refreshInFlight.set(false) }
                try await waitUntil("the server's answer") { serverAnswered.value || Task.isCancelled }
                try Task.checkCancellation()
                return Token(value: "fresh-\(number)", isExpired: false)
            })
        #expect(tokens.cancellation == .letRefreshFinish)
        let initiator = Task { try await tokens.get() }
        try await waitUntil { refreshInFlight.value }
        let waiters = Task { await concurrently(10) { try await tokens.get().value } }
        try await waitUntil { tokens.store.engine.pendingCount == 10 }

        initiator.cancel()
        // Not `.cancelled` ("cancelled before it started"): its refresh started, and goes on.
        let initiatorResult = try await withHangTimeout { await initiator.result }
        #expect(throws: CancellationError.self) { try initiatorResult.get() }
        #expect(refreshInFlight.value, "the cancelled caller left while its refresh was still in flight")

        serverAnswered.set(true)
        let results = await waiters.value
        #expect((try results.map { try $0.get() }) == Array(repeating: "fresh-1", count: 10))
        #expect(refreshes.value == 1, "the refresh was not aborted and redone")
        let stored = try await tokens.store.async.highestPriority.get()
        #expect(stored == Token(value: "fresh-1", isExpired: false))
    }

    @Test func refreshingValue_byDefault_aCallerCancelledWhileQueued_leavesWithoutRefreshing() async throws {
        let refreshes = Locked(0)
        let gate = Gate()
        let tokens = RefreshingValue(
            value: Token.expired, needsRefresh: { $0.isExpired },
            refresh: { _ in
                let number = refreshes.increment()
                if number == 1 { await gate.wait() }
                // The second refresh fails: the queued caller must not have shared or caused it.
                if number > 1 { throw TestError.thrown(id: number) }
                return Token(value: "fresh-\(number)", isExpired: false)
            })
        let initiator = Task { try await tokens.get() }
        try await waitUntil { gate.waiterCount == 1 }
        let queued = Task { try await tokens.get() }
        try await waitUntil { tokens.store.engine.pendingCount == 1 }

        queued.cancel()
        defer { gate.open() }  // even if the wait below runs out
        let queuedError = try await withHangTimeout { await thrownError { try await queued.value } }
        #expect(queuedError == .cancelled)
        try await waitUntil("the cancelled command left the queue") { tokens.store.engine.pendingCount == 0 }
        gate.open()
        #expect(try await initiator.value.value == "fresh-1")
        #expect(refreshes.value == 1)
    }

    @Test(arguments: [RefreshCancellation.letRefreshFinish, .cancelRefresh])
    func refreshingValue_getFromInsideRefresh_throwsReentrantAccess(cancellation: RefreshCancellation) async throws {
        let box = Locked<RefreshingValue<Token>?>(nil)
        let inner = Locked<QueueSafeValueError?>(nil)
        let tokens = RefreshingValue(
            value: Token.expired, cancellation: cancellation, needsRefresh: { $0.isExpired },
            refresh: { _ in
                if let tokens = box.value {
                    inner.set(await thrownError { try await tokens.get() })
                }
                return Token(value: "fresh", isExpired: false)
            })
        box.set(tokens)
        #expect(try await tokens.get().value == "fresh")
        #expect(inner.value == .reentrantAccess)
        box.set(nil)
    }

    @Test func refreshingValue_completionHandlerCallers_getTheSharedValue() async throws {
        let refreshes = Locked(0)
        let tokens = RefreshingValue(
            value: Token.expired, needsRefresh: { $0.isExpired },
            refresh: { _ in
                let number = refreshes.withLock {
                    $0 += 1
                    return $0
                }
                try await Task.sleep(nanoseconds: 1_000_000)
                return Token(value: "fresh-\(number)", isExpired: false)
            })
        let received = Locked<[String]>([])
        for _ in 0..<20 {
            tokens.get { result in
                received.withLock { $0.append((try? result.get().value) ?? "error") }
            }
        }
        try await waitUntil { received.value.count == 20 }
        #expect(received.value == Array(repeating: "fresh-1", count: 20))
        #expect(refreshes.value == 1)
    }

    @Test func refreshingValue_invalidateIfStillEqual_refreshesOnceForManyRejections() async throws {
        let refreshes = Locked(0)
        let tokens = RefreshingValue(
            value: Token(value: "v0", isExpired: false), needsRefresh: { $0.isExpired },
            refresh: { _ in
                let number = refreshes.withLock {
                    $0 += 1
                    return $0
                }
                return Token(value: "v\(number)", isExpired: false)
            })
        let rejected = try await tokens.get()
        let results = await concurrently(50) { () async throws -> String in
            // Each request was rejected with the same token ("401"): mark it, then fetch again.
            try await tokens.invalidate(ifStillEqualTo: rejected)
            return try await tokens.get().value
        }
        #expect(refreshes.value == 1)
        #expect((try results.map { try $0.get() }) == Array(repeating: "v1", count: 50))

        try await tokens.invalidate()
        let forced = try await tokens.get()
        #expect(forced.value == "v2")
    }
}
