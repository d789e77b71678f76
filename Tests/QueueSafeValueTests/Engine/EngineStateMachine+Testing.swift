@_spi(Testing) @testable import QueueSafeValue

/// The transition tests and the cycle explorer keep plain integers as the machine's handles: no
/// integer runs on a dispatch queue of its own, so no helper or inline successor is ever chosen.
extension Int: EngineHandle {
    /// No integer runs on a queue.
    public var targetQueueID: Int { 0 }
}

extension EngineStateMachine.Actions {
    /// The command this release granted, if any.
    var next: Handle? { grant?.handle }

    /// The commands that left the queue, in order.
    var left: [Handle] {
        others.compactMap { if case .left(let handle) = $0 { handle } else { nil } }
    }

    /// The commands whose tasks are cancelled, in order.
    var cancelled: [Handle] {
        others.compactMap { if case .cancel(let handle) = $0 { handle } else { nil } }
    }

    /// The manual-completion command to finish, if any.
    var finish: Handle? {
        others.lazy.compactMap { if case .finish(let handle) = $0 { handle } else { nil } }.first
    }
}

extension EngineStateMachine {
    /// ``leave(_:)``, answering with the command that left (`nil` if it was granted first or had
    /// left already).
    mutating func leaving(_ ticket: Ticket) -> Handle? {
        guard let actions = leave(ticket) else { return nil }
        return actions.left.first
    }
}
