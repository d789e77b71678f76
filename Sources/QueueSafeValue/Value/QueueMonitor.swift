import Dispatch
import QueueSafeValueShims

// MARK: - QueueMonitor

/// Reports what holds values up, for every `QueueSafeValue` and ``CommandQueue`` of the process:
/// a hold longer than a threshold **while it is still held** (and once more when it ends), a wait
/// longer than a threshold when it ends, and every timeout and deadlock refusal. Start it with
/// ``QueueSafeValue/monitor(thresholds:on:signposts:handler:)`` (see <doc:FindingWhatHoldsYourValue>).
///
/// - A *watchdog* (a timer on a queue of its own) samples the values that have been contended
///   since the monitor started, or were created while it runs, every
///   ``Thresholds/samplingPeriod``: a command that takes a free value never reads the clock. A hold
///   is reported within its threshold plus one sampling period, and named from where it was
///   issued (the file and line of its `withLock`, `set`, `perform`…).
/// - Events of one value are throttled: at most ``Thresholds/eventsPerSecond`` of each kind per
///   value per second (5 by default), except the end of a reported hold (`longHoldEnded`), which
///   the throttle never leaves out. The next event delivered for that value counts those left out
///   (``Event/omitted``), so nothing is lost silently; ``stop()`` returns how many were left out
///   since.
/// - The handler runs on the queue you give (a serial queue of its own by default), one event at a
///   time, outside every engine lock: it may use other values. A handler that blocks holds up only
///   later events: at most 256 wait for it, and events beyond that are counted as left out.
///
/// One monitor runs at a time: starting another stops the one before. Its figures are costs only
/// while it runs (<doc:FindingWhatHoldsYourValue#What-it-costs>).
public final class QueueMonitor: @unchecked Sendable {  // @unchecked Sendable: a lock or its queue guards state
    /// When events are reported, and how often at most.
    public struct Thresholds: Sendable, Equatable {
        /// A hold reported as long once it has lasted this long (`longHold` events).
        public let longHold: DispatchTimeInterval
        /// A wait reported as long, when it ends, if it lasted this long (`longWait` events).
        public let longWait: DispatchTimeInterval
        /// How often the watchdog looks at the contended values' holders.
        public let samplingPeriod: DispatchTimeInterval
        /// How many events of each kind one value may report per second (`longHold`, `longWait`,
        /// `timedOut` and `deadlock` each have this many); the rest are counted, not delivered. The
        /// end of a reported hold (`longHoldEnded`) is never left out by it.
        ///
        /// A second is a window of the monitor's clock, opened by the first event of the value
        /// after the previous window ended: a window never delivers more than this many of a kind.
        public let eventsPerSecond: Int

        /// Thresholds for holds and waits, the watchdog's period and the throttle.
        ///
        /// The default throttle, 5 events of each kind per value per second, lets a stall's events
        /// through; each kind has its own budget, so the refusals a stall causes cannot crowd out
        /// the long hold that names its culprit.
        /// - Throws: `.invalidArgument` for an interval of zero, below zero or `.never`, or fewer
        ///   than one event per second.
        public init(
            longHold: DispatchTimeInterval = .milliseconds(250),
            longWait: DispatchTimeInterval = .milliseconds(100),
            samplingPeriod: DispatchTimeInterval = .milliseconds(50),
            eventsPerSecond: Int = 5
        ) throws(QueueSafeValueError) {
            for (name, interval) in [
                ("longHold", longHold), ("longWait", longWait), ("samplingPeriod", samplingPeriod),
            ]
            where QueueMonitor.nanoseconds(interval) == nil {
                throw .invalidArgument("the monitor's \(name) must be above zero and finite, got \(interval)")
            }
            guard eventsPerSecond >= 1 else {
                throw .invalidArgument("the monitor's eventsPerSecond must be at least 1, got \(eventsPerSecond)")
            }
            self.longHold = longHold
            self.longWait = longWait
            self.samplingPeriod = samplingPeriod
            self.eventsPerSecond = eventsPerSecond
            longHoldNanoseconds = QueueMonitor.nanoseconds(longHold) ?? .max
        }

