@_spi(Testing) @testable import QueueSafeValue

extension QueueSafeValueError {
    /// A `.timedOut` to compare results with: errors compare by case, not by the diagnostics they
    /// carry.
    static let anyTimedOut = QueueSafeValueError.timedOut(.placeholder)
    /// A `.deadlock` to compare results with.
    static let anyDeadlock = QueueSafeValueError.deadlock(
        DeadlockReport(kind: .waitCycle, cycle: [], diagnostics: .placeholder, parkedPoolThreads: nil))
}

/// The `QueueSafeValueError` an awaiting command threw, or `nil` if it succeeded. Any other error
/// comes back as `.invalidArgument` naming it, so it fails an equality check loudly.
func thrownError<T>(
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

extension QueueSafeValueError {
    /// Whether this is the refusal of a negative timeout (not any `.invalidArgument`: `thrownError`
    /// reports unexpected errors as one).
    var isNegativeTimeout: Bool {
        if case .invalidArgument(let what) = self { return what.hasPrefix("timeout must not be negative") }
        return false
    }
}

extension Optional where Wrapped == QueueSafeValueError {
    var isNegativeTimeout: Bool { self?.isNegativeTimeout ?? false }
}

extension Result {
    /// Whether this failed with the refusal of a negative timeout.
    var isNegativeTimeout: Bool { (failure as? QueueSafeValueError)?.isNegativeTimeout ?? false }
}
