#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

// MARK: - Lock

/// A non-recursive mutual-exclusion lock backed by `os_unfair_lock` on Apple platforms and
/// `pthread_mutex_t` elsewhere.
///
/// The lock lives in memory the wrapper allocates, so its address never moves; the owner must call
/// ``deallocate()`` exactly once. The engine never runs user code, signals a semaphore or resumes a
/// continuation while it holds one.
struct Lock {
    #if canImport(Darwin)
        private let pointer: UnsafeMutablePointer<os_unfair_lock>
    #else
        private let pointer: UnsafeMutablePointer<pthread_mutex_t>
    #endif

    init() {
        #if canImport(Darwin)
            pointer = .allocate(capacity: 1)
            pointer.initialize(to: os_unfair_lock())
        #else
            pointer = .allocate(capacity: 1)
            pointer.initialize(to: pthread_mutex_t())
            let status = pthread_mutex_init(pointer, nil)
            precondition(status == 0, "pthread_mutex_init failed: \(status)")
        #endif
    }

    /// Destroys the lock. Call once, when no thread can use it any more.
    func deallocate() {
        #if !canImport(Darwin)
            pthread_mutex_destroy(pointer)
        #endif
        pointer.deinitialize(count: 1)
        pointer.deallocate()
    }

    @inline(__always)
    func lock() {
        #if canImport(Darwin)
            os_unfair_lock_lock(pointer)
        #else
            pthread_mutex_lock(pointer)
        #endif
    }

    @inline(__always)
    func unlock() {
        #if canImport(Darwin)
            os_unfair_lock_unlock(pointer)
        #else
            pthread_mutex_unlock(pointer)
        #endif
    }

    /// Runs `body` with the lock held. `body` must not call back into user code.
    @inline(__always)
    func withLock<R>(_ body: () throws -> R) rethrows -> R {
        lock()
        defer { unlock() }
        return try body()
    }
}
