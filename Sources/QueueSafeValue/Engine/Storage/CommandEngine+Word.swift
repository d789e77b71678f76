import QueueSafeValueShims

// The state word's protocol (the `state` word, see `EngineWord` for its layout and invariant): every change
// any code makes to the word is one of the six functions below. Four are the lock-free idle path
// (an exclusive command's take and release, a blocking shared read's join and leave); two are the
// shapes of a locked transition (the slow-release hand-over). Elsewhere the word is only read: for
// diagnostics snapshots, and for the holder's kind (the helping loop, and priority inheritance
// under the lock). The controlled scheduler in the test suite runs them as they are: each atomic
// operation is a sync point (`SyncPoints`).
//
// Each function states what it may assume of the word and what it leaves, and asserts both in
// debug builds (every test and checker run), reading the word with `peekForAssertion()`, which is
// not a sync point, so the assertions do not change the schedules the checker explores. Release
// builds compile them away.
extension CommandEngine {
    /// Idle take: `0 → kind`, one compare-and-swap, no lock. Fails once any bit is set.
    @inlinable
    @inline(__always)
    ///
    /// Before: `kind` is an exclusive kind. After, if it took the section: the word shows `kind`
    /// as the holder (nothing else can change the holder bits until it releases).
    final func tryAcquireIdle(_ kind: CommandKind) -> Bool {
        tryAcquireIdle(kind, in: words)
    }

    /// ``tryAcquireIdle(_:)`` on the engine's words as the caller loaded them: a caller that goes on
    /// to store other words of the engine (the holder's) reuses them instead of loading them again
    /// after the compare-and-swap.
    @inlinable
    @inline(__always)
    final func tryAcquireIdle(_ kind: CommandKind, in words: AtomicWords) -> Bool {
        let state = AtomicWord(words, index: Word.state.rawValue)
        SyncPoints.commandPoint("command arrives at", self, kind)
        assert(kind.wordBits & ~EngineWord.holderMask == 0 && kind.wordBits != 0, "an idle take of no holder kind")
        let taken = state.compareExchange(expected: 0, desired: kind.wordBits)
        assert(
            !taken || state.peekForAssertion() & EngineWord.holderMask == kind.wordBits,
            "an idle take left a word that does not show its holder")
        return taken
    }

    /// Idle release: `kind → 0`, one compare-and-swap, no lock. Fails when `slowRelease` or `closed`
    /// is set: the holder then releases through the lock (``releaseSlow(releaserQueue:)``).
    @inlinable
    @inline(__always)
    ///
    /// Before: the word shows `kind` as the holder (the caller holds). After, if it did not
    /// release: the word still shows it, with `slowRelease` or `closed` announced; the section is
    /// the caller's to hand on through the lock.
    final func tryReleaseIdle(_ kind: CommandKind) -> Bool {
        tryReleaseIdle(kind, in: words)
    }

