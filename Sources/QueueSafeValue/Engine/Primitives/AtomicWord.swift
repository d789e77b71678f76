import QueueSafeValueShims

// MARK: - AtomicWords

/// A few machine words in one allocation, read and written with C11 atomics (through the C shim:
/// Swift's `Synchronization.Atomic` needs macOS 15 / iOS 18). The words are the buffer's tail
/// elements, so their addresses never move; ``AtomicWord`` is the `Sendable` handle.
@usableFromInline
final class AtomicWords: ManagedBuffer<Void, Int> {
    /// Makes `count` words, each holding `initialValue`.
    static func make(count: Int, initialValue: Int = 0) -> AtomicWords {
        let buffer = create(minimumCapacity: count) { _ in () }
        let words = unsafeDowncast(buffer, to: AtomicWords.self)
        words.withUnsafeMutablePointerToElements { $0.initialize(repeating: initialValue, count: count) }
        return words
    }

    @inlinable
    @inline(__always)
    func address(_ index: Int) -> UnsafeMutablePointer<Int> {
        withUnsafeMutablePointerToElements { $0 + index }
    }
}

// MARK: - AtomicWord

/// One word of an ``AtomicWords`` buffer; a copy refers to the same word.
// @unchecked Sendable: every access to the word is atomic
@usableFromInline
struct AtomicWord: @unchecked Sendable {
    @usableFromInline let words: AtomicWords
    @usableFromInline let index: Int

    /// A new word of its own, holding `value`.
    init(_ value: Int) {
        self.init(AtomicWords.make(count: 1, initialValue: value), index: 0)
    }

    /// Word `index` of `words`.
    @inlinable
    init(_ words: AtomicWords, index: Int) {
        self.words = words
        self.index = index
    }

    // Each operation is a sync point (see `SyncPoints`): nothing in release builds.

    @inlinable @inline(__always) func loadAcquire() -> Int {
        SyncPoints.atomic()
        return qsv_atomic_load_acquire(words.address(index))
    }
    @inlinable @inline(__always) func loadRelaxed() -> Int {
        SyncPoints.atomic()
        return qsv_atomic_load_relaxed(words.address(index))
    }
    /// A relaxed load that is not a sync point: checking an assertion gives the controlled
    /// scheduler no place to switch threads.
    @inlinable @inline(__always) func peekForAssertion() -> Int {
        qsv_atomic_load_relaxed(words.address(index))
    }
    // Not a sync point either: for words only reports read.
    @inlinable @inline(__always) func storeUnobserved(_ value: Int) {
        qsv_atomic_store_relaxed(words.address(index), value)
    }
    @inlinable @inline(__always) func storeRelease(_ value: Int) { apply(qsv_atomic_store_release, value) }
    @inlinable @inline(__always) func storeRelaxed(_ value: Int) { apply(qsv_atomic_store_relaxed, value) }
    @inlinable @inline(__always) func exchange(_ value: Int) -> Int { apply(qsv_atomic_exchange, value) }
    @inlinable @inline(__always) func fetchAdd(_ delta: Int) -> Int { apply(qsv_atomic_fetch_add, delta) }
    @inlinable @inline(__always) func fetchOr(_ bits: Int) -> Int { apply(qsv_atomic_fetch_or, bits) }
    @inlinable @inline(__always) func fetchAnd(_ bits: Int) -> Int { apply(qsv_atomic_fetch_and, bits) }

    /// A sync point, then `operation` on the word with `operand`; inlined down to the C call.
    @inlinable @inline(__always)
    func apply<R>(_ operation: (UnsafeMutablePointer<Int>, Int) -> R, _ operand: Int) -> R {
        SyncPoints.atomic()
        return operation(words.address(index), operand)
    }

    /// Stores `desired` if the word holds `expected`; returns whether it did.
    @inlinable @inline(__always) func compareExchange(expected: Int, desired: Int) -> Bool {
        SyncPoints.atomic()
        return qsv_atomic_compare_exchange(words.address(index), expected, desired) != 0
    }

    /// Stores `desired` if the word holds `expected`; returns what the word held.
    @inlinable @inline(__always) func compareExchangeValue(expected: Int, desired: Int) -> Int {
        SyncPoints.atomic()
        return qsv_atomic_compare_exchange_value(words.address(index), expected, desired)
    }
}

/// Carries a value across a `@Sendable` boundary that the engine has made safe by other means.
// @unchecked Sendable: only for values the caller has made unshared (copied out, or moved to one queue)
struct UncheckedSendable<Wrapped>: @unchecked Sendable {
    var value: Wrapped

    init(_ value: Wrapped) {
        self.value = value
    }
}
