import Dispatch
import Foundation
import QueueSafeValueShims

// MARK: - Options

/// The command line: which scenarios to run, how long, and where to write the results.
struct Options {
    var quick = false
    var filter: String?
    var jsonPath: String?
    var svgPath: String?
    var check = false

    static let usage = """
        Usage: Benchmarks [--quick] [--filter TEXT] [--json PATH] [--svg PATH] [--check] [--help]

        Measures QueueSafeValue against a lock, a mutex, dispatch queues, an actor and plain tasks.
        Every scenario is calibrated and warmed up, then the samples are taken in rounds: each round
        takes one sample of every scenario, and for each comparison one sample of the library
        scenario and one of its baseline back to back (in alternating order), so that a slow
        stretch of the machine falls on both. The ratio library ÷ baseline is computed per round;
        the table reports its median over the rounds and its min–max. Lower ratios are better.

          --quick        short samples and 5 rounds, for CI (whole run well under a minute)
          --filter TEXT  run only the scenarios whose name contains TEXT (case-insensitive), plus
                         the baseline of every library scenario selected, so that a comparison
                         can be run on its own: --filter "wait.set contended 4 threads"
          --json PATH    write the results and the comparisons as JSON to PATH
          --svg PATH     write a bar chart of the comparisons' median ratios as SVG to PATH
          --check        exit with status 3 when a comparison misses its target (for local use)
          --help         print this text

        Build for release to get representative numbers: swift run -c release Benchmarks
        """

    /// Parses the arguments (without the program name). Prints usage and exits on `--help`, and on
    /// an unknown or incomplete argument with status 2.
    static func parse(_ arguments: [String]) -> Options {
        var options = Options()
        var remaining = arguments[...]
        func value(for flag: String) -> String {
            guard let next = remaining.popFirst() else { fail("\(flag) needs a value") }
            return next
        }
        while let argument = remaining.popFirst() {
            switch argument {
            case "--quick": options.quick = true
            case "--filter": options.filter = value(for: argument)
            case "--json": options.jsonPath = value(for: argument)
            case "--svg": options.svgPath = value(for: argument)
            case "--check": options.check = true
            case "--help", "-h":
                print(usage)
                exit(0)
            default: fail("unknown argument '\(argument)'")
            }
        }
        return options
    }

    private static func fail(_ message: String) -> Never {
        printError("Benchmarks: \(message)\n\n\(usage)")
        exit(2)
    }
}

/// How long each sample should take and how many of them to take.
struct RunConfiguration {
    /// Wall time one sample aims for.
    let sampleNanoseconds: UInt64
    /// Rounds of samples: each round takes one sample of every scenario (one of each member of a
    /// comparison, back to back). At least 5.
    let rounds: Int
    /// Untimed runs at the final sample size, after calibration.
    let warmUps: Int

    static let full = RunConfiguration(sampleNanoseconds: 25_000_000, rounds: 21, warmUps: 2)
    static let quick = RunConfiguration(sampleNanoseconds: 8_000_000, rounds: 5, warmUps: 1)
}

// MARK: - Scenarios and samples

/// What one sample measured.
struct Sample {
    /// For time scenarios the nanoseconds the timed part took; for memory scenarios the bytes.
    var measured: Double
    /// Extra per-op figures (for example the submit cost of a drain scenario), averaged by median.
    var extras: [String: Double] = [:]
    /// The operations performed, for a time-windowed scenario (which decides the count as it runs).
    var operations: Int?
}

/// One named benchmark.
struct Scenario {
    enum Unit: String {
        case nanoseconds = "ns/op"
        case bytes = "bytes/command"
        /// A latency per sample, in milliseconds (the priority-inversion rows).
        case milliseconds = "ms"
        /// A latency per sample, in microseconds (the timeout-lateness rows).
        case microseconds = "µs"

        /// Whether a sample's figure is a latency (not a cost per operation, which has a rate).
        var isLatency: Bool { self == .milliseconds || self == .microseconds }
    }

