@_spi(Testing) @testable import QueueSafeValue

// The world the deadlock explorer runs: several engines (each the real `EngineStateMachine` with a
// modelled state word, lock, and `ownerThread` word) and threads that take their sections nested,
// in the order of their programs, with the real `WaitForGraph` behind its own lock. Each step is
// one atomic action of the real code (`CommandEngine` and `BlockingWaiter`): an idle
// compare-and-swap, a store of `ownerThread`, one locked section of an engine (split around its
// atomic operation on the word), one locked section of the graph, an action after unlocking.
//
// A thread may also *await* another party, as `CommandQueue.perform` awaits the task of its
// operation: that party starts then, and registers the awaiting thread with itself whenever it is
// about to park (the real `OperationAwaiters`), so the awaiting thread waits for whatever it waits
// for. When the awaited party ends, the awaiting one goes on (or fails, if the awaited one was
// refused).
//
// Besides the engine's own promises (one holder per engine, no hang), it checks the detector
// against the truth: a wait refused as a deadlock must close a real cycle at that moment — each
// thread of it queued for a section the next one was granted, or awaiting a party that is — and no
// world may end with a thread stuck, which is what a missed cycle looks like.

/// One nested acquisition of a thread's program, or the await of another party.
struct CycleAcquisition: Hashable {
    var engine: Int
    var timed = false
    /// If set, this step awaits that thread (which starts now) instead of taking `engine`.
    var awaits: Int?

    init(engine: Int, timed: Bool = false) {
        self.engine = engine
        self.timed = timed
    }

    /// Starts thread `party` and waits until it ends (`perform` awaiting its operation).
    static func await(_ party: Int) -> CycleAcquisition {
        var step = CycleAcquisition(engine: -1)
        step.awaits = party
        return step
    }
}

/// Threads taking sections of several engines, nested in program order.
struct CycleScenario {
    var name: String
    var engines: Int
    var threads: [[CycleAcquisition]]

    /// The thread that starts and awaits `thread`, if any.
    func starter(of thread: Int) -> Int? {
        threads.indices.first { threads[$0].contains { $0.awaits == thread } }
    }
}

struct CycleWorld: ExplorableWorld {
    typealias Graph = WaitForGraph<Int>

    enum Phase: Hashable {
        /// Awaited by a thread that has not reached its await yet.
        case notStarted
        /// Awaits the party it started; goes on when that party ends.
        case awaiting(Int)
        /// About to take `depth`'s engine.
        case acquire
        case enqueue
        case enqueueStore(word: Int, queued: Bool)
        case register
        case parkDecide
        case parked
        case timeoutLeave
        /// Unregisters, then runs (`leaving: false`) or leaves the queue after its deadline.
        case unregister(leaving: Bool)
        case refuseLeave
        case awaitGrant
        case setOwner
        /// Holds `depth` sections; releasing the innermost next.
        case clearOwner
        case releaseFast
        case releaseLocked
        case releasePerform(engine: Int, next: Int?)
        case done
    }

    enum Failure: Hashable {
        case deadlock
        case timedOut
    }

    enum Handoff: Hashable {
        case waiting
        case granted
        case parked
    }

    struct ThreadState: Hashable {
        var phase: Phase = .acquire
        /// Sections held, the innermost last (engine numbers).
        var held: [Int] = []
        /// The acquisition being taken or the last one taken.
        var depth = 0
        var handoff: Handoff = .waiting
        var semaphore = 0
        var failures: [Failure] = []
        /// A failed acquisition stops the descent: the thread releases what it holds.
        var unwinding = false
    }

    enum Owner: Hashable {
        case thread(Int)
        case graph
    }

    struct EngineState {
        var machine = EngineStateMachine()
        var word = 0
        var lock: Int?
        /// `ownerThread`: the thread running in the section, plus one; 0 for none.
        var ownerThread = 0
        /// The thread the section was granted to and that has not released it (the truth).
        var grantedTo: Int?
        var tickets: [EngineStateMachine.Ticket?]
    }

