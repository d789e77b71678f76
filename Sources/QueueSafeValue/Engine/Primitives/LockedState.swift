#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

#if canImport(Darwin)
    typealias PlatformMutex = os_unfair_lock
#else
    typealias PlatformMutex = pthread_mutex_t
#endif

// MARK: - LockedState

/// A value that is only ever touched with a non-recursive lock held, in one allocation: the mutex
/// is the buffer's tail element, so its address never moves (as swift-nio's `NIOLock`). A failed
/// `pthread` call traps with its code. The engine's bodies only read and change `State`.
final class LockedState<State>: ManagedBuffer<State, PlatformMutex> {
    /// Makes the lock, guarding `initialState`. `inheritsPriority`: a thread that waits for the lock
    /// lends its priority to the one that holds it, as `os_unfair_lock` always does. On Linux that
    /// is a priority-inheriting futex, which hands a contended lock from thread to thread: it is for
    /// the process-wide locks a parking thread takes (a real-time waiter must not wait there for a
    /// normal thread that a thread between the two keeps off its processor), not for a value's own.
    static func make(_ initialState: State, inheritsPriority: Bool = false) -> LockedState<State> {
        let buffer = create(minimumCapacity: 1) { _ in initialState }
        let storage = unsafeDowncast(buffer, to: LockedState<State>.self)
        storage.withUnsafeMutablePointerToElements { mutex in
            #if canImport(Darwin)
                mutex.initialize(to: os_unfair_lock())
            #else
                mutex.initialize(to: pthread_mutex_t())
                var attributes = pthread_mutexattr_t()
                pthread_mutexattr_init(&attributes)
                defer { pthread_mutexattr_destroy(&attributes) }
                if inheritsPriority { pthread_mutexattr_setprotocol(&attributes, Int32(PTHREAD_PRIO_INHERIT)) }
                var status = pthread_mutex_init(mutex, &attributes)
                // A kernel without priority-inheriting futexes: a plain mutex.
                if status == ENOTSUP { status = pthread_mutex_init(mutex, nil) }
                check(status, "pthread_mutex_init")
            #endif
        }
        return storage
    }

    deinit {
        withUnsafeMutablePointerToElements { mutex in
            #if !canImport(Darwin)
                Self.check(pthread_mutex_destroy(mutex), "pthread_mutex_destroy")
            #endif
            mutex.deinitialize(count: 1)
        }
    }

    /// Runs `body` with the lock held and the state passed `inout`. `file` and `line` name the call
    /// site for a controlled scheduler's lock-order check, where the lock's *role* is `State`; under
    /// one, the mutex is taken once the scheduler lets this thread have it.
    @inline(__always)
    func withLock<R>(
        file: StaticString = #fileID, line: UInt = #line, _ body: (inout State) throws -> R
    ) rethrows -> R {
        try withUnsafeMutablePointers { state, mutex in
            #if DEBUG
                SyncPoints.scheduler?.willLock(
                    ObjectIdentifier(self), role: State.self, site: LockSite(file: file, line: line))
                defer { SyncPoints.scheduler?.didUnlock(ObjectIdentifier(self)) }
            #endif
            #if canImport(Darwin)
                os_unfair_lock_lock(mutex)
                defer { os_unfair_lock_unlock(mutex) }
            #else
                Self.check(pthread_mutex_lock(mutex), "pthread_mutex_lock")
                defer { Self.check(pthread_mutex_unlock(mutex), "pthread_mutex_unlock") }
            #endif
            return try body(&state.pointee)
        }
    }

    /// Traps with the code of a failed `pthread` call.
    @inline(__always)
    private static func check(_ status: Int32, _ call: StaticString) {
        precondition(status == 0, "\(call) failed: \(status)")
    }
}
