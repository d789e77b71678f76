import Dispatch
import Foundation
import QueueSafeValue

// MARK: - Stress

enum Stress {
    /// The priorities commands are drawn from.
    static let priorities: [CommandPriority] = [.lowest, .low, .medium, .high, .highest]
}

// MARK: - Generation

/// One container and everything issued to it. The soak replaces the current generation now and
/// then and releases the old container while its commands still hold, wait and arrive.
// @unchecked Sendable: `container` is guarded by `lock`; the rest is immutable or atomic
final class Generation: @unchecked Sendable {
    let index: Int
    let book: Book
    private(set) weak var token: LifetimeToken?
    private let lock = NSLock()
    private var container: QueueSafeValue<Ledger>?

    let wait: WaitSchedule<Ledger>
    /// `wait(timeout:)` schedules with deadlines of 0, 20 µs and 200 µs.
    let timed: [WaitSchedule<Ledger>]
    let async: AwaitSchedule<Ledger>
    let dispatch: [DispatchSchedule<Ledger>]

    /// Increments that reported success.
    let successes = AtomicCounter()
    let issued = AtomicCounter()
    /// Commands that reported an outcome (or, for dispatch commands, delivered their completion).
    let finished = AtomicCounter()
    /// What the value's observers saw: a task iterating `values`, and a handler on a queue.
    let iterated = ObserverLog()
    let handled = ObserverLog()
    private let observation: ObservationToken

    init(index: Int, issuers: Int, queues: [DispatchQueue]) {
        self.index = index
        book = Book(issuers: issuers)
        let token = LifetimeToken()
        // Every other container is eventually fair: barging, claims and due hand-offs under the
        // same mix of commands, timeouts, cancellations and releases.
        let container = QueueSafeValue(
            value: Ledger(book: book, token: token), fairness: index % 2 == 1 ? .eventual : .strictPriority)
        self.token = token
        self.container = container
        wait = container.wait
        timed = [.microseconds(0), .microseconds(20), .microseconds(200)].map { container.wait(timeout: $0) }
        async = container.async
        dispatch = queues.map { container.async(performIn: $0) }
        // Observers beside everything else; audited at the end (see `ObserverLog`).
        // The iterator observes from the moment it is made (here, before the container can be
        // released), whenever its task gets to run.
        var iterator = container.values.makeAsyncIterator()
        let iterated = self.iterated
        Task.detached {
            var count = 0
            while let ledger = await iterator.next() {
                iterated.append(ledger.counter)
                count += 1
                if count % 4 == 0 { await Task.yield() }  // now and then a slow consumer
            }
            iterated.end()
        }
        let handled = self.handled
        observation = container.observe(on: queues[0]) { ledger in handled.append(ledger.counter) }
    }

    /// Releases the container: later commands are refused, queued ones still run.
    func releaseContainer() {
        lock.lock()
        let released = container
        container = nil
        lock.unlock()
        withExtendedLifetime(released) {}
    }

    /// What holds the value now, while the container lives.
    var diagnostics: String {
        lock.lock()
        defer { lock.unlock() }
        return container.map { "\($0.diagnostics)" } ?? "container released"
    }
}

// MARK: - Soak

/// Drives every schedule and priority of one value at a time from threads and tasks at once, with
/// manual completions (inside the closure, late from another thread, dropped), deadlines, task
/// cancellation, `CommandQueue.cancelAll()` and container release; then audits what happened.
// @unchecked Sendable: mutable state is guarded by `lock` or atomic
final class Soak: @unchecked Sendable {
    let options: Options
    let issuers: Int
    private let taskCount: Int
    private let queues: [DispatchQueue]
    private let commandQueue = CommandQueue()
    /// The command queue's statistics, as the audit prints them.
    var commandQueueStatistics: String {
        commandQueue.statistics().map(String.init(describing:)) ?? "off"
    }
    private let queueBook: Book
    private let queueSuccesses = AtomicCounter()
    private let record: CommandRecord
    private let late = LateCompletions()

    private let lock = NSLock()
    private var generations: [Generation] = []
    private var current: Generation

    let tickets = AtomicCounter()
    let progress = AtomicCounter()
    private let workersDone = AtomicCounter()
    private let started = DispatchTime.now()

    // Outcomes.
    let ran = AtomicCounter()
    let timedOut = AtomicCounter()
    let cancelled = AtomicCounter()
    let refused = AtomicCounter()
    let lateCompletions = AtomicCounter()
    let droppedCompletions = AtomicCounter()
    let cancelAlls = AtomicCounter()
    private let cancelAllsEnded = AtomicCounter()
    let inconsistent = AtomicCounter()
    /// Shared reads that saw a half-applied write.
    let tornReads = AtomicCounter()
    let sharedReads = AtomicCounter()
    /// Operations whose task was cancelled after they had ended.
    let cancelledAfterEnd = AtomicCounter()

