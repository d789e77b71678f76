import Dispatch
import QueueSafeValueShims

#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

// MARK: - BlockingWaiter

/// A thread that waits for its turn: it spins briefly, then parks on a semaphore until the engine
/// grants it the critical section or its deadline passes.
///
/// The hand-off word has four bits: `granted`, `job` (a dispatch command for a queue this thread
/// runs on was handed to it: see *helping* below), `recheck` (a queue was tagged: this thread, which
/// did not know its queue, looks again) and `parked`. Whoever sets one of the first three also
/// clears `parked` in the same compare-and-swap, and signals the semaphore only if it found
/// `parked` set: so a thread that is still spinning is handed the section with one cache-line
/// transfer and no system call, and a park is signalled exactly once.
///
/// **Helping.** A thread that waits while running on a dispatch queue Q (the main queue, or a queue
/// dispatch commands target) blocks Q: a dispatch command for Q that must run before it could never
/// run its block. So such a thread runs those commands itself, on its own thread — which is running
/// on Q. It takes over a granted command whose block has not started, and the engine hands it the
/// ones granted while it waits (``job``).
///
/// Each thread keeps one waiter and reuses it for every blocking command it waits on: by the time a
/// wait returns, nothing else refers to it (a timed-out waiter left the queue, or consumed the
/// grant's signal). A command run while helping gets a waiter of its own for its own waits. The same
/// semaphore blocks the thread of a manual-completion command until its completion arrives.
// @unchecked Sendable: its word is atomic, its semaphore thread-safe; `job` is handed over through the word
final class BlockingWaiter: Waiter, @unchecked Sendable {
    private static let granted = 1
    private static let parked = 2
    private static let jobBit = 4
    private static let recheckBit = 8
    /// Eventually fair mode: a release freed the section and woke this thread to claim it.
    private static let claimBit = 16
    /// The command left the queue on the machine's decision: a grant found its deadline passed.
    private static let leftBit = 32

    /// How many times a waiter polls before it parks: longer than a typical short critical
    /// section, and shorter than a futex sleep and wake-up.
    static let spinLimit = 200
    /// How many polls the head spins without yielding: long enough for a hand-off between running
    /// threads to complete. Past them it yields every ``headYieldEvery`` polls: the holder it waits
    /// for may be waiting for this CPU.
    static let headPatience = 32
    /// After ``headPatience`` polls the head yields every this many.
    static let headYieldEvery = 4
    /// Whether a holder can run while this thread spins: with one processor online the head
    /// yields at every poll too (its spin would only delay the holder it waits for).
    private static let otherProcessors = sysconf(Int32(_SC_NPROCESSORS_ONLN)) > 1

    private let word = AtomicWord(0)
    /// The processor this thread last polled its word on (-1: unknown), for the granting thread's
    /// ``waitsOnCallersProcessor``. Written only by this thread, read relaxed: a hint (a parked
    /// thread may wake up elsewhere).
    private let processor = AtomicWord(-1)
    private let parker = Parker()
    /// The thread this waiter belongs to (each thread has its own).
    private let thread = currentThreadID()
    /// Granted dispatch commands to run on this thread: appended by a granting thread under the
    /// engine lock before it sets `job` in the word, taken by this thread after it saw `job`.
    /// Several may be handed over at once (shared reads for its queue), and more may come while it
    /// runs the first: so a lock of their own.
    private let jobs = LockedState.make([Waiter]())
    /// When the current command gives up waiting (`uptimeNanoseconds`), or 0: set by this thread
    /// before it enqueues, read by a grant under the engine lock.
    var deadline: UInt64 = 0
    /// Why the machine took the current command out of the queue (it expired): written under the
    /// engine lock before ``leftBit`` is posted, read by this thread after it saw the bit.
    private var refusal: QueueSafeValueError?

    private override init() {}

