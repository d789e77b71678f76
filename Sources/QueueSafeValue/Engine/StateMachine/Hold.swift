// Who holds the section, as the machine knows it: one typed part of `EngineStateMachine`, whose
// fields only this file touches.

/// Who holds the section, and since when.
///
/// The idle path takes a free section and frees it again with one compare-and-swap each, without
/// the machine, but only while the state word's `slowRelease` and `closed` bits are clear; blocking
/// shared reads join and leave it the same way. So ``Holder/free``, ``Holder/untracked`` and
/// ``idleReaders`` are what the machine last saw, and the word says what is true now; while
/// `slowRelease` is set, the machine and the word agree exactly.
///
/// Invariant (``violation(word:)``): a tracked holder or listed readers only while the word says
/// so, with `slowRelease` set; the word's shared bit exactly while listed readers hold; readers never
/// beside an exclusive holder; under `slowRelease` the machine's count of idle readers is the
/// word's; readers listed exactly while the holder is ``Holder/readers``, each once; a machine that
/// saw a free section never finds it held under `slowRelease`. The storage asserts it (within
/// ``EngineStateMachine/wordViolation(_:)``) on the word every locked transition leaves, and the
/// idle path's own rules in `CommandEngine+Word.swift`.
struct Hold {
    /// Who holds the section.
    enum Holder: Equatable {
        /// Nobody held it when the machine last saw it (an idle take may have happened since).
        case free
        /// A command the machine keeps no record of (a blocking, awaiting or dispatched command
        /// without a manual completion), or a holder the machine found by its word. It may release
        /// on the idle path unseen while the word's `slowRelease` is clear.
        case untracked
        /// A tracked holder: an operation (for ``CommandQueue/cancelAll()``) or a manual completion,
        /// with its record's slot. It releases through the lock.
        case tracked(UInt32)
        /// Shared reads, listed in ``readers``. They release through the lock.
        case readers
    }

    private(set) var holder = Holder.free
    /// The slots of the shared reads that hold the section, in grant order; empty unless the
    /// holder is ``Holder/readers``. (Kept apart from the case, so that its storage is reused from
    /// one batch of readers to the next.)
    private(set) var readers: [UInt32] = []
    /// When the holder got the section (``sinceIsExact``), or when the first command began to wait
    /// for it, on the clock the engine passes in as `now`; 0 when unknown. While shared reads hold:
    /// when the first of them got the section.
    private(set) var since: UInt64 = 0
    private(set) var sinceIsExact = false
    /// How many shared reads that took the idle path hold the section (the word counts them, see
    /// ``EngineWord/idleReaders(_:)``): exact while the word's `slowRelease` is set, which is when
    /// only locked transitions change the count; each of those reads it first (``observe(_:)``).
    private(set) var idleReaders = 0
    /// How many listed shared holders may hold at once: unlimited for a value's shared reads, a
    /// ``CommandQueue``'s width for its operations (see `EngineStateMachine+Width.swift`). Lowering
    /// it takes no share back: the ones that hold finish, and no more are granted until fewer hold.
    private(set) var shareLimit = Int.max

    /// Whether a limit applies (a ``CommandQueue`` of width above 1).
    @inline(__always)
    var isLimited: Bool { shareLimit != .max }

    /// Whether one more shared holder may be granted now.
    @inline(__always)
    var hasFreeShare: Bool {
        // mutant(slot-past-width): readers.count <= shareLimit
        readers.count < shareLimit
    }

    /// How many shares were granted while ``shareLimit`` or more already held: none, ever (the
    /// invariant's count; a lowered limit takes no share back, so only a grant can break it).
    private(set) var grantsPastLimit = 0

    /// What ``grantsPastLimit`` says is wrong, if anything.
    var shareLimitViolation: String? {
        grantsPastLimit == 0
            ? nil : "a share was granted past the limit of \(shareLimit): more operations run than the width"
    }

    /// Sets ``shareLimit`` (at least 1).
    mutating func setShareLimit(_ limit: Int) {
        precondition(limit >= 1, "a share limit below 1")
        shareLimit = limit
    }

    /// The tracked holder's slot, if the machine tracks the holder.
    @inline(__always)
    var trackedSlot: UInt32? {
        if case .tracked(let slot) = holder { return slot }
        return nil
    }

    /// Whether shared reads the machine keeps records of hold the section.
    @inline(__always)
    var hasListedReaders: Bool { !readers.isEmpty }

    /// Whether shared reads hold the section: listed ones, or ones that took the idle path.
    @inline(__always)
    var readersHold: Bool { !readers.isEmpty || idleReaders > 0 }

    /// A locked transition read `word`: the idle readers it counts are the ones that hold now.
    @inline(__always)
    mutating func observe(_ word: Int) {
        idleReaders = EngineWord.idleReaders(word)
    }

