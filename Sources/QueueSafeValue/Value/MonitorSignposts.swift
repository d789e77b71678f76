import Dispatch

#if canImport(os)
    import os
#endif

/// Emits a ``QueueMonitor``'s events as signposts (`monitor(signposts: true)`): a long hold is an
/// interval from its report to its end (per value), every other event a point. Below macOS 12 /
/// iOS 15 / tvOS 15 / watchOS 8 (`OSSignposter`), and off Apple platforms, nothing is emitted.
enum MonitorSignposts {
    /// What emits an event of a value (keyed by its engine), where signposts exist; `nil` elsewhere.
    static func make() -> (@Sendable (QueueMonitor.Event, ObjectIdentifier) -> Void)? {
        #if canImport(os)
            if #available(macOS 12, iOS 15, tvOS 15, watchOS 8, *) {
                let emitter = SignpostEmitter()
                return { event, key in emitter.emit(event, key: key) }
            }
        #endif
        return nil
    }
}

#if canImport(os)
    /// The signposter, and the long holds whose intervals are open, per value.
    @available(macOS 12, iOS 15, tvOS 15, watchOS 8, *)
    final class SignpostEmitter: @unchecked Sendable {  // @unchecked Sendable: immutable; `openIntervals` locks
        private let signposter = OSSignposter(subsystem: "QueueSafeValue", category: .pointsOfInterest)
        private let openIntervals = LockedState.make([ObjectIdentifier: OSSignpostIntervalState]())

        func emit(_ event: QueueMonitor.Event, key: ObjectIdentifier) {
            let text = event.description
            switch event.kind {
            case .longHold:
                let state = signposter.beginInterval(
                    "long hold", id: signposter.makeSignpostID(), "\(text, privacy: .public)")
                let replaced = openIntervals.withLock { open in open.updateValue(state, forKey: key) }
                if let replaced { signposter.endInterval("long hold", replaced) }
            case .longHoldEnded:
                if let state = openIntervals.withLock({ open in open.removeValue(forKey: key) }) {
                    signposter.endInterval("long hold", state, "\(text, privacy: .public)")
                }
            case .longWait:
                signposter.emitEvent("long wait", "\(text, privacy: .public)")
            case .timedOut:
                signposter.emitEvent("timed out", "\(text, privacy: .public)")
            case .deadlock:
                signposter.emitEvent("deadlock", "\(text, privacy: .public)")
            }
        }
    }
#endif
