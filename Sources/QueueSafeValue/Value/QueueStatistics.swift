import Dispatch

// MARK: - QueueStatistics

/// What a value (or ``CommandQueue``) counted while its statistics were on: the commands that had
/// to wait, how long they waited per priority, the longest hold, timeouts and deadlocks.
///
/// Turn them on with ``QueueSafeValue/collectStatistics(_:)`` and read them with
/// ``QueueSafeValue/statistics(reset:)``. Every figure is counted in a step the engine takes anyway,
/// under its lock: a command that takes a free value is **not** counted (counting it would cost
/// every command, statistics on or off; see <doc:FindingWhatHoldsYourValue#Statistics>). Memory is
/// fixed: one histogram of ``bucketCount`` counters per priority that waited.
public struct QueueStatistics: Sendable, CustomStringConvertible {
    /// How many buckets a wait histogram has.
    public static let bucketCount = Statistics.buckets

    /// How many seconds the figures cover: since they were turned on or last reset.
    public let seconds: Double
    /// Commands that had to wait for the value (it was held, or others waited).
    public let contendedCommands: Int
    /// Commands handed the value by a release after waiting (the others of ``contendedCommands``
    /// were granted it as it came free, gave up, or still wait).
    public let handedOn: Int
    /// Commands refused with `.timedOut`.
    public let timeouts: Int
    /// Commands refused with `.deadlock`.
    public let deadlocks: Int
    /// The longest wait of a command handed the value, in seconds (to a few milliseconds).
    public let longestWait: Double
    /// The longest hold the engine saw end, in seconds, at least: a hold the engine saw begin when
    /// it handed the value on, or from the moment a command began to wait for it (a hold that took
    /// a free value and ended before anyone waited is not seen).
    public let longestHold: Double
    /// Per priority, the waits of commands handed the value: `waits[p][0]` counts waits under
    /// 1 ms, `waits[p][k]` (k ≥ 1) waits of 2^(k-1) ms up to 2^k ms; the last bucket counts
    /// everything longer.
    public let waits: [CommandPriority: [Int]]

    init(_ statistics: Statistics, now: UInt64) {
        seconds = Double(now >= statistics.since ? now - statistics.since : 0) / 1e9
        contendedCommands = statistics.contended
        handedOn = statistics.handedOn
        timeouts = statistics.timeouts
        deadlocks = statistics.deadlocks
        longestWait = Double(statistics.longestWait) / 1e3
        longestHold = Double(statistics.longestHold) / 1e9
        waits = Dictionary(
            uniqueKeysWithValues: statistics.waits.map { (CommandPriority(rawValue: $0.priority), $0.counts) })
    }

    /// The upper bound of histogram bucket `index`, in milliseconds (`nil` for the last one).
    public static func bucketLimit(_ index: Int) -> Int? {
        index >= bucketCount - 1 ? nil : 1 << index
    }

    /// Several lines: the counts, then one histogram line per priority ("high: <1 ms 40, <2 ms 3, …").
    public var description: String {
        var lines = [
            "\(contendedCommands) contended (\(handedOn) handed on), \(timeouts) timeouts, \(deadlocks) deadlocks"
                + " in \(QueueDiagnostics.format(seconds)) s; longest wait \(QueueDiagnostics.format(longestWait)) s,"
                + " longest hold \(QueueDiagnostics.format(longestHold)) s"
        ]
        for (priority, counts) in waits.sorted(by: { $0.key > $1.key }) {
            let cells = counts.indices.filter { counts[$0] > 0 }.map { index in
                Self.bucketLimit(index).map { "<\($0) ms \(counts[index])" } ?? "longer \(counts[index])"
            }
            lines.append("  \(priority): " + cells.joined(separator: ", "))
        }
        return lines.joined(separator: "\n")
    }
}

extension QueueSafeValue {
    /// Turns this value's statistics on (counting from zero) or off. Off by default; while off they
    /// cost nothing, and while on, one count or two in steps the engine takes under its lock anyway
    /// (<doc:FindingWhatHoldsYourValue#What-it-costs>).
    public func collectStatistics(_ on: Bool = true) {
        engine.collectStatistics(on)
    }

    /// What this value counted since its statistics were turned on or last reset, or `nil` while
    /// they are off. Takes the engine's lock briefly; never waits for the critical section.
    /// - Parameter reset: start counting from zero again after this read.
    public func statistics(reset: Bool = false) -> QueueStatistics? {
        engine.statistics(reset: reset)
    }
}

extension CommandQueue {
    /// Turns this queue's statistics on (counting from zero) or off (see
    /// ``QueueSafeValue/collectStatistics(_:)``).
    public func collectStatistics(_ on: Bool = true) {
        engine.collectStatistics(on)
    }

    /// What this queue counted since its statistics were turned on or last reset, or `nil` while
    /// they are off (see ``QueueSafeValue/statistics(reset:)``).
    public func statistics(reset: Bool = false) -> QueueStatistics? {
        engine.statistics(reset: reset)
    }
}
