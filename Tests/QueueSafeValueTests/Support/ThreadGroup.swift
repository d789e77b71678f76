import Dispatch
import Foundation
import Testing

/// Dedicated threads for blocking commands (a blocked thread must not starve the cooperative pool
/// or a dispatch pool). A test joins what it spawns, so no thread outlives it.
final class ThreadGroup: @unchecked Sendable {  // @unchecked Sendable: a DispatchGroup and a lock
    private let group = DispatchGroup()
    private let running = Locked(0)

    init() {}

    /// Starts a new thread running `body`.
    func spawn(_ body: @escaping @Sendable () -> Void) {
        group.enter()
        running.increment()
        let thread = Thread { [group, running] in
            body()
            running.add(-1)
            group.leave()
        }
        thread.stackSize = 1 << 20
        thread.start()
    }

    /// Waits for every spawned thread to finish, recording an issue on a hang.
    @discardableResult
    func join(sourceLocation: SourceLocation = #_sourceLocation) -> Bool {
        waitOrFail(group, "spawned threads to finish", sourceLocation: sourceLocation)
    }

    /// Waits for every spawned thread to finish without blocking a thread of the cooperative pool;
    /// throws `TestError.hang` on a hang.
    func join(
        isolation: isolated (any Actor)? = #isolation,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        try await waitUntil("spawned threads to finish", sourceLocation: sourceLocation) { running.value == 0 }
        group.wait()  // they have all left, or are leaving right now
    }
}
