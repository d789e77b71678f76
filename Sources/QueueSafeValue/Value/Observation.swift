import Dispatch

// Observing a value (`values`, `observe(on:)`): while observers exist, every command that can
// change the value snapshots it *inside* its critical section, numbered in commit order, and offers
// the snapshot to each observer after its release. An observer keeps only the newest snapshot it
// has not delivered and drops any numbered at or below one it has, so only committed values
// arrive, in commit order.

// MARK: - Engine side

/// One committed value, numbered in commit order.
// @unchecked Sendable: immutable, and made only for Sendable values (observers require them)
final class ObservedChange<Value>: @unchecked Sendable {
    let value: Value
    let sequence: UInt64

    init(value: Value, sequence: UInt64) {
        self.value = value
        self.sequence = sequence
    }
}

/// An observer as the engine keeps it: something to offer changes to, and to finish.
// @unchecked Sendable: subclasses guard their state with their own lock
class ObservationSink: @unchecked Sendable {
    /// A committed change (an `ObservedChange` of the engine's value type), after the release.
    func offer(_ change: AnyObject) {}
    /// The container was released and its last value offered: no more changes come.
    func finish() {}
}

/// What an observer keeps of the changes offered to it: the newest it has not delivered, and the
/// number of the newest offered, so that a change numbered at or below it is dropped.
struct LatestChange<Value> {
    var pending: Value?
    var newest: UInt64?

    /// Keeps `change` (an `ObservedChange<Value>`) unless it is no newer than one offered before.
    mutating func keep(_ change: AnyObject) -> Bool {
        let change = unsafeDowncast(change, to: ObservedChange<Value>.self)
        guard newest.map({ change.sequence > $0 }) ?? true else { return false }
        newest = change.sequence
        pending = change.value
        return true
    }
}

extension ValueEngine {
    /// Inside the critical section of a command that may have changed the value, while observers
    /// exist: numbers the change and snapshots the value.
    @usableFromInline
    @inline(never)
    func captureChange() -> AnyObject {
        changeSequence &+= 1
        return ObservedChange(value: pointer.pointee, sequence: changeSequence)
    }

    /// After the release: offers a captured change to every observer.
    @usableFromInline
    @inline(never)
    func deliverChange(_ change: AnyObject) {
        for sink in boosts.withLock({ $0.sinks }) { sink.offer(change) }
    }

    /// Registers an observer: from now on every command that may change the value captures it.
    /// If the value was freed already, the observer is finished at once instead.
    func addSink(_ sink: ObservationSink) {
        let added = boosts.withLock { record -> Bool in
            guard !record.observersFinished else { return false }
            record.sinks.append(sink)
            observing.storeRelease(record.sinks.count)
            return true
        }
        if !added { sink.finish() }
    }

    /// Forgets an observer.
    func removeSink(_ sink: ObservationSink) {
        boosts.withLock { record in
            record.sinks.removeAll { $0 === sink }
            observing.storeRelease(record.sinks.count)
        }
    }

    /// The value is about to be freed (nothing holds or waits): every observer gets the value as
    /// the last command left it, and ends.
    func finishObservers() {
        let sinks = boosts.withLock { record -> [ObservationSink] in
            defer {
                record.sinks = []
                record.observersFinished = true
                observing.storeRelease(0)
            }
            return record.sinks
        }
        guard !sinks.isEmpty else { return }
        let last = ObservedChange(value: pointer.pointee, sequence: changeSequence)
        for sink in sinks {
            sink.offer(last)
            sink.finish()
        }
    }
}

// MARK: - values

/// The successive values of a container, as an `AsyncSequence`: the current value first, then the
/// value after each command that could have changed it, in commit order (``QueueSafeValue/values``).
///
/// Each iterator is an observer of its own with latest-value semantics: while its consumer is busy,
/// newer values replace the one it has not taken yet (like `AsyncStream`'s `bufferingNewest(1)`), so
/// a slow consumer skips to the newest value and never slows down the commands. It never sees a
/// value that was not committed, nor committed values out of order. The sequence ends (`nil`) once
/// the container was released and its last value delivered, when the iterating task is cancelled,
/// or at once if the container was gone before the iterator was made. Values are delivered outside every
/// lock and critical section: the loop body may issue commands on the same value.
public struct ObservedValues<Value: Sendable>: AsyncSequence, Sendable {
    /// The container's value.
    public typealias Element = Value
    /// The sequence never fails: it ends.
    public typealias Failure = Never

