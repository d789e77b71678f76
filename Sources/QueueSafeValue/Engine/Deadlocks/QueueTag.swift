import Dispatch
import QueueSafeValueShims

#if canImport(CDispatch)
    import CDispatch
#endif

// MARK: - QueueTag

/// Tells which dispatch queue code runs on. Dispatch has no "current queue", only queue-specific
/// values: a queue that dispatch commands target gets this tag (an identity of its own and its
/// label) when the first of them is submitted, and code running on the queue reads the tag back.
///
/// A thread may have started to wait on a queue before anything tagged it: it cannot know then that
/// it blocks that queue. So tagging a queue tells every parked waiter that did not know its queue
/// to look again (``DeadlockDetector/tagQueue(_:)``): whether a waiting thread runs on a queue
/// never depends on what happened before its wait began.
@_spi(Testing)
public struct QueueTag: Sendable, Hashable {
    /// The queue's identity: ``mainQueue``, or a number no other queue of the process has.
    let id: Int
    /// The queue's label, for reports.
    let label: String

    /// The key of the tags. The main queue is tagged before any other queue can be: on Linux every
    /// `DispatchQueue.main` is a new wrapper of the one main queue, so only the tag, stored on the
    /// queue itself, recognises it.
    /// The key of the tags (for the test suite's virtual queues, which read a tag the way Dispatch
    /// does for a thread running on the queue).
    @_spi(Testing)
    public static var specificKey: DispatchSpecificKey<QueueTag> { key }

    #if DEBUG
        /// The tag of `queue` in `detector`'s identities, tagging the queue if it carries no tag yet (a
        /// controlled scheduler's virtual queues).
        @_spi(Testing)
        public static func tag(of queue: DispatchQueue, in detector: DeadlockDetector) -> QueueTag {
            QueueTag(id: identity(of: queue, in: detector), label: queue.label)
        }
    #endif

    private static let key: DispatchSpecificKey<QueueTag> = {
        let key = DispatchSpecificKey<QueueTag>()
        let main = DispatchQueue.main
        main.setSpecific(key: key, value: QueueTag(id: mainQueue, label: main.label))
        return key
    }()

    /// The identity the main queue goes by.
    static let mainQueue = 1

    /// The identity of `queue`, tagging it if it carries no tag yet.
    /// - Complexity: O(1) to read the tag (a lookup in Dispatch's queue-specific list); tagging
    ///   happens once per queue, under a lock, and wakes the parked waiters that do not know their
    ///   queue.
    static func identity(of queue: DispatchQueue, in detector: DeadlockDetector = .shared) -> Int {
        if let tag = queue.getSpecific(key: key) { return tag.id }
        // Serialized, so that two threads tagging one queue at once agree on its identity.
        return detector.tagQueue(label: queue.label) { newID in
            // Another thread may have tagged it since the read above.
            if let tag = queue.getSpecific(key: key) { return tag.id }
            queue.setSpecific(key: key, value: QueueTag(id: newID, label: queue.label))
            return newID
        }
    }

    /// The innermost tagged queue the caller runs on, if any.
    static var current: QueueTag? {
        if let virtual = SyncPoints.queueOverride { return virtual }
        return DispatchQueue.getSpecific(key: key)
    }

    /// The identities of the queues the caller runs on, as far as they can be known: the main
    /// queue on the main thread (which, until `dispatchMain()`, drains it), and the innermost
    /// tagged queue; and whether that innermost queue is known (a tagged one), or the caller may
    /// run on a queue nothing has tagged yet.
    static var currentIdentities: (identities: [Int], innermostKnown: Bool) {
        var identities: [Int] = []
        if qsv_is_main_thread() != 0 && SyncPoints.queueOverride == nil { identities.append(mainQueue) }
        guard let current else { return (identities, false) }
        if current.id != mainQueue || identities.isEmpty { identities.append(current.id) }
        return (identities, true)
    }

    /// The label of the queue the caller runs on, tagged or not; `nil` outside any queue's block,
    /// and on Dispatch's own global queues (whose label a plain thread reports too).
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