    /// The calling thread's waiter, ready for a new wait.
    static func forCurrentThread() -> BlockingWaiter {
        if let raw = pthread_getspecific(waiterKey) {
            let waiter = Unmanaged<BlockingWaiter>.fromOpaque(raw).takeUnretainedValue()
            waiter.word.storeRelaxed(0)
            waiter.deadline = 0
            return waiter
        }
        let waiter = BlockingWaiter()
        let status = pthread_setspecific(waiterKey, Unmanaged.passRetained(waiter).toOpaque())
        precondition(status == 0, "pthread_setspecific failed: \(status)")
        return waiter
    }

    override func start() {
        post(Self.granted)
    }

    override var threadToBoost: Int { thread }

    override func givesUp(at now: UInt64) -> EngineStateMachine.GiveUp {
        Self.deadline(deadline, hasPassedAt: now) ? .timedOut : .stays
    }

    override func expired(_ diagnostics: QueueDiagnostics) {
        refusal = .timedOut(diagnostics)
    }

    override func postLeft() {
        post(Self.leftBit)
    }

    override var waitsOnCallersProcessor: Bool {
        // The caller's processor first: unknown under a controlled scheduler, where the word is
        // then not read (no extra sync point to explore).
        let caller = SyncPoints.currentProcessor()
        return caller >= 0 && processor.loadRelaxed() == caller
    }

    override func assignJob(_ command: Waiter) {
        jobs.withLock { $0.append(command) }
    }

    /// Hands this waiting thread the granted dispatch command stored in ``job``.
    override func postJob() {
        post(Self.jobBit)
    }

    /// Tells this parked thread that a queue was tagged: it looks again at which queues it runs on
    /// (see ``DeadlockDetector/tagQueue(_:)``). Harmless if it is no longer parked.
    func postRecheck() {
        post(Self.recheckBit)
    }

    /// Wakes this waiting thread to claim the section a release freed (eventually fair mode).
    override func postClaim() {
        post(Self.claimBit)
    }

    /// Sets `bit` and clears `parked`; signals if it found the thread parked.
    private func post(_ bit: Int) {
        var current = word.loadAcquire()
        while !word.compareExchange(expected: current, desired: (current | bit) & ~Self.parked) {
            current = word.loadAcquire()
        }
        if current & Self.parked != 0 { parker.unpark() }
    }

    /// Blocks until the engine grants this waiter, or until `deadline`; meanwhile runs the dispatch
    /// commands handed to it (see *helping*).
    ///
    /// Exactly one of "granted" and "gave up" wins: the state machine decides, under the engine
    /// lock, in ``CommandEngine/leaveWithSnapshot(_:)``.
    /// - Returns: `nil` when granted; `.timedOut` when the deadline passed first; `.deadlock` when
    ///   parking would have closed a wait cycle or starved the cooperative pool.
    func waitForGrant(
        engine: CommandEngine,
        ticket: CommandEngine.Ticket,
        deadline: DispatchTime?
    ) -> QueueSafeValueError? {
        // Eventually fair mode: this thread was woken to claim a free section and is on its way.
        var claiming = false
        while true {
            // Before each spin, and as it parks: a deadline that passed while
            // this thread did not run ends the wait here.
            if let deadline, SyncPoints.now() >= deadline {
                return giveUp(engine: engine, ticket: ticket)
            }
            switch spin(engine: engine, ticket: ticket, claiming: &claiming) {
            case .granted: return nil
            case .gaveUp(let error): return error
            case .spun: break
            }
            if claiming {
                // No longer on its way: the next release wakes it again.
                claiming = false
                if engine.claim(ticket, parking: true) == .settled { return awaitVerdict() }
            }
            switch park(engine: engine, ticket: ticket, deadline: deadline) {
            case .granted: return nil
            case .gaveUp(let error): return error
            case .claim: claiming = true
            }
        }
    }

    /// How a spin ended.
    private enum SpinResult {
        case granted
        case gaveUp(QueueSafeValueError)
        /// It spun out its polls: it parks next.
        case spun
    }