    let engine: ValueEngine<Value>

    /// An iterator that observes on its own, from now until it is released: a change committed
    /// after this call reaches it even before its first `next()`, which returns the current value
    /// (or a newer one).
    public func makeAsyncIterator() -> Iterator {
        let subscription = ValuesSubscription(engine: engine)
        return Iterator(
            subscription: subscription, token: ObservationToken { [engine] in engine.removeSink(subscription) })
    }

    /// Iterates ``ObservedValues``; each iterator observes on its own.
    public struct Iterator: AsyncIteratorProtocol {
        /// The container's value.
        public typealias Element = Value
        /// The iterator never fails: it ends.
        public typealias Failure = Never

        let subscription: ValuesSubscription<Value>
        /// Unregisters the observer when the iterator goes (the engine holds the observer, not the
        /// iterator).
        let token: ObservationToken

        /// The next value: the current one first, then each newer committed value.
        /// - Returns: `nil` once the container was released (after its last value), or the task
        ///   was cancelled.
        public mutating func next() async -> Value? {
            await subscription.next()
        }

        /// ``next()``, from the caller's isolation.
        public mutating func next(isolation actor: isolated (any Actor)?) async -> Value? {
            await subscription.next()
        }
    }
}

/// One iterator's observer: registered when the iterator is made, unregistered when it goes.
// @unchecked Sendable: `state` is behind its lock; `readFirst` is touched only by the iterating task
final class ValuesSubscription<Value: Sendable>: ObservationSink, @unchecked Sendable {
    struct State {
        var latest = LatestChange<Value>()
        /// The consumer, suspended until a value is pending or the sequence ends. It is resumed
        /// without a payload and takes the value under the lock: what it reads is ordered by the
        /// lock, not by the runtime's resume (see `UnsafeContinuation.resumeFromAnotherThread()`).
        var waiting: TurnContinuation?
        var finished = false
    }

    let engine: ValueEngine<Value>
    private let state = LockedState.make(State())
    /// Whether the first `next()` read the current value; touched only by the iterating task.
    private var readFirst = false

    init(engine: ValueEngine<Value>) {
        self.engine = engine
        super.init()
        engine.addSink(self)
    }

    func next() async -> Value? {
        if !readFirst {
            readFirst = true
            await readCurrentValue()
        }
        while true {
            let now: Value?? = state.withLock { state in
                if let pending = state.latest.pending {
                    state.latest.pending = nil
                    return .some(pending)
                }
                return state.finished ? .some(nil) : nil
            }
            if let now { return now }
            await withTaskCancellationHandler {
                await withUnsafeContinuation { (continuation: TurnContinuation) in
                    let ready = state.withLock { state in
                        guard state.latest.pending == nil && !state.finished else { return true }
                        state.waiting = continuation
                        return false
                    }
                    if ready { continuation.resume() }
                }
            } onCancel: {
                self.finish()
            }
        }
    }

    /// The current value, read in a shared read of the highest priority, with its number.
    private func readCurrentValue() async {
        let engine = self.engine
        do {
            let current = try await engine.withSharedAwaitingAccess(
                priority: .highest, site: CallSite(file: #fileID, line: #line), timeout: nil, isolation: nil
            ) { value in ObservedChange(value: value, sequence: engine.changeSequence) }
            offer(current)
        } catch .valueContainerDeinited {
            // Released: the commands queued before still commit, and when the value is freed this
            // observer is offered its final value and finished (at once, if that happened already).
        } catch {
            finish()  // the task was cancelled
        }
    }

    override func offer(_ change: AnyObject) {
        let resume = state.withLock { state -> TurnContinuation? in
            guard !state.finished, state.latest.keep(change) else { return nil }
            defer { state.waiting = nil }
            return state.waiting
        }
        resume?.resumeFromAnotherThread()
    }

    override func finish() {
        let resume = state.withLock { state -> TurnContinuation? in
            state.finished = true
            defer { state.waiting = nil }
            return state.waiting
        }
        resume?.resumeFromAnotherThread()
    }
}

// MARK: - observe(on:)

/// Stops the observation it was returned for (``QueueSafeValue/observe(on:_:file:line:)``): call
/// ``cancel()``, or let the token go. A handler call already running finishes; none starts after.
public final class ObservationToken: Sendable {
    private let stop: @Sendable () -> Void

