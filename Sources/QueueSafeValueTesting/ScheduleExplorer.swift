#if DEBUG
    import Dispatch
    import Foundation

    @_spi(Testing) import QueueSafeValue

    // MARK: - ScheduleExplorer

    /// Enumerates the schedules of a world that depart from a deterministic default schedule at most
    /// `preemptionBound` times, depth first, replaying each one in a fresh world. The default runs a
    /// thread until it blocks, then the next one in round-robin order; a departure (a *delay*: another
    /// thread goes first) is a preemption when the running thread could have gone on. This is delay
    /// bounding (Emmi, Qadeer and Rakamarić), a refinement of CHESS's preemption bounding: most
    /// concurrency bugs need two departures or fewer, and the count of schedules grows polynomially
    /// with the bound instead of exponentially with the run's length.
    struct ScheduleExplorer {
        struct Report {
            var runs = 0
            var steps = 0
            var decisions = 0
            /// Whether every schedule within the bound was run (not cut by the run budget).
            var isComplete = true
            var violation: (message: String, trace: [String])?
            /// Under `commands`, a violation's every step, decisions and forced moves alike.
            var violationSteps: [String] = []
            /// Every nesting of locks the runs took (see ``LockOrder``).
            var nestings: [LockNesting: LockNesting.Witness] = [:]
            /// The choices of the last run (a failing one's, when there is a violation).
            var lastSchedule: [Int] = []
        }

        /// How the explorer picks schedules: depth first within the preemption bound (every schedule
        /// once), or one schedule per run drawn from a seed (uniformly at each decision, or by PCT).
        enum Strategy {
            case exhaustive
            case random(seed: UInt64)
            /// Probabilistic concurrency testing (Burckhardt et al.): random thread priorities, and
            /// `depth - 1` points where the running thread's priority drops; finds a bug of depth `d`
            /// with probability at least 1/(n·k^(d−1)) per run (n threads, k decisions).
            case pct(depth: Int, seed: UInt64)
        }

        var preemptionBound = 2
        var runBudget = 50_000
        var strategy = Strategy.exhaustive
        var granularity = Granularity.syncPoints
        var stepLimit = 20_000
        /// How long (real time) one run may take before it counts as a hang outside the world.
        var runTimeout: TimeInterval = 60
        /// Past this (real time), no new run starts (`nil`: no limit); the report is then incomplete.
        var deadline: DispatchTime?
        /// Replayed with every sync point traced, for a violation's report (the checker's).
        var tracesViolations = true
        /// The first run's choices (a replay's schedule).
        var initialPrefix: [Int] = []

        /// `build` makes the world of one run: spawns its threads and returns the check to make when
        /// the run has ended (`nil` when all is well, or what went wrong).
        func explore(_ build: (ControlledWorld) -> () -> String?) -> Report {
            var report = Report()
            var prefix = initialPrefix
            var pctSteps = 64  // PCT's estimate of a run's decisions, updated from each run
            while true {
                let chooser = makeChooser(run: report.runs, decisionsEstimate: pctSteps)
                let world = ControlledWorld(
                    replaying: prefix, stepLimit: stepLimit, granularity: granularity, chooser: chooser)
                let finalCheck = build(world)
                var outcome = world.run(timeout: runTimeout)
                if outcome.violation == nil { outcome.violation = finalCheck() }
                report.runs += 1
                report.steps += outcome.steps
                report.decisions += world.decisions.count
                report.nestings.merge(world.nestings) { first, _ in first }
                report.lastSchedule = world.decisions.map(\.chosen)
                pctSteps = max(pctSteps, world.decisions.count)
                if let violation = outcome.violation {
                    report.violationSteps = world.describeSteps()
                    guard tracesViolations else {
                        report.violation = (violation, world.describeDecisions())
                        return report
                    }
                    // Replayed with every sync point traced, for the report.
                    let replay = ControlledWorld(replaying: world.decisions.map(\.chosen))
                    replay.isTracing = true
                    let replayCheck = build(replay)
                    _ = replay.run()
                    _ = replayCheck()
                    report.violation = (
                        violation, world.describeDecisions() + ["--- sync points of the replay:"] + replay.trace
                    )
                    return report
                }
                if case .exhaustive = strategy {
                    guard let next = Self.nextPrefix(after: world.decisions, bound: preemptionBound) else {
                        return report
                    }
                    prefix = next
                }
                if report.runs >= runBudget || deadline.map({ DispatchTime.now() >= $0 }) == true {
                    report.isComplete = false
                    return report
                }
            }
        }

        /// The generator of run number `run` of a seeded strategy: each run draws its own stream.
        private static func generator(seed: UInt64, run: Int) -> SplitMix64 {
            SplitMix64(seed: seed &+ UInt64(run) &* 0x9E37_79B9_7F4A_7C15)
        }

        /// The strategy's choice past the replayed prefix, for run number `run`.
        private func makeChooser(
            run: Int, decisionsEstimate: Int
        ) -> ((_ decision: Int, _ options: [(thread: Int, timeout: Bool)]) -> Int)? {
            switch strategy {
            case .exhaustive:
                return nil
            case .random(let seed):
                var generator = Self.generator(seed: seed, run: run)
                return { _, options in Int(generator.next() % UInt64(options.count)) }
            case .pct(let depth, let seed):
                var generator = Self.generator(seed: seed, run: run)
                // Change points: depth - 1 decision numbers; the i-th drops the chosen thread to
                // priority i (below every initial one).
                var changePoints: [Int: Int] = [:]
                for point in 0..<max(0, depth - 1) {
                    changePoints[Int(generator.next() % UInt64(max(1, decisionsEstimate)))] = point
                }
                var priorities: [Int: UInt64] = [:]
                return { decision, options in
                    func priority(_ thread: Int) -> UInt64 {
                        if let known = priorities[thread] { return known }
                        let fresh = UInt64(depth) &+ 1 &+ generator.next() % (1 << 32)
                        priorities[thread] = fresh
                        return fresh
                    }
                    func best() -> Int {
                        options.indices.max { priority(options[$0].thread) < priority(options[$1].thread) }!
                    }
                    if let lowered = changePoints[decision] {
                        priorities[options[best()].thread] = UInt64(lowered)
                    }
                    return best()
                }
            }
        }

        /// The next schedule in depth-first order: the deepest decision with an option not tried yet
        /// whose preemptions stay within the bound.
        static func nextPrefix(after decisions: [Decision], bound: Int) -> [Int]? {
            var preemptionsBefore: [Int] = []
            var count = 0
            for decision in decisions {
                preemptionsBefore.append(count)
                if decision.isPreemption(decision.chosen) { count += 1 }
            }
            for depth in decisions.indices.reversed() {
                let decision = decisions[depth]
                for option in (decision.chosen + 1)..<decision.options.count
                where preemptionsBefore[depth] + (decision.isPreemption(option) ? 1 : 0) <= bound {
                    return decisions[..<depth].map(\.chosen) + [option]
                }
            }
            return nil
        }
    }

    extension ControlledWorld {
        /// The decisions of the run, for a violation's trace: who went on at each one.
        func describeDecisions() -> [String] {
            decisions.enumerated().map { depth, decision in
                let option = decision.options[decision.chosen]
                let name = threadName(option.thread)
                return "\(depth): \(name)\(option.timeout ? " times out" : "")"
                    + (decision.isPreemption(decision.chosen) ? " (preempting)" : "")
                    + (granularity != .commands || option.timeout ? "" : decision.reached.map { ": \($0)" } ?? "")
            }
        }

        /// Every step of the run (under `commands`), for a failure's trace: a decision's as in
        /// ``describeDecisions()``, numbered as the replay string counts them; a forced move's
        /// numbered "-".
        func describeSteps() -> [String] {
            let decisions = describeDecisions()
            return steps.map { step in
                if let decision = step.decision { return decisions[decision] }
                let name = threadName(step.thread)
                return step.timeout ? "-: \(name) times out" : "-: \(name): \(step.what)"
            }
        }
    }

    /// A small seeded generator (SplitMix64): the same seed gives the same schedules on every platform.
    struct SplitMix64: RandomNumberGenerator {
        private var state: UInt64

        init(seed: UInt64) { state = seed }

        /// SplitMix64's constants: the golden-ratio increment and the two multipliers of its mix.
        private static let increment: UInt64 = 0x9E37_79B9_7F4A_7C15
        private static let multipliers: (UInt64, UInt64) = (0xBF58_476D_1CE4_E5B9, 0x94D0_49BB_1331_11EB)

        mutating func next() -> UInt64 {
            state &+= Self.increment
            var z = state
            z = (z ^ (z >> 30)) &* Self.multipliers.0
            z = (z ^ (z >> 27)) &* Self.multipliers.1
            return z ^ (z >> 31)
        }
    }
#endif
