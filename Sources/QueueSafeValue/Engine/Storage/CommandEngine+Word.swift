import QueueSafeValueShims

// The state word's protocol: every change any code makes to the word is one of the six functions
// below (Architecture.md, "The state word", lists what each may assume and must leave). Each asserts
// both in debug builds, reading the word with `peekForAssertion()`, which is not a sync point, so
// the assertions do not change the schedules the checker explores.
extension CommandEngine {
    /// Idle take: `0 → kind`, one compare-and-swap, no lock; fails once any bit is set. On the
    /// engine's words as the caller loaded them: a caller that goes on to store the holder's words
    /// reuses them instead of loading them again after the compare-and-swap.
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

    /// Idle release: `kind → 0`, one compare-and-swap, no lock; fails when `slowRelease` or
    /// `closed` is set, and the holder then releases through the lock.
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

    /// Idle join of a shared read: `w → w + unit` while the word admits idle readers, retried only
    /// while other idle readers change the count. The caller listed the read first (in its thread's
    /// record, or in `taskReader`), so whoever sees it in the word can find it.
    /// - Returns: whether it holds a share now; if not, it goes through the lock.
    @inlinable
    @inline(__always)
    final func tryJoinReadersIdle() -> Bool {
        var word = state.loadRelaxed()
        while EngineWord.admitsIdleReader(word) {
            let seen = state.compareExchangeValue(expected: word, desired: word &+ EngineWord.idleReaderUnit)
            if seen == word {
                assert(
                    EngineWord.idleReaders(state.peekForAssertion()) > 0
                        && state.peekForAssertion() & EngineWord.holderMask == 0,
                    "an idle join left a word that does not count the reader, or shows an exclusive holder")
                return true
            }
            word = seen
        }
        return false
    }

    /// Idle leave of a shared read that joined with ``tryJoinReadersIdle()``: `w → w - unit` while
    /// the word lets idle readers leave. The caller took the read off its list first.
    /// - Returns: `false` if it must leave through the lock.
    @inlinable
    @inline(__always)
    final func tryLeaveReadersIdle() -> Bool {
        var word = state.loadRelaxed()
        assert(
            EngineWord.idleReaders(word) > 0 && word & EngineWord.holderMask == 0,
            "an idle leave of a reader the word does not count")
        while EngineWord.releasesIdleReader(word) {
            let seen = state.compareExchangeValue(expected: word, desired: word &- EngineWord.idleReaderUnit)
            if seen == word { return true }
            word = seen
        }
        assert(
            EngineWord.idleReaders(word) > 0 && word & (EngineWord.slowRelease | EngineWord.closed) != 0,
            "an idle leave failed with nothing announced")
        return false
    }

    /// What this engine is called in the threads' records of idle reads: its address.
    @inlinable
    @inline(__always)
    final var idleReadIdentity: Int {
        Int(bitPattern: Unmanaged.passUnretained(self).toOpaque())
    }

    /// Under the engine lock: a transition that may race with the idle path. Setting `bit` first
    /// makes both idle compare-and-swaps fail from then on, so the word the machine decides on is
    /// stored without a retry loop.
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

    /// Under the engine lock, called by the holder: only locked transitions change the word now, so
    /// a plain read and store suffice.
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

    /// A blocking command on the calling thread `thread` takes a free section, and the holder's words.
    @inlinable
    @inline(__always)
    final func tryAcquireIdleBlocking(thread: Int, site: CallSite) -> Bool {
        let words = self.words
        guard tryAcquireIdle(.blocking, in: words) else { return false }
        keepHolder(thread: thread, site: site, in: words)
        return true
    }

    /// A dispatch command takes a free section and keeps its call site and priority, before its
    /// block is published.
    @inline(__always)
    final func tryAcquireIdleDispatched(_ command: Waiter, priority: CommandPriority) -> Bool {
        guard tryAcquireIdle(.dispatched, in: words) else { return false }
        keepHolderSite(command.keptSite, priority: priority)
        return true
    }

    /// A task's command takes a free section and keeps its call site (its task is stored when its
    /// section begins).
    @inlinable
    @inline(__always)
    final func tryAcquireIdleAwaiting(site: CallSite) -> Bool {
        guard tryAcquireIdle(.awaiting, in: words) else { return false }
        keepHolderSite(site)
        return true
    }

    // MARK: Call sites

    /// The command issued at `site` took a free section: keeps its call site for reports, two
    /// plain stores of constants where the command is inlined.
    @inlinable
    @inline(__always)
    final func keepHolderSite(_ site: CallSite) {
        holderFile.storeUnobserved(site.fileAddress)
        holderLine.storeUnobserved(Self.holderLineWord(site.line))
    }

    /// The line word of a holder whose priority is not kept (the layout is at
    /// ``keepHolderSite(_:priority:)``).
    @inlinable
    @inline(__always)
    static func holderLineWord(_ line: UInt) -> Int {
        line < 1 << 23 ? Int(truncatingIfNeeded: line) : 0  // 32-bit: below 2^23 here, so it fits
    }

    /// A blocking command took a free section on `thread`: the idle path's stores, through one
    /// address in `words` as the caller loaded them (the three words are neighbours).
    @inlinable
    @inline(__always)
    final func keepHolder(thread: Int, site: CallSite, in words: AtomicWords) {
        let owner = words.address(Word.ownerThread.rawValue)
        // The owner last, releasing the call site: a report trusts the call site only once it sees
        // the owner (`holderSiteIsCurrent`).
        qsv_atomic_store_relaxed(
            owner + (Word.holderFile.rawValue - Word.ownerThread.rawValue),
            site.fileAddress)
        qsv_atomic_store_relaxed(
            owner + (Word.holderLine.rawValue - Word.ownerThread.rawValue),
            Self.holderLineWord(site.line))
        SyncPoints.atomic()  // the owner's store, as `ownerThread.storeRelease` would be
        qsv_atomic_store_release(owner, thread)
    }

    /// The command issued at `site` holds the section now: it took a free one (no priority kept), or
    /// was granted it with `priority`. The line word, 32 bits: the line in bits 0–22 (0: unknown),
    /// whether the priority is known in bit 23, the priority in bits 24–31.
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

    /// The call site and priority of the exclusive holder, as last kept: meaningful only while the
    /// state word shows an exclusive holder (one that just took it may not have stored them yet).
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
