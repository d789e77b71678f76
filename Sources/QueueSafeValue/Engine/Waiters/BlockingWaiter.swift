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
    static let otherProcessors = sysconf(Int32(_SC_NPROCESSORS_ONLN)) > 1

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

    /// The machine took the command out of the queue (``leftBit``): its error, once any job handed
    /// to this thread before is run.
    func tookLeave() -> QueueSafeValueError {
        runJobHandedBeforeLeaving()
        guard let refusal else { preconditionFailure("a waiter left the queue without a reason") }
        self.refusal = nil
        return refusal.namingQueue()
    }

    /// What this waiter's word says at one poll of the engine's spin
    /// (``CommandEngine/waitForGrant(_:ticket:deadline:)``), once it has run a job handed to it and
    /// noted a wake-up to claim a free section (`claiming`): granted, or taken out of the queue with
    /// an error; `nil` while it waits on.
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
    }

    /// This waiter's identity, as the engine's `head` and `handedTo` hints name it.
    var address: Int { Int(bitPattern: UInt(bitPattern: ObjectIdentifier(self))) }

    /// Whether the current command has a deadline. Out of line: the spin asks only where it would
    /// yield, and its polls stay as short as an untimed command's.
    @inline(never)
    func hasDeadline() -> Bool {
        deadline != 0
    }

    /// Stores where this thread waits, for the thread that grants it (``waitsOnCallersProcessor``),
    /// and returns it (-1: unknown, and nothing is stored). Called as the spin starts and after each
    /// yield (which may have moved the thread), not at every poll: where the C library cannot read
    /// it from the thread's restartable-sequence area, each read is a call of its own.
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

    /// A waiter that left the queue may have been handed a job just before: the granting thread
    /// chose it as a helper under the engine lock, before the leave took that lock (so `job` is
    /// visible here), and posts `job` after unlocking. The job's command holds the section and
    /// nothing else will run it: this thread runs it before it reports why it gave up.
    func runJobHandedBeforeLeaving() {
        guard jobs.withLock({ !$0.isEmpty }) else { return }
        while word.loadAcquire() & Self.jobBit == 0 { SyncPoints.yield() }
        runJob()
    }

    /// The machine no longer has this waiter waiting: it granted it, or took it out of the queue
    /// (it expired). The start() or the leave is on its way (briefly: the deciding thread is
    /// between unlocking and posting it).
    /// - Returns: `nil` once granted, or the error it left with.
    func awaitVerdict() -> QueueSafeValueError? {
        while true {
            let current = word.loadAcquire()
            if current & Self.granted != 0 { return nil }
            if current & Self.leftBit != 0 { return tookLeave() }
            SyncPoints.yield()
        }
    }

    /// Runs the dispatch commands handed to this thread, with a waiter of its own for their own
    /// waits. (The bit is cleared first: a job handed over meanwhile sets it again.)
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
