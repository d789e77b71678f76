import QueueSafeValueShims

// The state word's protocol (the `state` word, see `EngineWord` for its layout and invariant): every change
// any code makes to the word is one of the six functions below. Four are the lock-free idle path
// (an exclusive command's take and release, a blocking shared read's join and leave); two are the
// shapes of a locked transition. Elsewhere the word is only read: for diagnostics
// snapshots, and for the holder's kind (the helping loop, and priority inheritance under the
// lock). The controlled scheduler in the test suite runs them as they are: each atomic operation
// is a sync point (`SyncPoints`).
extension CommandEngine {
    /// Idle take: `0 → kind`, one compare-and-swap, no lock. Fails once any bit is set.
    @inlinable
    @inline(__always)
    final func tryAcquireIdle(_ kind: CommandKind) -> Bool {
        SyncPoints.commandPoint("command arrives at", self, kind)
        return state.compareExchange(expected: 0, desired: kind.wordBits)
    }

    /// Idle release: `kind → 0`, one compare-and-swap, no lock. Fails when `slowRelease` or `closed`
    /// is set: the holder then releases through the lock (``releaseSlow(releaserQueue:)``).
    @inlinable
    @inline(__always)
    final func tryReleaseIdle(_ kind: CommandKind) -> Bool {
        SyncPoints.commandPoint("command releases", self, kind)
        return state.compareExchange(expected: kind.wordBits, desired: 0)
    }

    /// Idle join of a blocking shared read: `w → w + unit` while the word admits idle readers
    /// (``EngineWord/admitsIdleReader(_:)``), one compare-and-swap, retried only while other idle
    /// readers change the count. The calling thread lists the read in its record of idle reads
    /// first (`qsv_idle_reads_push`), so that whoever sees the reader in the word can find its
    /// thread (deadlock detection, priority inheritance); a failed join takes it off again, and
    /// ends a raise that may have found it there (``endPhantomBoost()``).
    /// - Returns: where the read is listed, for ``tryLeaveReadersIdle(_:)``, if it holds a share
    ///   now; `nil` sends it through the lock.
    @inlinable
    @inline(__always)
    final func tryJoinReadersIdle() -> IdleRead? {
        SyncPoints.commandPoint("read arrives at", self, .blocking)
        let record = qsv_idle_reads_current()!
        let place = qsv_idle_reads_push(record, idleReadIdentity)
        guard place != 0 else { return nil }
        var word = state.loadRelaxed()
        while EngineWord.admitsIdleReader(word) {
            let seen = state.compareExchangeValue(expected: word, desired: word &+ EngineWord.idleReaderUnit)
            if seen == word { return IdleRead(record: record, place: place) }
            word = seen
        }
        qsv_idle_reads_pop(record, place)
        endPhantomBoost()
        return nil
    }

    /// Idle leave of a shared read that joined with ``tryJoinReadersIdle()``: `w → w - unit` while
    /// the word lets idle readers leave (``EngineWord/releasesIdleReader(_:)``). The read leaves the
    /// thread's record first: from then on nothing raises the thread for it.
    /// - Parameter read: where the join listed the read.
    /// - Returns: `false` if it must leave through the lock (``releaseIdleReaderSlow()``): a
    ///   command waits, or the container was released.
    @inlinable
    @inline(__always)
    final func tryLeaveReadersIdle(_ read: IdleRead) -> Bool {
        SyncPoints.commandPoint("read releases", self, .blocking)
        qsv_idle_reads_pop(read.record, read.place)
        var word = state.loadRelaxed()
        while EngineWord.releasesIdleReader(word) {
            let seen = state.compareExchangeValue(expected: word, desired: word &- EngineWord.idleReaderUnit)
            if seen == word { return true }
            word = seen
        }
        return false
    }

    /// What this engine is called in the threads' records of idle reads: its address.
    @inlinable
    @inline(__always)
    final var idleReadIdentity: Int {
        // Unmanaged: only the address is read, as an identity; nothing is retained or released.
        Int(bitPattern: Unmanaged.passUnretained(self).toOpaque())
    }

    /// Under the engine lock: a transition that may race with the idle path (an enqueue, a close).
    /// It first sets `bit` with one atomic read-modify-write, so that neither idle
    /// compare-and-swap can succeed from then on; the machine decides on the word it read, and the
    /// word it leaves in `word` is stored, without a retry loop.
    @inline(__always)
    final func transition<R>(
        announcing bit: Int,
        _ machine: inout Machine,
        _ decide: (inout Machine, _ word: inout Int) -> R
    ) -> R {
        // mutant(enqueue-without-slow-release): var word = bit == EngineWord.slowRelease ? state.loadAcquire() : state.fetchOr(bit)
        var word = state.fetchOr(bit)
        let result = decide(&machine, &word)
        state.storeRelease(word)
        return result
    }

    /// Under the engine lock, called by the holder (a release through the lock, the start of a
    /// manual completion): `slowRelease` or `closed` is set or the holder is the caller, so only
    /// locked transitions change the word now, and a plain read and store suffice.
    @inline(__always)
    final func transitionWhileHeld<R>(
        _ machine: inout Machine,
        _ decide: (inout Machine, _ word: inout Int) -> R
    ) -> R {
        var word = state.loadAcquire()
        let result = decide(&machine, &word)
        state.storeRelease(word)
        return result
    }
}

/// Where a blocking shared read on the idle path is listed: its thread's record of idle reads (in
/// the C shim, one per thread, never freed) and its place there.
@usableFromInline
struct IdleRead {
    @usableFromInline let record: UnsafeMutablePointer<qsv_idle_reads>
    @usableFromInline let place: Int

    @inlinable
    init(record: UnsafeMutablePointer<qsv_idle_reads>, place: Int) {
        self.record = record
        self.place = place
    }
}
