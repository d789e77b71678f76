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

    /// Runs `body` with the lock held and the state passed `inout`. `file` and `line` name the call
    /// site for a controlled scheduler's lock-order check, where the lock's *role* is `State`.
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

    /// Takes the mutex; under a controlled scheduler, once the scheduler lets this thread have it.
    @inline(__always)
    private func lock(_ mutex: UnsafeMutablePointer<PlatformMutex>, file: StaticString, line: UInt) {
        #if DEBUG
            SyncPoints.scheduler?.willLock(
                ObjectIdentifier(self), role: State.self, site: LockSite(file: file, line: line))
        #endif
        #if canImport(Darwin)
            os_unfair_lock_lock(mutex)
        #else
            let status = pthread_mutex_lock(mutex)
            precondition(status == 0, "pthread_mutex_lock failed: \(status)")
        #endif
    }

    @inline(__always)
    private func unlock(_ mutex: UnsafeMutablePointer<PlatformMutex>) {
        #if canImport(Darwin)
            os_unfair_lock_unlock(mutex)
        #else
            let status = pthread_mutex_unlock(mutex)
            precondition(status == 0, "pthread_mutex_unlock failed: \(status)")
        #endif
        #if DEBUG
            SyncPoints.scheduler?.didUnlock(ObjectIdentifier(self))
        #endif
    }
}