    /// A shared read that took the idle path gives its share back through the lock.
    mutating func removeIdleReader() {
        assert(idleReaders > 0, "an idle reader released that the word does not count")
        idleReaders -= 1
    }

    /// The monitor reported the current hold as long (``EngineStateMachine/reportLongHold(now:threshold:)``):
    /// its end is reported too (``EngineStateMachine/Other/longHoldEnded``).
    private(set) var isReportedLong = false
    /// Counts the holds the machine has seen end (a hand-on, a freed section), so that the
    /// invariant can tell the hold reported as long from the next one.
    private var holds: UInt32 = 0
    /// ``holds`` when the current hold was reported as long.
    private var reportedHold: UInt32 = 0

    /// The monitor reports the current hold as long.
    /// - Returns: `false` if it had been reported already.
    mutating func markReportedLong() -> Bool {
        guard !isReportedLong else { return false }
        isReportedLong = true
        reportedHold = holds
        return true
    }

    /// The hold ends: whether it had been reported as long (and from now on, it is not).
    mutating func takeReportedLong() -> Bool {
        holds &+= 1
        // mutant(finished-hold-still-reported): return isReportedLong
        defer { isReportedLong = false }
        return isReportedLong
    }

    /// A command holds the section now, tracked in `slot` or untracked (`nil`).
    mutating func grant(tracked slot: UInt32?) {
        holder = slot.map { .tracked($0) } ?? .untracked
    }

    /// A locked transition read `word` (``observe(_:)``), and notes a holder it shows that the
    /// machine had not seen take the section (``foundHeld()``).
    /// - Returns: whether the word shows a holder.
    mutating func observeHolder(_ word: Int) -> Bool {
        observe(word)
        let held = EngineWord.isHeld(word)
        if held { foundHeld() }
        return held
    }

    /// The machine found the section held by a command it had not seen take it.
    mutating func foundHeld() {
        if holder == .free { holder = .untracked }
    }

    /// The tracked holder ended: the section is about to be handed on (or freed).
    /// - Returns: its slot.
    mutating func endTracked() -> UInt32? {
        guard case .tracked(let slot) = holder else { return nil }
        holder = .untracked
        return slot
    }

    /// The section's last holder released it, and nobody was waiting.
    mutating func free() {
        assert(readers.isEmpty && idleReaders == 0, "freed while readers hold")
        holder = .free
        holds &+= 1
        isReportedLong = false
    }

    /// The shared read in `slot` holds the section now, beside the others.
    mutating func addReader(_ slot: UInt32) {
        if readers.count >= shareLimit { grantsPastLimit += 1 }
        readers.append(slot)
        holder = .readers
    }

    /// The shared read in `slot` released its share.
    /// - Returns: `false` if it was not listed.
    mutating func removeReader(_ slot: UInt32) -> Bool {
        guard let index = readers.firstIndex(of: slot) else { return false }
        readers.remove(at: index)
        if readers.isEmpty { holder = .untracked }  // the last reader hands the section on next
        return true
    }

    /// Notes since when the section has been held (`exact`) or waited for.
    @inline(__always)
    mutating func stamp(_ now: UInt64, exact: Bool) {
        (since, sinceIsExact) = (now, exact)
    }

    /// What is wrong with the hold's bookkeeping, or with the word beside it, if anything.
    func violation(word: Int) -> String? {
        let slow = word & EngineWord.slowRelease != 0
        let sharedBit = word & EngineWord.shared != 0
        let idle = EngineWord.idleReaders(word)
        if sharedBit != !readers.isEmpty {
            return "the word's shared bit says \(sharedBit) but \(readers.count) readers are listed"
        }
        if EngineWord.readersHold(word) && word & EngineWord.holderMask != 0 {
            return "an exclusive holder beside shared reads"
        }
        if slow && idleReaders != idle {
            return "the machine counts \(idleReaders) idle readers under slowRelease, the word \(idle)"
        }
        if (holder == .readers) != !readers.isEmpty { return "the holder is \(holder) with \(readers.count) readers" }
        if Set(readers).count != readers.count { return "a reader listed twice" }
        if isReportedLong && (reportedHold != holds || !EngineWord.isHeld(word)) {
            return
                "a hold that ended is still reported as held (reported as long, the monitor would report its successor's end as its own)"
        }
        switch holder {
        case .free:
            if slow && EngineWord.isHeld(word) {
                return "the machine saw a free section that is held under slowRelease"
            }
        case .untracked:
            break
        case .tracked:
            if word & EngineWord.holderMask == 0 || !slow { return "a tracked holder the word does not show" }
        case .readers:
            if word & EngineWord.holderMask != 0 { return "an exclusive holder beside \(readers.count) shared reads" }
            if !slow { return "shared reads could release without the lock" }
        }
        return nil
    }
}