        /// ``init(longHold:longWait:samplingPeriod:eventsPerSecond:)-(DispatchTimeInterval,_,_,_)``
        /// with `Duration`s (`try .init(longHold: budget)` for a `Duration` you hold;
        /// `.milliseconds(200)` keeps meaning a `DispatchTimeInterval`), kept to the nanosecond as
        /// every `Duration` timeout of the library is. The same defaults.
        /// - Throws: `.invalidArgument` for a duration of zero, below zero or below a nanosecond, or
        ///   fewer than one event per second.
        @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
        @_disfavoredOverload  // `.milliseconds(200)` names both types: it keeps meaning a DispatchTimeInterval
        public init(
            longHold: Duration = .milliseconds(250),
            longWait: Duration = .milliseconds(100),
            samplingPeriod: Duration = .milliseconds(50),
            eventsPerSecond: Int = 5
        ) throws(QueueSafeValueError) {
            // Checked here, to name the duration given: a fraction of a nanosecond converts to zero.
            for (name, duration) in [
                ("longHold", longHold), ("longWait", longWait), ("samplingPeriod", samplingPeriod),
            ]
            where QueueMonitor.nanoseconds(DispatchTimeInterval(timeout: duration)) == nil {
                throw .invalidArgument("the monitor's \(name) must be at least one nanosecond, got \(duration)")
            }
            try self.init(
                longHold: DispatchTimeInterval(timeout: longHold), longWait: DispatchTimeInterval(timeout: longWait),
                samplingPeriod: DispatchTimeInterval(timeout: samplingPeriod), eventsPerSecond: eventsPerSecond)
        }

        /// Thresholds a public initializer refuses, for the controlled scheduler's scenarios: a long
        /// hold of `longHoldNanoseconds` (0: every sample of a held value reports), waits never.
        init(checkingLongHold longHoldNanoseconds: UInt64) {
            longHold = .nanoseconds(Int(clamping: longHoldNanoseconds))  // 32-bit: shown only, compared as UInt64
            longWait = .seconds(3600)
            samplingPeriod = .seconds(3600)
            eventsPerSecond = .max
            self.longHoldNanoseconds = longHoldNanoseconds
        }

        /// The long-hold threshold in nanoseconds, worked out once (every sample compares with it).
        let longHoldNanoseconds: UInt64
        /// The long-wait threshold in nanoseconds.
        var longWaitNanoseconds: UInt64 { QueueMonitor.nanoseconds(longWait) ?? .max }

        /// The long-wait threshold as a hand-off reads it from a word: whole milliseconds, at least 1.
        var longWaitWord: Int {
            let milliseconds = max(1, longWaitNanoseconds / 1_000_000)
            return Int(clamping: milliseconds)  // 32-bit: past Int32.max ms (24.8 days) it acts as 24.8 days
        }
    }

    /// One report: what happened to which value, where it was issued, and what held it.
    public struct Event: Sendable, CustomStringConvertible {
        /// What happened.
        public enum Kind: String, Sendable {
            /// A hold has lasted ``Thresholds/longHold`` and still holds: ``Event/duration`` is how
            /// long it has held (at least), ``Event/diagnostics`` names it and its waiters.
            case longHold
            /// A hold reported as ``longHold`` ended: ``Event/duration`` is its length (at least).
            /// The throttle never leaves it out.
            case longHoldEnded
            /// A command waited ``Thresholds/longWait`` or longer and has just been granted the value:
            /// ``Event/duration`` is how long it waited, ``Event/heldBy`` the holder that handed it on.
            case longWait
            /// A command gave up waiting (`.timedOut`): ``Event/diagnostics`` is the error's.
            case timedOut
            /// A command was refused because waiting would deadlock (`.deadlock`).
            case deadlock
        }

