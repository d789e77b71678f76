import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

/// An append-only log shared across threads, queues and tasks.
final class Recorder<Element>: @unchecked Sendable {  // @unchecked Sendable: every access takes the lock
    private let lock = NSLock()
    private var elements: [Element] = []

    init() {}

    func append(_ element: Element) {
        lock.lock()
        elements.append(element)
        lock.unlock()
    }

    /// Everything appended so far, in order.
    var snapshot: [Element] {
        lock.lock()
        defer { lock.unlock() }
        return elements
    }

    var count: Int {
        lock.lock()
        defer { lock.unlock() }
        return elements.count
    }
}

// MARK: - Executor events

extension Recorder where Element == RecurringExecutorEvent {
    /// The handler to pass to an executor.
    var handler: @Sendable (RecurringExecutorEvent) -> Void {
        { [self] event in append(event) }
    }

    /// What the recorded events report, in order (their timestamps left out).
    var kinds: [RecurringExecutorEvent.Kind] {
        snapshot.map(\.kind)
    }

    /// Waits (bounded) until the recorded events' kinds satisfy `condition`.
    func wait(
        sourceLocation: SourceLocation = #_sourceLocation,
        until condition: @escaping ([RecurringExecutorEvent.Kind]) -> Bool
    ) async throws {
        try await waitUntil("the executor's events to match", sourceLocation: sourceLocation) {
            condition(kinds)
        }
    }

    /// Waits (bounded) until an event of `kind` has been recorded at least `count` times.
    func wait(
        for kind: RecurringExecutorEvent.Kind,
        count: Int = 1,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        try await waitUntil("\(count) × \(kind)", sourceLocation: sourceLocation) {
            kinds.filter { $0 == kind }.count >= count
        }
    }

    /// The runs that started, in order.
    var starts: [RecurringTrigger] {
        kinds.compactMap { kind in
            if case .started(_, let trigger) = kind { return trigger }
            return nil
        }
    }
}
