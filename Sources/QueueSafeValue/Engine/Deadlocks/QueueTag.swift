import Dispatch
import QueueSafeValueShims

// MARK: - QueueTag

/// Tells which dispatch queue code runs on. Dispatch has no "current queue", only queue-specific
/// values: a queue that dispatch commands target gets this tag (its identity and label) the first
/// time one of them has to wait for it, and code running on the queue reads the tag back.
struct QueueTag: Sendable, Hashable {
    /// The queue's identity: its address, or ``mainQueue``.
    let id: Int
    /// The queue's label, for reports.
    let label: String

    private static let key = DispatchSpecificKey<QueueTag>()

    /// The identity the main queue goes by.
    static let mainQueue = 1

    /// The main queue's object, compared by identity (`DispatchQueue.main` itself costs a
    /// `swift_once` and a retain each time).
    private static let mainQueueObject = ObjectIdentifier(DispatchQueue.main)

    /// The identity of `queue`, tagging it if it carries no tag yet.
    /// - Complexity: about 25 ns to read the tag; tagging happens once per queue.
    static func identity(of queue: DispatchQueue) -> Int {
        let object = ObjectIdentifier(queue)
        if let tag = queue.getSpecific(key: key) { return tag.id }
        // The main queue is tagged too: after `dispatchMain()` a worker thread, not the main
        // thread, drains it, so only the tag tells that code runs on it.
        let id = object == mainQueueObject ? mainQueue : Int(bitPattern: UInt(bitPattern: object))
        queue.setSpecific(key: key, value: QueueTag(id: id, label: queue.label))
        return id
    }

    /// The innermost tagged queue the caller runs on, if any.
    static var current: QueueTag? {
        DispatchQueue.getSpecific(key: key)
    }

    /// The identities of the queues the caller runs on, as far as they can be known: the main
    /// queue on the main thread (which, until `dispatchMain()`, drains it), and the innermost
    /// tagged queue.
    static var currentIdentities: [Int] {
        var identities: [Int] = []
        if qsv_is_main_thread() != 0 { identities.append(mainQueue) }
        if let current, current.id != mainQueue || identities.isEmpty { identities.append(current.id) }
        return identities
    }
}