    init(stop: @escaping @Sendable () -> Void) {
        self.stop = stop
    }

    deinit {
        stop()
    }

    /// Stops the observation. Calling it again does nothing.
    public func cancel() {
        stop()
    }
}

/// A queue's observer: one drain block at a time on the queue delivers the newest value.
// @unchecked Sendable: `state` is behind its lock; the rest is immutable
final class QueueObserver<Value: Sendable>: ObservationSink, @unchecked Sendable {
    struct State {
        var latest = LatestChange<Value>()
        var draining = false
        var stopped = false
        /// The container was released: its last value still drains, nothing comes after.
        var finished = false
    }

    private let queue: DispatchQueue
    private let handler: @Sendable (Value) -> Void
    private let state = LockedState.make(State())

    init(queue: DispatchQueue, handler: @escaping @Sendable (Value) -> Void) {
        self.queue = queue
        self.handler = handler
    }

    override func offer(_ change: AnyObject) {
        let startDrain = state.withLock { state -> Bool in
            guard !state.stopped, !state.finished, state.latest.keep(change) else { return false }
            guard !state.draining else { return false }
            state.draining = true
            return true
        }
        if startDrain { SyncPoints.async(queue) { self.drain() } }
    }

    /// On the queue: delivers the newest value until none is pending. One drain at a time, so the
    /// handler sees values in commit order.
    private func drain() {
        while true {
            let next = state.withLock { state -> Value? in
                guard !state.stopped, let pending = state.latest.pending else {
                    state.draining = false
                    return nil
                }
                state.latest.pending = nil
                return pending
            }
            guard let next else { return }
            handler(next)
        }
    }

    override func finish() {
        state.withLock { $0.finished = true }
    }

    /// Stops delivering (a cancelled token).
    func stop() {
        state.withLock { $0.stopped = true }
    }
}

// MARK: - The containers' API

extension QueueSafeValue where Value: Sendable {
    /// The value's successive states: the current value first, then the value after each command
    /// that could have changed it, in commit order, until the container is released.
    ///
    /// ```swift
    /// let settings = QueueSafeValue(value: ["theme": "dark"])
    /// Task {
    ///     for await current in settings.values { print(current) }
    /// }
    /// ```
    ///
    /// A slow consumer skips to the newest value (so a loop that waits for one intermediate value
    /// may miss it: wait for a condition that stays true); values arrive outside every lock and
    /// critical section, so the loop may issue commands on the same value. See ``ObservedValues``.
    public var values: ObservedValues<Value> {
        ObservedValues(engine: engine)
    }

    /// Calls `handler` on `queue` with the current value, then with the value after each command
    /// that could have changed it, in commit order, until the returned token is cancelled or
    /// released, or the container is released (after its last value).
    ///
    /// While `handler` runs or waits for `queue`, newer values replace the one not yet delivered:
    /// it is called with the newest, never with a value that was not committed, and never out of
    /// order. It runs outside every lock and critical section.
    /// - Returns: the token that stops the observation: keep it as long as you observe.
    public func observe(
        on queue: DispatchQueue, _ handler: @escaping @Sendable (Value) -> Void, file: StaticString = #fileID,
        line: UInt = #line
    ) -> ObservationToken {
        let observer = QueueObserver(queue: queue, handler: handler)
        let engine = self.engine
        engine.addSink(observer)
        // The current value, read in its turn (a shared read, on the queue) with its number.
        engine.sharedReadCommandType.submitShared(
            engine: engine, queue: queue, priority: .highest, site: CallSite(file: file, line: line),
            operation: .sharedRead { result in
                guard case .success(let value) = result else { return }
                observer.offer(ObservedChange(value: value, sequence: engine.changeSequence))
            })
        return ObservationToken { [weak engine, observer] in
            observer.stop()
            engine?.removeSink(observer)
        }
    }
}
