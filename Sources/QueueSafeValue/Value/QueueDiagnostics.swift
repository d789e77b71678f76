import Dispatch

// MARK: - QueueDiagnostics

/// A snapshot of one critical section and the commands waiting for it: what holds the value up.
///
/// Read it from ``QueueSafeValue/diagnostics`` (or the synced and asynced containers, or
/// ``CommandQueue/diagnostics``) when a command takes longer than you expect. Taking the snapshot
/// takes the engine's lock briefly; it never waits for the critical section itself, so it works
/// while the value is held forever. The snapshot is a moment's truth: by the time you read it the
/// queue may have moved on.
public struct QueueDiagnostics: Sendable, CustomStringConvertible {
    /// How the command that holds the critical section waits and where its closure runs.
    public enum HolderKind: String, Sendable {
        /// `wait` / `wait(timeout:)` / a synced value: a thread runs the closure.
        case blocking
        /// `async(performIn:)` / an asynced value: the closure runs on a dispatch queue.
        case dispatch
        /// `value.async`: a task runs the closure, and may hold the value across `await`s.
        case awaiting
        /// A ``CommandQueue`` operation.
        case operation
    }

    /// The command that holds the critical section.
    public struct Holder: Sendable, CustomStringConvertible {
        /// How it waits and runs.
        public let kind: HolderKind
        /// Whether it is a manual-completion command whose closure has run but whose `done()` has
        /// not been called yet: nothing else can run until it is.
        public let awaitsCompletion: Bool

        /// "a blocking command", "a dispatch command waiting for done()", …
        public var description: String {
            let article = kind == .awaiting || kind == .operation ? "an" : "a"
            let noun = kind == .operation ? "CommandQueue operation" : "\(kind.rawValue) command"
            return "\(article) \(noun)" + (awaitsCompletion ? " waiting for done()" : "")
        }
    }

    /// The command holding the critical section, or `nil` when it is free.
    public let holder: Holder?
    /// How many commands wait for the critical section, per priority (priorities with none are
    /// absent).
    public let waiting: [CommandPriority: Int]
    /// Whether the container was released (new commands are refused; queued ones still run).
    public let isContainerReleased: Bool

    /// How many commands wait, over all priorities.
    public var waitingCount: Int { waiting.values.reduce(0, +) }

    /// One line: "held by a blocking command; 3 waiting (highest: 1, low: 2)".
    public var description: String {
        var text = holder.map { "held by \($0)" } ?? "free"
        if waitingCount == 0 {
            text += "; nothing waiting"
        } else {
            let counts = waiting.sorted { $0.key > $1.key }.map { "\($0.key): \($0.value)" }
            text += "; \(waitingCount) waiting (\(counts.joined(separator: ", ")))"
        }
        if isContainerReleased { text += "; container released" }
        return text
    }
}

// MARK: - Taking the snapshot

extension CommandEngine {
    /// The section's holder and waiters now, read under the lock.
    @usableFromInline
    final var diagnostics: QueueDiagnostics {
        withMachine { machine, word in
            let holder: QueueDiagnostics.Holder?
            switch word & EngineWord.holderMask {
            case 0:
                holder = nil
            case CommandKind.blocking.wordBits:
                holder = .init(kind: .blocking, awaitsCompletion: machine.holderAwaitsCompletion)
            case CommandKind.dispatched.wordBits:
                holder = .init(kind: .dispatch, awaitsCompletion: machine.holderAwaitsCompletion)
            default:
                let kind: QueueDiagnostics.HolderKind = machine.trackedHolderKind == .operation ? .operation : .awaiting
                holder = .init(kind: kind, awaitsCompletion: machine.holderAwaitsCompletion)
            }
            return QueueDiagnostics(
                holder: holder, waiting: machine.waitingCountsByPriority(), isContainerReleased: machine.isClosed)
        }
    }
}
