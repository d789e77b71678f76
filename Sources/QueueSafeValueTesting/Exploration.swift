import Dispatch
import Foundation
@_spi(Testing) import QueueSafeValue

// MARK: - Exploration

/// Runs a test body under a controlled scheduler that explores the interleavings of its commands.
///
/// ```swift
/// let report = try Exploration.explore(.exhaustive(preemptionBound: 2)) { scenario in
///     let balance = QueueSafeValue(value: 100)
///     for name in ["A", "B"] {
///         scenario.thread(name) {
///             try balance.wait.withLock { $0 -= 30 }
///         }
///     }
///     scenario.check {
///         try Exploration.require(try balance.wait.read { $0 } == 40, "a withdrawal was lost")
///     }
/// }
/// print(report)  // how many schedules ran, and whether that was every one within the bound
/// ```
///
/// `body` runs once per schedule, on the calling thread: it makes fresh values and starts the
/// *parties* (``Scenario/thread(_:_:)``, ``Scenario/task(_:_:)``, ``Scenario/async(on:_:_:)``). The
/// parties then run one at a time. Wherever a command on any `QueueSafeValue`, `CommandQueue`,
/// `RefreshingValue` or `RecurringExecutor` arrives, is released or is completed by hand, and at
/// every ``point()``, the scheduler decides which party goes next; between those points a party runs
/// on. A party that waits (for its turn, a lock of the library, a timer) lets the others go. When
/// every party waits for time to pass, the virtual clock jumps to the next deadline (``now``,
/// ``sleep(nanoseconds:)``, command timeouts, `RecurringExecutor` intervals).
///
/// A schedule fails when a party or a check throws (`try #require(…)`, ``require(_:_:)``, a
/// command's `QueueSafeValueError`, including `.deadlock`), when every party waits and none can go
/// on, or when a party takes more than `stepLimit` steps. The first failure ends the exploration:
/// ``explore(_:schedules:timeLimit:stepLimit:replay:_:)`` throws an ``ExplorationFailure`` whose
/// ``ExplorationFailure/replay`` string runs exactly that schedule again, and whose description
/// traces every step of it, each naming its party.
///
/// Debug builds only: the scheduler drives a seam that release builds of `QueueSafeValue` do not
/// contain. In a release build `explore` throws `QueueSafeValueError.invalidArgument`.
public enum Exploration {
    /// Which schedules an exploration runs.
    public struct Strategy: Sendable, Hashable, CustomStringConvertible {
        enum Kind: Hashable {
            case exhaustive(preemptionBound: Int)
            case random(seed: UInt64)
            case pct(depth: Int, seed: UInt64)
            /// One schedule, given by a replay string that a run of `source` (a strategy, as written)
            /// printed.
            case replay(of: String)
        }

        let kind: Kind

        /// Every schedule that departs from the default one (each party runs until it waits, then
        /// the next) at most `preemptionBound` times, each once, depth first. Most concurrency bugs
        /// need two departures or fewer; the number of schedules grows polynomially with the bound.
        public static func exhaustive(preemptionBound: Int = 2) -> Strategy {
            Strategy(kind: .exhaustive(preemptionBound: preemptionBound))
        }

        /// Schedules drawn at random, uniformly at each decision; the same seed draws the same ones.
        public static func random(seed: UInt64 = 0) -> Strategy {
            Strategy(kind: .random(seed: seed))
        }

        /// Probabilistic concurrency testing: random party priorities and `depth - 1` random points
        /// where the running party's priority drops. Each schedule finds a bug that needs `depth`
        /// orderings with probability at least 1/(n·k^(depth−1)), for n parties and k decisions.
        public static func pct(depth: Int = 3, seed: UInt64 = 0) -> Strategy {
            Strategy(kind: .pct(depth: depth, seed: seed))
        }

        /// A replay of `replay`, a failure's replay string: its strategy is the one that found the
        /// schedule (a replay of a replay is a replay of the same strategy).
        static func replay(of replay: String) -> Strategy {
            var source = replay.lastIndex(of: ":").map { String(replay[..<$0]) } ?? replay
            while source.hasPrefix(replayPrefix) { source.removeFirst(replayPrefix.count) }
            return Strategy(kind: .replay(of: source))
        }