    /// Polls the word for a while (``spinLimit`` turns), running the jobs handed over meanwhile and,
    /// in the eventually fair mode, claiming a section that was freed for this thread.
    ///
    /// Only the waiter the next grant goes to keeps its CPU: the engine's `head` or `handedTo` hint
    /// names it. It polls without yielding for ``headPatience`` polls (the holder is running on
    /// another CPU, or is about to), and then yields every ``headYieldEvery``. Where the processor
    /// it runs on is unknown (Apple platforms), it also yields on its first poll while the holder
    /// has not started (whoever was handed the section may be waiting for this CPU); where it is
    /// known, the releasing thread gave that CPU away already if the new holder waited on it (see
    /// ``waitsOnCallersProcessor``). Every other waiter yields at every poll: it cannot be granted
    /// before the head is, and its CPU is better spent on the holder or the head. With one
    /// processor online every waiter yields at every poll.
    /// - Returns: whether the section was granted.
    ///
    private func spin(engine: CommandEngine, ticket: CommandEngine.Ticket, claiming: inout Bool) -> SpinResult {
        let me = Int(bitPattern: UInt(bitPattern: ObjectIdentifier(self)))
        let mayKeepProcessor = Self.otherProcessors
        var here = noteProcessor()
        for round in 1...SyncPoints.spinLimit(Self.spinLimit) {
            let current = word.loadAcquire()
            // One test for the bits a poll usually finds clear.
            if current & (Self.granted | Self.leftBit | Self.jobBit | Self.claimBit) != 0 {
                if current & Self.granted != 0 { return .granted }
                if current & Self.leftBit != 0 { return .gaveUp(tookLeave()) }
                if current & Self.jobBit != 0 { runJob() }
                if current & Self.claimBit != 0 {
                    _ = word.fetchAnd(~Self.claimBit)
                    claiming = true
                }
            }
            // On its way to a free section: claim it once the word shows no holder.
            if claiming && !EngineWord.isHeld(engine.state.loadAcquire()) {
                switch engine.claim(ticket, parking: false) {
                case .settled:
                    return awaitVerdict().map { .gaveUp($0) } ?? .granted
                case .passedOn: claiming = false
                default: break
                }
            }
            // Architecture, "More threads than cores": the head spins, the others yield (the holder
            // or the head may be waiting for this CPU).
            let isHead = engine.word(.head).loadRelaxed() == me || engine.word(.handedTo).loadRelaxed() == me
            let yields =
                !isHead || !mayKeepProcessor
                || (round == 1 && here < 0 && engine.ownerThread.loadRelaxed() == 0)
                || (round > Self.headPatience && round % Self.headYieldEvery == 0)
            // A command with a deadline parks instead of yielding: on a busy machine a yield can
            // keep the thread off its processor for a scheduler tick, long past a short deadline,
            // where a timed park wakes it when the deadline passes.
            if yields && hasDeadline() { break }
            SyncPoints.relax(givingProcessorAway: yields)
            if yields { here = noteProcessor() }
        }
        return .spun
    }

    /// Whether the current command has a deadline. Out of line: the spin asks only where it would
    /// yield, and its polls stay as short as an untimed command's.
    @inline(never)
    private func hasDeadline() -> Bool {
        deadline != 0
    }

    /// The deadline passed while this thread did not park: it leaves the queue, unless the machine
    /// decided first (granted it, or found it expired).
    /// - Returns: `.timedOut`, or the machine's earlier verdict (`nil`: granted).
    private func giveUp(engine: CommandEngine, ticket: CommandEngine.Ticket) -> QueueSafeValueError? {
        if let diagnostics = engine.leaveWithSnapshot(ticket) {
            runJobHandedBeforeLeaving()
            return .timedOut(diagnostics)
        }
        return awaitVerdict()
    }

    /// The machine took the command out of the queue (``leftBit``): its error, once any job handed
    /// to this thread before is run.
    private func tookLeave() -> QueueSafeValueError {
        runJobHandedBeforeLeaving()
        guard let refusal else { preconditionFailure("a waiter left the queue without a reason") }
        self.refusal = nil
        return refusal.namingQueue()
    }