        /// What happened.
        public let kind: Kind
        /// The value or queue, as diagnostics name it (`'checkout'`, `QueueSafeValue<Int> #3fa0`).
        public let value: String
        /// Seconds: how long the holder has held so far (`longHold`, and `timedOut` and `deadlock`:
        /// the holder the refused command waited for), the hold's length (`longHoldEnded`), how long
        /// the command waited (`longWait`). At least that long: the engine's clock is coarse (a few
        /// milliseconds).
        public let duration: Double
        /// Where the command was issued: the holder (`longHold`, `longHoldEnded`) or the command that
        /// waited (the others); `nil` if not known.
        public let callSite: QueueDiagnostics.CallSite?
        /// The command's priority, if known.
        public let priority: CommandPriority?
        /// For `longWait`: where the command that held the value until then was issued.
        public internal(set) var heldBy: QueueDiagnostics.CallSite?
        /// The value's holder and waiters when the event happened (`longHold`, `timedOut`,
        /// `deadlock`), else `nil`.
        public internal(set) var diagnostics: QueueDiagnostics?
        /// For `deadlock`: the cycle.
        public internal(set) var deadlock: DeadlockReport?
        /// How many events of this value were left out (by the throttle, or because the handler
        /// fell behind) since the last one delivered.
        public internal(set) var omitted = 0
        /// When it happened.
        public let time: DispatchTime

        /// One line: "longHold 'checkout': 0.50 s, issued at MyApp/Checkout.swift:88 (…)".
        public var description: String {
            var text = "\(kind.rawValue) \(value): \(QueueDiagnostics.format(duration)) s"
            if let callSite { text += ", issued at \(callSite)" }
            if let priority { text += ", priority \(priority)" }
            if let heldBy { text += ", held up by \(heldBy)" }
            if let deadlock {
                text += "; \(deadlock)"
            } else if let diagnostics {
                text += "; \(diagnostics)"
            }
            if omitted > 0 { text += " (\(omitted) earlier event\(omitted == 1 ? "" : "s") of this value left out)" }
            return text
        }
    }

    /// The thresholds it runs with.
    public let thresholds: Thresholds

    private let handler: @Sendable (Event) -> Void
    private let deliveryQueue: DispatchQueue
    /// Emits an event as a signpost: what `MonitorSignposts.make()` returned when asked for, else `nil`.
    private let signposts: (@Sendable (Event, ObjectIdentifier) -> Void)?
    private let watchdogQueue = DispatchQueue(label: "QueueSafeValue.monitor.watchdog")
    private let state = LockedState.make(State())
    private var timer: DispatchSourceTimer?

    /// What the monitor keeps, behind its lock.
    private struct State {
        /// The values it watches (registered when contended, or created while it runs).
        var watched: [ObjectIdentifier: Watched] = [:]
        /// Events waiting for the handler.
        var pending = 0
        var isStopped = false
    }

    /// A value the monitor watches, with its throttle.
    private struct Watched {
        weak var engine: CommandEngine?
        /// The start of the current one-second window (`nil` before the first event), and the
        /// events of each throttled kind delivered in it.
        var windowStart: UInt64?
        var delivered: [Event.Kind: Int] = [:]
        /// Events left out since the last one delivered.
        var omitted = 0
        /// The per-value thresholds, if set (``QueueSafeValue/monitorThresholds``).
        var thresholds: Thresholds?
    }

    /// At most this many events wait for the handler; more are counted as left out.
    static let pendingLimit = 256

    init(
        thresholds: Thresholds, queue: DispatchQueue?, signposts: Bool = false,
        handler: @escaping @Sendable (Event) -> Void
    ) {
        self.thresholds = thresholds
        self.handler = handler
        deliveryQueue = queue ?? DispatchQueue(label: "QueueSafeValue.monitor.handler")
        self.signposts = signposts ? MonitorSignposts.make() : nil
    }

    // MARK: The running monitor

    /// Every monitor started, so that the address in `qsv_monitor_word` always refers to a live one.
    // Unsafe: the list is touched only inside its own lock.
    fileprivate nonisolated(unsafe) static let started = LockedState.make([QueueMonitor]())

    /// The running monitor, if any.
    @inline(__always)
    static var active: QueueMonitor? {
        let address = qsv_monitor_load()
        guard address != 0, let pointer = UnsafeRawPointer(bitPattern: address) else { return nil }
        // Unmanaged: `started` keeps every monitor alive for the process's life.
        return Unmanaged<QueueMonitor>.fromOpaque(pointer).takeUnretainedValue()
    }

