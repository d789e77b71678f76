import Foundation
import Testing

extension AsyncStream where Element: Sendable {
    /// Collects the stream to its end, or until `timeout` (a hang turned into a partial result,
    /// `finished == false`). The collecting task is cancelled either way, so none is left behind.
    func collected(timeout: TimeInterval = hangTimeout) async -> (events: [Element], finished: Bool) {
        let collected = Locked<([Element], Bool)>(([], false))
        let task = Task {
            for await event in self { collected.withLock { $0.0.append(event) } }
            collected.withLock { $0.1 = true }
        }
        _ = try? await waitUntil("the stream to finish", timeout: timeout) { collected.value.1 }
        task.cancel()
        await task.value
        return collected.value
    }
}
