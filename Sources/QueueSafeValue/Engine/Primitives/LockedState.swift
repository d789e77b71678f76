#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

// MARK: - PlatformMutex

#if canImport(Darwin)
    /// The mutex under ``LockedState``: `os_unfair_lock` on Apple platforms.
    typealias PlatformMutex = os_unfair_lock
#else
    /// The mutex under ``LockedState``: `pthread_mutex_t` elsewhere.
    typealias PlatformMutex = pthread_mutex_t
#endif

// MARK: - LockedState

/// A value that is only ever touched with a non-recursive lock held, in one allocation.
///
/// The mutex lives in the buffer's tail element, so its address never moves; the class owns it and
/// destroys it in its own `deinit` (the model is swift-nio's `NIOLock` over `ManagedBuffer`). Every
/// `pthread` return code is checked: a failure is a programming error and traps with its code.
///
/// The engine never runs user code, signals a semaphore or resumes a continuation inside
/// ``withLock(_:)``: the bodies it passes only read and change `State`. (`ManagedBuffer` is not
/// `Sendable`; its owners are, and say why.)
final class LockedState<State>: ManagedBuffer<State, PlatformMutex> {
    /// Makes the lock, guarding `initialState`.
    static func make(_ initialState: State) -> LockedState<State> {
        let buffer = create(minimumCapacity: 1) { _ in initialState }
        // `create` builds an instance of the class it is called on: this one.
        let storage = unsafeDowncast(buffer, to: LockedState<State>.self)
        storage.withUnsafeMutablePointerToElements { mutex in
            #if canImport(Darwin)
                mutex.initialize(to: os_unfair_lock())
            #else
                mutex.initialize(to: pthread_mutex_t())
                let status = pthread_mutex_init(mutex, nil)
                precondition(status == 0, "pthread_mutex_init failed: \(status)")
            #endif
        }
        return storage
    }

    deinit {
        withUnsafeMutablePointerToElements { mutex in
            #if !canImport(Darwin)
                let status = pthread_mutex_destroy(mutex)
                precondition(status == 0, "pthread_mutex_destroy failed: \(status)")
            #endif
            mutex.deinitialize(count: 1)
        }
    }

    /// Runs `body` with the lock held and the state passed `inout`.
    ///
    /// `file` and `line` name the call site for a controlled scheduler's lock-order check (debug
    /// builds; inlined away otherwise). The lock's *role* there is the type of what it guards.
    @inline(__always)
    func withLock<R>(
        file: StaticString = #fileID, line: UInt = #line, _ body: (inout State) throws -> R
    ) rethrows -> R {
        try withUnsafeMutablePointers { state, mutex in
            lock(mutex, file: file, line: line)
            defer { unlock(mutex) }
            return try body(&state.pointee)
        }
    }

    /// Takes the mutex; under a controlled scheduler, only once the scheduler lets this thread
    /// have it (see `SyncPoints`).
    @inline(__always)
    private func lock(_ mutex: UnsafeMutablePointer<PlatformMutex>, file: StaticString, line: UInt) {
        #if DEBUG
            SyncPoints.scheduler?.willLock(
                ObjectIdentifier(self), role: State.self, site: LockSite(file: file, line: line))
        #endif
        Self.lock(mutex)
    }

    @inline(__always)
    private func unlock(_ mutex: UnsafeMutablePointer<PlatformMutex>) {
        Self.unlock(mutex)
        #if DEBUG
            SyncPoints.scheduler?.didUnlock(ObjectIdentifier(self))
        #endif
    }

    @inline(__always)
    private static func lock(_ mutex: UnsafeMutablePointer<PlatformMutex>) {
        #if canImport(Darwin)
            os_unfair_lock_lock(mutex)
        #else
            let status = pthread_mutex_lock(mutex)
            precondition(status == 0, "pthread_mutex_lock failed: \(status)")
        #endif
    }

    @inline(__always)
    private static func unlock(_ mutex: UnsafeMutablePointer<PlatformMutex>) {
        #if canImport(Darwin)
            os_unfair_lock_unlock(mutex)
        #else
            let status = pthread_mutex_unlock(mutex)
            precondition(status == 0, "pthread_mutex_unlock failed: \(status)")
        #endif
    }
}
