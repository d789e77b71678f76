import Dispatch
import QueueSafeValueShims

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

    /// Where a command was issued: the `#fileID` and `#line` of the call, which every command
    /// takes as default arguments (`file:` and `line:`, the last ones of its parameter list).
    public struct CallSite: Sendable, Hashable, CustomStringConvertible {
        /// The file, as `#fileID` names it: `Module/File.swift`.
        public let fileID: String
        /// The line; 0 when it was too large to keep (past 8,388,607 for a holder).
        public let line: Int

        /// Where the call was: the file and line, `MyApp/Checkout.swift:88`.
        public init(fileID: String, line: Int) {
            self.fileID = fileID
            self.line = line
        }

        /// `MyApp/Checkout.swift:88`.
        public var description: String { "\(fileID):\(line)" }
    }

    /// Who issued a command: `thread 'sync'`, `main thread`, `queue 'db'`, `a task`.
    ///
    /// Named when the snapshot is taken, from the thread, queue or task that waits or holds then
    /// (give a thread its name with ``nameCurrentThread(_:)``).
    public typealias Party = String

    /// A command that waits for the critical section.
    public struct Waiter: Sendable, CustomStringConvertible {
        /// How it waits and where it will run.
        public let kind: HolderKind
        /// The priority it waits with.
        public let priority: CommandPriority
        /// Where it was issued.
        public let callSite: CallSite?
        /// Who waits: the thread of a blocking command, the queue of a dispatch command, or a task.
        public internal(set) var party: Party
        /// Since when it waits, to a few milliseconds (the engine's coarse clock).
        public let since: DispatchTime
        /// A dispatch command's queue, until ``QueueDiagnostics/namingQueue()`` names it.
        var queueIdentity: Int?

        /// How long it has waited when read.
        public var waitedFor: Double {
            Double(DispatchTime.now().uptimeNanoseconds &- since.uptimeNanoseconds) / 1e9
        }

        /// "MyApp/Cart.swift:12 (thread 'ui', high) waiting for 0.31 s".
        public var description: String {
            let place = callSite.map { "\($0) " } ?? ""
            return
                "\(place)(\(party), priority \(priority)) waiting for \(QueueDiagnostics.format(max(0, waitedFor))) s"
        }
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
        /// Where the holder was issued: the file and line of its `withLock`, `set`, `perform`…
        /// Known for an exclusive holder, and for shared reads that took their share through the
        /// engine's lock (the first of them); `nil` for shared reads that joined a free value
        /// without it.
        public internal(set) var callSite: CallSite?
        /// Who holds: `thread 'sync'` (a blocking command's thread, named while it holds),
        /// `queue 'db'` (a dispatch command), `a task`; `nil` when the snapshot cannot tell.
        public internal(set) var party: Party?
        /// The priority the holder was issued with, if it waited for its turn. A command that took
        /// a free value did not need one: its priority is not kept (`nil`).
        public internal(set) var priority: CommandPriority?
        /// What the holder inherits from the commands waiting behind it (priority inheritance,
        /// see <doc:GettingStarted#Priorities-when-the-command-runs>): `task priority high`, `thread priority 47`;
        /// `nil` when it runs at its own priority.
        public internal(set) var raisedTo: String?

        /// How long it has held the section when read, at least: from ``since``; `nil` if unknown.
        public var heldFor: Double? {
            since.map { max(0, Double(DispatchTime.now().uptimeNanoseconds &- $0.uptimeNanoseconds) / 1e9) }
        }

        /// For a ``HolderKind/dispatch`` command taken under the engine lock: the identity of its
        /// queue, named in ``queue`` once the lock is released (see ``QueueDiagnostics/namingQueue()``).
        var queueIdentity: Int?

        /// "a blocking command for at least 2.5 s (issued at MyApp/Checkout.swift:88, thread 'sync'
        /// (0x7f3a1c), raised to task priority high)", "3 shared reads (the first a …) for 0.02 s"…
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
            if let heldFor {
                text += " for \(sinceIsExact ? "" : "at least ")\(QueueDiagnostics.format(heldFor)) s"
            }
            var details: [String] = []
            if let callSite { details.append("issued at \(callSite)") }
            if let party, queue == nil { details.append(party) }
            if let priority { details.append("priority \(priority)") }
            if let raisedTo { details.append("raised to \(raisedTo)") }
            if !details.isEmpty { text += " (\(details.joined(separator: ", ")))" }
            return text
        }
    }

    /// Seconds with two decimals.
    static func format(_ seconds: Double) -> String {
        // Int64: an `Int` of 32 bits holds hundredths of a second for 248 days only.
        let hundredths = Int64((seconds * 100).rounded())
        let fraction = hundredths % 100
        return "\(hundredths / 100).\(fraction < 10 ? "0" : "")\(fraction)"
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
    /// The commands waiting, in the order they will be granted the section (highest priority
    /// first, first come first served within a priority, as the value's fairness has it now).
    public internal(set) var waiters: [Waiter] = []

    /// How many commands wait, over all priorities.
    public var waitingCount: Int { waiting.values.reduce(0, +) }

    /// One line: "'balance': held by a blocking command for 0.25 s (issued at MyApp/Ledger.swift:40,
    /// thread 'sync' (0x7f3a1c)); 2 waiting (highest: 1, low: 1), first MyApp/Cart.swift:12 (thread 'ui', highest)
    /// waiting for 0.20 s; then …" (the first three waiters).
    public var description: String {
        var text = "\(name): " + (holder.map { "held by \($0)" } ?? "free")
        if waitingCount == 0 {
            text += "; nothing waiting"
        } else {
            let counts = waiting.sorted { $0.key > $1.key }.map { "\($0.key): \($0.value)" }
            text += "; \(waitingCount) waiting (\(counts.joined(separator: ", ")))"
            let next = waiters.prefix(3).map(\.description)
            if !next.isEmpty { text += ", first \(next.joined(separator: "; then "))" }
        }
        if isContainerReleased { text += "; container released" }
        return text
    }
}