        private static let replayPrefix = "replay of "

        /// The strategy as written in Swift, as replay strings begin with it; a replay says which
        /// strategy found its schedule (`replay of exhaustive(preemptionBound: 2)`).
        public var description: String {
            switch kind {
            case .exhaustive(let bound): "exhaustive(preemptionBound: \(bound))"
            case .random(let seed): "random(seed: \(seed))"
            case .pct(let depth, let seed): "pct(depth: \(depth), seed: \(seed))"
            case .replay(let source): Self.replayPrefix + source
            }
        }
    }

    /// What an exploration that found no failure ran.
    public struct Report: Sendable, CustomStringConvertible {
        /// The strategy.
        public let strategy: Strategy
        /// How many schedules ran.
        public let schedules: Int
        /// For ``Strategy/exhaustive(preemptionBound:)``: whether every schedule within the bound ran
        /// (`false`: the budget of schedules or of time cut it). For the random strategies: whether
        /// the whole budget of schedules ran.
        public let isComplete: Bool

        /// How many schedules ran, with which strategy, and whether the budget cut them.
        public var description: String {
            "\(schedules) schedules (\(strategy)\(isComplete ? "" : ", cut by the budget")), no failure"
        }
    }

    /// Runs `body`'s parties under the controlled scheduler, one schedule after another, until one
    /// fails or the strategy or the budget is exhausted.
    ///
    /// - Parameters:
    ///   - strategy: which schedules to run (default: every one within two preemptions).
    ///   - schedules: the most schedules to run (default 10,000).
    ///   - timeLimit: the most real time to spend (`nil`: no limit); no schedule starts past it.
    ///   - stepLimit: the most sync points one schedule may take; more is reported as a party that
    ///     never finishes (a livelock, or a loop waiting for something no party does).
    ///   - replay: a failure's ``ExplorationFailure/replay`` string: runs exactly that schedule,
    ///     once, instead of exploring.
    ///   - body: called on the calling thread once per schedule: makes the values and starts the
    ///     parties. It must start the same parties in the same order every time.
    /// - Returns: what ran, when no schedule failed.
    /// - Throws: ``ExplorationFailure`` for the first schedule that failed;
    ///   `QueueSafeValueError.invalidArgument` for a bound, depth or budget below its minimum, a
    ///   replay string that is not one, or a release build.
    @discardableResult
    public static func explore(
        _ strategy: Strategy = .exhaustive(preemptionBound: 2),
        schedules: Int = 10_000,
        timeLimit: DispatchTimeInterval? = nil,
        stepLimit: Int = 100_000,
        replay: String? = nil,
        _ body: (Scenario) throws -> Void
    ) throws -> Report {
        #if DEBUG
            switch strategy.kind {
            case .exhaustive(let bound) where bound < 0:
                throw QueueSafeValueError.invalidArgument("the preemption bound must not be negative, got \(bound)")
            case .pct(let depth, _) where depth < 1:
                throw QueueSafeValueError.invalidArgument("the PCT depth must be at least 1, got \(depth)")
            default: break
            }
            guard schedules >= 1 else {
                throw QueueSafeValueError.invalidArgument("the budget must allow a schedule, got \(schedules)")
            }
            guard stepLimit >= 1 else {
                throw QueueSafeValueError.invalidArgument("the step limit must be at least 1, got \(stepLimit)")
            }
            var explorer = ScheduleExplorer()
            explorer.granularity = .commands
            explorer.stepLimit = stepLimit
            explorer.tracesViolations = false
            explorer.runBudget = schedules
            if let timeLimit { explorer.deadline = .now() + timeLimit }
            var used = strategy
            if let replay {
                explorer.initialPrefix = try ReplayString.decode(replay)
                explorer.runBudget = 1
                explorer.preemptionBound = 0
                used = .replay(of: replay)
            } else {
                switch strategy.kind {
                case .exhaustive(let bound): explorer.preemptionBound = bound
                case .random(let seed): explorer.strategy = .random(seed: seed)
                case .pct(let depth, let seed): explorer.strategy = .pct(depth: depth, seed: seed)
                case .replay:
                    throw QueueSafeValueError.invalidArgument("a replay strategy needs its replay string: pass replay:")
                }
            }
            let report = explorer.explore { world in
                let scenario = Scenario(world: world)
                do {
                    try body(scenario)
                } catch {
                    world.failRun("the body threw before its parties ran: \(error)")
                }
                return { scenario.endOfRun() }
            }
            if let (message, decisions) = report.violation {
                throw ExplorationFailure(
                    message: message, replay: ReplayString.encode(report.lastSchedule, strategy: used),
                    strategy: used, schedule: report.runs, decisions: decisions, steps: report.violationSteps)
            }
            let complete: Bool
            if case .exhaustive = strategy.kind, replay == nil {
                complete = report.isComplete
            } else {
                complete = report.runs >= schedules || replay != nil
            }
            return Report(strategy: used, schedules: report.runs, isComplete: complete)
        #else
            throw QueueSafeValueError.invalidArgument(
                "Exploration needs a debug build of QueueSafeValue (its scheduler drives a seam release builds leave out)"
            )
        #endif
    }

