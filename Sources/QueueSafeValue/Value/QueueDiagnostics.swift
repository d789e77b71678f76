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
        /// Whether it is a manual-completion command whose `done()` has not been called yet:
        /// nothing else can run until it is.
        public let awaitsCompletion: Bool
        /// Since when it holds the section, to a few milliseconds: the moment it was granted
        /// (`sinceIsExact`), or — for a command that took a free section, which costs no clock
        /// read — the moment the first command began to wait for it, so it has held the section at
        /// least that long. `nil` when nothing has waited for it since it took the section.
        public let since: DispatchTime?
        /// Whether ``since`` is the moment of the grant rather than a lower bound.
        public let sinceIsExact: Bool
        /// For a ``HolderKind/dispatch`` command: the label of the queue its closures run on
        /// (`queue #7` for a queue the library no longer remembers the label of); `nil` otherwise.
        public internal(set) var queue: String?
        /// For a ``HolderKind/dispatch`` command: it was granted the value, but its queue has not
        /// run it yet, so the queue is busy or blocked (a thread waiting on that serial queue for
        /// this same value runs it itself; see <doc:GettingStarted#Deadlocks>).
        public let isWaitingForItsQueue: Bool
        /// How many shared reads hold the value together (see `read`), or how many operations of a
        /// ``CommandQueue`` of width above 1 run (one per slot); 0 when one exclusive command
        /// holds it. For shared reads and operations, ``kind`` is the first one's, ``since`` is when
        /// the first of them got the value, and ``awaitsCompletion`` is `false`.
        public let sharedReads: Int
        /// For a ``HolderKind/dispatch`` command taken under the engine lock: the identity of its
        /// queue, named in ``queue`` once the lock is released (see ``QueueDiagnostics/namingQueue()``).
        let queueIdentity: Int?

        /// "a blocking command for at least 2.5 s", "a dispatch command waiting to run on queue
        /// 'db' for 0.1 s", "a dispatch command on queue 'db' waiting for done() for 3.00 s",
        /// "3 shared reads (the first a blocking command) for 0.02 s", …
        public var description: String {
            let article = kind == .awaiting ? "an" : "a"
            let noun = kind == .operation ? "CommandQueue operation" : "\(kind.rawValue) command"
            var text = "\(article) \(noun)"
            if sharedReads > 0 {
                text = "\(sharedReads) shared read\(sharedReads == 1 ? "" : "s") (the first \(text))"
            }
            if let queue {
                text += isWaitingForItsQueue ? " waiting to run on queue '\(queue)'" : " on queue '\(queue)'"
            }
            text += awaitsCompletion ? " waiting for done()" : ""
            if let since {
                let seconds = Double(DispatchTime.now().uptimeNanoseconds &- since.uptimeNanoseconds) / 1e9
                text += " for \(sinceIsExact ? "" : "at least ")\(Self.format(max(0, seconds))) s"
            }
            return text
        }

        init(
            kind: HolderKind, awaitsCompletion: Bool, since: DispatchTime?, sinceIsExact: Bool, queue: String?,
            isWaitingForItsQueue: Bool, sharedReads: Int = 0, queueIdentity: Int? = nil
        ) {
            self.kind = kind
            self.awaitsCompletion = awaitsCompletion
            self.since = since
            self.sinceIsExact = sinceIsExact
            self.queue = queue
            self.isWaitingForItsQueue = isWaitingForItsQueue
            self.sharedReads = sharedReads
            self.queueIdentity = queueIdentity
        }

        private static func format(_ seconds: Double) -> String {
            // Int64: an `Int` of 32 bits holds hundredths of a second for 248 days only.
            let hundredths = Int64((seconds * 100).rounded())
            let fraction = hundredths % 100
            return "\(hundredths / 100).\(fraction < 10 ? "0" : "")\(fraction)"
        }
    }

    /// How the value or queue is named: its label in quotes, or its type and a short identity.
    public let name: String
    /// The command holding the critical section, or `nil` when it is free.
    public internal(set) var holder: Holder?
    /// How many commands wait for the critical section, per priority (priorities with none are
    /// absent).
    public let waiting: [CommandPriority: Int]
    /// Whether the container was released (new commands are refused; queued ones still run).
    public let isContainerReleased: Bool

    /// How many commands wait, over all priorities.
    public var waitingCount: Int { waiting.values.reduce(0, +) }

    /// One line: "'balance': held by a blocking command for 0.25 s; 3 waiting (highest: 1, low: 2)".
    public var description: String {
        var text = "\(name): " + (holder.map { "held by \($0)" } ?? "free")
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
        withMachine { machine, word in snapshot(machine, word: word) }.namingQueue()
    }

    /// The snapshot of `machine` and `word`, taken by a caller that holds the lock. A dispatch
    /// holder's queue is known by its identity only: call ``QueueDiagnostics/namingQueue()`` after
    /// unlocking (the labels are the deadlock detector's, under its lock, which is taken before an
    /// engine's, never inside it).
    final func snapshot(_ machine: Machine, word: Int) -> QueueDiagnostics {
        if EngineWord.readersHold(word) {
            // Reads that took the idle path are blocking reads the machine keeps no record of.
            let kind: QueueDiagnostics.HolderKind =
                switch machine.firstReaderKind ?? .blocking {
                case .blocking: .blocking
                case .dispatched: .dispatch
                case .awaiting: .awaiting
                case .operation: .operation  // a CommandQueue of width above 1
                }
            let holder = QueueDiagnostics.Holder(
                kind: kind, awaitsCompletion: false,
                since: machine.holderSince == 0 ? nil : DispatchTime(uptimeNanoseconds: machine.holderSince),
                sinceIsExact: machine.firstReaderKind != nil || machine.holderSinceIsExact, queue: nil,
                isWaitingForItsQueue: false,
                sharedReads: machine.readers.count + EngineWord.idleReaders(word))
            return QueueDiagnostics(
                name: displayName, holder: holder, waiting: machine.waitingCountsByPriority(),
                isContainerReleased: machine.isClosed)
        }
        let kind: QueueDiagnostics.HolderKind?
        switch word & EngineWord.holderMask {
        case 0: kind = nil
        case CommandKind.blocking.wordBits: kind = .blocking
        case CommandKind.dispatched.wordBits: kind = .dispatch
        default: kind = machine.trackedHolderKind == .operation ? .operation : .awaiting
        }
        let queueIdentity = kind == .dispatch ? dispatchedHolderQueue.loadRelaxed() : nil
        // A retained address: published and not claimed by its block (or a helper) yet.
        let waitingForQueue = kind == .dispatch && pendingDispatch.loadAcquire() > Self.dispatchStarted
        let holder = kind.map { kind in
            QueueDiagnostics.Holder(
                kind: kind, awaitsCompletion: machine.holderAwaitsCompletion,
                since: machine.holderSince == 0 ? nil : DispatchTime(uptimeNanoseconds: machine.holderSince),
                // Named after unlocking (`namingQueue()`): the detector's lock is never taken inside this one.
                // mutant(lock-order-inversion): sinceIsExact: machine.holderSinceIsExact, queue: queueIdentity.flatMap { DeadlockDetector.shared.label(ofQueue: $0) }, isWaitingForItsQueue: waitingForQueue,
                sinceIsExact: machine.holderSinceIsExact, queue: nil, isWaitingForItsQueue: waitingForQueue,
                queueIdentity: queueIdentity)
        }
        return QueueDiagnostics(
            name: displayName, holder: holder, waiting: machine.waitingCountsByPriority(),
            isContainerReleased: machine.isClosed)
    }
}

extension QueueDiagnostics {
    /// The snapshot with a dispatch holder's queue named by its label (`queue #7` for a queue whose
    /// label the library no longer remembers). Takes the deadlock detector's lock: call it with no
    /// engine lock held.
    func namingQueue() -> QueueDiagnostics {
        guard let id = holder?.queueIdentity, holder?.queue == nil else { return self }
        var named = self
        named.holder?.queue = DeadlockDetector.shared.label(ofQueue: id) ?? "queue #\(id)"
        return named
    }
}

extension QueueSafeValueError {
    /// The error with the queue in its diagnostics named (see ``QueueDiagnostics/namingQueue()``).
    func namingQueue() -> QueueSafeValueError {
        switch self {
        case .timedOut(let diagnostics): .timedOut(diagnostics.namingQueue())
        default: self
        }
    }
}
