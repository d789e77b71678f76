import Foundation
import Testing

/// How a suite shares the test process with the other suites. Every suite of this target names one:
/// `@Suite(.runsAlongsideOthers)` or `@Suite(.runsAlone)`.
///
/// Swift Testing runs tests in parallel, and `.serialized` orders tests only inside one suite. A few
/// tests check behaviour that depends on process-wide state: the deadlock detector counts the
/// threads of the cooperative pool that are parked in blocking commands, across every value, so a
/// test that exhausts the pool on purpose (and expects exactly one refusal) would see another test's
/// parked thread as one of its own. Such a suite runs alone: its tests start once every running test
/// has ended, and no other test starts until they are done. The rest run alongside each other.
struct ProcessSharing: SuiteTrait, TestTrait, TestScoping {
    /// Whether the tests need the process to themselves.
    let isExclusive: Bool

    var isRecursive: Bool { true }

    /// One scope per test case (a parameterized test's cases each take it).
    func scopeProvider(for test: Test, testCase: Test.Case?) -> Self? {
        test.isSuite || testCase == nil ? nil : self
    }

    func provideScope(
        for test: Test,
        testCase: Test.Case?,
        performing function: @Sendable () async throws -> Void
    ) async throws {
        // A trait applied twice (a suite inside a suite) takes the lock once.
        if Self.isInsideScope {
            try await function()
            return
        }
        await ProcessSharingLock.shared.acquire(exclusive: isExclusive)
        do {
            try await Self.$isInsideScope.withValue(true) { try await function() }
        } catch {
            ProcessSharingLock.shared.release(exclusive: isExclusive)
            throw error
        }
        ProcessSharingLock.shared.release(exclusive: isExclusive)
    }

    @TaskLocal private static var isInsideScope = false
}

extension Trait where Self == ProcessSharing {
    /// The suite's tests run in parallel with the other suites' tests (Swift Testing's default).
    static var runsAlongsideOthers: Self { ProcessSharing(isExclusive: false) }

    /// The suite's tests run while no other test runs: they depend on process-wide state.
    static var runsAlone: Self { ProcessSharing(isExclusive: true) }
}
