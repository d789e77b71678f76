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

/// A thread that waits for its turn: it spins briefly, then parks until the engine grants it the
/// critical section or its deadline passes.
///
/// Whoever posts a bit into the hand-off word clears `parked` in the same compare-and-swap, and
/// signals only if it found `parked` set: a spinning thread is handed the section with no system
/// call, and a park is signalled exactly once.
///
/// **Helping.** A thread waiting while it runs on a dispatch queue Q blocks Q, so it runs the
/// dispatch commands for Q that must run before it itself: it takes over a granted command whose
/// block has not started, and is handed the ones granted while it waits (`jobBit`).
///
/// Each thread reuses one waiter: when a wait returns, nothing else refers to it. A command run
/// while helping gets a waiter of its own.
// @unchecked Sendable: its word is atomic, its semaphore thread-safe; `job` is handed over through the word
final class BlockingWaiter: Waiter, @unchecked Sendable {
    private static let granted = 1
    private static let parked = 2
    private static let jobBit = 4
    private static let recheckBit = 8
    private static let claimBit = 16
    private static let leftBit = 32

    /// How many times a waiter polls before it parks: longer than a typical short critical
    /// section, and shorter than a futex sleep and wake-up.
    static let spinLimit = 200
    /// How many polls the head spins without yielding (a hand-off between running threads), and
    /// then how often it yields (its holder may be waiting for this CPU).
    static let headPatience = 32
    static let headYieldEvery = 4
    /// With one processor online the head yields at every poll too.
    static let otherProcessors = sysconf(Int32(_SC_NPROCESSORS_ONLN)) > 1

    private let word = AtomicWord(0)
    /// The processor this thread last polled on (-1: unknown), a hint for the granting thread.
    private let processor = AtomicWord(-1)
    private let parker = Parker()
    private let thread = currentThreadID()
    /// Granted dispatch commands to run on this thread, appended under the engine lock before
    /// `jobBit` is posted. More may come while it runs one: a lock of their own.
    private let jobs = LockedState.make([Waiter]())
    /// When the current command gives up waiting (`uptimeNanoseconds`), or 0.
    var deadline: UInt64 = 0
    /// Why the machine took the current command out of the queue, written before `leftBit` is posted.
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
        setThreadWaiter(Unmanaged.passRetained(waiter).toOpaque())
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
        // The caller's first: unknown under a controlled scheduler, which then explores no extra load.
        let caller = SyncPoints.currentProcessor()
        return caller >= 0 && processor.loadRelaxed() == caller
    }

    override func assignJob(_ command: Waiter) {
        jobs.withLock { $0.append(command) }
    }

    override func postJob() {
        post(Self.jobBit)
    }

    /// Tells this parked thread that a queue was tagged: it looks again at which queues it runs on.
    func postRecheck() {
        post(Self.recheckBit)
    }

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

    /// The machine took the command out of the queue: its error, once any job handed before is run.
    func tookLeave() -> QueueSafeValueError {
        runJobHandedBeforeLeaving()
        guard let refusal else { preconditionFailure("a waiter left the queue without a reason") }
        self.refusal = nil
        return refusal.namingQueue()
    }

    /// What the word says at one poll of the engine's spin, once it has run a job handed to it and
    /// noted a wake-up to claim (`claiming`); `nil` while it waits on.
    func poll(claiming: inout Bool) -> Verdict? {
        let current = word.loadAcquire()
        // One test for the bits a poll usually finds clear.
        guard current & (Self.granted | Self.leftBit | Self.jobBit | Self.claimBit) != 0 else { return nil }
        if current & Self.granted != 0 { return .granted }
        if current & Self.leftBit != 0 { return .gaveUp(tookLeave()) }
        if current & Self.jobBit != 0 { runJob() }
        if current & Self.claimBit != 0 {
            _ = word.fetchAnd(~Self.claimBit)
            claiming = true
        }
        return nil
    }

    /// How a wait, or a part of it, ended.
    enum Verdict {
        case granted
        case gaveUp(QueueSafeValueError)
        /// Eventually fair mode: woken to claim the section a release freed (only from a park).
        case claim
    }

    /// This waiter's identity, as the engine's `head` and `handedTo` hints name it.
    var address: Int { Int(bitPattern: UInt(bitPattern: ObjectIdentifier(self))) }

    /// Out of line: the spin asks only where it would yield, so its polls stay short.
    @inline(never)
    func hasDeadline() -> Bool {
        deadline != 0
    }

    /// Stores and returns the processor this thread waits on (-1: unknown). Called as the spin starts
    /// and after each yield, not at every poll: where the C library cannot read it cheaply, each
    /// read is a call.
    func noteProcessor() -> Int {
        let here = SyncPoints.currentProcessor()
        if here >= 0 && processor.loadRelaxed() != here { processor.storeRelaxed(here) }
        return here
    }

    enum ParkOutcome {
        case granted
        case job
        case recheck
        case claim
        case left
        case deadlinePassed
    }

    /// Parks until a grant, a job, a new queue tag or the deadline.
    func parkOnce(deadline: DispatchTime?) -> ParkOutcome {
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
            if parker.park(until: deadline) { continue }
            // The deadline passed: it gives up unless a post cleared `parked` (consume its signal).
            guard word.compareExchange(expected: Self.parked, desired: 0) else {
                parker.park()
                continue
            }
            return .deadlinePassed
        }
    }

    /// A waiter that left the queue may have been handed a job just before (under the lock the leave
    /// took next); nothing else will run that command, so this thread does, before it reports.
    func runJobHandedBeforeLeaving() {
        guard jobs.withLock({ !$0.isEmpty }) else { return }
        while word.loadAcquire() & Self.jobBit == 0 { SyncPoints.yield() }
        runJob()
    }

    /// The machine decided (granted it, or it expired) and the post is briefly on its way.
    func awaitVerdict() -> Verdict {
        while true {
            let current = word.loadAcquire()
            if current & Self.granted != 0 { return .granted }
            if current & Self.leftBit != 0 { return .gaveUp(tookLeave()) }
            SyncPoints.yield()
        }
    }

    /// Runs the dispatch commands handed to this thread (the bit cleared first: a new job sets it again).
    func runJob() {
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
        if saved != nil { setThreadWaiter(nil) }
        body()
        if saved != nil {
            // The waiter created by `body`'s waits, if any, goes; the saved one comes back.
            if let raw = pthread_getspecific(waiterKey) { Unmanaged<BlockingWaiter>.fromOpaque(raw).release() }
            setThreadWaiter(saved)
        }
    }

    private static func setThreadWaiter(_ raw: UnsafeRawPointer?) {
        let status = pthread_setspecific(waiterKey, raw)
        precondition(status == 0, "pthread_setspecific failed: \(status)")
    }

    /// Blocks the holder's thread until ``finishManualCompletion()``.
    func waitForManualCompletion() {
        parker.park()
    }

    override func finishManualCompletion() {
        parker.unpark()
    }
}

/// Each thread's ``BlockingWaiter``, retained; released when the thread exits.
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