    /// ``explore(_:schedules:timeLimit:stepLimit:replay:_:)-(_,_,DispatchTimeInterval?,_,_,_)`` with a
    /// `Duration` for the real time to spend, to the nanosecond.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    @_disfavoredOverload  // `.seconds(2)` names both types: it keeps meaning a DispatchTimeInterval
    @discardableResult
    public static func explore(
        _ strategy: Strategy = .exhaustive(preemptionBound: 2),
        schedules: Int = 10_000,
        timeLimit: Duration,
        stepLimit: Int = 100_000,
        replay: String? = nil,
        _ body: (Scenario) throws -> Void
    ) throws -> Report {
        let limit = DispatchTimeInterval.converting(timeLimit)
        return try explore(
            strategy, schedules: schedules, timeLimit: limit, stepLimit: stepLimit, replay: replay, body)
    }

    /// A point where the scheduler may let another party go first, besides the commands' own: put
    /// one between two steps of your code that another party could come between (a read and a
    /// write of a variable that is not in a `QueueSafeValue`, for instance). Outside an exploration
    /// it does nothing.
    public static func point() {
        userPoint()
    }

    /// ``point()`` from async code.
    public static func point() async {
        userPoint()
    }

    /// What both forms of ``point()`` do (from async code, `point()` names the async form itself).
    private static func userPoint() {
        #if DEBUG
            if let world = ControlledSchedulers.current as? ControlledWorld, world.granularity == .commands {
                world.userPoint()
            }
        #endif
    }

    /// Now, on the exploration's virtual clock (inside a party), else `DispatchTime.now()`.
    public static var now: DispatchTime {
        #if DEBUG
            if let virtual = ControlledSchedulers.current?.now { return virtual }
        #endif
        return .now()
    }

    /// Suspends the calling task for `nanoseconds`: on the virtual clock inside an exploration (it
    /// ends when every party waits and the clock reaches it), else `Task.sleep(nanoseconds:)`.
    /// - Throws: `CancellationError` when the task is cancelled first.
    public static func sleep(nanoseconds: UInt64) async throws {
        #if DEBUG
            if let sleep = ControlledSchedulers.current?.virtualSleep {
                try await sleep(nanoseconds)
                return
            }
        #endif
        try await Task.sleep(nanoseconds: nanoseconds)
    }

    /// ``sleep(nanoseconds:)`` for a `Duration` (to the nanosecond): on the virtual clock inside an
    /// exploration, else `Task.sleep(nanoseconds:)`.
    /// - Throws: `CancellationError` when the task is cancelled first;
    ///   `QueueSafeValueError.invalidArgument` for a negative duration.
    @available(macOS 13, iOS 16, tvOS 16, watchOS 9, *)
    public static func sleep(for duration: Duration) async throws {
        let (seconds, attoseconds) = duration.components
        guard seconds >= 0, attoseconds >= 0 else {
            throw QueueSafeValueError.invalidArgument("a sleep must not be negative, got \(duration)")
        }
        let (whole, overflow) = UInt64(seconds).multipliedReportingOverflow(by: 1_000_000_000)
        let nanoseconds = overflow ? UInt64.max : whole &+ UInt64(attoseconds / 1_000_000_000)
        try await sleep(nanoseconds: nanoseconds < whole ? UInt64.max : nanoseconds)
    }

