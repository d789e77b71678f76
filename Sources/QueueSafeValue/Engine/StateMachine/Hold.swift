// Who holds the section, and since when: a typed part of `EngineStateMachine`.

/// The idle path takes and frees the section without the machine while `slowRelease` and `closed`
/// are clear, so ``Holder/free``, ``Holder/untracked`` and ``idleReaders`` are what the machine last
/// saw; while `slowRelease` is set, the machine and the word agree exactly.
struct Hold {
    enum Holder: Equatable {
        /// When last seen (an idle take may have happened since).
        case free
        /// No record: it may release on the idle path unseen while `slowRelease` is clear.
        case untracked
        /// An operation (for ``CommandQueue/cancelAll()``) or a manual completion: it releases
        /// through the lock.
        case tracked(UInt32)
        case readers
    }

    private(set) var holder = Holder.free
    /// In grant order; apart from the case, so its storage is reused from one batch to the next.
    private(set) var readers: [UInt32] = []
    /// When the holder got the section (``sinceIsExact``), or the first command began to wait for
    /// it; 0 when unknown. While reads hold: when the first of them got it.
    private(set) var since: UInt64 = 0
    private(set) var sinceIsExact = false
    /// Exact while `slowRelease` is set: only locked transitions change it then, each reading the
    /// word first (``observe(_:)``).
    private(set) var idleReaders = 0
    /// A ``CommandQueue``'s width; lowering it takes no share back.
    private(set) var shareLimit = Int.max

    @inline(__always)
    var isLimited: Bool { shareLimit != .max }

    @inline(__always)
    var hasFreeShare: Bool {
        // mutant(slot-past-width): readers.count <= shareLimit
        readers.count < shareLimit
    }

    /// Shares granted while the limit or more held (the invariant: none, ever).
    private(set) var grantsPastLimit = 0

    var shareLimitViolation: String? {
        grantsPastLimit == 0
            ? nil : "a share was granted past the limit of \(shareLimit): more operations run than the width"
    }

    /// At least 1 (``EngineStateMachine/setWidth(_:now:)`` checks it).
    mutating func setShareLimit(_ limit: Int) {
        shareLimit = limit
    }

    @inline(__always)
    var trackedSlot: UInt32? {
        if case .tracked(let slot) = holder { return slot }
        return nil
    }

    @inline(__always)
    var hasListedReaders: Bool { !readers.isEmpty }

    @inline(__always)
    var readersHold: Bool { !readers.isEmpty || idleReaders > 0 }

    @inline(__always)
    mutating func observe(_ word: Int) {
        idleReaders = EngineWord.idleReaders(word)
    }

    mutating func removeIdleReader() {
        assert(idleReaders > 0, "an idle reader released that the word does not count")
        idleReaders -= 1
    }

    /// The monitor reported the current hold as long: its end is reported too.
    private(set) var isReportedLong = false
    /// Holds seen to end, so the invariant tells the hold reported long from the next one.
    private var holds: UInt32 = 0
    private var reportedHold: UInt32 = 0

    /// `false` if it had been reported already.
    mutating func markReportedLong() -> Bool {
        guard !isReportedLong else { return false }
        isReportedLong = true
        reportedHold = holds
        return true
    }

    /// The hold ends: whether it had been reported as long.
    mutating func takeReportedLong() -> Bool {
        holds &+= 1
        // mutant(finished-hold-still-reported): return isReportedLong
        defer { isReportedLong = false }
        return isReportedLong
    }

    mutating func grant(tracked slot: UInt32?) {
        holder = slot.map { .tracked($0) } ?? .untracked
    }

    /// ``observe(_:)``, then ``foundHeld(_:now:)`` if the word shows a holder; returns whether it does.
    mutating func observeHolder(_ word: Int) -> Bool {
        observe(word)
        let held = EngineWord.isHeld(word)
        if held { foundHeld(word) }
        return held
    }

    /// The word shows a holder. With `now`: one that took a free section unseen (the word without
    /// `slowRelease`) has held it at least since then.
    mutating func foundHeld(_ word: Int, now: UInt64? = nil) {
        if holder == .free { holder = .untracked }
        if let now, word & EngineWord.slowRelease == 0 { stamp(now, exact: false) }
    }

    mutating func endTracked() -> UInt32? {
        guard case .tracked(let slot) = holder else { return nil }
        holder = .untracked
        return slot
    }

    mutating func free() {
        assert(readers.isEmpty && idleReaders == 0, "freed while readers hold")
        holder = .free
        _ = takeReportedLong()
    }

    mutating func addReader(_ slot: UInt32) {
        if readers.count >= shareLimit { grantsPastLimit += 1 }
        readers.append(slot)
        holder = .readers
    }

    /// `false` if it was not listed.
    mutating func removeReader(_ slot: UInt32) -> Bool {
        guard let index = readers.firstIndex(of: slot) else { return false }
        readers.remove(at: index)
        if readers.isEmpty { holder = .untracked }  // the last reader hands the section on next
        return true
    }

    @inline(__always)
    mutating func stamp(_ now: UInt64, exact: Bool) {
        (since, sinceIsExact) = (now, exact)
    }

    /// Within ``EngineStateMachine/wordViolation(_:)``, on the word every locked transition leaves.
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
