import QueueSafeValueShims

// MARK: - AtomicWord

/// One machine word in its own allocation, read and written with C11 atomics.
///
/// A struct over a pointer: copies share the word. The owner calls ``deallocate()`` once.
struct AtomicWord {
    private let pointer: UnsafeMutablePointer<Int>

    init(_ value: Int) {
        pointer = .allocate(capacity: 1)
        pointer.initialize(to: value)
    }

    func deallocate() {
        pointer.deallocate()
    }

    @inline(__always) func loadAcquire() -> Int { qsv_atomic_load_acquire(pointer) }
    @inline(__always) func loadRelaxed() -> Int { qsv_atomic_load_relaxed(pointer) }
    @inline(__always) func storeRelease(_ value: Int) { qsv_atomic_store_release(pointer, value) }
    @inline(__always) func storeRelaxed(_ value: Int) { qsv_atomic_store_relaxed(pointer, value) }
    @inline(__always) func exchange(_ value: Int) -> Int { qsv_atomic_exchange(pointer, value) }
    @inline(__always) func fetchAdd(_ delta: Int) -> Int { qsv_atomic_fetch_add(pointer, delta) }

    /// Stores `desired` if the word holds `expected`; returns whether it did.
    @inline(__always) func compareExchange(expected: Int, desired: Int) -> Bool {
        qsv_atomic_compare_exchange(pointer, expected, desired) != 0
    }
}

/// A nonzero identifier of the calling thread.
@inline(__always)
func currentThreadID() -> Int {
    Int(bitPattern: qsv_current_thread_id())
}

/// Tells the processor the caller is busy-waiting.
@inline(__always)
func cpuRelax() {
    qsv_cpu_relax()
}

/// Carries a value the engine has proven is no longer shared (it was copied out of the section)
/// across a `@Sendable` boundary.
struct UncheckedSendable<Wrapped>: @unchecked Sendable {
    var value: Wrapped

    init(_ value: Wrapped) {
        self.value = value
    }
}
