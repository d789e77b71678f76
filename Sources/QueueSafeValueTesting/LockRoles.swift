#if DEBUG
    @_spi(Testing) import QueueSafeValue

    /// What a lock is for, whichever instance it is: the type of the state it guards (every engine's
    /// lock is one role), or the concurrency runtime's per-task lock, which a thread takes to escalate
    /// or resume a task and holds while it runs a task's cancellation or escalation handler.
    enum LockRole: Hashable, CustomStringConvertible {
        /// The type of the guarded state: cheap to make and compare on every lock a run takes; named
        /// only when a report prints it.
        case guarding(Any.Type)
        case taskRuntime

        init(_ guarded: Any.Type) {
            self = .guarding(guarded)
        }

        static func == (lhs: LockRole, rhs: LockRole) -> Bool {
            switch (lhs, rhs) {
            case (.guarding(let left), .guarding(let right)): left == right
            case (.taskRuntime, .taskRuntime): true
            default: false
            }
        }

        func hash(into hasher: inout Hasher) {
            switch self {
            case .guarding(let type): hasher.combine(ObjectIdentifier(type))
            case .taskRuntime: hasher.combine(0)
            }
        }

        /// An engine's lock (the one a command's lock sections are counted by). Reads the type's
        /// name: ask once per type.
        var isEngine: Bool {
            if case .guarding(let type) = self {
                String(reflecting: type).hasSuffix(".EngineStateMachine")
            } else {
                false
            }
        }

        var description: String {
            switch self {
            case .guarding(let type): Self.name(of: type)
            case .taskRuntime: "task (the runtime's lock)"
            }
        }

        /// The names the lock order in `CommandEngine`'s header uses.
        private static func name(of guarded: Any.Type) -> String {
            let type = String(reflecting: guarded)
            let roles = [
                ("EngineStateMachine", "engine"), ("BoostRecord", "boost record"),
                ("DeadlockDetector", "deadlock detector"), ("BoostRegistry", "boost registry"),
                ("Array<QueueSafeValue.Waiter>", "helper jobs"), ("Observation", "observer"),
            ]
            return roles.first { type.contains($0.0) }?.1 ?? type
        }
    }

    /// A lock held by a thread of a controlled world, and where it was taken.
    struct HeldLock {
        let role: LockRole
        let site: LockSite
    }

    /// A lock of role `inner` taken while one of role `outer` is held.
    struct LockNesting: Hashable {
        let outer: LockRole
        let inner: LockRole

        /// Where a run first took it.
        struct Witness {
            let outerSite: LockSite
            let innerSite: LockSite
            let thread: String
        }
    }
#endif
