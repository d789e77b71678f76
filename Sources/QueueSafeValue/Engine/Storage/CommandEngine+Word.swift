// The state word's protocol (the `state` word, see `EngineWord` for its layout and invariant): every change
// any code makes to the word is one of the four functions below. Two are the lock-free idle path;
// two are the shapes of a locked transition. Elsewhere the word is only read: for diagnostics
// snapshots, and for the holder's kind (the helping loop, and priority inheritance under the
// lock). The controlled scheduler in the test suite runs them as they are: each atomic operation
// is a sync point (`SyncPoints`).
extension CommandEngine {
    /// Idle take: `0 → kind`, one compare-and-swap, no lock. Fails once any bit is set.
    @inlinable
    @inline(__always)
    final func tryAcquireIdle(_ kind: CommandKind) -> Bool {
        state.compareExchange(expected: 0, desired: kind.wordBits)
    }

    /// Idle release: `kind → 0`, one compare-and-swap, no lock. Fails when `slowRelease` or `closed`
    /// is set: the holder then releases through the lock (``releaseSlow(releaserQueue:)``).
    @inlinable
    @inline(__always)
    final func tryReleaseIdle(_ kind: CommandKind) -> Bool {
        state.compareExchange(expected: kind.wordBits, desired: 0)
    }

    /// Under the engine lock: a transition that may race with the idle path (an enqueue, a close).
    /// It first sets `bit` with one atomic read-modify-write, so that neither idle
    /// compare-and-swap can succeed from then on; the machine decides on the word it read, and the
    /// word it returns is stored, without a retry loop.
    @inline(__always)
    final func transition<R>(
        announcing bit: Int,
        _ machine: inout Machine,
        _ decide: (inout Machine, _ observed: Int) -> (R, word: Int)
    ) -> R {
        // mutant(enqueue-without-slow-release): let observed = bit == EngineWord.slowRelease ? state.loadAcquire() : state.fetchOr(bit)
        let observed = state.fetchOr(bit)
        let (result, word) = decide(&machine, observed)
        state.storeRelease(word)
        return result
    }

    /// Under the engine lock, called by the holder (a release through the lock, the start of a
    /// manual completion): `slowRelease` or `closed` is set or the holder is the caller, so only
    /// locked transitions change the word now, and a plain read and store suffice.
    @inline(__always)
    final func transitionWhileHeld<R>(
        _ machine: inout Machine,
        _ decide: (inout Machine, _ observed: Int) -> (R, word: Int)
    ) -> R {
        let (result, word) = decide(&machine, state.loadAcquire())
        state.storeRelease(word)
        return result
    }
}