    let name: String
    let summary: String
    var unit: Unit = .nanoseconds
    /// Operation counts are multiples of this (a drain cycle's size, a thread count).
    var granularity = 1
    /// When set, every sample runs exactly this many operations and no calibration happens.
    var fixedOperations: Int?
    /// When set, warm-up runs use this many operations instead of the sample size.
    var warmUpOperations: Int?
    /// When set, at most this many samples (at least 5) even if the configuration asks for more.
    var maximumSamples: Int?
    /// When `true`, `run` receives a time window in nanoseconds instead of an operation count,
    /// keeps every thread busy until the window has passed and reports the operations performed in
    /// ``Sample/operations``. Used where threads contend: the sample lasts the same time whether the
    /// threads overlap smoothly or convoy through the scheduler, so no calibration is needed.
    var timeWindowed = false
    /// Performs `operations` operations and returns what was measured for all of them together.
    let run: (_ operations: Int) -> Sample
}

/// The outcome of one scenario: per-op values of every timed sample.
struct ScenarioResult {
    let name: String
    let summary: String
    let unit: Scenario.Unit
    let operationsPerSample: Int
    /// Per-operation values (ns/op or bytes/command), one per sample.
    let values: [Double]
    let extras: [String: Double]
    let seconds: Double

    var median: Double { Statistics.median(values) }
    var minimum: Double { values.min() ?? 0 }
    var maximum: Double { values.max() ?? 0 }
    var operationsPerSecond: Double {
        if unit == .bytes { return extras["drainOpsPerSecond"] ?? 0 }
        if unit.isLatency { return 0 }
        return median > 0 ? 1e9 / median : 0
    }
}

enum Statistics {
    static func median(_ values: [Double]) -> Double {
        guard !values.isEmpty else { return 0 }
        let sorted = values.sorted()
        let middle = sorted.count / 2
        return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
    }
}

// MARK: - Measuring

/// A scenario after calibration and warm-up, collecting its samples as the rounds take them.
final class PreparedScenario {
    let scenario: Scenario
    /// The operation count of every sample (for a time-windowed scenario, the window in ns).
    let operations: Int
    /// How many rounds this scenario takes part in (its `maximumSamples`, or every round).
    let rounds: Int
    private(set) var values: [Double] = []
    private var counts: [Double] = []
    private var extras: [String: [Double]] = [:]
    private var nanoseconds: UInt64

    /// Calibrates `scenario` to the configuration's sample length and runs its warm-ups.
    init(_ scenario: Scenario, configuration: RunConfiguration) {
        let started = Clock.now()
        self.scenario = scenario
        var operations = scenario.fixedOperations ?? scenario.granularity
        if scenario.timeWindowed {
            operations = Int(configuration.sampleNanoseconds)
        } else if scenario.fixedOperations == nil {
            operations = Harness.calibrate(scenario, target: Double(configuration.sampleNanoseconds))
        }
        self.operations = operations
        let warmUpOperations = scenario.warmUpOperations ?? operations
        for _ in 0..<configuration.warmUps { _ = scenario.run(warmUpOperations) }
        rounds = max(5, min(configuration.rounds, scenario.maximumSamples ?? .max))
        nanoseconds = Clock.now() - started
    }

    /// Takes one timed sample and returns its per-operation value (ns/op, or bytes/command).
    func sample() -> Double {
        let started = Clock.now()
        let sample = scenario.run(operations)
        let count = sample.operations ?? operations
        let value = sample.measured / Double(max(count, 1))
        values.append(value)
        counts.append(Double(count))
        for (key, extra) in sample.extras { extras[key, default: []].append(extra) }
        nanoseconds += Clock.now() - started
        return value
    }

    var result: ScenarioResult {
        ScenarioResult(
            name: scenario.name,
            summary: scenario.summary,
            unit: scenario.unit,
            operationsPerSample: Int(Statistics.median(counts)),
            values: values,
            extras: extras.mapValues(Statistics.median),
            seconds: Double(nanoseconds) / 1e9
        )
    }
}

enum Harness {
    /// Finds the operation count whose sample takes about `target` nanoseconds. Grows the count
    /// until a run takes a quarter of the target, then re-estimates at the estimated size until the
    /// estimate settles, so one slow first run (thread pool start-up) does not fix a tiny count.
    /// These runs double as the first warm-up.
    static func calibrate(_ scenario: Scenario, target: Double) -> Int {
        let granularity = scenario.granularity
        let limit = 1 << 30
        var operations = granularity
        var elapsed = max(scenario.run(operations).measured, 1)
        while elapsed < target / 4 && operations < limit {
            operations *= min(16, max(2, Int(target / 4 / elapsed)))
            elapsed = max(scenario.run(operations).measured, 1)
        }
        for _ in 0..<4 {
            let estimate = min(limit, roundUp(Int(Double(operations) * target / elapsed), to: granularity))
            let settled = estimate <= operations * 2 && estimate * 2 >= operations
            operations = estimate
            if settled { break }
            elapsed = max(scenario.run(operations).measured, 1)
        }
        return operations
    }

