import Dispatch

#if canImport(os)
    import os
#endif

// The monitor's events as signposts, on Apple platforms: one switch,
// `QueueSafeValue.monitor(signposts: true)`, off by default. Everywhere else, and below macOS 12 /
// iOS 15 / tvOS 15 / watchOS 8 (`OSSignposter`), nothing is made and nothing is emitted.

/// Emits a ``QueueMonitor``'s events as signposts: a long hold is an interval from its report to its
/// end (per value), every other event a point.
enum MonitorSignposts {
    /// The emitter, where signposts exist; `nil` elsewhere.
    static func make() -> AnyObject? {
        #if canImport(os)
            if #available(macOS 12, iOS 15, tvOS 15, watchOS 8, *) { return SignpostEmitter() }
        #endif
        return nil
    }

    /// Emits `event` of `engine` through `emitter` (what ``make()`` returned).
    static func emit(_ event: QueueMonitor.Event, of engine: CommandEngine, to emitter: AnyObject) {
        #if canImport(os)
            if #available(macOS 12, iOS 15, tvOS 15, watchOS 8, *), let emitter = emitter as? SignpostEmitter {
                emitter.emit(event, key: ObjectIdentifier(engine))
            }
        #endif
    }
}

#if canImport(os)
    /// The signposter and the long holds whose intervals are open, per value.
    @available(macOS 12, iOS 15, tvOS 15, watchOS 8, *)
    final class SignposterBox: @unchecked Sendable {  // @unchecked Sendable: `open` is behind `lock`
        let signposter = OSSignposter(subsystem: "QueueSafeValue", category: .pointsOfInterest)
        let lock = LockedState.make([ObjectIdentifier: OSSignpostIntervalState]())
    }

    @available(macOS 12, iOS 15, tvOS 15, watchOS 8, *)
    final class SignpostEmitter: @unchecked Sendable {  // @unchecked Sendable: immutable; the box locks
        private let box = SignposterBox()

        func emit(_ event: QueueMonitor.Event, key: ObjectIdentifier) {
            let signposter = box.signposter
            let text = event.description
            switch event.kind {
            case .longHold:
                let state = signposter.beginInterval(
                    "long hold", id: signposter.makeSignpostID(), "\(text, privacy: .public)")
                let replaced = box.lock.withLock { open in open.updateValue(state, forKey: key) }
                if let replaced { signposter.endInterval("long hold", replaced) }
            case .longHoldEnded:
                if let state = box.lock.withLock({ open in open.removeValue(forKey: key) }) {
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
