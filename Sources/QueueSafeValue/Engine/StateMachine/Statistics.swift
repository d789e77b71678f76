// The opt-in statistics of one value: a typed part of `EngineStateMachine`, whose fields only this
// file touches. Off (`nil` in the machine) unless the value's owner turns them on; every count is
// made in a transition the command makes anyway, under the lock: a command that takes a free
// value is not counted (counting it would cost every command; see
// <doc:FindingWhatHoldsYourValue#Statistics>).

/// What a value's engine counts while its statistics are on.
struct Statistics {
    /// When counting began (or was last reset), on the machine's clock.
    var since: UInt64
    /// Commands that had to wait.
    var contended = 0
    /// Commands handed the value by a release (after waiting).
    var handedOn = 0
    var timeouts = 0
    var deadlocks = 0
    /// The longest wait of a command handed the value, in milliseconds.
    var longestWait: UInt32 = 0
    /// The longest hold the machine saw end, in nanoseconds (at least that long: see ``Hold/since``).
    var longestHold: UInt64 = 0
    /// Per priority (its raw value), how many waits fell in each bucket: bucket 0 under 1 ms,
    /// bucket k (1…) from 2^(k-1) ms up to 2^k ms, the last one everything longer. A list searched
    /// from the front, not a dictionary: a value's commands use a few priorities, and a hand-on
    /// counts under the engine lock, where hashing cost more than the search.
    var waits: [(priority: UInt8, counts: [Int])] = []

    static let buckets = 24

    init(since: UInt64) {
        self.since = since
    }

    /// The bucket of a wait of `milliseconds`.
    static func bucket(_ milliseconds: UInt32) -> Int {
        guard milliseconds > 0 else { return 0 }
        // 32 - leading zeros: 1 ms → 1, 2–3 ms → 2, 4–7 ms → 3, …
        return min(buckets - 1, UInt32.bitWidth - milliseconds.leadingZeroBitCount)
    }

    /// A command of `priority` that waited `milliseconds` was handed the value.
    mutating func handedOn(priority: CommandPriority, waited milliseconds: UInt32) {
        handedOn += 1
        longestWait = max(longestWait, milliseconds)
        let bucket = Self.bucket(milliseconds)
        if let index = waits.firstIndex(where: { $0.priority == priority.rawValue }) {
            waits[index].counts[bucket] += 1
        } else {
            var counts = Array(repeating: 0, count: Self.buckets)
            counts[bucket] = 1
            waits.append((priority.rawValue, counts))
        }
    }

    /// A hold the machine saw end had lasted `nanoseconds` (at least).
    mutating func holdEnded(after nanoseconds: UInt64) {
        longestHold = max(longestHold, nanoseconds)
    }

    /// A copy with arrays of its own. A plain copy would share the histograms' storage with this
    /// value until one side writes: a read that copied them under the lock and read them after
    /// would then read storage the next hand-on writes in place. That is safe (the hand-on writes in
    /// place only once the read has let its copy go), but the reference count that orders the two
    /// is kept by the Swift runtime, which ThreadSanitizer does not see, so it reported a race.
    var unshared: Statistics {
        var copy = self
        // `map` builds new arrays, where `Array(_:)` of an array shares its storage.
        copy.waits = waits.map { ($0.priority, $0.counts.map { $0 }) }
        return copy
    }
}

extension EngineStateMachine {
    // MARK: Statistics

    /// Turns the statistics on (from zero, at `now`) or off.
    mutating func collectStatistics(_ on: Bool, now: UInt64) {
        statistics = on ? Statistics(since: now) : nil
    }

    /// The statistics, and a fresh start if `reset`; `nil` while they are off. What it returns
    /// shares no storage with the machine, which the caller reads after the lock: after a reset
    /// the machine keeps nothing of it; otherwise it is a copy with arrays of its own (see
    /// ``Statistics/unshared``).
    mutating func readStatistics(reset: Bool, now: UInt64) -> Statistics? {
        guard let current = statistics else { return nil }
        guard reset else { return current.unshared }
        statistics = Statistics(since: now)
        return current
    }

    /// A command that waited was refused: a timeout, or a deadlock.
    mutating func noteRefusal(deadlock: Bool) {
        guard statistics != nil else { return }
        if deadlock { statistics?.deadlocks += 1 } else { statistics?.timeouts += 1 }
    }
}