    private static func roundUp(_ value: Int, to multiple: Int) -> Int {
        max(multiple, (value + multiple - 1) / multiple * multiple)
    }
}

/// The monotonic clock the timings use.
enum Clock {
    @inline(__always)
    static func now() -> UInt64 {
        DispatchTime.now().uptimeNanoseconds
    }

    /// Runs `body` and returns the nanoseconds it took.
    @inline(__always)
    static func time(_ body: () -> Void) -> UInt64 {
        let start = now()
        body()
        return now() - start
    }
}

// MARK: - Concurrency helpers

/// A mutable integer shared between threads, queues or tasks whose accesses are already serialized
/// by the thing being measured (a lock, a serial queue, a QueueSafeValue's critical section).
final class Counter: @unchecked Sendable {
    var value = 0
}

/// A box for a result produced on another thread and read after a semaphore wait.
final class Mailbox<T>: @unchecked Sendable {
    var value: T?
}

/// The timed part of a run of threads (``Concurrency/runThreads(_:for:_:)``). It opens only once
/// every thread has completed an operation: until then some threads have not yet had a processor
/// (there may be more threads than processors), and the ones that have share the section among
/// fewer contenders than the row names. A strict first-come-first-served lock gains most from that
/// start: two running threads alternate at the speed of a two-thread hand-off while the others wait
/// for the scheduler, so a window opened at the release of the threads mixed the two-thread figure
/// into every row of more threads (issue 44 measured its fair lock 2x faster at 4 threads and 4x at 8 that
/// way than with every thread contending).
// @unchecked Sendable: its words are atomic; the times are written before `open` is set and read after.
final class ThreadWindow: @unchecked Sendable {
    /// Two words: how many threads have completed an operation (`arrived`), and 1 once the window
    /// is open (`open`).
    private let words = UnsafeMutablePointer<Int>.allocate(capacity: 2)
    private var arrived: UnsafeMutablePointer<Int> { words }
    private var open: UnsafeMutablePointer<Int> { words + 1 }
    private let threads: Int
    private let length: UInt64
    /// When the window opened and when it closes, written by the thread that opens it.
    private(set) var opensAt: UInt64 = 0
    private(set) var closesAt: UInt64 = 0

    init(threads: Int, length: UInt64) {
        self.threads = threads
        self.length = length
        words.initialize(repeating: 0, count: 2)
    }

    deinit { words.deallocate() }

    /// Whether the window is open (every thread has completed an operation); its times are
    /// readable once this returns `true`.
    @inline(__always)
    var isOpen: Bool { qsv_atomic_load_acquire(open) != 0 }

    /// The calling thread has completed its first operation: the last of them opens the window.
    func arrive() {
        guard qsv_atomic_fetch_add(arrived, 1) + 1 == threads else { return }
        opensAt = Clock.now()
        closesAt = opensAt + length
        qsv_atomic_store_release(open, 1)
    }

    /// Runs `operation` on the calling thread: once, then until the window opens (not counted),
    /// then in batches of 64 until the window has closed (the clock is read once per batch).
    /// - Parameter arrivingAtCall: the thread counts as arrived when it starts its first operation,
    ///   not when that operation completed: for rows where a thread may wait without bound by
    ///   design (strict priority across priorities), whose window would otherwise open only when
    ///   the threads above it happened to pause, seconds later.
    /// - Returns: how many operations ran in the window, and how many ran in all (what a row's
    ///   check of its counter compares with).
    @inline(__always)
    func repeatInWindow(arrivingAtCall: Bool = false, _ operation: () -> Void) -> (inWindow: Int, all: Int) {
        if arrivingAtCall { arrive() }
        operation()
        if !arrivingAtCall { arrive() }
        var before = 1
        while !isOpen {
            operation()
            before += 1
        }
        let deadline = closesAt
        var performed = 0
        repeat {
            for _ in 0..<64 { operation() }
            performed += 64
        } while Clock.now() < deadline
        return (performed, before + performed)
    }
}