// MARK: - Naming threads

extension QueueDiagnostics {
    /// Names the calling thread, as the library's reports show it: `thread 'sync' (0x7f3a…)` in a
    /// snapshot, a ``DeadlockReport`` or a ``QueueMonitor`` event. The name is the system's thread
    /// name, so debuggers, Instruments, crash reports and `top -H` show it too.
    ///
    /// It names the calling thread only, and takes effect before it returns: a report made a moment
    /// later, on any thread, reads the new name. On Apple platforms it calls
    /// `pthread_setname_np(name)`, which keeps 63 bytes of UTF-8 (the system refuses a longer name
    /// outright); on Linux `pthread_setname_np(pthread_self(), name)`, which keeps 15 bytes. A
    /// longer name is cut to the whole characters that fit (`"payments-worker-7"` is
    /// `payments-worker` on Linux), a name is cut at a NUL character, and an empty name removes the
    /// thread's own name.
    ///
    /// Name threads you start and own. A thread of a dispatch queue or of Swift's cooperative pool
    /// keeps the name after your block or job ends, for whatever runs there next; the reports name a
    /// queue by its label and a task by its `Task(name:)` instead.
    ///
    /// Unlike `Thread.current.name` with swift-corelibs-foundation on Linux, it works from the first
    /// instruction of a thread's body (see <doc:GettingStarted#Deadlocks>).
    public static func nameCurrentThread(_ name: String) {
        #if canImport(Darwin)
            let kept = threadName(name, keptIn: 63)
        #else
            let kept = threadName(name, keptIn: 15)
        #endif
        qsv_set_current_thread_name(String(kept))
    }

    /// The longest prefix of `name` made of whole characters that fits `bytes` bytes of UTF-8.
    static func threadName(_ name: String, keptIn bytes: Int) -> Substring {
        var end = name.startIndex
        var used = 0
        while end < name.endIndex {
            let next = name.index(after: end)
            used += name.utf8.distance(from: end, to: next)
            if used > bytes { break }
            end = next
        }
        return name[..<end]
    }
}

extension QueueDiagnostics.HolderKind {
    init(_ kind: CommandKind) {
        switch kind {
        case .blocking: self = .blocking
        case .dispatched: self = .dispatch
        case .awaiting: self = .awaiting
        case .operation: self = .operation
        }
    }
}

extension QueueDiagnostics {
    /// The snapshot with a dispatch holder's queue named by its label (`queue #7` for a queue whose
    /// label the library no longer remembers). Takes the deadlock detector's lock: call it with no
    /// engine lock held.
    func namingQueue() -> QueueDiagnostics {
        var named = self
        if let id = holder?.queueIdentity, holder?.queue == nil {
            named.holder?.queue = DeadlockDetector.shared.label(ofQueue: id) ?? "queue #\(id)"
        }
        for index in named.waiters.indices {
            guard let id = named.waiters[index].queueIdentity else { continue }
            named.waiters[index].party =
                DeadlockDetector.shared.label(ofQueue: id).map { "queue '\($0)'" } ?? "queue #\(id)"
            named.waiters[index].queueIdentity = nil
        }
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