    /// Fails the schedule unless `condition` holds: throws an error that carries `message`. Use it,
    /// or `try #require(…)`, or `XCTUnwrap`, in parties and checks (an `#expect` that does not throw
    /// is recorded by the test, but the scheduler does not see it).
    ///
    /// `message` is evaluated only when `condition` is false, and may throw
    /// (`"\(try balance.wait.read { $0 }) left"`): the requirement still fails with its own error,
    /// whose message then says what the message threw instead.
    public static func require(
        _ condition: Bool, _ message: @autoclosure () throws -> String = "a requirement failed",
        file: StaticString = #fileID, line: UInt = #line
    ) throws {
        guard !condition else { return }
        let text: String
        do { text = try message() } catch { text = "a requirement failed (its message threw \(error))" }
        throw RequirementFailed(message: "\(text) (\(file):\(line))")
    }

    struct RequirementFailed: Error, CustomStringConvertible {
        let message: String
        var description: String { message }
    }
}

// MARK: - Scenario

extension Exploration {
    /// One schedule's parties: what `body` starts. Only one party runs at a time.
    public final class Scenario: @unchecked Sendable {  // @unchecked Sendable: `lock` guards the parties' state
        #if DEBUG
            let world: ControlledWorld
            private let lock = NSLock()
            private var checks: [() throws -> Void] = []
            private var unfinishedTasks: [Int: String] = [:]
            private var taskCount = 0

            init(world: ControlledWorld) {
                self.world = world
            }
        #endif

        /// Starts a party on a thread of its own (it may block: `value.wait` commands).
        /// - Parameters:
        ///   - name: the party's name in reports.
        ///   - body: what it does; an error it throws fails the schedule.
        public func thread(_ name: String, _ body: @escaping @Sendable () throws -> Void) {
            #if DEBUG
                let world = self.world
                world.spawn(name) {
                    do { try body() } catch { world.failRun("\(name) threw: \(error)") }
                }
            #endif
        }

        /// Starts a party in a task (it may await: `value.await` commands, `CommandQueue`,
        /// `RefreshingValue`), whose jobs the scheduler runs, and the jobs of the tasks the library
        /// starts for it. A `Task {}` the body starts itself is not controlled: start it with this.
        /// - Parameters:
        ///   - name: the party's name in reports.
        ///   - body: what it does; an error it throws fails the schedule, and so does a task that
        ///     has not finished when every party has stopped (it awaits something no party does).
        @available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *)
        public func task(_ name: String, _ body: @escaping @Sendable () async throws -> Void) {
            #if DEBUG
                let world = self.world
                let number = lock.withLock { () -> Int in
                    taskCount += 1
                    unfinishedTasks[taskCount] = name
                    return taskCount
                }
                // Its own executor names every job of the task, so each step of a trace names the
                // party; the task is named too, so that the library's reports (a deadlock, who
                // waits for whom) name it.
                Task(name: name, executorPreference: world.taskExecutor(named: "task '\(name)'")) {
                    do { try await body() } catch { world.failRun("task '\(name)' threw: \(error)") }
                    self.lock.withLock { _ = self.unfinishedTasks.removeValue(forKey: number) }
                }
            #endif
        }

        /// A new serial queue for this schedule. Any queue a command dispatches to runs under the
        /// scheduler (its blocks one at a time, in order, as a party); this one is simply fresh.
        public func queue(_ label: String) -> DispatchQueue {
            DispatchQueue(label: label)
        }

        /// Starts a party as a block on `queue` (a serial queue: a concurrent one is run serially),
        /// after the blocks already there.
        /// - Parameters:
        ///   - name: the block's name in reports.
        ///   - block: what it does; an error it throws fails the schedule.
        public func async(
            on queue: DispatchQueue, _ name: String = "a block", _ block: @escaping @Sendable () throws -> Void
        ) {
            #if DEBUG
                let world = self.world
                world.submit({ do { try block() } catch { world.failRun("\(name) threw: \(error)") } }, to: queue)
            #endif
        }

