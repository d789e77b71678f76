// MARK: - QueueSafeValueError

/// Why a command did not run, or did not complete normally.
///
/// Every command reports failure through this type (in a `Result`, or as the typed error of an
/// awaiting command) instead of trapping, hanging or returning an optional.
///
/// Two errors are equal when they are the same case (and, for ``invalidArgument(_:)``, name the
/// same argument): the diagnostics that ``timedOut(_:)`` and ``deadlock(_:)`` carry are context,
/// not identity. Match those cases with a pattern, such as `if case .timedOut = error`.
public enum QueueSafeValueError: Error, Equatable, Hashable, Sendable, CustomStringConvertible {
    /// The `QueueSafeValue` (or synced / asynced value) behind the scheduler was released before
    /// the command was issued. The command did not run. Commands queued before the release still run.
    case valueContainerDeinited
    /// The command was given a `nil` closure, so there is nothing to run. The value was not touched.
    case commandClosureDeallocated
    /// The command was issued from inside a critical section of the same queue and would have waited
    /// for itself forever. It failed at once and did not run.
    case reentrantAccess
    /// A `wait(timeout:)` command did not get the critical section in time. It will never run. The
    /// payload says what held the value and what waited for it at that moment.
    // Indirect: the payloads are large, and an inline payload would make every `Result` and every
    // `QueueSafeValueError?` that the idle path returns as large, for every command to move.
    indirect case timedOut(QueueDiagnostics)
    /// The task that issued (or was created for) the command was cancelled before the command
    /// started. It will never run.
    case cancelled
    /// An argument is out of range (for example a negative interval). The text names it.
    case invalidArgument(String)
    /// Waiting would never end: the command would have closed a cycle of threads and tasks that
    /// each wait for a value the next one holds, or parked the last free thread of Swift's
    /// cooperative pool while a task holds the value. It failed at once and did not run; the
    /// report names the cycle.
    indirect case deadlock(DeadlockReport)

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
        case .timedOut(let diagnostics):
            return
                "QueueSafeValueError.timedOut: the command did not get the critical section before its timeout. \(diagnostics)"
        case .cancelled:
            return "QueueSafeValueError.cancelled: the command was cancelled before it started"
        case .invalidArgument(let what):
            return "QueueSafeValueError.invalidArgument: \(what)"
        case .deadlock(let report):
            return "QueueSafeValueError.deadlock: \(report)"
        }
    }

    // MARK: Text for people

    /// One sentence that says what happened, for a person: an alert's title, a log line.
    ///
    /// Never `nil`. With Foundation, this is what `error.localizedDescription` returns (the type is a
    /// `LocalizedError`). It is English, not localized.
    public var errorDescription: String? {
        switch self {
        case .valueContainerDeinited:
            return "The value was released before the command was issued, so the command did not run."
        case .commandClosureDeallocated:
            return "The command was given no closure, so it had nothing to run."
        case .reentrantAccess:
            return "The command was issued from inside a critical section of the same value or queue, "
                + "where it would have waited for itself forever, so it failed at once."
        case .timedOut:
            return "The command did not get the value before its timeout, and it will never run."
        case .cancelled:
            return "The command was cancelled before it started, so it did not run."
        case .invalidArgument(let what):
            return "An argument was out of range: \(what)" + (what.hasSuffix(".") ? "" : ".")
        case .deadlock:
            return "The command would have waited forever, so it failed at once instead of deadlocking."
        }
    }

    /// Why it happened, in one or more sentences; for the ``timedOut(_:)`` and ``deadlock(_:)``
    /// cases this includes what held the value (and the cycle) at the moment the command gave up.
    /// Never `nil`.
    public var failureReason: String? {
        switch self {
        case .valueContainerDeinited:
            return "The container that owned the value (a QueueSafeValue, synced or asynced value) was "
                + "deallocated. Commands issued before that still ran; later ones are refused."
        case .commandClosureDeallocated:
            return "A nil closure was passed where the command needed one. The value was not touched."
        case .reentrantAccess:
            return "The calling thread or task (or a parent task) already holds this value or queue."
        case .timedOut(let diagnostics):
            return "When the command gave up: \(diagnostics)."
        case .cancelled:
            return "Its task was cancelled (or CommandQueue.cancelAll() was called) while it waited for its turn."
        case .invalidArgument:
            return "The value passed is outside the range the API accepts, so nothing was created or changed."
        case .deadlock(let report):
            let text = report.description
            return text.prefix(1).uppercased() + text.dropFirst()
        }
    }

    /// What to do about it, in one or more sentences. Never `nil`.
    public var recoverySuggestion: String? {
        switch self {
        case .valueContainerDeinited:
            return "Keep a strong reference to the container for as long as commands are issued through it."
        case .commandClosureDeallocated:
            return "Pass a closure to the command."
        case .reentrantAccess:
            return "Use the value you already hold inside the current closure, or issue the command after that "
                + "closure has returned. From inside a CommandQueue operation, enqueue further work without "
                + "awaiting it."
        case .timedOut(let diagnostics):
            if diagnostics.holder?.awaitsCompletion == true {
                return "The holder waits for its done() call: make sure every path of its closure calls done(), "
                    + "or allow a longer timeout."
            }
            return "Find out why the holder keeps the value that long, or allow a longer timeout."
        case .cancelled:
            return "Nothing to undo: the command did not touch the value. Issue it again from a task that is not "
                + "cancelled if the work is still needed."
        case .invalidArgument:
            return "Pass a value in the documented range."
        case .deadlock(let report):
            switch report.kind {
            case .waitCycle:
                return "Take values in one agreed order everywhere, or release one before waiting for another. "
                    + "The other parties of the cycle go on once this caller releases what it holds."
            case .cooperativePoolExhausted:
                return "Inside tasks, use the awaiting schedule (value.async), which suspends instead of "
                    + "blocking a thread."
            }
        }
    }

    /// Compares the cases (and the argument of ``invalidArgument(_:)``), not the diagnostics.
    public static func == (lhs: QueueSafeValueError, rhs: QueueSafeValueError) -> Bool {
        lhs.identity == rhs.identity
    }

    /// Hashes what ``==(_:_:)`` compares.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(identity.index)
        hasher.combine(identity.argument)
    }

    /// What equality compares: the case, and the argument of `invalidArgument`.
    private var identity: (index: Int, argument: String?) {
        switch self {
        case .valueContainerDeinited: (0, nil)
        case .commandClosureDeallocated: (1, nil)
        case .reentrantAccess: (2, nil)
        case .timedOut: (3, nil)
        case .cancelled: (4, nil)
        case .invalidArgument(let what): (5, what)
        case .deadlock: (6, nil)
        }
    }
}