    /// Stores where this thread waits, for the thread that grants it (``waitsOnCallersProcessor``),
    /// and returns it (-1: unknown, and nothing is stored). Called as the spin starts and after each
    /// yield (which may have moved the thread), not at every poll: where the C library cannot read
    /// it from the thread's restartable-sequence area, each read is a call of its own.
    private func noteProcessor() -> Int {
        let here = SyncPoints.currentProcessor()
        if here >= 0 && processor.loadRelaxed() != here { processor.storeRelaxed(here) }
        return here
    }

    /// How a park ended.
    private enum ParkResult {
        case granted
        case gaveUp(QueueSafeValueError)
        /// Eventually fair mode: woken to claim the section a release freed.
        case claim
    }

    /// The parking half of ``waitForGrant(engine:ticket:deadline:)``: registered for deadlock
    /// detection while parked, unregistered before it does anything else.
    private func park(
        engine: CommandEngine,
        ticket: CommandEngine.Ticket,
        deadline: DispatchTime?
    ) -> ParkResult {
        // Before it blocks its queue for longer than a spin: see *helping*.
        var tagEpoch = engine.becomeHelper(ticket)
        let nodes = DeadlockDetector.currentNodes()
        let poolThread = nodes.count > 1 && qsv_is_main_thread() == 0
        // While it is parked, the holder runs at least as urgently as this thread, and as what this
        // thread inherits from sections it holds (a chain). From here until it is registered and
        // has passed that on, the chains it may extend lag.
        SyncPoints.inheritance(true)
        var inheritancePending = true
        engine.inheritUrgency(ticket, .ofCurrentThread(), party: nodes)
        while true {
            // About to park: would that close a cycle, or starve the cooperative pool?
            let registration = DeadlockDetector.shared.register(
                nodes, waitingFor: engine, ticket: ticket, poolThread: poolThread, watcher: tagEpoch.map { (self, $0) })
            if inheritancePending {
                // A raise that reached this thread before the chain walk could see where it waits.
                if registration.verdict == .wait { engine.passOnInherited(ticket, party: nodes) }
                SyncPoints.inheritance(false)
                inheritancePending = false
            }
            guard registration.verdict == .wait else {
                return refuse(registration, engine: engine, ticket: ticket).map { .gaveUp($0) } ?? .granted
            }
            let outcome = parkOnce(deadline: deadline)
            // Unregistered before anything else, and before leaving the queue: a party that gave
            // up must not look like a waiter to another thread's walk.
            DeadlockDetector.shared.unregister(nodes, watcher: tagEpoch == nil ? nil : self)
            switch outcome {
            case .granted:
                return .granted
            case .job:
                runJob()
            case .recheck:
                // A queue was tagged: it may be the one this thread runs on.
                tagEpoch = engine.becomeHelper(ticket)
            case .claim:
                return .claim
            case .left:
                return .gaveUp(tookLeave())
            case .deadlinePassed:
                // Unless granted (or found expired) at the same instant: then its start() (or its
                // leave) sets a bit without a signal (not parked).
                return giveUp(engine: engine, ticket: ticket).map { .gaveUp($0) } ?? .granted
            }
        }
    }

    private enum ParkOutcome {
        case granted
        case job
        case recheck
        case claim
        case left
        case deadlinePassed
    }

    /// Parks until a grant, a job, a new queue tag or the deadline.
    private func parkOnce(deadline: DispatchTime?) -> ParkOutcome {
        while true {
            let current = word.loadAcquire()
            if current & Self.granted != 0 { return .granted }
            if current & Self.leftBit != 0 { return .left }
            if current & Self.jobBit != 0 { return .job }
            if current & Self.recheckBit != 0 {
                _ = word.fetchAnd(~Self.recheckBit)
                return .recheck
            }
            if current & Self.claimBit != 0 {
                _ = word.fetchAnd(~Self.claimBit)
                return .claim
            }
            // mutant(lost-parked-bit): guard word.compareExchange(expected: current, desired: current) else { continue }
            guard word.compareExchange(expected: current, desired: current | Self.parked) else { continue }
            guard let deadline else {
                parker.park()
                continue
            }
            if parker.park(until: deadline) { continue }
            // The deadline passed. Unless a grant or a job cleared `parked` (its signal is on its
            // way: consume it), the command gives up.
            guard word.compareExchange(expected: Self.parked, desired: 0) else {
                parker.park()
                continue
            }
            return .deadlinePassed
        }
    }

