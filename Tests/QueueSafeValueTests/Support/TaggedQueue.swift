import Dispatch

#if canImport(CDispatch)
    import CDispatch
#endif

/// A dispatch queue that can tell whether the caller runs on it.
final class TaggedQueue: @unchecked Sendable {  // @unchecked Sendable: immutable after init
    let queue: DispatchQueue
    private let key = DispatchSpecificKey<Int>()
    private let tag: Int

    init(label: String, tag: Int = 1, attributes: DispatchQueue.Attributes = []) {
        queue = DispatchQueue(label: label, attributes: attributes)
        self.tag = tag
        queue.setSpecific(key: key, value: tag)
    }

    /// Whether the calling code runs on this queue.
    var isCurrent: Bool {
        DispatchQueue.getSpecific(key: key) == tag
    }

    /// The label of the dispatch queue the caller runs on (any queue, tagged or not).
    static func currentLabel() -> String {
        #if canImport(Darwin)
            return String(cString: __dispatch_queue_get_label(nil))
        #else
            return String(cString: dispatch_queue_get_label(nil))
        #endif
    }
}
