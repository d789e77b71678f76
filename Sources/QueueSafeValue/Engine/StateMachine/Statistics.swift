// The opt-in statistics of one value: a typed part of `EngineStateMachine`. Each count is made in
// a transition the command makes anyway: a command that takes a free value is not counted
// (counting it would cost every command; see <doc:FindingWhatHoldsYourValue#Statistics>).

struct Statistics {
    /// Since counting began or was reset.
    var since: UInt64
    var contended = 0
    var handedOn = 0
    var timeouts = 0
    var deadlocks = 0
    /// In milliseconds.
    var longestWait: UInt32 = 0
    /// In nanoseconds, at least (see ``Hold/since``).
    var longestHold: UInt64 = 0
    /// Per priority, waits per bucket: 0 under 1 ms, k from 2^(k-1) ms up to 2^k ms, the last
    /// everything longer. A list, not a dictionary: a few priorities, and hashing under the lock
    /// cost more than the search.
    var waits: [(priority: UInt8, counts: [Int])] = []

    static let buckets = 24

    static func bucket(_ milliseconds: UInt32) -> Int {
        guard milliseconds > 0 else { return 0 }
        // 32 - leading zeros: 1 ms → 1, 2–3 ms → 2, 4–7 ms → 3, …
        return min(buckets - 1, UInt32.bitWidth - milliseconds.leadingZeroBitCount)
    }

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

    mutating func holdEnded(after nanoseconds: UInt64) {
        longestHold = max(longestHold, nanoseconds)
    }

    /// A copy with arrays of its own. Sharing the histograms' storage is safe (a hand-on writes in
    /// place only once the reader let its copy go), but ThreadSanitizer does not see the runtime's
    /// reference count that orders the two, and reported a race.
    var unshared: Statistics {
        var copy = self
        // `map` builds new arrays, where `Array(_:)` of an array shares its storage.
        copy.waits = waits.map { ($0.priority, $0.counts.map { $0 }) }
        return copy
    }
}

extension EngineStateMachine {
    // MARK: Statistics

    mutating func collectStatistics(_ on: Bool, now: UInt64) {
        statistics = on ? Statistics(since: now) : nil
    }

    /// What it returns shares no storage with the machine: the caller reads it after the lock.
    mutating func readStatistics(reset: Bool, now: UInt64) -> Statistics? {
        guard let current = statistics else { return nil }
        guard reset else { return current.unshared }
        statistics = Statistics(since: now)
        return current
    }

    mutating func noteRefusal(deadlock: Bool) {
        if deadlock { statistics?.deadlocks += 1 } else { statistics?.timeouts += 1 }
    }
}