    /// Stops the monitor: no more events are reported (those already handed to the handler's
    /// queue still run), the watchdog stops, and the values it watched pay nothing for it any more.
    /// - Returns: how many events were left out by the throttle (and not yet counted in a delivered
    ///   event), or because the handler fell behind.
    @discardableResult
    public func stop() -> Int {
        let address = Int(bitPattern: Unmanaged.passUnretained(self).toOpaque())
        _ = qsv_monitor_compare_exchange(address, 0)
        let (left, engines) = state.withLock { state -> (Int, [CommandEngine]) in
            state.isStopped = true
            let left = state.watched.values.reduce(0) { $0 + $1.omitted }
            let engines = state.watched.values.compactMap(\.engine)
            state.watched = [:]
            return (left, engines)
        }
        for engine in engines {
            engine.monitoredWord.storeUnobserved(0)
            engine.ownLongWaitWord.storeUnobserved(0)
        }
        watchdogQueue.sync {
            timer?.cancel()
            timer = nil
        }
        return left
    }

    /// Whether it still reports.
    public var isRunning: Bool { !state.withLock { $0.isStopped } }

    // MARK: Values

    /// Watches `engine` from now on (its holds are sampled). Called once per engine and monitor.
    func watch(_ engine: CommandEngine, thresholds: Thresholds? = nil) {
        let added = state.withLock { state -> Bool in
            guard !state.isStopped else { return false }
            let key = ObjectIdentifier(engine)
            if state.watched[key]?.engine !== engine { state.watched[key] = Watched(engine: engine) }
            if let thresholds { state.watched[key]?.thresholds = thresholds }
            return true
        }
        guard added else { return }
        engine.monitoredWord.storeUnobserved(1)
        // Its own long-wait threshold, in milliseconds, where a hand-off reads it without this lock.
        if let thresholds {
            engine.ownLongWaitWord.storeUnobserved(thresholds.longWaitWord)
        }
    }

    // MARK: The watchdog

    fileprivate func startWatchdog() {
        // The period as it was given: its unit holds it in an `Int`, on 32 bits too, and Dispatch
        // works with it in 64 bits (a period in nanoseconds would stop at 2.1 s there).
        let period = thresholds.samplingPeriod
        watchdogQueue.sync {
            let timer = DispatchSource.makeTimerSource(queue: watchdogQueue)
            timer.schedule(deadline: .now() + period, repeating: period)
            // Strong: a monitor lives as long as the process (``started``), and `stop()` lets go of
            // the timer and this closure. (A weak capture's side table, reachable only through
            // the object's encoded reference count, reads as a leak to LeakSanitizer.)
            timer.setEventHandler { [self] in sample() }
            self.timer = timer
            timer.resume()
        }
    }

    /// One look at every watched value's holder: a hold that has lasted its threshold is reported
    /// once, while it still holds.
    func sample() {
        let engines = state.withLock { state -> [(CommandEngine, Thresholds?)] in
            state.watched = state.watched.filter { $0.value.engine != nil }
            return state.watched.values.compactMap { watched in watched.engine.map { ($0, watched.thresholds) } }
        }
        for (engine, own) in engines {
            let threshold = (own ?? thresholds).longHoldNanoseconds
            if let event = engine.sampleHold(longHold: threshold) { report(event, of: engine) }
        }
    }

    // MARK: Reporting

    /// Throttles `event` of `engine` at `now` (uptime nanoseconds; `nil`: the clock, read under the
    /// monitor's lock, so that the times the throttle sees never go back) and hands it to the
    /// handler's queue, or counts it as left out. Called outside every engine lock.
    func report(_ event: Event, of engine: CommandEngine, now: UInt64? = nil) {
        // Every event, before the throttle: a long hold's interval always gets its end.
        signposts?(event, ObjectIdentifier(engine))
        let omitted = state.withLock { state -> Int? in
            guard !state.isStopped else { return nil }
            let now = now ?? SyncPoints.now().uptimeNanoseconds
            let key = ObjectIdentifier(engine)
            var watched = state.watched[key] ?? Watched(engine: engine)
            if watched.engine !== engine { watched = Watched(engine: engine) }
            let limit = (watched.thresholds ?? thresholds).eventsPerSecond
            // Only a time a second or more past the window's start opens the next window, so no
            // window delivers more than its rate whatever the order of the times: an older time,
            // which wrapping arithmetic would take for a late one, counts in the current one.
            if watched.windowStart.map({ now >= $0 && now - $0 >= 1_000_000_000 }) ?? true {
                watched.windowStart = now
                watched.delivered = [:]
            }
            // The end of a reported hold is never throttled; every other kind has its budget.
            let throttled = event.kind != .longHoldEnded && watched.delivered[event.kind, default: 0] >= limit
            guard !throttled, state.pending < Self.pendingLimit else {
                watched.omitted += 1
                state.watched[key] = watched
                return nil
            }
            if event.kind != .longHoldEnded { watched.delivered[event.kind, default: 0] += 1 }
            let omitted = watched.omitted
            watched.omitted = 0
            state.watched[key] = watched
            state.pending += 1
            return omitted
        }
        guard let omitted else { return }
        var delivered = event
        delivered.omitted = omitted
        // Through the controlled scheduler where one runs (its scenarios see every event): a plain
        // `async` in release builds.
        SyncPoints.async(deliveryQueue) { [self, delivered] in
            state.withLock { $0.pending -= 1 }
            handler(delivered)
        }
    }