    init(options: Options) {
        self.options = options
        taskCount = max(2, options.threads / 2)
        issuers = options.threads + taskCount
        queues =
            (0..<3).map { DispatchQueue(label: "Stress.serial.\($0)") } + [DispatchQueue.global(qos: .userInitiated)]
        queueBook = Book(issuers: issuers)
        record = CommandRecord(capacity: options.ops)
        current = Generation(index: 0, issuers: issuers, queues: queues)
        generations = [current]
    }

    // MARK: Running

    /// Runs the soak to the end and returns the audit.
    func run() -> Audit {
        // Issue 46's figures: what the long-lived queue's operations waited, printed at the end.
        commandQueue.collectStatistics()
        let group = DispatchGroup()
        for issuer in 0..<options.threads {
            group.enter()
            let thread = Thread { [self] in
                threadWorker(issuer: issuer)
                group.leave()
            }
            thread.stackSize = 1 << 20
            thread.start()
        }
        for index in 0..<taskCount {
            group.enter()
            Task.detached { [self] in
                await taskWorker(issuer: options.threads + index)
                group.leave()
            }
        }
        let helpers = startHelpers()
        let watchdog = Watchdog(soak: self)
        watchdog.start()
        group.wait()
        workersDone.add()
        helpers.wait()
        rotateGeneration(final: true)
        // From here on the wait below is bounded itself, and says what hangs.
        watchdog.stop()
        let quiet = waitForQuiescence() && waitForObservers()
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1e9
        return audit(seconds: seconds, quiet: quiet)
    }

    /// The generation rotator and the late-completion caller.
    private func startHelpers() -> DispatchGroup {
        let group = DispatchGroup()
        group.enter()
        let rotator = Thread { [self] in
            while workersDone.value == 0 {
                usleep(20_000)
                rotateGeneration(final: false)
            }
            group.leave()
        }
        rotator.start()
        group.enter()
        let completer = Thread { [self] in
            while workersDone.value == 0 || late.callAll() > 0 {
                // A late completion holds its value until it is called: keep "late" short.
                if late.callAll() == 0 { usleep(20) }
            }
            group.leave()
        }
        completer.start()
        return group
    }

    /// Starts a new generation and releases the old container.
    private func rotateGeneration(final: Bool) {
        lock.lock()
        let old = current
        if !final {
            current = Generation(index: generations.count, issuers: issuers, queues: queues)
            generations.append(current)
        }
        lock.unlock()
        old.releaseContainer()
    }

    private var currentGeneration: Generation {
        lock.lock()
        defer { lock.unlock() }
        return current
    }