        /// Adds a check that runs on the calling thread once every party has finished, in the order
        /// added; an error it throws fails the schedule. Commands in it run as they would outside
        /// an exploration.
        public func check(_ body: @escaping () throws -> Void) {
            #if DEBUG
                lock.withLock { checks.append(body) }
            #endif
        }

        #if DEBUG
            /// After a run with no failure: the tasks that never finished, then the checks.
            func endOfRun() -> String? {
                let (stuck, checks) = lock.withLock { (unfinishedTasks.sorted { $0.key < $1.key }, self.checks) }
                if let (_, name) = stuck.first {
                    return "task '\(name)' never finished: it awaits something no party will do"
                }
                for check in checks {
                    do { try check() } catch { return "a check failed: \(error)" }
                }
                return nil
            }
        #endif
    }
}

// MARK: - ExplorationFailure

/// A schedule that failed, with the string that runs it again: pass ``replay`` to
/// `Exploration.explore(replay:)` with the same body.
public struct ExplorationFailure: Error, Sendable, CustomStringConvertible {
    /// What went wrong.
    public let message: String
    /// The schedule, as a string for `Exploration.explore(replay:)`.
    public let replay: String
    /// The strategy that found it.
    public let strategy: Exploration.Strategy
    /// Which schedule it was (1 is the first).
    public let schedule: Int
    /// Who went on at each decision of the schedule ("3: B (preempting): a blocking read arrives
    /// at 'balance'"), numbered as the replay string counts them.
    public let decisions: [String]
    /// Every step of the schedule, in order: a party went on at a command point, as it started or
    /// resumed, or after a wait. A decision reads as in ``decisions``; a forced move (the only party
    /// that could go on) is numbered "-" ("-: task 'B': an awaiting command releases 'shared'").
    public let steps: [String]

    /// How many steps ``description`` shows, the last ones.
    static let shownSteps = 60

    /// The message, every step of the schedule (the last 60, if there were more: ``steps`` has
    /// them all), and the replay string.
    public var description: String {
        let shown = steps.suffix(Self.shownSteps)
        let cut = steps.count - shown.count
        return """
            Exploration failed on schedule \(schedule) (\(strategy)): \(message)
            every step (n: the schedule's n-th decision; -: the only party that could go on)\
            \(cut > 0 ? ", the last \(shown.count) (\(cut) before them are in `steps`)" : ""):
            \(shown.map { "  " + $0 }.joined(separator: "\n"))
            replay: "\(replay)"
            """
    }
}

// MARK: - Replay strings

/// A schedule as a string: the strategy's name, a colon, then each decision's choice as one base-36
/// digit (a choice of 36 or more in parentheses, in decimal).
enum ReplayString {
    /// A replay's string names the strategy that found its schedule, so it reads (and replays)
    /// the same as the string it came from.
    static func encode(_ choices: [Int], strategy: Exploration.Strategy) -> String {
        let digits = choices.map { $0 < 36 ? String($0, radix: 36) : "(\($0))" }.joined()
        if case .replay(let source) = strategy.kind { return "\(source):\(digits)" }
        return "\(strategy):\(digits)"
    }

    static func decode(_ string: String) throws(QueueSafeValueError) -> [Int] {
        guard let colon = string.lastIndex(of: ":") else {
            throw QueueSafeValueError.invalidArgument("not a replay string (no ':'): \(string)")
        }
        var choices: [Int] = []
        var rest = string[string.index(after: colon)...]
        while let first = rest.first {
            if first == "(" {
                guard let close = rest.firstIndex(of: ")"),
                    let value = Int(rest[rest.index(after: rest.startIndex)..<close])
                else { throw QueueSafeValueError.invalidArgument("not a replay string: \(string)") }
                choices.append(value)
                rest = rest[rest.index(after: close)...]
            } else {
                guard let value = Int(String(first), radix: 36) else {
                    throw QueueSafeValueError.invalidArgument("not a replay string ('\(first)'): \(string)")
                }
                choices.append(value)
                rest = rest.dropFirst()
            }
        }
        return choices
    }
}
