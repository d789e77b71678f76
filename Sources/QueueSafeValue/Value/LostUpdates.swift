#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

// MARK: - LostUpdate

/// A blocking `set` that did not run because of how the calling code is built, not because of a
/// limit the caller chose: it was issued from inside the value's own critical section
/// (``QueueSafeValueError/reentrantAccess``), or waiting for its turn would have closed a wait cycle
/// (``QueueSafeValueError/deadlock(_:)``).
///
/// The `Result` that `set` returns says so, but a `set`'s result may be discarded
/// (`value.wait.highestPriority.set { $0 -= 1 }` compiles without a warning), and then the update
/// would be lost without a word. So these failures are also handed to ``LostUpdates/handler``. A
/// `set` that timed out (you chose the timeout) or whose container was released (nobody can see the
/// value any more) is not reported.
public struct LostUpdate: Sendable, CustomStringConvertible {
    /// Why the `set` did not run: ``QueueSafeValueError/reentrantAccess`` or
    /// ``QueueSafeValueError/deadlock(_:)``.
    public let error: QueueSafeValueError
    /// How the value is named in diagnostics: its label in quotes, or its type and a short identity.
    public let value: String

    /// One line that names the value and the error, and says how to silence or trap it.
    public var description: String {
        "QueueSafeValue: a blocking set on \(value) did not run, and its update is lost unless the caller "
            + "reads the Result it returned: \(error). (Reported by LostUpdates.handler; set it to nil to "
            + "silence this, or trap in it to stop here.)"
    }
}

// MARK: - LostUpdates

/// Where ``LostUpdate``s are reported: a `set` whose update could be lost silently, because its
/// result may be discarded, never is.
///
/// In debug builds the default handler prints the report's ``LostUpdate/description`` to standard
/// error, once per lost update; in release builds there is none. Set ``handler`` to `nil` to turn
/// reports off, or to your own closure, for example to stop in the debugger:
///
/// ```swift
/// LostUpdates.handler = { lost in assertionFailure(lost.description) }
/// ```
///
/// The handler runs on the thread that issued the `set`, after the command failed and outside every
/// lock of the library; it must not block for long. Commands that do not return a discardable
/// result (`get`, `map`, awaiting commands, which throw) are never reported: their caller sees the
/// failure.
public enum LostUpdates {
    /// Called for every lost update; see ``LostUpdates``. Reads and writes are thread-safe.
    public static var handler: (@Sendable (LostUpdate) -> Void)? {
        get { storage.withLock { $0 } }
        set { storage.withLock { $0 = newValue } }
    }

    /// The default handler of debug builds: prints the report to standard error.
    public static let printWarning: @Sendable (LostUpdate) -> Void = { lost in
        var line = lost.description + "\n"
        line.withUTF8 { _ = write(2, $0.baseAddress, $0.count) }  // without Foundation
    }

    // Unsafe: the handler is touched only inside its own lock.
    private nonisolated(unsafe) static let storage: LockedState<(@Sendable (LostUpdate) -> Void)?> = {
        #if DEBUG
            .make(printWarning)
        #else
            .make(nil)
        #endif
    }()

    /// Reports a failed blocking `set` if its failure is one that loses an update silently.
    static func report(_ error: QueueSafeValueError, value: @autoclosure () -> String) {
        switch error {
        case .reentrantAccess, .deadlock:
            handler?(LostUpdate(error: error, value: value()))
        case .valueContainerDeinited, .commandClosureDeallocated, .timedOut, .cancelled, .invalidArgument:
            return
        }
    }
}