    enum Step {
        case thread(Int, Choice)
    }

    enum Choice: Hashable {
        case only
        case wake
        case timeout
    }

    let scenario: CycleScenario
    var engines: [EngineState]
    var threads: [ThreadState]
    var graph = Graph()
    var error: String?

    init(_ scenario: CycleScenario) {
        self.scenario = scenario
        engines = Array(
            repeating: EngineState(tickets: Array(repeating: nil, count: scenario.threads.count)),
            count: scenario.engines)
        threads = scenario.threads.indices.map { index in
            if scenario.threads[index].isEmpty { return ThreadState(phase: .done) }
            return ThreadState(phase: scenario.starter(of: index) == nil ? .acquire : .notStarted)
        }
    }

    /// The nodes `thread` registers as one party: itself, then the threads awaiting it, in a chain.
    private func party(_ thread: Int) -> [Graph.Node] {
        var nodes: [Graph.Node] = [.thread(thread)]
        var current = thread
        while let starter = scenario.starter(of: current), threads[starter].phase == .awaiting(current) {
            nodes.append(.thread(starter))
            current = starter
        }
        return nodes
    }

    private func target(_ thread: Int) -> CycleAcquisition { scenario.threads[thread][threads[thread].depth] }

    /// The engine the thread is acquiring (before holding it) or releasing (its innermost one).
    private func engine(of thread: Int) -> Int {
        switch threads[thread].phase {
        case .clearOwner, .releaseFast, .releaseLocked: return threads[thread].held.last!
        case .releasePerform(let engine, _): return engine
        default: return target(thread).engine
        }
    }

    // MARK: Steps

    func enabledSteps() -> [Step] {
        var steps: [Step] = []
        for (index, thread) in threads.enumerated() {
            switch thread.phase {
            case .done, .notStarted:
                continue
            case .awaiting(let party):
                if threads[party].phase == .done { steps.append(.thread(index, .only)) }
            case .enqueue, .timeoutLeave, .refuseLeave, .releaseLocked:
                if engines[engine(of: index)].lock == nil { steps.append(.thread(index, .only)) }
            case .enqueueStore:
                steps.append(.thread(index, .only))
            case .parked:
                if thread.semaphore > 0 {
                    steps.append(.thread(index, .wake))
                } else if target(index).timed {
                    steps.append(.thread(index, .timeout))
                }
            case .awaitGrant:
                if thread.handoff == .granted { steps.append(.thread(index, .only)) }
            default:
                steps.append(.thread(index, .only))
            }
        }
        // A woken thread's next step touches nothing another thread reads: take it alone.
        if let local = steps.first(where: { if case .thread(_, .wake) = $0 { true } else { false } }) {
            return [local]
        }
        return steps
    }

    func describe(_ step: Step) -> String {
        guard case .thread(let index, let choice) = step else { return "" }
        let what = choice == .only ? "" : " → \(choice)"
        return "thread \(index) (engine \(engine(of: index))): \(threads[index].phase)\(what)"
    }

    mutating func apply(_ step: Step) {
        guard case .thread(let index, let choice) = step else { return }
        applyThread(index, choice)
        check()
    }