    /// Waiting would deadlock: leave the queue and report why, unless the grant came first.
    private func refuse(
        _ registration: DeadlockDetector.Registration,
        engine: CommandEngine,
        ticket: CommandEngine.Ticket
    ) -> QueueSafeValueError? {
        if let diagnostics = engine.leaveWithSnapshot(ticket) {
            runJobHandedBeforeLeaving()
            return .deadlock(
                DeadlockDetector.report(
                    registration, diagnostics: diagnostics, waiterDescription: DeadlockDetector.describeCurrent()))
        }
        return awaitVerdict()
    }

    /// A waiter that left the queue may have been handed a job just before: the granting thread
    /// chose it as a helper under the engine lock, before the leave took that lock (so `job` is
    /// visible here), and posts `job` after unlocking. The job's command holds the section and
    /// nothing else will run it: this thread runs it before it reports why it gave up.
    private func runJobHandedBeforeLeaving() {
        guard jobs.withLock({ !$0.isEmpty }) else { return }
        while word.loadAcquire() & Self.jobBit == 0 { SyncPoints.yield() }
        runJob()
    }

    /// The machine no longer has this waiter waiting: it granted it, or took it out of the queue
    /// (it expired). The start() or the leave is on its way (briefly: the deciding thread is
    /// between unlocking and posting it).
    /// - Returns: `nil` once granted, or the error it left with.
    private func awaitVerdict() -> QueueSafeValueError? {
        while true {
            let current = word.loadAcquire()
            if current & Self.granted != 0 { return nil }
            if current & Self.leftBit != 0 { return tookLeave() }
            SyncPoints.yield()
        }
    }

    /// Runs the dispatch commands handed to this thread, with a waiter of its own for their own
    /// waits. (The bit is cleared first: a job handed over meanwhile sets it again.)
    private func runJob() {
        _ = word.fetchAnd(~Self.jobBit)
        let commands = jobs.withLock { jobs in
            defer { jobs = [] }
            return jobs
        }
        guard !commands.isEmpty else { return }
        Self.withoutThreadWaiter {
            for command in commands { command.runOnHelper() }
        }
    }

    /// Runs `body` with the thread's waiter put aside, so waits inside `body` use another one.
    static func withoutThreadWaiter(_ body: () -> Void) {
        let saved = pthread_getspecific(waiterKey)
        if saved != nil {
            let status = pthread_setspecific(waiterKey, nil)
            precondition(status == 0, "pthread_setspecific failed: \(status)")
        }
        body()
        if saved != nil {
            // The waiter created by `body`'s waits, if any, goes; the saved one comes back.
            if let raw = pthread_getspecific(waiterKey) { Unmanaged<BlockingWaiter>.fromOpaque(raw).release() }
            let status = pthread_setspecific(waiterKey, saved)
            precondition(status == 0, "pthread_setspecific failed: \(status)")
        }
    }

    /// Blocks the holder's thread until ``finishManualCompletion()``.
    func waitForManualCompletion() {
        parker.park()
    }

    override func finishManualCompletion() {
        parker.unpark()
    }
}

/// The thread-specific slot that holds each thread's ``BlockingWaiter`` (retained; released when
/// the thread exits).
private let waiterKey: pthread_key_t = {
    var key = pthread_key_t()
    #if canImport(Darwin)
        let status = pthread_key_create(&key) { raw in
            Unmanaged<BlockingWaiter>.fromOpaque(raw).release()
        }
    #else
        let status = pthread_key_create(&key) { raw in
            if let raw { Unmanaged<BlockingWaiter>.fromOpaque(raw).release() }
        }
    #endif
    precondition(status == 0, "pthread_key_create failed: \(status)")
    return key
}()