    /// A command number, or `nil` once the budget of operations or time is spent.
    private func takeTicket() -> Int? {
        let ticket = tickets.add()
        guard ticket < options.ops else { return nil }
        if let seconds = options.seconds, ticket % 1024 == 0 {
            let elapsed = Double(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1e9
            if elapsed > seconds {
                tickets.add(options.ops)  // everyone stops
                return nil
            }
        }
        return ticket
    }

    // MARK: Threads

    private func threadWorker(issuer: Int) {
        var random = SplitMix64(seed: options.seed ^ (UInt64(issuer + 1) &* 0x9E37_79B9_7F4A_7C15))
        var sequence = 0
        let inFlight = DispatchSemaphore(value: 32)
        while let command = takeTicket() {
            let generation = currentGeneration
            let level = Int.random(in: 0..<Stress.priorities.count, using: &random)
            let priority = Stress.priorities[level]
            sequence += 1
            let sequence = sequence
            let record = self.record
            generation.issued.add()
            let increment: @Sendable (inout Ledger) -> Void = { ledger in
                ledger.increment(issuer: issuer, level: level, sequence: sequence, command: command, record: record)
            }
            switch Int.random(in: 0..<100, using: &random) {
            case 0..<25:
                report(generation.wait.priority(priority).set(completion: increment), command, generation)
            case 25..<37:
                let timed = generation.timed[Int.random(in: 0..<generation.timed.count, using: &random)]
                report(timed.priority(priority).set(completion: increment), command, generation)
            case 37..<41:
                let result = generation.wait.priority(priority).set { ledger, done in
                    increment(&ledger)
                    done()
                }
                report(result, command, generation)
            case 41..<42:
                let result = generation.wait.priority(priority).set { ledger, done in
                    increment(&ledger)
                    self.late.add(done)
                }
                if case .success = result { lateCompletions.add() }
                report(result, command, generation)
            case 42..<46:
                let result = generation.wait.priority(priority).set { ledger, _ in increment(&ledger) }
                if case .success = result { droppedCompletions.add() }
                report(result, command, generation)
            case 48..<52:
                // A shared read, beside other reads, of any blocking schedule.
                let schedule =
                    random.next() % 2 == 0
                    ? generation.wait : generation.timed[Int.random(in: 0..<generation.timed.count, using: &random)]
                let result = Result { () throws(QueueSafeValueError) -> Bool in
                    try schedule.priority(priority).read { ledger -> Bool in
                        record.markRan(command)
                        return ledger.isWhole
                    }
                }
                reportShared(result, command, generation)
            case 52..<54:
                // A manual-completion shared read: done inside, or late from another thread.
                let inside = random.next() % 2 == 0
                let result = generation.wait.priority(priority).read { ledger, done in
                    record.markRan(command)
                    if !ledger.isWhole { self.tornReads.add() }
                    if inside { done() } else { self.late.add(done) }
                }
                reportShared(result.map { true }, command, generation)
            case 46..<48:
                // An exclusive read inside the section audits the counter without changing it.
                let result = generation.wait.priority(priority).map { ledger -> Bool in
                    record.markRan(command)
                    ledger.book.observe(issuer: issuer, level: level, sequence: sequence)
                    return ledger.counter == ledger.book.count
                }
                reportRead(result, command, generation)
            default:
                inFlight.wait()
                let schedule = generation.dispatch[Int.random(in: 0..<generation.dispatch.count, using: &random)]
                let style = Int.random(in: 0..<50, using: &random)
                let completion: @Sendable (Result<Ledger, QueueSafeValueError>) -> Void = { result in
                    self.report(result, command, generation)
                    inFlight.signal()
                }
                switch style {
                case 5..<12:
                    schedule.priority(priority).read { result in
                        if case .success(let ledger) = result {
                            record.markRan(command)
                            self.reportShared(.success(ledger.isWhole), command, generation)
                        } else {
                            self.reportShared(result.map { _ in true }, command, generation)
                        }
                        inFlight.signal()
                    }
                case 0:
                    lateCompletions.add()
                    schedule.priority(priority).set(
                        manualCompletion: { ledger, done in
                            increment(&ledger)
                            self.late.add(done)
                        }, completion: completion)
                case 1..<5:
                    droppedCompletions.add()
                    schedule.priority(priority).set(
                        manualCompletion: { ledger, _ in increment(&ledger) }, completion: completion)
                default:
                    schedule.priority(priority).set(accessClosure: increment, completion: completion)
                }
            }
        }
        // Every dispatch command has delivered once all 32 places are back. (They are returned
        // before the semaphore goes: libdispatch traps on one released below its initial value.)
        for _ in 0..<32 { inFlight.wait() }
        for _ in 0..<32 { inFlight.signal() }
    }

    // MARK: Tasks

    private func taskWorker(issuer: Int) async {
        var random = SplitMix64(seed: options.seed ^ (UInt64(issuer + 1) &* 0xD1B5_4A32_D192_ED03))
        var sequence = 0
        var operations: [(command: Int, task: Task<Void, any Error>)] = []
        var finished: [Task<Void, any Error>] = []
        while let command = takeTicket() {
            let generation = currentGeneration
            let level = Int.random(in: 0..<Stress.priorities.count, using: &random)
            let priority = Stress.priorities[level]
            sequence += 1
            let sequence = sequence
            let record = self.record
            generation.issued.add()
            let roll = Int.random(in: 0..<100, using: &random)
            switch roll {
            case 0..<30:
                do {
                    try await generation.async.priority(priority).set { ledger in
                        ledger.increment(
                            issuer: issuer, level: level, sequence: sequence, command: command, record: record)
                        if roll < 8 { await Task.yield() }  // holds the value across a suspension
                    }
                    report(Result<Void, QueueSafeValueError>.success(()), command, generation)
                } catch {
                    report(Result<Void, QueueSafeValueError>.failure(error), command, generation)
                }
            case 45..<52:
                // A shared read, held across a suspension now and then.
                do {
                    let whole = try await generation.async.priority(priority).read { ledger -> Bool in
                        record.markRan(command)
                        if roll < 47 { await Task.yield() }
                        return ledger.isWhole
                    }
                    reportShared(.success(whole), command, generation)
                } catch {
                    reportShared(.failure(error), command, generation)
                }
            case 30..<45:
                let child = Task {
                    try await generation.async.priority(priority).set { ledger in
                        ledger.increment(
                            issuer: issuer, level: level, sequence: sequence, command: command, record: record)
                    }
                }
                if roll < 40 {
                    if roll % 2 == 0 { await Task.yield() }
                    child.cancel()
                }
                switch await child.result {
                case .success: report(Result<Void, QueueSafeValueError>.success(()), command, generation)
                case .failure(let error as QueueSafeValueError):
                    report(Result<Void, QueueSafeValueError>.failure(error), command, generation)
                case .failure: inconsistent.add()
                }
            default:
                // Command queue operations: the generation plays no part.
                generation.finished.add()
                let queueBook = self.queueBook
                if roll < 54 {
                    cancelAlls.add()
                    commandQueue.cancelAll()
                    cancelAllsEnded.add()
                }
                let task = commandQueue.enqueue(priority: priority) {
                    record.markRan(command)
                    queueBook.observe(issuer: issuer, level: level, sequence: sequence)
                    queueBook.count += 1
                    if roll % 7 == 0 { await Task.yield() }
                }
                operations.append((command, task))
                if operations.count >= 8 || roll >= 97 {
                    await settle(&operations, finished: &finished)
                }
            }
        }
        await settle(&operations, finished: &finished)
        checkStillUncancelled(finished)
    }

    /// Awaits every operation enqueued since the last call. `finished` holds the operations that
    /// ended uncancelled in the previous call while no cancelAll() was under way: none may have been
    /// cancelled since (cancelAll() runs often, from every task), because an operation that ended is
    /// never touched.
    private func settle(
        _ operations: inout [(command: Int, task: Task<Void, any Error>)],
        finished: inout [Task<Void, any Error>]
    ) async {
        checkStillUncancelled(finished)
        finished.removeAll()
        for (command, task) in operations {
            switch await task.result {
            case .success:
                queueSuccesses.add()
                ran.add()
                // Judged only if no cancelAll() was under way when it was seen ended: one that
                // began while the operation ran may still be delivering its cancellation.
                let ended = cancelAllsEnded.value
                if !task.isCancelled && cancelAlls.value == ended { finished.append(task) }
            case .failure(QueueSafeValueError.cancelled):
                record.markFailed(command)
                cancelled.add()
            case .failure:
                inconsistent.add()
            }
            progress.add()
        }
        operations.removeAll()
    }

    private func checkStillUncancelled(_ finished: [Task<Void, any Error>]) {
        for task in finished where task.isCancelled { cancelledAfterEnd.add() }
    }

    // MARK: Reporting

    private func report<T>(_ result: Result<T, QueueSafeValueError>, _ command: Int, _ generation: Generation) {
        switch result {
        case .success:
            generation.successes.add()
            ran.add()
        case .failure(let error):
            record.markFailed(command)
            switch error {
            case .timedOut: timedOut.add()
            case .cancelled: cancelled.add()
            case .valueContainerDeinited: refused.add()
            default: inconsistent.add()
            }
        }
        generation.finished.add()
        progress.add()
    }

    /// A shared read: it counts as run (and as torn if it saw a half-applied write), not as an
    /// increment.
    private func reportShared(_ result: Result<Bool, QueueSafeValueError>, _ command: Int, _ generation: Generation) {
        if case .success(let whole) = result {
            sharedReads.add()
            if !whole { tornReads.add() }
            ran.add()
            generation.finished.add()
            progress.add()
        } else if case .failure(let error) = result {
            report(Result<Void, QueueSafeValueError>.failure(error), command, generation)
        }
    }

    /// A read: it counts as run, but not as an increment.
    private func reportRead(_ result: Result<Bool, QueueSafeValueError>, _ command: Int, _ generation: Generation) {
        switch result {
        case .success(let consistent):
            if !consistent { inconsistent.add() }
            ran.add()
            generation.finished.add()
            progress.add()
        case .failure(let error):
            report(Result<Void, QueueSafeValueError>.failure(error), command, generation)
        }
    }

    // MARK: The end

    /// Waits (bounded) until every command issued has reported. Each command reports after its
    /// release, so by then every released value whose queue drained has been freed too.
    private func waitForQuiescence() -> Bool {
        let deadline = DispatchTime.now() + .seconds(30)
        while DispatchTime.now() < deadline {
            late.callAll()
            if lock.withLock({ generations }).allSatisfy({ $0.finished.value == $0.issued.value }) { return true }
            usleep(1000)
        }
        return false
    }

    /// Waits (bounded) until every generation's observers saw its final value (and its `values`
    /// sequence ended: the container was released).
    private func waitForObservers() -> Bool {
        let deadline = DispatchTime.now() + .seconds(30)
        while DispatchTime.now() < deadline {
            let all = lock.withLock { generations }
            if all.allSatisfy({ $0.iterated.hasEnded && $0.handled.last == $0.book.count }) { return true }
            usleep(1000)
        }
        return false
    }

    /// What the watchdog prints when nothing moves.
    func dump() -> String {
        let all = lock.withLock { generations }
        var lines = ["command queue: \(commandQueue.diagnostics)"]
        for generation in all where generation.finished.value != generation.issued.value || generation.token != nil {
            lines.append(
                "generation \(generation.index): \(generation.issued.value) issued, "
                    + "\(generation.finished.value) reported, value \(generation.diagnostics)")
        }
        return lines.joined(separator: "\n")
    }

    private func audit(seconds: Double, quiet: Bool) -> Audit {
        var audit = Audit(seconds: seconds, soak: self)
        audit.hangs = quiet ? 0 : 1
        if !quiet { audit.hangReport = dump() }
        for generation in lock.withLock({ generations }) {
            audit.lostUpdates += generation.book.lostUpdates + abs(generation.book.count - generation.successes.value)
            audit.orderViolations += generation.book.orderViolations
            if generation.token != nil { audit.valuesOutlivingContainers += 1 }
            for log in [generation.iterated, generation.handled] {
                audit.observations += log.count
                audit.observerViolations += log.violations(finalValue: generation.book.count)
            }
        }
        audit.lostUpdates += abs(queueBook.count - queueSuccesses.value)
        audit.orderViolations += queueBook.orderViolations
        audit.ranAfterFailure = record.ranAfterFailure.value
        audit.cancelledAfterEnd = cancelledAfterEnd.value
        audit.generations = lock.withLock { generations.count }
        return audit
    }
}

// MARK: - Audit

/// The verdict of a soak.
struct Audit {
    var seconds: Double
    var operations: Int
    var hangs = 0
    var hangReport: String?
    var lostUpdates = 0
    var orderViolations = 0
    var ranAfterFailure = 0
    var cancelledAfterEnd = 0
    var inconsistentOutcomes: Int
    var tornReads: Int
    var valuesOutlivingContainers = 0
    /// Values the observers saw, and what they saw wrong: a value out of commit order (or seen
    /// twice), or a last value that is not the final one.
    var observations = 0
    var observerViolations = 0
    var generations = 0
    let outcomes: String
    /// The command queue's statistics (see `QueueStatistics`).
    let statistics: String

