// MARK: - QueueSafeValueError

/// Why a command did not run, or did not complete normally.
///
/// Every command reports failure through this type (in a `Result`, or as the typed error of an
/// awaiting command) instead of trapping, hanging or returning an optional.
public enum QueueSafeValueError: Error, Equatable, Hashable, Sendable, CustomStringConvertible {
    /// The `QueueSafeValue` (or synced / asynced value) behind the scheduler was released before
    /// the command was issued. The command did not run. Commands queued before the release still run.
    case valueContainerDeinited
    /// The command was given a `nil` closure, so there is nothing to run. The value was not touched.
    case commandClosureDeallocated
    /// The command was issued from inside a critical section of the same queue and would have waited
    /// for itself forever. It failed at once and did not run.
    case reentrantAccess
    /// A `wait(timeout:)` command did not get the critical section in time. It will never run.
    case timedOut
    /// The task that issued (or was created for) the command was cancelled before the command
    /// started. It will never run.
    case cancelled
    /// An argument is out of range (for example a negative interval). The text names it.
    case invalidArgument(String)

    /// A sentence that explains the failure.
    public var description: String {
        switch self {
        case .valueContainerDeinited:
            return
                "QueueSafeValueError.valueContainerDeinited: the value container was released before the command was issued"
        case .commandClosureDeallocated:
            return "QueueSafeValueError.commandClosureDeallocated: the command was given no closure to run"
        case .reentrantAccess:
            return
                "QueueSafeValueError.reentrantAccess: a command waited on the queue whose critical section it is already inside"
        case .timedOut:
            return "QueueSafeValueError.timedOut: the command did not get the critical section before its timeout"
        case .cancelled:
            return "QueueSafeValueError.cancelled: the command was cancelled before it started"
        case .invalidArgument(let what):
            return "QueueSafeValueError.invalidArgument: \(what)"
        }
    }
}
