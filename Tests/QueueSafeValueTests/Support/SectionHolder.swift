import Dispatch
import Testing

@_spi(Testing) @testable import QueueSafeValue

/// Holds a value's critical section through a manual-completion dispatch command until
/// ``release()`` is called, so a test can line up waiting commands behind it.
final class SectionHolder: @unchecked Sendable {  // @unchecked Sendable: state is `Locked`
    private let done = Locked<CommandCompletionClosure?>(nil)
    private let granted = DispatchSemaphore(value: 0)
    private static let queue = DispatchQueue(label: "SectionHolder")

    /// Issues the holding command at `priority` and waits until it holds the section.
    init<Value: Sendable>(
        _ value: QueueSafeValue<Value>,
        priority: CommandPriority = .highest,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        value.async(performIn: Self.queue).priority(priority).get { [done, granted] _, completion in
            done.set(completion)
            granted.signal()
        }
        waitOrFail(granted, "the holder to get the section", sourceLocation: sourceLocation)
    }

    /// Ends the holding command (from the calling thread); the next pending command starts.
    func release() {
        let completion = done.withLock { closure -> CommandCompletionClosure? in
            defer { closure = nil }
            return closure
        }
        completion?()
    }
}