    init(seconds: Double, soak: Soak) {
        self.seconds = seconds
        operations = min(soak.tickets.value, soak.options.ops)
        inconsistentOutcomes = soak.inconsistent.value
        statistics = soak.commandQueueStatistics
        tornReads = soak.tornReads.value
        outcomes =
            "ran \(soak.ran.value), timed out \(soak.timedOut.value), cancelled \(soak.cancelled.value), "
            + "refused after release \(soak.refused.value); shared reads \(soak.sharedReads.value); "
            + "completions called late \(soak.lateCompletions.value), "
            + "dropped \(soak.droppedCompletions.value); cancelAll \(soak.cancelAlls.value) times"
    }

    var failures: Int {
        hangs + lostUpdates + orderViolations + ranAfterFailure + cancelledAfterEnd + inconsistentOutcomes
            + valuesOutlivingContainers + tornReads + observerViolations
    }
}

// MARK: - Watchdog

/// Fails the run, with a dump of the queues, when no command reports for 10 s.
// @unchecked Sendable: `stopped` is atomic; the rest immutable
final class Watchdog: @unchecked Sendable {
    private let soak: Soak
    private let stopped = AtomicCounter()

    init(soak: Soak) {
        self.soak = soak
    }

    func start() {
        let thread = Thread { [self] in
            var last = soak.progress.value
            var still = 0
            while stopped.value == 0 {
                sleep(1)
                let now = soak.progress.value
                still = now == last ? still + 1 : 0
                last = now
                if still >= 10 {
                    print("HANG: no command reported for 10 s (seed 0x\(String(soak.options.seed, radix: 16)))")
                    print(soak.dump())
                    print("lost updates: ?, order violations: ?, hangs: 1")
                    exit(1)
                }
            }
        }
        thread.start()
    }

    func stop() {
        stopped.add()
    }
}
