import Dispatch
import QueueSafeValueShims

#if canImport(CDispatch)
    import CDispatch
#endif

// MARK: - QueueTag

/// Which dispatch queue code runs on. Dispatch has no "current queue", only queue-specific values:
/// a queue gets this tag (an identity and its label) when the first dispatch command targets it.
///
/// A thread may have begun to wait on a queue before anything tagged it, so tagging a queue tells
/// every parked waiter that did not know its queue to look again
/// (``DeadlockDetector/tagQueue(label:_:)``): what a waiter knows never depends on that order.
@_spi(Testing)
public struct QueueTag: Sendable, Hashable {
    /// ``mainQueue``, or a number no other queue of the process has.
    let id: Int
    let label: String

    #if DEBUG
        /// The tag of `queue` in `detector`'s identities, tagging it if it has none yet (a controlled
        /// scheduler's virtual queues).
        @_spi(Testing)
        public static func tag(of queue: DispatchQueue, in detector: DeadlockDetector) -> QueueTag {
            QueueTag(id: identity(of: queue, in: detector), label: queue.label)
        }
    #endif

    /// The key of the tags; the test suite's virtual queues read a tag as Dispatch does for a thread
    /// running on the queue. The main queue is tagged first: on Linux every `DispatchQueue.main` is a
    /// new wrapper of the one main queue, so only the tag, stored on the queue itself, recognises it.
    @_spi(Testing)
    public static let specificKey: DispatchSpecificKey<QueueTag> = {
        let key = DispatchSpecificKey<QueueTag>()
        let main = DispatchQueue.main
        main.setSpecific(key: key, value: QueueTag(id: mainQueue, label: main.label))
        return key
    }()

    static let mainQueue = 1

    /// Tags `queue` if it has no tag yet: once per queue, under the detector's lock.
    static func identity(of queue: DispatchQueue, in detector: DeadlockDetector = .shared) -> Int {
        if let tag = queue.getSpecific(key: specificKey) { return tag.id }
        // Serialized, so two threads tagging one queue at once agree on its identity.
        return detector.tagQueue(label: queue.label) { newID in
            // Another thread may have tagged it since the read above.
            if let tag = queue.getSpecific(key: specificKey) { return tag.id }
            queue.setSpecific(key: specificKey, value: QueueTag(id: newID, label: queue.label))
            return newID
        }
    }

    /// The innermost tagged queue the caller runs on.
    static var current: QueueTag? {
        if let virtual = SyncPoints.queueOverride { return virtual }
        return DispatchQueue.getSpecific(key: specificKey)
    }

    /// The main queue on the main thread (which drains it until `dispatchMain()`), and the innermost
    /// tagged queue; `innermostKnown` is false if the caller may run on a queue not tagged yet.
    static var currentIdentities: (identities: [Int], innermostKnown: Bool) {
        var identities: [Int] = []
        if qsv_is_main_thread() != 0 && SyncPoints.queueOverride == nil { identities.append(mainQueue) }
        guard let current else { return (identities, false) }
        if current.id != mainQueue || identities.isEmpty { identities.append(current.id) }
        return (identities, true)
    }

    /// Tagged or not; `nil` outside a queue's block and on Dispatch's global queues (whose label a
    /// plain thread reports too).
    static var currentLabel: String? {
        if let virtual = SyncPoints.queueOverride { return virtual?.label }
        #if canImport(Darwin)
            let raw: UnsafePointer<CChar>? = __dispatch_queue_get_label(nil)
        #else
            let raw: UnsafePointer<CChar>? = dispatch_queue_get_label(nil)
        #endif
        guard let raw else { return nil }
        let label = String(cString: raw)
        return label.isEmpty || label.hasPrefix("com.apple.root.") ? nil : label
    }
}
