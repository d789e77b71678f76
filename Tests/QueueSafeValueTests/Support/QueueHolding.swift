import Testing

@_spi(Testing) @testable import QueueSafeValue

/// Enqueues an operation that holds `queue` until `gate` opens, and returns once it runs.
/// - Returns: its task, whose value says whether the operation saw its task cancelled.
func holdQueue(_ queue: CommandQueue, until gate: Gate) async throws -> Task<Bool, any Error> {
    let entered = Locked(0)
    let holder = queue.enqueue(priority: .lowest) { () -> Bool in
        entered.increment()
        await gate.wait()
        return Task.isCancelled
    }
    try await waitUntil("the holding operation started") { entered.value == 1 }
    return holder
}