    /// ``tryReleaseIdle(_:)`` on the engine's words as the caller loaded them (see
    /// ``tryAcquireIdle(_:in:)``).
    @inlinable
    @inline(__always)
    final func tryReleaseIdle(_ kind: CommandKind, in words: AtomicWords) -> Bool {
        let state = AtomicWord(words, index: Word.state.rawValue)
        SyncPoints.commandPoint("command releases", self, kind)
        assert(
            state.peekForAssertion() & EngineWord.holderMask == kind.wordBits,
            "an idle release by a command the word does not show as the holder")
        // mutant(idle-release-lets-go-when-it-fails): let released = state.exchange(0) == kind.wordBits
        let released = state.compareExchange(expected: kind.wordBits, desired: 0)
        assert(
            released || EngineWord.isAnnounced(state.peekForAssertion(), heldBy: kind),
            "an idle release that failed let go of the section, or failed with nothing announced")
        return released
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
            if seen == word {
                assert(
                    EngineWord.idleReaders(state.peekForAssertion()) > 0
                        && state.peekForAssertion() & EngineWord.holderMask == 0,
                    "an idle join left a word that does not count the reader, or shows an exclusive holder")
                return IdleRead(record: record, place: place)
            }
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
        assert(
            EngineWord.idleReaders(word) > 0 && word & EngineWord.holderMask == 0,
            "an idle leave of a reader the word does not count")
        while EngineWord.releasesIdleReader(word) {
            let seen = state.compareExchangeValue(expected: word, desired: word &- EngineWord.idleReaderUnit)
            if seen == word { return true }
            word = seen
        }
        // It still holds its share: the last reader to leave through the lock hands the section on.
        assert(
            EngineWord.idleReaders(word) > 0 && word & (EngineWord.slowRelease | EngineWord.closed) != 0,
            "an idle leave failed with nothing announced")
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
    /// compare-and-swap can succeed from then on; the machine decides on the word it read and
    /// leaves the word to store in `word`, which is stored without a retry loop.
    ///
    /// Before: `bit` is `slowRelease` or `closed`. After: the word stored agrees with the machine
    /// (``EngineStateMachine/wordViolation(_:)``).
    @inline(__always)
    final func transition<R>(
        announcing bit: Int,
        _ machine: inout Machine,
        _ decide: (inout Machine, _ word: inout Int) -> R
    ) -> R {
        assert(bit == EngineWord.slowRelease || bit == EngineWord.closed, "a transition announced no lock bit")
        // mutant(enqueue-without-slow-release): var word = bit == EngineWord.slowRelease ? state.loadAcquire() : state.fetchOr(bit)
        var word = state.fetchOr(bit)
        let result = decide(&machine, &word)
        assertAgrees(machine, word)
        state.storeRelease(word)
        return result
    }

    /// Under the engine lock, called by the holder (a release through the lock, the start of a
    /// manual completion): `slowRelease` or `closed` is set or the holder is the caller, so only
    /// locked transitions change the word now, and a plain read and store suffice.
    ///
    /// Before: the word shows a holder. After: the word stored agrees with the machine.
    @inline(__always)
    final func transitionWhileHeld<R>(
        _ machine: inout Machine,
        _ decide: (inout Machine, _ word: inout Int) -> R
    ) -> R {
        var word = state.loadAcquire()
        assert(EngineWord.isHeld(word), "a holder's transition on a free section")
        let result = decide(&machine, &word)
        assertAgrees(machine, word)
        state.storeRelease(word)
        return result
    }

    /// Debug builds: traps if `word`, about to be stored, disagrees with the machine.
    @inline(__always)
    private func assertAgrees(_ machine: borrowing Machine, _ word: Int) {
        #if DEBUG
            if let violation = machine.wordViolation(word) {
                assertionFailure("a transition left a word that disagrees: \(violation)")
            }
        #endif
    }

    // MARK: The holder's words

    /// A blocking command issued at `site` on the calling thread `thread` takes a free section:
    /// the idle take (``tryAcquireIdle(_:in:)``) and, if it took it, the holder's words.
    /// - Returns: whether it holds the section now.
    @inlinable
    @inline(__always)
    final func tryAcquireIdleBlocking(thread: Int, site: CallSite) -> Bool {
        let words = self.words
        guard tryAcquireIdle(.blocking, in: words) else { return false }
        keepHolder(thread: thread, site: site, in: words)
        return true
    }

    /// A dispatch command (`command`, its call site kept in it) of `priority` takes a free section
    /// (``tryAcquireIdle(_:in:)``) and, if it took it, its call site and priority are kept: it holds
    /// the section from here on, before its block is published. (Granted at once through the lock,
    /// ``enqueue(_:kind:priority:reentrant:)`` keeps them.)
    /// - Returns: whether it holds the section now.
    @inline(__always)
    final func tryAcquireIdleDispatched(_ command: Waiter, priority: CommandPriority) -> Bool {
        guard tryAcquireIdle(.dispatched) else { return false }
        keepHolderSite(command.keptSite, priority: priority)
        return true
    }

    /// A task's command issued at `site` takes a free section (``tryAcquireIdle(_:in:)``) and, if
    /// it took it, keeps its call site (its task is stored when its section begins).
    /// - Returns: whether it holds the section now.
    @inlinable
    @inline(__always)
    final func tryAcquireIdleAwaiting(site: CallSite) -> Bool {
        guard tryAcquireIdle(.awaiting) else { return false }
        keepHolderSite(site)
        return true
    }

    // MARK: Call sites

    /// The command issued at `site` holds the section now (it took a free one): keeps its call site
    /// for reports. Two plain stores (see <doc:FindingWhatHoldsYourValue#What-it-costs>).
    @inlinable
    @inline(__always)
    final func keepHolderSite(_ site: CallSite) {
        // Constants where the command is inlined: an address and a line, stored.
        holderFile.storeUnobserved(site.fileAddress)
        holderLine.storeUnobserved(Self.holderLineWord(site.line))
    }

    /// The line word of a holder whose priority is not kept (see ``keepHolderSite(_:priority:)``
    /// for the layout): the line, or 0 (unknown) for one past 8,388,607.
    @inlinable
    @inline(__always)
    static func holderLineWord(_ line: UInt) -> Int {
        line < 1 << 23 ? Int(truncatingIfNeeded: line) : 0  // 32-bit: below 2^23 here, so it fits
    }

    /// A blocking command issued at `site` took a free section on the calling thread `thread`:
    /// the idle path's stores, made through one address in `words` (the engine's words, as the
    /// caller loaded them for its compare-and-swap; the three words are neighbours).
    @inlinable
    @inline(__always)
    final func keepHolder(thread: Int, site: CallSite, in words: AtomicWords) {
        let owner = words.address(Word.ownerThread.rawValue)
        // The call site first (constants where the command is inlined: an address and a line),
        // the owner last, releasing them: a report trusts the call site only once it sees the
        // owner (`holderSiteIsCurrent`), so it never names the previous holder's line.
        qsv_atomic_store_relaxed(
            owner + (Word.holderFile.rawValue - Word.ownerThread.rawValue),
            site.fileAddress)
        qsv_atomic_store_relaxed(
            owner + (Word.holderLine.rawValue - Word.ownerThread.rawValue),
            Self.holderLineWord(site.line))
        SyncPoints.atomic()  // the owner's store, as `ownerThread.storeRelease` would be
        qsv_atomic_store_release(owner, thread)
    }

    /// The command issued at `site` holds the section now: it took a free one (its priority then
    /// played no part and is not kept), or was granted it with `priority`.
    ///
    /// The line word keeps the line in bits 0–22 (a line past 8,388,607 is kept as 0, unknown),
    /// whether the priority is known in bit 23 and the priority in bits 24–31, so that it fits a
    /// 32-bit word too.
    @inlinable
    @inline(__always)
    final func keepHolderSite(_ site: KeptCallSite, priority: CommandPriority? = nil) {
        holderFile.storeUnobserved(Int(bitPattern: site.file))
        let line = site.line < 1 << 23 ? site.line : 0
        var known: UInt32 = 0
        if let priority { known = 1 << 23 | UInt32(priority.rawValue) << 24 }
        // 32-bit: a 32-bit word by design, read back bit for bit with UInt32(truncatingIfNeeded:)
        holderLine.storeUnobserved(Int(truncatingIfNeeded: line | known))
    }

    /// The call site and priority of the exclusive holder, as last kept (``keepHolderSite(_:priority:)``):
    /// meaningful only while the state word shows an exclusive holder (a holder that took the
    /// section a few instructions ago may not have stored them yet).
    final var holderSite: (site: KeptCallSite, priority: CommandPriority?) {
        let file = UnsafeRawPointer(bitPattern: holderFile.peekForAssertion())
        let bits = UInt32(truncatingIfNeeded: holderLine.peekForAssertion())
        let priority = bits & 1 << 23 == 0 ? nil : CommandPriority(rawValue: UInt8(truncatingIfNeeded: bits >> 24))
        return (KeptCallSite(file: file, line: UInt(bits & (1 << 23 - 1))), priority)
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