    /// `interval` in nanoseconds, saturated; `nil` for zero, below zero or `.never`.
    static func nanoseconds(_ interval: DispatchTimeInterval) -> UInt64? {
        interval.saturatedNanoseconds.flatMap { $0 > 0 ? UInt64($0) : nil }
    }
}

// MARK: - Starting it

extension QueueSafeValue {
    /// Starts the process-wide monitor (see ``QueueMonitor``): `handler` is told of long holds while
    /// they hold, long waits, timeouts and deadlock refusals of every value and ``CommandQueue``.
    ///
    /// ```swift
    /// let monitor = QueueSafeValue<Never>.monitor(
    ///     thresholds: try .init(longHold: .milliseconds(200))
    /// ) { event in
    ///     print("QueueSafeValue:", event)  // or your logger, your tracer, a signpost
    /// }
    /// // … later, if ever:
    /// monitor.stop()
    /// ```
    ///
    /// Call it on any `QueueSafeValue` type (`QueueSafeValue<Never>` reads best): the monitor is
    /// the process's, not the type's. Starting one stops the one before.
    /// - Parameters:
    ///   - thresholds: when to report, and how often at most per value.
    ///   - queue: where `handler` runs; a serial queue of the monitor's own by default. A concurrent
    ///     queue may run several events at once.
    ///   - signposts: also emit every event as a signpost (subsystem `QueueSafeValue`, Instruments'
    ///     Points of Interest): a long hold as an interval from its report to its end, the others as
    ///     points. Apple platforms from macOS 12, iOS 15, tvOS 15 and watchOS 8; elsewhere, and
    ///     below those, nothing. Off by default.
    ///   - handler: called once per event, outside every engine lock; it may use other values.
    /// - Returns: the monitor, to stop it.
    @discardableResult
    public static func monitor(
        thresholds: QueueMonitor.Thresholds? = nil,
        on queue: DispatchQueue? = nil,
        signposts: Bool = false,
        handler: @escaping @Sendable (QueueMonitor.Event) -> Void
    ) -> QueueMonitor {
        // The default thresholds are valid: `try!` cannot trap.
        let thresholds = thresholds ?? (try! QueueMonitor.Thresholds())
        let monitor = QueueMonitor(thresholds: thresholds, queue: queue, signposts: signposts, handler: handler)
        let previous = QueueMonitor.started.withLock { started in
            started.append(monitor)
            let previous = QueueMonitor.active
            // The threshold first: a hand-off that sees the monitor reads it after.
            qsv_monitor_long_wait_store(thresholds.longWaitWord)
            qsv_monitor_store(Int(bitPattern: Unmanaged.passUnretained(monitor).toOpaque()))
            return previous
        }
        previous?.stop()
        monitor.startWatchdog()
        return monitor
    }

    /// Gives this value thresholds of its own in the running monitor (a lock its app holds for long
    /// by design, say), and watches it from now on. Without a running monitor this does nothing.
    public func monitor(with thresholds: QueueMonitor.Thresholds) {
        QueueMonitor.active?.watch(engine, thresholds: thresholds)
    }
}

extension CommandQueue {
    /// Gives this queue thresholds of its own in the running monitor (see
    /// ``QueueSafeValue/monitor(with:)``). Without a running monitor this does nothing.
    public func monitor(with thresholds: QueueMonitor.Thresholds) {
        QueueMonitor.active?.watch(engine, thresholds: thresholds)
    }
}