    private mutating func applyThread(_ me: Int, _ choice: Choice) {
        let phase = threads[me].phase
        let e = engine(of: me)
        switch phase {
        case .acquire where target(me).awaits != nil:
            let party = target(me).awaits!
            threads[party].phase = .acquire
            threads[me].phase = .awaiting(party)
        case .awaiting(let party):
            if let failure = threads[party].failures.last {
                failAcquisition(me, failure)  // `perform` rethrows what its operation threw
            } else if threads[me].depth + 1 < scenario.threads[me].count {
                threads[me].depth += 1
                threads[me].phase = .acquire
            } else {
                afterRelease(me)
            }
        case .notStarted:
            fail("thread \(me) stepped before it was started")
        case .acquire:
            // The idle compare-and-swap.
            if engines[e].word == 0 {
                engines[e].word = CommandKind.blocking.wordBits
                grant(e, to: me)
                threads[me].phase = .setOwner
            } else {
                threads[me].phase = .enqueue
            }
        case .enqueue:
            let observed = engines[e].word
            engines[e].word |= EngineWord.slowRelease
            engines[e].lock = me
            let (admission, word) = engines[e].machine.enqueue(
                me, kind: .blocking, priority: .medium, reentrant: false, observed: observed)
            switch admission {
            case .granted:
                grant(e, to: me)
                threads[me].phase = .enqueueStore(word: word, queued: false)
            case .queued(let ticket):
                engines[e].tickets[me] = ticket
                threads[me].handoff = .waiting
                threads[me].phase = .enqueueStore(word: word, queued: true)
            case .refused(let error):
                fail("thread \(me) was refused: \(error)")
            case .expired:
                fail("thread \(me) expired without a deadline")
            }
        case .enqueueStore(let word, let queued):
            engines[e].word = word
            engines[e].lock = nil
            // The real waiter spins first; only a thread about to park registers.
            threads[me].phase = queued ? .register : .setOwner
        case .register:
            // The graph's lock section: it reads the engines' `ownerThread` words.
            let owners = engines.map(\.ownerThread)
            let verdict = graph.register(party(me), waitingFor: e) { engine in
                owners[engine] == 0 ? [] : [.thread(owners[engine] - 1)]
            }
            switch verdict {
            case .wait:
                threads[me].phase = .parkDecide
            case .cycle(let links):
                if !truthHasCycle(from: me, waitingFor: e) {
                    fail("refused a wait that closed no cycle: thread \(me) for engine \(e), links \(links)")
                }
                threads[me].phase = .refuseLeave
            case .poolExhausted:
                fail("a pool refusal without a pool")
            }
        case .parkDecide:
            if threads[me].handoff == .granted {
                threads[me].phase = .unregister(leaving: false)
            } else {
                threads[me].handoff = .parked
                threads[me].phase = .parked
            }
        case .parked:
            if choice == .timeout {
                // The timed wait returned with no signal; `parked` is cleared (CAS parked → 0), so a
                // grant from now on sets `granted` without a signal.
                threads[me].handoff = .waiting
                threads[me].phase = .unregister(leaving: true)
            } else {
                threads[me].semaphore -= 1
                threads[me].phase = .unregister(leaving: false)
            }
        case .unregister(let leaving):
            graph.unregister(party(me))
            threads[me].phase = leaving ? .timeoutLeave : .setOwner
        case .timeoutLeave:
            if leave(e, me) {
                failAcquisition(me, .timedOut)
            } else {
                threads[me].phase = .awaitGrant
            }
        case .refuseLeave:
            if leave(e, me) {
                failAcquisition(me, .deadlock)
            } else {
                threads[me].phase = .awaitGrant
            }
        case .awaitGrant:
            threads[me].phase = .setOwner
        case .setOwner:
            if engines[e].grantedTo != me { fail("thread \(me) runs in engine \(e) without its grant") }
            engines[e].ownerThread = me + 1
            threads[me].held.append(e)
            if threads[me].depth + 1 < scenario.threads[me].count {
                threads[me].depth += 1
                threads[me].phase = .acquire
            } else {
                threads[me].phase = .clearOwner
            }
        case .clearOwner:
            engines[e].ownerThread = 0
            threads[me].phase = .releaseFast
        case .releaseFast:
            if engines[e].word == CommandKind.blocking.wordBits {
                engines[e].word = 0
                released(me, e)
                afterRelease(me)
            } else {
                threads[me].phase = .releaseLocked
            }
        case .releaseLocked:
            let (release, word) = engines[e].machine.release(observed: engines[e].word)
            engines[e].word = word
            released(me, e)
            if let next = release.next { grant(e, to: next) }
            threads[me].phase = .releasePerform(engine: e, next: release.next)
        case .releasePerform(_, let next):
            if let next {
                let old = threads[next].handoff
                threads[next].handoff = .granted
                if old == .parked { threads[next].semaphore += 1 }
            }
            afterRelease(me)
        case .done:
            fail("thread \(me) stepped after it ended")
        }
    }

