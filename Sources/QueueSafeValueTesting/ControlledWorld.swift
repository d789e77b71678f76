#if DEBUG
    import Dispatch
    import Foundation
    import QueueSafeValueShims

    @_spi(Testing) import QueueSafeValue

    // The controlled scheduler: it runs the real storage (CommandEngine, the waiters, the state word,
    // the locks, the parkers, dispatch and task resumption) on threads of its own, one at a time, and
    // decides at every sync point (see `SyncPoints`) which thread goes next. A *run* executes one
    // schedule from start to end; `ScheduleExplorer` enumerates the schedules, with a bound on
    // preemptions, and replays each one from scratch (stateless model checking, as CHESS and loom do).
    //
    // What a thread may be: a program of the scenario, a virtual serial queue running its blocks in
    // order, a task job (every `Task` of a scenario prefers this scheduler as its executor), or a
    // timer (`asyncAfter`), which may fire at any point (time passes whenever the scheduler says so).
    //
    // It checks, besides what the scenario checks: no action (a wake, a resume, a dispatch) performed
    // while the thread holds a lock of the storage; no thread woken twice for one park, and no wake
    // left over at the end (each park is woken exactly once); no run ending with a thread stuck (a
    // lost wake-up or a hang); no run longer than its step limit (a livelock).
    //
    // It has two clients, and a granularity for each (`Granularity`): the test suite's checker
    // decides at every sync point (`syncPoints`), and a timed wait or a timer may end at any of them;
    // the `QueueSafeValueTesting` library (`Exploration`) decides only at command points and a user's
    // own points (`commands`: between a user's commands, where a user's bug lives), lets every other
    // point go on with the running thread while it can, and keeps a virtual clock that jumps to the
    // next deadline when every thread waits.

    /// One schedule's verdict.
    struct RunOutcome {
        var violation: String?
        var steps = 0
    }

    /// Where the scheduler decides who goes next (see the header).
    enum Granularity {
        case syncPoints
        case commands
    }

    /// A decision the scheduler took where more than one thread could go on.
    struct Decision {
        /// The options, in a deterministic order: `(thread index, times out)`. The default schedule's
        /// choice comes first (the running thread, if it can go on: `continues`); choosing another
        /// *delays* that thread.
        var options: [(thread: Int, timeout: Bool)]
        var chosen: Int
        var continues: Bool
        /// The command point the chosen thread had reached (under `commands`), if any.
        var reached: String? = nil

        /// Whether choosing `option` departs from the default schedule (it costs one of the bound).
        func isPreemption(_ option: Int) -> Bool { option != 0 }
    }

    /// A step of a run under `commands`: a thread went on at a command point, or after a wait, or
    /// as it started, whether the schedule chose it among others (a decision) or it was the only
    /// one that could go on (a forced move). A failure's trace shows them all.
    struct Step {
        var thread: Int
        /// What it did as it went on ("a blocking read arrives at 'balance'").
        var what: String
        var timeout: Bool
        /// Its index in the run's decisions, or `nil` for a forced move.
        var decision: Int?
    }

    // @unchecked Sendable: its state is touched under `lock`
    final class ControlledWorld: ControlledScheduler, @unchecked Sendable {
        // MARK: Threads

        enum ThreadState {
            case runnable
            case blockedOnLock(ObjectIdentifier)
            /// Parked until a wake, or (with a deadline, in uptime nanoseconds) until the deadline.
            case parked(ObjectIdentifier, deadline: UInt64?)
            /// A timer of the virtual clock (`commands`), until its deadline.
            case sleeping(until: UInt64)
            /// Busy-waiting: may go on once another thread took a step after `step` (the step at which
            /// the thread last looked at what it waits for).
            case spinning(since: Int)
            /// About to touch a task (resume it, escalate it): may go on once no thread runs inside a
            /// lock of the concurrency runtime, which that could wait for outside the world.
            case waitingForRuntime
            case finished
        }

        // @unchecked Sendable: its state is touched under the world's lock, its baton is a semaphore
        final class VirtualThread: @unchecked Sendable {
            let index: Int
            let name: String
            /// The party it works for, as the names of the tasks it starts say: its own name, or for
            /// a job or a timer, the party of its task or of the thread that armed it.
            var origin = ""
            let baton = DispatchSemaphore(value: 0)
            var state = ThreadState.runnable
            /// What its last park returned (set by whoever ended the park).
            var parkResult = true
            /// The virtual queue whose blocks it runs, if any.
            var queue: QueueTag?
            /// It runs a task's job.
            var isTask = false
            /// The platform's identifier of the thread (see `ControlledSchedulers.currentThread`),
            /// once it started.
            var osThread = 0
            /// It runs code the concurrency runtime called under a lock of its own.
            var insideRuntimeLock = 0
            /// The command point it reached last ("a blocking command arrives at 'A'"), under
            /// `commands`: what it does when it goes on; before its first, how it begins ("starts",
            /// "resumes" for a task's later job, "fires" for a timer).
            var reached: String
            /// A step of the trace went on from `reached` already: if the thread is chosen again
            /// before its next command point, it waited in between (for its turn, a lock).
            var reachedIsShown = false
            /// The progress count at its last sync point (not a busy-wait turn): what it saw was read
            /// then.
            var lastStep = 0
            /// The locks it holds, innermost last, each with its role and where it was taken (the
            /// runtime's lock, while it runs code the runtime called under it, among them).
            var held: [(lock: ObjectIdentifier, held: HeldLock)] = []
            /// It holds a lock of the storage (not counting the runtime's).
            var holdsALock: Bool { held.contains { $0.held.role != .taskRuntime } }

            init(index: Int, name: String, reached: String) {
                self.index = index
                self.name = name
                self.reached = reached
            }
        }

        private let lock = NSLock()
        private var threads: [VirtualThread] = []
        private var running: VirtualThread?
        private var lockOwners: [ObjectIdentifier: Int] = [:]
        private var permits: [ObjectIdentifier: Int] = [:]
        private var queues: [ObjectIdentifier: (fifo: [@Sendable () -> Void], hasWorker: Bool)] = [:]
        private var step = 0
        /// Steps other than busy-wait turns.
        private var progress = 0
        private let stepLimit: Int
        private let ended = DispatchSemaphore(value: 0)
        private var isOver = false

        // MARK: The schedule

        /// The choices to replay, then the default (go on with the running thread).
        private let prefix: [Int]
        /// Picks an option past the prefix (a strategy's); `nil`: the default, option 0.
        private let chooser: ((_ decision: Int, _ options: [(thread: Int, timeout: Bool)]) -> Int)?
        let granularity: Granularity
        /// The virtual clock (`commands`), in uptime nanoseconds: it starts at the real clock's now.
        private var virtualNow = DispatchTime.now().uptimeNanoseconds
        /// Where the checker's step clock starts (see ``fairnessNow``).
        private let clockOrigin = DispatchTime.now().uptimeNanoseconds
        /// Failures the run's own code reported (see ``failRun(_:)``) end it as a violation does.
        private(set) var decisions: [Decision] = []
        /// Every step under `commands`, decisions and forced moves alike (see ``Step``).
        private(set) var steps: [Step] = []
        private(set) var outcome = RunOutcome()
        /// Checked at every step where no thread holds a lock (the storage is between transitions).
        var quiescentCheck: (() -> String?)?

        /// The deadlock detector of this world (its tags, watchers and wait-for graph).
        let detector = DeadlockDetector()
        /// The platform's priority calls in this world: a fake that plays the kernel, so raising a
        /// thread records the urgency it would run at instead of changing a real thread's
        /// scheduling (see ``spawn(_:queue:isTask:urgency:sleepingUntil:_:)``). Linux's policy unless
        /// ``simulate(_:)`` chose another.
        private(set) var priorityCalls = RecordingPriorityBackend(.linux)
        /// The boost registry of this world, which raises threads through ``priorityCalls``.
        private(set) var boostRegistry: BoostRegistry

        /// Runs priority inheritance with `platform`'s policy (Linux's by default): call while the
        /// world is built, before it runs.
        func simulate(_ platform: RecordingPriorityBackend.Platform) {
            priorityCalls = RecordingPriorityBackend(platform)
            boostRegistry = BoostRegistry(backend: priorityCalls.backend)
        }
        /// How many threads are passing a change of urgency along a chain now (see
        /// `SyncPoints.inheritance`): the raised parties agree with the machines only when none is.
        private var inheritanceInProgress = 0
        /// When set, every sync point is recorded with where it was reached (slow: for a failing run's
        /// replay).
        var isTracing = false
        private(set) var trace: [String] = []

        private func traceHere(_ kind: String) {
            guard isTracing else { return }
            // Raw frames (addresses on Linux): the report's reader symbolizes them.
            let frames = Thread.callStackSymbols.dropFirst(2).prefix(9)
            let thread = lock.withLock { running?.name ?? "?" }
            lock.withLock { trace.append("\(thread): \(kind) in \(frames.joined(separator: " <- "))") }
        }

        init(
            replaying prefix: [Int], stepLimit: Int = 20_000, granularity: Granularity = .syncPoints,
            chooser: ((_ decision: Int, _ options: [(thread: Int, timeout: Bool)]) -> Int)? = nil
        ) {
            self.prefix = prefix
            self.stepLimit = stepLimit
            self.granularity = granularity
            self.chooser = chooser
            boostRegistry = BoostRegistry(backend: priorityCalls.backend)
        }

        // MARK: Running

        /// Starts a thread of the world running `body` (it waits for its first turn).
        @discardableResult
        /// - Parameter urgency: the thread's own scheduling urgency, as priority inheritance reads it
        ///   (a real-time priority on Linux, a QoS class on Apple platforms: see ``simulate(_:)``);
        ///   virtual, like every raise of it.
        /// - Parameter sleepingUntil: a timer of the virtual clock: the thread's first turn comes once the
        ///   clock reaches this deadline.
        /// - Parameter begins: what its first step does, in a trace.
        /// - Parameter origin: the party it works for, in a trace (see ``VirtualThread/origin``).
        func spawn(
            _ name: String, queue: QueueTag? = nil, isTask: Bool = false, urgency: Int32 = 0,
            sleepingUntil: UInt64? = nil, begins: String = "starts", origin: String? = nil,
            _ body: @escaping @Sendable () -> Void
        ) -> VirtualThread {
            let thread = lock.withLock { () -> VirtualThread in
                let thread = VirtualThread(index: threads.count, name: name, reached: begins)
                thread.origin = origin ?? name
                thread.queue = queue
                thread.isTask = isTask
                if let sleepingUntil { thread.state = .sleeping(until: sleepingUntil) }
                threads.append(thread)
                return thread
            }
            let os = Thread { [self] in
                Self.nameCurrentThread(name)  // for the library's own reports (a deadlock's parties)
                let osThread = ControlledSchedulers.currentThread
                lock.withLock { thread.osThread = osThread }
                thread.baton.wait()
                // Installed first: the registry's lock is the world's to grant (taken before, a thread
                // could block on it outside the world while a paused thread held it).
                ControlledSchedulers.install(self)
                if urgency != 0 {
                    priorityCalls.setOwnUrgency(ofThread: ControlledSchedulers.currentThread, to: urgency)
                }
                if !isOverLocked { body() }
                ControlledSchedulers.install(nil)
                finish(thread)
            }
            os.stackSize = 1 << 20
            os.start()
            return thread
        }

        private var isOverLocked: Bool { lock.withLock { isOver } }

        /// Names the calling thread (Linux keeps 15 bytes of it), through pthreads, which takes
        /// effect at once: swift-corelibs-foundation's `Thread.current.name` may not reach the
        /// system in the first instant of a thread's body (see GettingStarted's *Deadlocks*).
        private static func nameCurrentThread(_ name: String) {
            qsv_set_current_thread_name(String(decoding: name.utf8.prefix(15), as: UTF8.self))
        }

        /// Runs the world from its threads' first turn until every thread has ended (or a violation);
        /// returns the verdict. Call from a thread of no world, after spawning the first threads.
        func run(timeout: TimeInterval = 60) -> RunOutcome {
            let first = lock.withLock { () -> VirtualThread? in
                // The virtual clock starts now: a deadline the scenario's setup computed from the real
                // clock is never behind it.
                virtualNow = max(virtualNow, DispatchTime.now().uptimeNanoseconds)
                return chooseNext(current: nil, branch: true)
            }
            guard let first else { return outcome }
            first.baton.signal()
            if ended.wait(timeout: .now() + timeout) == .timedOut {
                lock.withLock {
                    let states = threads.map { "\($0.name): \($0.state)" }.joined(separator: ", ")
                    fail(
                        "the run did not end within \(timeout) s: \(running?.name ?? "no thread") had the turn and "
                            + "never gave it back (it blocked outside the world). Threads: \(states)")
                    isOver = true
                }
            }
            if lock.withLock({ everyPartyWaited }) {
                // Who waits for whom, as the library's detector knows it (from this thread, which
                // runs in no world, while the waiting threads stay parked).
                let names = lock.withLock {
                    Dictionary(threads.map { ($0.osThread, $0.name) }, uniquingKeysWith: { first, _ in first })
                }
                let waits = detector.describeWaits(names: names)
                if !waits.isEmpty {
                    lock.withLock { outcome.violation? += ". Who waits for whom: " + waits.joined(separator: "; ") }
                }
            }
            // Every thread ended: nothing holds, so nothing may still be raised, and no priority
            // call may have been misused on the way (an override ended twice, say).
            let platformProblem =
                priorityCalls.firstMisuse
                ?? priorityCalls.leftovers.map { "a raise outlived every hold (\(priorityCalls.platform)): \($0)" }
            return lock.withLock {
                if let platformProblem { fail(platformProblem) }
                return outcome
            }
        }

        /// The platform's identifiers of the world's threads that have started, with their names.
        var startedThreads: [(thread: Int, name: String)] {
            lock.withLock { threads.filter { $0.osThread != 0 }.map { ($0.osThread, $0.name) } }
        }

        /// The run ended with every party waiting (see ``run(timeout:)``).
        private var everyPartyWaited = false

        /// Under `lock`: the threads that may go on now, `(thread index, times out)`.
        private func currentOptions() -> [(thread: Int, timeout: Bool)] {
            var options: [(thread: Int, timeout: Bool)] = []
            let virtual = granularity == .commands
            for thread in threads {
                switch thread.state {
                case .runnable: options.append((thread.index, false))
                case .blockedOnLock(let id): if lockOwners[id] == nil { options.append((thread.index, false)) }
                case .parked(_, let deadline?):
                    // Any time for the checker; on the virtual clock, once it reached the deadline.
                    if !virtual || deadline <= virtualNow { options.append((thread.index, true)) }
                case .parked(_, nil): break
                case .sleeping(let until): if until <= virtualNow { options.append((thread.index, false)) }
                case .spinning(let since): if progress > since { options.append((thread.index, false)) }
                case .waitingForRuntime:
                    if !threads.contains(where: { $0.insideRuntimeLock > 0 }) { options.append((thread.index, false)) }
                case .finished: break
                }
            }
            return options
        }

        /// Under `lock`, on the virtual clock: when no thread can go on, time jumps to the earliest
        /// deadline of a timed park or a timer. Returns whether it did.
        private func advanceVirtualClock() -> Bool {
            guard granularity == .commands else { return false }
            let deadlines = threads.compactMap { thread -> UInt64? in
                switch thread.state {
                case .parked(_, let deadline?): deadline
                case .sleeping(let until): until
                default: nil
                }
            }
            // mutant(frozen-clock): guard let next = deadlines.min(), false else { return false }
            guard let next = deadlines.min() else { return false }
            virtualNow = max(virtualNow, next)
            return true
        }

        /// Under `lock`: picks the thread to run next and records the decision, or ends the run. With
        /// `branch` false (a point that is not a command point, under `commands`), the running thread
        /// goes on if it can, and nothing is recorded.
        private func chooseNext(current: VirtualThread?, branch: Bool) -> VirtualThread? {
            guard !isOver else { return nil }
            var options = currentOptions()
            if options.isEmpty, advanceVirtualClock() { options = currentOptions() }
            if !branch, let current, options.contains(where: { $0.thread == current.index && !$0.timeout }) {
                current.state = .runnable
                running = current
                return current
            }
            // While a thread runs inside a lock of the concurrency runtime, a task job that could take
            // that lock waits (one that holds a lock of the storage finishes its section first).
            if threads.contains(where: { $0.insideRuntimeLock > 0 }) {
                let allowed = options.filter { option in
                    let thread = threads[option.thread]
                    return !thread.isTask || thread.holdsALock || thread.insideRuntimeLock > 0
                }
                if !allowed.isEmpty { options = allowed }
            }
            guard !options.isEmpty else {
                if granularity == .commands,
                    threads.contains(where: { if case .finished = $0.state { false } else { true } })
                {
                    fail("every party waits, and none can go on: \(describeWaits())")
                    everyPartyWaited = true
                } else if let stuck = threads.first(where: { if case .finished = $0.state { false } else { true } }) {
                    fail("a run ended with \(stuck.name) stuck (\(stuck.state)): a hang or a lost wake-up")
                } else {
                    let leftOver = permits.filter { $0.value > 0 }
                    if !leftOver.isEmpty { fail("a wake-up that no park consumed was left over") }
                }
                end()
                return nil
            }
            // The default schedule: the running thread goes on; a thread that cannot goes to the next
            // one in round-robin order. Its option comes first; every other option is a *delay*.
            var continues = false
            if let current, let own = options.firstIndex(where: { $0.thread == current.index && !$0.timeout }) {
                options.insert(options.remove(at: own), at: 0)
                continues = true
            } else if let current, let next = options.firstIndex(where: { $0.thread > current.index && !$0.timeout }) {
                options = Array(options[next...] + options[..<next])
            }
            var chosen = 0
            var decision: Int?
            if options.count > 1 {
                if decisions.count < prefix.count {
                    // mutant(replay-ignores-schedule): chosen = 0
                    chosen = prefix[decisions.count]
                    guard chosen < options.count else {
                        fail("the schedule did not replay: the run is not deterministic")
                        end()
                        return nil
                    }
                } else if let chooser {
                    chosen = min(max(chooser(decisions.count, options), 0), options.count - 1)
                }
                decision = decisions.count
                decisions.append(
                    Decision(
                        options: options, chosen: chosen, continues: continues,
                        reached: stepDescription(threads[options[chosen].thread])))
            }
            let option = options[chosen]
            let thread = threads[option.thread]
            if granularity == .commands {
                // A forced move too: the trace of a failure shows every step (the checker, which
                // decides at every sync point, keeps only its decisions).
                let what = decision.map { decisions[$0].reached ?? "" } ?? stepDescription(thread)
                steps.append(Step(thread: thread.index, what: what, timeout: option.timeout, decision: decision))
                thread.reachedIsShown = true
            }
            if option.timeout {
                thread.parkResult = false
            } else if case .parked = thread.state {
                preconditionFailure("an untimed parked thread was chosen")
            }
            thread.state = .runnable
            running = thread
            return thread
        }

        /// Under `lock`: what `thread` does as it goes on now: the point it reached, or, if a step
        /// went on from that point already, that it goes on after a wait.
        private func stepDescription(_ thread: VirtualThread) -> String {
            thread.reachedIsShown ? "goes on (it waited since: \(thread.reached))" : thread.reached
        }

        /// The running thread `current` gives the turn to whoever the schedule picks, and waits until
        /// it gets the turn back. Under no lock.
        private func reschedule(_ current: VirtualThread, branch: Bool = true) {
            let next = lock.withLock { () -> VirtualThread? in
                step += 1
                // A busy-wait turn changes nothing another thread waits for; every other step may.
                if case .spinning = current.state {
                } else {
                    progress += 1
                    current.lastStep = progress
                }
                outcome.steps = step
                if step > stepLimit {
                    fail("more than \(stepLimit) steps: a livelock")
                    end()
                    return nil
                }
                return chooseNext(current: current, branch: branch || granularity == .syncPoints)
            }
            if let next, next !== current { next.baton.signal() }
            if next !== current { current.baton.wait() }
            if isOverLocked { abandon() }
        }

        /// After a violation the world is over: a thread that gets the turn again can only stop here.
        func abandon() -> Never {
            ControlledSchedulers.install(nil)
            // Parked forever: the run failed, and the thread's code cannot be unwound.
            while true { Foundation.sleep(3600) }
        }

        private func finish(_ thread: VirtualThread) {
            let next = lock.withLock { () -> VirtualThread? in
                // What it did after its last sync point (the operation that sync point announced) is a
                // step a spinning thread may wait for: without this, a thread that ends right after
                // its last write leaves a thread spinning on that write stuck.
                progress += 1
                thread.state = .finished
                if thread.holdsALock { fail("\(thread.name) ended holding a lock") }
                return chooseNext(current: nil, branch: true)
            }
            next?.baton.signal()
        }

        private func end() {
            guard !isOver else { return }
            isOver = true
            ended.signal()
        }

        private func fail(_ message: String) {
            if outcome.violation == nil { outcome.violation = message }
        }

        /// The run's own code failed (a party threw, a check failed): the run ends with `message`.
        /// From a thread of the world, the caller then stops (see ``abandon()``).
        func failRun(_ message: String) {
            let onAThreadOfTheWorld = lock.withLock { () -> Bool in
                fail(message)
                end()
                return running != nil && ControlledSchedulers.current === self
            }
            if onAThreadOfTheWorld { abandon() }
        }

        /// Under `lock`: who waits, for the report of a run where every party waits.
        private func describeWaits() -> String {
            threads.compactMap { thread -> String? in
                let what: String
                switch thread.state {
                case .finished: return nil
                case .runnable, .spinning, .waitingForRuntime: what = "could not go on"
                case .blockedOnLock: what = "waits for a lock of the library"
                case .parked(_, nil): what = "waits for its turn (or a completion) with no deadline"
                case .parked(_, _?): what = "waits with a deadline"
                case .sleeping: what = "sleeps"
                }
                return "\(thread.name) \(what)"
            }.joined(separator: "; ")
        }

        private var current: VirtualThread {
            lock.withLock { running! }
        }

        /// Runs the quiescent check when no thread of the world holds a lock.
        private func checkIfQuiescent() {
            guard let check = quiescentCheck else { return }
            let quiet = lock.withLock { lockOwners.isEmpty }
            guard quiet else { return }
            ControlledSchedulers.install(nil)
            let violation = check()
            ControlledSchedulers.install(self)
            if let violation {
                lock.withLock {
                    fail(violation)
                    end()
                }
            }
        }

        /// The name of thread `index`.
        func threadName(_ index: Int) -> String {
            lock.withLock { threads[index].name }
        }

        // MARK: ControlledScheduler

        func atomicPoint() {
            traceHere("atomic")
            checkIfQuiescent()
            reschedule(current, branch: false)
        }

        func commandPoint(_ describe: () -> String) {
            // The checker decides at the sync points around it; a command point of a thread inside a
            // lock of the library is no place to stop a user's party.
            guard granularity == .commands else { return }
            let thread = current
            let reached = describe()
            let holds = lock.withLock { () -> Bool in
                thread.reached = reached
                thread.reachedIsShown = false
                return thread.holdsALock
            }
            reschedule(thread, branch: !holds)
        }

        /// A user's own point (`Exploration.point()`).
        func userPoint() {
            let thread = current
            lock.withLock {
                thread.reached = "Exploration.point()"
                thread.reachedIsShown = false
            }
            reschedule(thread, branch: true)
        }

        /// The clock every deadline is computed on: the virtual clock (`commands`), or the
        /// checker's step clock (``fairnessNow``), which the engine's own clocks read too, so that
        /// whether a deadline has passed is part of the schedule, not of the host's speed.
        var now: DispatchTime? {
            DispatchTime(uptimeNanoseconds: fairnessNow)
        }

        /// The eventually fair mode's clock: the virtual clock (`commands`); for the checker
        /// (`syncPoints`), a microsecond per step that made progress since the run began, so that
        /// a schedule decides how much time passes and a bound can be explored.
        var fairnessNow: UInt64 {
            lock.withLock {
                granularity == .commands ? virtualNow : clockOrigin &+ UInt64(progress) &* 1_000
            }
        }

        var virtualSleep: (@Sendable (UInt64) async throws -> Void)? {
            guard granularity == .commands else { return nil }
            return { [self] nanoseconds in try await sleep(nanoseconds: nanoseconds) }
        }

        /// A sleep on the virtual clock: a timer thread resumes the task when the clock reaches the
        /// deadline, or the task's cancellation does first (throwing `CancellationError`).
        func sleep(nanoseconds: UInt64) async throws {
            let sleeper = current
            let deadline = lock.withLock { () -> UInt64 in
                // Not a point where another party may go first, but the reason the next step is
                // another party's: a trace says so.
                steps.append(
                    Step(thread: sleeper.index, what: "sleeps for \(Self.describe(nanoseconds))", timeout: false))
                return virtualNow &+ nanoseconds
            }
            let wake = SleepWake()
            try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                    if wake.attach(continuation) {
                        // Named after the sleeper: "task 'A': its sleep ends", "task 'A' sleeps".
                        spawn(
                            sleeper.name, sleepingUntil: deadline, begins: "its sleep ends", origin: sleeper.origin
                        ) { wake.resume(nil) }
                    }
                }
            } onCancel: {
                wake.resume(CancellationError())
            }
        }

        /// A length of virtual time, in the largest unit that divides it ("1 s", "250 ms", "3 ns").
        private static func describe(_ nanoseconds: UInt64) -> String {
            let units: [(UInt64, String)] = [(1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "µs")]
            for (size, unit) in units where nanoseconds >= size && nanoseconds % size == 0 {
                return "\(nanoseconds / size) \(unit)"
            }
            return "\(nanoseconds) ns"
        }

        func willLock(_ id: ObjectIdentifier, role: Any.Type, site: LockSite) {
            traceHere("lock")
            let thread = current
            let taken = HeldLock(role: LockRole(role), site: site)
            lock.withLock {
                noteNestings(of: thread, taking: taken)
                if isEngine(role) { engineLockSections[thread.origin, default: []].append(site) }
            }
            reschedule(thread, branch: false)  // another thread may take it first
            while true {
                let free = lock.withLock { () -> Bool in
                    if lockOwners[id] == nil {
                        lockOwners[id] = thread.index
                        thread.held.append((id, taken))
                        return true
                    }
                    thread.state = .blockedOnLock(id)
                    return false
                }
                if free { return }
                reschedule(thread)
            }
        }

        func didUnlock(_ id: ObjectIdentifier) {
            traceHere("unlock")
            let thread = current
            lock.withLock {
                lockOwners[id] = nil
                if let index = thread.held.lastIndex(where: { $0.lock == id }) { thread.held.remove(at: index) }
            }
            checkIfQuiescent()
            reschedule(thread, branch: false)
        }

        func park(_ parker: ObjectIdentifier, deadline: DispatchTime?) -> Bool {
            traceHere("park")
            let thread = current
            let consumed = lock.withLock { () -> Bool in
                if let count = permits[parker], count > 0 {
                    permits[parker] = count - 1
                    return true
                }
                thread.parkResult = true
                thread.state = .parked(parker, deadline: deadline?.uptimeNanoseconds)
                return false
            }
            reschedule(thread)
            return consumed ? true : lock.withLock { thread.parkResult }
        }

        func unpark(_ parker: ObjectIdentifier) {
            traceHere("unpark")
            let thread = current
            lock.withLock {
                if thread.holdsALock { fail("\(thread.name) woke a thread while holding a lock") }
                if let parked = threads.first(where: { if case .parked(parker, _) = $0.state { true } else { false } })
                {
                    parked.parkResult = true
                    parked.state = .runnable
                } else {
                    permits[parker, default: 0] += 1
                    if permits[parker]! > 1 { fail("a thread was woken twice for one park") }
                }
            }
            reschedule(thread, branch: false)
        }

        func spin() {
            traceHere("spin")
            let thread = current
            // It looked last at its previous sync point: another thread's step since then may have
            // changed what it waits for.
            lock.withLock { thread.state = .spinning(since: thread.lastStep) }
            reschedule(thread, branch: false)
        }

        func async(on queue: DispatchQueue, _ block: @escaping @Sendable () -> Void) {
            traceHere("async")
            let thread = current
            lock.withLock {
                if thread.holdsALock { fail("\(thread.name) dispatched a block while holding a lock") }
            }
            submit(block, to: queue)
            reschedule(thread, branch: false)
        }

        /// Adds `block` to the virtual serial queue of `queue`, which runs its blocks in order on a thread
        /// of the world that knows it runs on that queue. Also for a scenario's setup: a program that
        /// starts as a block of the queue.
        func submit(_ block: @escaping @Sendable () -> Void, to queue: DispatchQueue) {
            submit(block, to: queue, tagged: true)
        }

        /// Like ``submit(_:to:)``, but the queue carries no tag until something tags it (a dispatch
        /// command for it): a thread running on it cannot tell which queue it runs on until then.
        func submitUntagged(_ block: @escaping @Sendable () -> Void, to queue: DispatchQueue) {
            submit(block, to: queue, tagged: false)
        }

        private func submit(_ block: @escaping @Sendable () -> Void, to queue: DispatchQueue, tagged: Bool) {
            let id = ObjectIdentifier(queue)
            let needsWorker = lock.withLock { () -> Bool in
                var entry = queues[id] ?? ([], false)
                entry.fifo.append(block)
                let needsWorker = !entry.hasWorker
                entry.hasWorker = true
                queues[id] = entry
                return needsWorker
            }
            guard needsWorker else { return }
            // Tagged as the engine tags it, in this world's detector (a fresh queue per run).
            let tag = tagged ? QueueTag.tag(of: queue, in: detector) : nil
            let worker = spawn("queue '\(queue.label)'", queue: tag) { [self] in
                while let next = nextBlock(id) { next() }
            }
            if !tagged { untagged[id] = (queue, worker) }
        }

        /// The workers of queues that were not tagged when they started; they learn their tag when
        /// they next ask (``currentQueue``).
        private var untagged: [ObjectIdentifier: (queue: DispatchQueue, worker: VirtualThread)] = [:]

        /// The next block of a virtual queue, or `nil` (the worker ends) when it has none.
        private func nextBlock(_ id: ObjectIdentifier) -> (@Sendable () -> Void)? {
            lock.withLock {
                guard var entry = queues[id], !entry.fifo.isEmpty else {
                    queues[id]?.hasWorker = false
                    return nil
                }
                let block = entry.fifo.removeFirst()
                queues[id] = entry
                return block
            }
        }

        func asyncAfter(_ deadline: DispatchTime, _ item: DispatchWorkItem) {
            let thread = current
            lock.withLock {
                if thread.holdsALock { fail("\(thread.name) armed a timer while holding a lock") }
            }
            let item = SendableBox(item)  // performed once, on the timer's thread
            // The checker's timer may fire at any point; the virtual clock's, at its deadline.
            let until = granularity == .commands ? deadline.uptimeNanoseconds : nil
            spawn("timer of \(thread.name)", sleepingUntil: until, begins: "fires", origin: thread.origin) {
                if !item.value.isCancelled { item.value.perform() }
            }
            reschedule(thread, branch: false)
        }

        func willResume() {
            traceHere("resume")
            let thread = current
            lock.withLock {
                if thread.holdsALock { fail("\(thread.name) resumed a task while holding a lock") }
                if thread.insideRuntimeLock == 0 && threads.contains(where: { $0.insideRuntimeLock > 0 }) {
                    thread.state = .waitingForRuntime
                }
            }
            reschedule(thread, branch: false)
        }

        /// The transitions noted so far, in order (see `SyncPoints.note`).
        var notes: [String] { lock.withLock { noted } }
        private var noted: [String] = []

        func note(_ event: StaticString) {
            lock.withLock { noted.append("\(event)") }
        }

        func inheritance(_ begins: Bool) {
            lock.withLock { inheritanceInProgress += begins ? 1 : -1 }
        }

        /// Whether no thread is passing a change of urgency along a chain (see ``inheritance(_:)``).
        var isInheritanceSettled: Bool { lock.withLock { inheritanceInProgress == 0 } }

        func willTouchTask() {
            let thread = current
            lock.withLock {
                noteNestings(
                    of: thread, taking: HeldLock(role: .taskRuntime, site: LockSite(file: "the runtime", line: 0)))
                if thread.insideRuntimeLock == 0 && threads.contains(where: { $0.insideRuntimeLock > 0 }) {
                    thread.state = .waitingForRuntime
                }
            }
            reschedule(thread, branch: false)
        }

        var currentQueue: QueueTag? {
            let thread = current
            if thread.queue == nil, let (queue, _) = untagged.values.first(where: { $0.worker === thread }) {
                // Dispatch knows the queue a thread runs on once the queue carries a tag.
                if let tag = queue.getSpecific(key: QueueTag.specificKey) { thread.queue = tag }
            }
            return thread.queue
        }

        func enterRuntimeLock() {
            let thread = current
            lock.withLock {
                thread.insideRuntimeLock += 1
                thread.held.append(
                    (Self.runtimeLock, HeldLock(role: .taskRuntime, site: LockSite(file: "a task handler", line: 0))))
            }
        }

        func leaveRuntimeLock() {
            let thread = current
            lock.withLock {
                thread.insideRuntimeLock -= 1
                if let index = thread.held.lastIndex(where: { $0.lock == Self.runtimeLock }) {
                    thread.held.remove(at: index)
                }
            }
        }

        // MARK: Lock order

        /// Every nesting of a lock inside another that the run took, by role (see ``LockOrder``).
        private(set) var nestings: [LockNesting: LockNesting.Witness] = [:]
        /// Where the threads of each party (``VirtualThread/origin``) took an engine's lock, in
        /// order: the lock sections its commands cost, helpers and jobs that work for it included.
        private(set) var engineLockSections: [String: [LockSite]] = [:]
        /// Which roles are an engine's lock, by the guarded type, as first asked.
        private var engineRoles: [ObjectIdentifier: Bool] = [:]

        /// Under the world's lock: whether a lock guarding `guarded` is an engine's.
        private func isEngine(_ guarded: Any.Type) -> Bool {
            let id = ObjectIdentifier(guarded)
            if let known = engineRoles[id] { return known }
            let isEngine = LockRole(guarded).isEngine
            engineRoles[id] = isEngine
            return isEngine
        }
        /// The runtime's lock, as a held lock's identity.
        private static let runtimeLock = ObjectIdentifier(LockRole.self)

        /// Under the world's lock: `thread` takes `taken` while it holds what it holds.
        private func noteNestings(of thread: VirtualThread, taking taken: HeldLock) {
            for (_, held) in thread.held {
                let nesting = LockNesting(outer: held.role, inner: taken.role)
                if nestings[nesting] == nil {
                    nestings[nesting] = LockNesting.Witness(
                        outerSite: held.site, innerSite: taken.site, thread: thread.name)
                }
            }
        }

        // MARK: Task jobs

        /// The executors of this world's tasks (see ``TaskJobs``), kept as long as the world: a task
        /// does not keep the executor it prefers alive on every runtime.
        private var taskJobs: [AnyObject] = []
        /// How many tasks the library started in this world, to number their names.
        private var libraryTasks = 0

        /// The executor for a task called `name` ("task 'refresher'"), whose jobs run on threads of
        /// this world with that name: every step of the task's in a trace names it, the steps of a
        /// job after a sleep or any other resumption too. Its child tasks, which inherit the
        /// executor, run under the same name. `origin`: the party it works for (its own name).
        @available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *)
        func taskExecutor(named name: String, origin: String? = nil) -> any TaskExecutor {
            let jobs = TaskJobs(world: self, name: name, origin: origin ?? name)
            lock.withLock { taskJobs.append(jobs) }
            return jobs
        }

        /// The executor of a task the library starts on the running thread (a `CommandQueue`'s
        /// operation, a `RefreshingValue`'s refresh, a `RecurringExecutor`'s loop): numbered, and
        /// named after the party it works for.
        @available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *)
        func executorForNewTask() -> any TaskExecutor {
            let (number, origin) = lock.withLock { () -> (Int, String) in
                libraryTasks += 1
                return (libraryTasks, running?.origin ?? "the scenario")
            }
            return taskExecutor(named: "library task \(number) (for \(origin))", origin: origin)
        }

        /// Starts a thread of the world that runs a job of `jobs`' task (`nil`: a task that prefers
        /// the world itself, the checker's), named after the task; `false` when the world is over.
        @available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *)
        fileprivate func spawnJob(of jobs: TaskJobs?, _ run: @escaping @Sendable () -> Void) -> Bool {
            let begins = lock.withLock { () -> String? in
                guard !isOver else { return nil }
                guard let jobs else { return "starts or resumes" }
                defer { jobs.hasStarted = true }
                return jobs.hasStarted ? "resumes" : "starts"
            }
            guard let begins else { return false }
            spawn(jobs?.name ?? "a task", isTask: true, begins: begins, origin: jobs?.origin, run)
            return true
        }
    }

    // The world as the executor its tasks prefer (the checker's tasks prefer the world itself, an
    // exploration's each a `TaskJobs` of their own). `TaskExecutor`, `ExecutorJob` and running a
    // job on an executor need the Swift 6.0 runtime (macOS 15, iOS 18, tvOS 18, watchOS 11,
    // visionOS 2): the rest of the world keeps the package's floor, and explorations with task
    // parties need these systems (`Exploration.Scenario.task`).
    @available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *)
    extension ControlledWorld: TaskExecutor {
        func enqueue(_ job: consuming ExecutorJob) {
            TaskJobs.enqueue(UnownedJob(job), on: asUnownedTaskExecutor(), in: self, of: nil)
        }
    }

    /// The executor one task of a world prefers (see ``ControlledWorld/taskExecutor(named:origin:)``):
    /// the world runs each of its jobs on a thread named after the task.
    @available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *)
    // @unchecked Sendable: `world` is a weak reference (safe to load from any thread) set once, and
    // `hasStarted` is touched under the world's lock
    final class TaskJobs: TaskExecutor, @unchecked Sendable {
        private weak var world: ControlledWorld?
        let name: String
        /// The party the task works for (its own name, for a party's task).
        let origin: String
        /// A job of the task ran: the next one resumes it.
        fileprivate var hasStarted = false

        init(world: ControlledWorld, name: String, origin: String) {
            self.world = world
            self.name = name
            self.origin = origin
        }

        func enqueue(_ job: consuming ExecutorJob) {
            Self.enqueue(UnownedJob(job), on: asUnownedTaskExecutor(), in: world, of: self)
        }

        /// Runs `job` on a thread of `world`, or, when the world is over or gone (a test ending a
        /// wait its failed exploration left behind), outside any world, so that the task can
        /// finish instead of leaking.
        static func enqueue(
            _ job: UnownedJob, on executor: UnownedTaskExecutor, in world: ControlledWorld?, of jobs: TaskJobs?
        ) {
            let run: @Sendable () -> Void = { job.runSynchronously(on: executor) }
            if let world, world.spawnJob(of: jobs, run) { return }
            Thread(block: run).start()
        }
    }

    /// A value sent to another thread that uses it alone.
    struct SendableBox<Value>: @unchecked Sendable {  // @unchecked Sendable: used by one thread at a time
        let value: Value

        init(_ value: Value) { self.value = value }
    }

    /// The continuation of a virtual sleep, resumed once: by its timer or by its task's cancellation.
    // @unchecked Sendable: `state` is touched under `lock`
    final class SleepWake: @unchecked Sendable {
        private let lock = NSLock()
        private var continuation: CheckedContinuation<Void, any Error>?
        private var outcome: (any Error)??

        /// Keeps `continuation`; returns `false` if the sleep ended already (resumed then).
        func attach(_ continuation: CheckedContinuation<Void, any Error>) -> Bool {
            let ended = lock.withLock { () -> (any Error)?? in
                if outcome == nil { self.continuation = continuation }
                return outcome
            }
            guard let ended else { return true }
            if let error = ended { continuation.resume(throwing: error) } else { continuation.resume() }
            return false
        }

        /// Ends the sleep (`nil`: the deadline came), once.
        func resume(_ error: (any Error)?) {
            let continuation = lock.withLock { () -> CheckedContinuation<Void, any Error>? in
                guard outcome == nil else { return nil }
                outcome = .some(error)
                defer { self.continuation = nil }
                return self.continuation
            }
            guard let continuation else { return }
            if let error { continuation.resume(throwing: error) } else { continuation.resume() }
        }
    }

#endif
