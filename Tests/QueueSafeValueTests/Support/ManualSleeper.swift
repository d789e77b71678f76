import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

/// A clock the test drives by hand: every `sleep(nanoseconds:)` stays suspended until the test fires
/// it. With `honorsCancellation`, a cancelled sleep throws at once, as `Task.sleep` does; without it,
/// a cancelled sleep keeps waiting for `fire`, then returns normally (a misbehaving clock).
final class ManualSleeper: RecurringSleeper, @unchecked Sendable {  // @unchecked Sendable: state is `Locked`
    struct Sleep {
        let id: Int
        let nanoseconds: UInt64
        var isCancelled = false
        var hasEnded = false
        var continuation: CheckedContinuation<Void, any Error>?
    }

    private let honorsCancellation: Bool
    private let state = Locked<[Sleep]>([])

    init(honorsCancellation: Bool = true) {
        self.honorsCancellation = honorsCancellation
    }

    func sleep(nanoseconds: UInt64) async throws {
        let id = state.withLock { sleeps in
            sleeps.append(Sleep(id: sleeps.count, nanoseconds: nanoseconds))
            return sleeps.count - 1
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let cancelNow = state.withLock { sleeps -> Bool in
                    if sleeps[id].isCancelled && honorsCancellation {
                        sleeps[id].hasEnded = true
                        return true
                    }
                    sleeps[id].continuation = continuation
                    return false
                }
                if cancelNow { continuation.resume(throwing: CancellationError()) }
            }
        } onCancel: {
            let continuation = state.withLock { sleeps -> CheckedContinuation<Void, any Error>? in
                sleeps[id].isCancelled = true
                guard honorsCancellation, let continuation = sleeps[id].continuation else { return nil }
                sleeps[id].continuation = nil
                sleeps[id].hasEnded = true
                return continuation
            }
            continuation?.resume(throwing: CancellationError())
        }
    }

    /// Every sleep so far, in the order they began.
    var sleeps: [Sleep] { state.value }

    /// Waits (bounded) until sleep number `index` (from 0) is suspended and can be fired.
    @discardableResult
    func waitForSleep(_ index: Int, sourceLocation: SourceLocation = #_sourceLocation) async throws -> Sleep {
        try await waitUntil("sleep \(index) to begin", sourceLocation: sourceLocation) {
            let sleeps = self.sleeps
            return sleeps.count > index && sleeps[index].continuation != nil
        }
        return sleeps[index]
    }

    /// Waits (bounded) until a sleep that was not cancelled is suspended, and returns its index.
    func waitForActiveSleep(sourceLocation: SourceLocation = #_sourceLocation) async throws -> Int {
        var found: Int?
        try await waitUntil("an active sleep", sourceLocation: sourceLocation) {
            found = sleeps.lastIndex { $0.continuation != nil && !$0.isCancelled }
            return found != nil
        }
        return found!
    }

    /// Ends sleep number `index` normally, as if its time had elapsed.
    func fire(_ index: Int) {
        let continuation = state.withLock { sleeps -> CheckedContinuation<Void, any Error>? in
            let continuation = sleeps[index].continuation
            sleeps[index].continuation = nil
            sleeps[index].hasEnded = true
            return continuation
        }
        continuation?.resume()
    }

    /// Ends every sleep still suspended, so no task is left waiting on this clock when a test ends.
    func fireAll() {
        for index in sleeps.indices { fire(index) }
    }
}