enum Concurrency {
    /// Starts `count` threads that each wait at a start barrier, releases them together and keeps
    /// them running `body(threadIndex, window)` (which runs its operations through
    /// ``ThreadWindow/repeatInWindow(_:)``) until `window` nanoseconds after the window opened,
    /// that is after every thread has completed an operation.
    /// - Returns: the nanoseconds from the window's opening until every thread has finished, the
    ///   operations in the window (what the row's figure divides by), and all operations performed
    ///   (for the row's check of its counter).
    static func runThreads(
        _ count: Int,
        for window: UInt64,
        _ body: @escaping @Sendable (_ index: Int, _ window: ThreadWindow) -> (inWindow: Int, all: Int)
    ) -> (elapsed: UInt64, operations: Int, performed: Int) {
        let ready = DispatchSemaphore(value: 0)
        let start = DispatchSemaphore(value: 0)
        let finished = DispatchGroup()
        let timed = ThreadWindow(threads: count, length: window)
        let counts = Mailbox<[(inWindow: Int, all: Int)]>()
        counts.value = Array(repeating: (0, 0), count: count)
        let countsLock = NSLock()
        for index in 0..<count {
            finished.enter()
            let thread = Thread {
                ready.signal()
                start.wait()
                let performed = body(index, timed)
                // lock() and unlock(): `NSLocking.withLock` is newer than the deployment floor.
                countsLock.lock()
                counts.value![index] = performed
                countsLock.unlock()
                finished.leave()
            }
            thread.stackSize = 1 << 20
            thread.start()
        }
        for _ in 0..<count { ready.wait() }
        for _ in 0..<count { start.signal() }
        finished.wait()
        let ended = Clock.now()
        countsLock.lock()
        let all = counts.value!
        countsLock.unlock()
        return (ended - timed.opensAt, all.reduce(0) { $0 + $1.inWindow }, all.reduce(0) { $0 + $1.all })
    }

    /// Runs `tasks` concurrent child tasks, each repeating `operation` in batches of 64 until
    /// `window` nanoseconds have passed, and blocks the calling thread until all have ended.
    /// - Returns: the nanoseconds from the start until every task has ended, and the total operations.
    static func runTasks(
        _ tasks: Int, for window: UInt64, _ operation: @escaping @Sendable () async -> Void
    ) -> (elapsed: UInt64, operations: Int) {
        blockingAwait {
            let start = Clock.now()
            let deadline = start + window
            let operations = await withTaskGroup(of: Int.self) { group in
                for _ in 0..<tasks {
                    group.addTask {
                        var performed = 0
                        repeat {
                            for _ in 0..<64 { await operation() }
                            performed += 64
                        } while Clock.now() < deadline
                        return performed
                    }
                }
                return await group.reduce(0, +)
            }
            return (Clock.now() - start, operations)
        }
    }

    /// Runs `body` in a detached task (off the main actor, which the calling thread may be running)
    /// and blocks the calling thread until it returns.
    static func blockingAwait<T: Sendable>(_ body: @escaping @Sendable () async -> T) -> T {
        let mailbox = Mailbox<T>()
        let done = DispatchSemaphore(value: 0)
        Task.detached {
            mailbox.value = await body()
            done.signal()
        }
        done.wait()
        return mailbox.value!
    }
}

// MARK: - Checks

/// Stops the run when a scenario's work did not happen as expected: a lost update is a library bug,
/// not something to average away.
func check(_ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String) {
    if !condition() {
        printError("Benchmarks: check failed: \(message())")
        exit(1)
    }
}

func printError(_ text: String) {
    FileHandle.standardError.write(Data((text + "\n").utf8))
}

// MARK: - Machine

/// What the results depend on besides the code: processor and load.
enum Machine {
    /// The CPU model named in `/proc/cpuinfo`, or `nil` where there is none.
    static var cpuModel: String? {
        guard let info = try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8) else { return nil }
        for line in info.split(separator: "\n") where line.hasPrefix("model name") {
            return line.split(separator: ":", maxSplits: 1).last?.trimmingCharacters(in: .whitespaces)
        }
        return nil
    }

    /// The 1-minute load average from `/proc/loadavg`, or `nil` where there is none. Above the
    /// processor count it means other processes competed for the CPUs during the run.
    static var loadAverage: Double? {
        guard let text = try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8) else { return nil }
        return text.split(separator: " ").first.flatMap { Double($0) }
    }
}

/// A small deterministic generator (SplitMix64) for reproducible "random" priorities.
struct SplitMix64 {
    private var state: UInt64

    init(seed: UInt64) {
        state = seed
    }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