    private mutating func grant(_ e: Int, to thread: Int) {
        if let holder = engines[e].grantedTo { fail("engine \(e) granted to \(thread) while \(holder) holds it") }
        engines[e].grantedTo = thread
    }

    private mutating func released(_ thread: Int, _ e: Int) {
        engines[e].grantedTo = nil
        threads[thread].held.removeLast()
    }

    private mutating func leave(_ e: Int, _ thread: Int) -> Bool {
        guard let ticket = engines[e].tickets[thread] else { return false }
        return engines[e].machine.leave(ticket) != nil
    }

    /// An acquisition failed: no deeper one is attempted; the thread releases what it holds.
    private mutating func failAcquisition(_ me: Int, _ failure: Failure) {
        threads[me].failures.append(failure)
        threads[me].unwinding = true
        threads[me].phase = threads[me].held.isEmpty ? .done : .clearOwner
    }

    private mutating func afterRelease(_ me: Int) {
        threads[me].phase = threads[me].held.isEmpty ? .done : .clearOwner
    }

    // MARK: The truth

    /// Whether `thread` waiting for engine `e` closes a cycle now: each engine on the way was
    /// granted to a thread that is queued for the next one, back to `thread`.
    private func truthHasCycle(from thread: Int, waitingFor e: Int) -> Bool {
        var current = e
        var seen: Set<Int> = []
        while let holder = engines[current].grantedTo, seen.insert(current).inserted {
            if party(thread).contains(.thread(holder)) { return true }
            guard let next = blockingEngine(of: holder) else { return false }
            current = next
        }
        return false
    }

    /// The engine `thread` is blocked on: the one it is queued for, or, while it awaits a party,
    /// the one that party is blocked on.
    private func blockingEngine(of thread: Int) -> Int? {
        if case .awaiting(let party) = threads[thread].phase { return blockingEngine(of: party) }
        return queuedEngine(of: thread)
    }

    /// The engine `thread` is queued for (not granted, not left), if any.
    private func queuedEngine(of thread: Int) -> Int? {
        for (index, engine) in engines.enumerated() {
            if let ticket = engine.tickets[thread], engine.machine.isWaiting(ticket) { return index }
        }
        return nil
    }

    // MARK: Checks

    private mutating func fail(_ message: String) {
        if error == nil { error = message }
    }

    private mutating func check() {
        for (index, engine) in engines.enumerated() where engine.lock == nil {
            if let violation = engine.machine.invariantViolation(word: engine.word) {
                fail("engine \(index): \(violation)")
            }
        }
    }

    func violation() -> String? { error }

    func terminalViolation() -> String? {
        let stuck = threads.indices.first { index in
            // A party never started because its starter failed before awaiting it is not stuck.
            threads[index].phase != .done
                && !(threads[index].phase == .notStarted && threads[scenario.starter(of: index)!].phase == .done)
        }
        if let stuck {
            return "thread \(stuck) hung in a wait cycle the detector missed (\(threads[stuck].phase), "
                + "holding \(threads[stuck].held))"
        }
        if !graph.waits.isEmpty { return "the graph still has waits: \(graph.waits.keys)" }
        return nil
    }

    // MARK: Fingerprint

    var fingerprint: StateFingerprint { StateFingerprint(feed) }

    private func feed(_ hasher: inout Hasher) {
        hasher.combine(threads)
        hasher.combine(error)
        hasher.combine(graph.waits)
        for engine in engines {
            hasher.combine(engine.word)
            hasher.combine(engine.lock)
            hasher.combine(engine.ownerThread)
            hasher.combine(engine.grantedTo)
            hasher.combine(engine.machine.waitingCount)
            for entry in engine.machine.waitingInOrder() { hasher.combine(entry.waiter.number) }
            for ticket in engine.tickets { hasher.combine(ticket.flatMap { engine.machine.summary(of: $0) }) }
        }
    }
}
