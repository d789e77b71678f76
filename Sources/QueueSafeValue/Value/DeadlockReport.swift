// MARK: - DeadlockReport

/// Why a command failed with ``QueueSafeValueError/deadlock(_:)``: the wait it refused and the
/// cycle that wait would have closed.
///
/// The command that gets this error never ran and left the queue; nothing else was changed. The
/// other parties of the cycle keep waiting until a value of the cycle is released, which usually
/// happens as soon as the refused caller returns from the closure that holds its value.
public struct DeadlockReport: Sendable, CustomStringConvertible {
    /// What kind of deadlock it was.
    public enum Kind: Sendable {
        /// Each party of ``DeadlockReport/cycle`` waits for a value that the next one holds, and
        /// the last one waits for a value the refused caller holds.
        case waitCycle
        /// A blocking command inside a task would have parked a thread of Swift's cooperative pool
        /// while a task holds the value: with every pool thread parked, that task could never
        /// resume to release it.
        case cooperativePoolExhausted
    }

    /// One party of a cycle: a thread or task, the value it waits for, and the value's holder.
    public struct Link: Sendable, CustomStringConvertible {
        /// The waiting thread or task: `thread 0x7f3a1c (queue 'db')`, `task 0x55d2a0`.
        public let waiter: String
        /// The value it waits for, by label or short identity.
        public let value: String
        /// The thread or task that holds that value.
        public let holder: String

        /// "thread 0x7f3a1c waits for 'balance', held by thread 0x7f3b08".
        public var description: String { "\(waiter) waits for \(value), held by \(holder)" }
    }

    /// What kind of deadlock it was.
    public let kind: Kind
    /// The cycle, starting with the refused caller. Empty for ``Kind/cooperativePoolExhausted``.
    public let cycle: [Link]
    /// The value the refused command waited for, at the moment it was refused.
    public let diagnostics: QueueDiagnostics
    /// For ``Kind/cooperativePoolExhausted``: how many pool threads were parked in blocking
    /// commands, out of how many the pool has.
    public let parkedPoolThreads: (parked: Int, width: Int)?

    /// A paragraph that names the cycle, what was refused, and what holds the value.
    public var description: String {
        switch kind {
        case .waitCycle:
            let links = cycle.map(\.description).joined(separator: "; ")
            return "a wait cycle: \(links). The wait of \(cycle.first?.waiter ?? "the caller") was refused. "
                + "\(diagnostics)"
        case .cooperativePoolExhausted:
            let parked =
                parkedPoolThreads.map { "\($0.parked) of the pool's \($0.width) threads" } ?? "the pool's threads"
            return "a blocking command inside a task would have parked the last free thread of Swift's cooperative "
                + "pool (\(parked) already wait in blocking commands) while a task holds the value and needs a "
                + "pool thread to resume. Use the awaiting schedule (value.async) inside tasks. \(diagnostics)"
        }
    }
}
