import Dispatch
import QueueSafeValue

#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

// MARK: - Shared read scenarios

/// A read-mostly workload on 2 and on 4 threads, four ways: the library's shared reads
/// (`value.wait.highestPriority.read { … }`), the same reads as exclusive commands, a
/// `pthread_rwlock_t`, and a concurrent `DispatchQueue` with barrier writes.
///
/// The value is an `[Int]` of 256 elements. Each thread draws every operation from its own
/// `SplitMix64`: 95% are reads whose closure hashes the whole array ``ReadMostly/passes`` times (about
/// 2 µs of processor time), 5% are writes that add one to one element. Reads feed their hashes into a
/// per-thread sink, so they cannot be optimized away; the run stops with an error if the elements'
/// final sum differs from their initial sum plus the writes done. ns/op is elapsed time ÷ the
/// operations (reads and writes) of all threads, as in the other contended rows.
enum SharedReadScenarios {
    static var all: [Scenario] {
        [waitReadUncontended, waitGetUncontended, rwlockReadUncontended]
            + [2, 4].flatMap { threads in
                [
                    sharedRead(threads: threads), exclusiveGet(threads: threads), rwlock(threads: threads),
                    barrier(threads: threads),
                ]
            }
    }

    /// A shared read of an idle value, one thread: what a user who turns a configuration value's
    /// reads into `read` pays per read.
    static var waitReadUncontended: Scenario {
        uncontendedRead(name: "wait.read uncontended", summary: "value.wait.highestPriority.read { $0 }") {
            let value = QueueSafeValue(value: 1)
            // `try?` (a failure would break the sum's check): `try!` costs a retain and a release
            // of the engine per read, which a caller in a throwing function does not pay.
            return { (try? value.wait.highestPriority.read { $0 }) ?? 0 }
        }
    }

    /// The exclusive read it replaces: `get` takes the value alone, read-only, on the same engine
    /// path as the deprecated `withValue` (this row's name before issue 31).
    static var waitGetUncontended: Scenario {
        uncontendedRead(name: "wait.get uncontended", summary: "try value.wait.highestPriority.get().get()") {
            let value = QueueSafeValue(value: 1)
            return { try! value.wait.highestPriority.get().get() }
        }
    }

    /// A read lock taken and released on an idle `pthread_rwlock_t`, one thread.
    static var rwlockReadUncontended: Scenario {
        uncontendedRead(name: "pthread_rwlock read uncontended", summary: "pthread_rwlock_rdlock, read an Int, unlock")
        {
            let shared = ReadWriteLocked(1)
            return { shared.read { $0 } }
        }
    }

    /// One thread reading a value of 1 `operations` times through the reader `makeReader` returns
    /// (made before the clock starts), checking that every read saw it.
    private static func uncontendedRead(
        name: String, summary: String, _ makeReader: @escaping @Sendable () -> () -> Int
    ) -> Scenario {
        Scenario(name: name, summary: summary + ", one thread") { operations in
            let read = makeReader()
            var sum = 0
            let elapsed = Clock.time {
                for _ in 0..<operations { sum &+= read() }
            }
            check(sum == operations, "\(name) summed \(sum) of \(operations)")
            return Sample(measured: Double(elapsed))
        }
    }

    static func sharedRead(threads: Int) -> Scenario {
        libraryRow(threads: threads, row: "shared read", command: "read") { value in
            try! value.wait.highestPriority.read { ReadMostly.work($0) }
        }
    }

    /// The same reads as exclusive commands: `map` runs its closure inside the critical section,
    /// holding the value alone.
    static func exclusiveGet(threads: Int) -> Scenario {
        libraryRow(threads: threads, row: "exclusive get", command: "map") { value in
            try! value.wait.highestPriority.map { ReadMostly.work($0) }.get()
        }
    }

    /// A row of the library: reads with `read`, writes with `set`, on one `QueueSafeValue`.
    private static func libraryRow(
        threads: Int, row: String, command: String, read: @escaping @Sendable (QueueSafeValue<[Int]>) -> UInt64
    ) -> Scenario {
        let name = "read-mostly \(threads) threads: \(row)"
        return Scenario(
            name: name,
            summary: "95% value.wait.highestPriority.\(command) { hash 256 Ints, ~2 µs }, 5% set { one element "
                + "+= 1 }, from \(threads) threads at once",
            timeWindowed: true
        ) { window in
            let value = QueueSafeValue(value: ReadMostly.initialValue)
            let outcome = ReadMostly.run(
                threads: threads, window: window,
                read: { read(value) },
                write: { slot in value.wait.highestPriority.set { $0[slot] &+= 1 } })
            let final = try! value.wait.highestPriority.get().get()
            return outcome.checked(final, name)
        }
    }

    /// A `pthread_rwlock_t` with default attributes (on glibc they prefer readers: a waiting writer
    /// does not stop new reads from starting).
    static func rwlock(threads: Int) -> Scenario {
        let name = "read-mostly \(threads) threads: pthread_rwlock"
        return Scenario(
            name: name,
            summary: "95% pthread_rwlock_rdlock, hash 256 Ints (~2 µs), unlock; 5% wrlock, one element += 1, "
                + "unlock; from \(threads) threads at once",
            timeWindowed: true
        ) { window in
            let shared = ReadWriteLocked(ReadMostly.initialValue)
            let outcome = ReadMostly.run(
                threads: threads, window: window,
                read: { shared.read { ReadMostly.work($0) } },
                write: { slot in shared.write { $0[slot] &+= 1 } })
            return outcome.checked(shared.read { $0 }, name)
        }
    }

    /// The concurrent-queue pattern of iOS code: reads with `sync`, writes with
    /// `async(flags: .barrier)`. Async is kept because it is what that code does, and the per-op
    /// figure stays meaningful: a barrier holds back every block submitted after it, so the writer's
    /// next `sync` read waits until its write has run, and each thread ends with a barrier `sync`
    /// inside the timed window, so no write is left running after the clock stops.
    static func barrier(threads: Int) -> Scenario {
        let name = "read-mostly \(threads) threads: GCD barrier"
        return Scenario(
            name: name,
            summary: "95% concurrentQueue.sync { hash 256 Ints, ~2 µs }, 5% async(flags: .barrier) { one element "
                + "+= 1 }, from \(threads) threads at once",
            timeWindowed: true
        ) { window in
            let shared = BarrierGuarded(ReadMostly.initialValue)
            let outcome = ReadMostly.run(
                threads: threads, window: window,
                read: { shared.read { ReadMostly.work($0) } },
                write: { slot in shared.write(slot: slot) },
                finish: { shared.drain() })
            return outcome.checked(shared.read { $0 }, name)
        }
    }
}

// MARK: - The workload

/// What every read-mostly row does; only the way the value is guarded differs.
enum ReadMostly {
    static let elementCount = 256
    static let initialValue = Array(0..<elementCount)
    /// Out of every 100 operations, on average, how many are writes.
    static let writesPerHundred: UInt64 = 5
    /// Passes of ``work(_:)`` over the 256 elements: about 1.9 µs for one read on the 2-core AMD EPYC
    /// the Benchmarks article's figures come from (the minimum of repeated single-threaded runs).
    static let passes = 7

    /// A read's processor work: an FNV-1a-style hash of every element, `passes` times. Each step
    /// multiplies the previous hash, so the chain can be neither vectorized nor reordered and its
    /// time is set by the core's multiply latency. Not inlined, so that every row runs the same code.
    @inline(never)
    static func work(_ values: [Int]) -> UInt64 {
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        for _ in 0..<passes {
            for element in values {
                hash = (hash ^ UInt64(bitPattern: Int64(element))) &* 0x0000_0100_0000_01B3
            }
        }
        return hash
    }

    /// What one sample did: its time and operations, and the writes to check the value against.
    struct Outcome {
        let elapsed: UInt64
        let operations: Int
        let writes: Int

        /// Stops the run unless `final` holds every write, then returns the sample.
        func checked(_ final: [Int], _ name: String) -> Sample {
            let expected = initialValue.reduce(0, +) + writes
            let sum = final.reduce(0, +)
            check(sum == expected, "\(name): the elements sum to \(sum), expected \(expected) after \(writes) writes")
            return Sample(measured: Double(elapsed), operations: operations)
        }
    }

    /// Runs the workload on `threads` threads for `window` nanoseconds. `read` performs one read and
    /// returns its hash; `write` adds one to the element at the given index; `finish` runs on each
    /// thread after its last operation, inside the timed window.
    static func run(
        threads: Int,
        window: Int,
        read: @escaping @Sendable () -> UInt64,
        write: @escaping @Sendable (_ slot: Int) -> Void,
        finish: @escaping @Sendable () -> Void = {}
    ) -> Outcome {
        let tallies = Tallies(threads: threads)
        let (elapsed, operations, _) = Concurrency.runThreads(threads, for: UInt64(window)) { index, timed in
            var generator = SplitMix64(seed: UInt64(index) &+ 1)
            var sink: UInt64 = 0
            var writes = 0
            let performed = timed.repeatInWindow {
                let draw = generator.next()
                if draw % 100 < writesPerHundred {
                    write(Int((draw >> 32) % UInt64(elementCount)))
                    writes += 1
                } else {
                    sink &+= read()
                }
            }
            finish()
            tallies.record(index: index, sink: sink, writes: writes)
            return performed
        }
        return Outcome(elapsed: elapsed, operations: operations, writes: tallies.totalWrites)
    }

    /// Per-thread results: the hashes every thread's reads added up (stored where other threads can
    /// see them, so that the optimizer must compute them) and its writes.
    private final class Tallies: @unchecked Sendable {  // Sendable: threads write their own slots; read after the join.
        private let sinks: UnsafeMutablePointer<UInt64>
        private let writes: UnsafeMutablePointer<Int>
        private let threads: Int

        init(threads: Int) {
            self.threads = threads
            sinks = .allocate(capacity: threads)
            sinks.initialize(repeating: 0, count: threads)
            writes = .allocate(capacity: threads)
            writes.initialize(repeating: 0, count: threads)
        }

        deinit {
            sinks.deallocate()
            writes.deallocate()
        }

        func record(index: Int, sink: UInt64, writes count: Int) {
            sinks[index] = sink
            writes[index] = count
        }

        var totalWrites: Int { (0..<threads).reduce(0) { $0 + writes[$1] } }
    }
}

// MARK: - The baselines' guards

/// The value behind a `pthread_rwlock_t` with default attributes, read and written in place (a plain
/// pointer, as a QueueSafeValue's storage is: no exclusivity check).
private final class ReadWriteLocked<Value>: @unchecked Sendable {  // Sendable: the rwlock guards `value`.
    // Unsafe: pthread objects must not move, so the lock lives in an allocation of its own.
    private let lock = UnsafeMutablePointer<pthread_rwlock_t>.allocate(capacity: 1)
    private let value = UnsafeMutablePointer<Value>.allocate(capacity: 1)

    init(_ initial: Value) {
        pthread_rwlock_init(lock, nil)
        value.initialize(to: initial)
    }

    deinit {
        value.deinitialize(count: 1)
        value.deallocate()
        pthread_rwlock_destroy(lock)
        lock.deallocate()
    }

    func read<R>(_ body: (Value) -> R) -> R {
        pthread_rwlock_rdlock(lock)
        defer { pthread_rwlock_unlock(lock) }
        return body(value.pointee)
    }

    func write(_ body: (inout Value) -> Void) {
        pthread_rwlock_wrlock(lock)
        defer { pthread_rwlock_unlock(lock) }
        body(&value.pointee)
    }
}

/// The value behind a concurrent `DispatchQueue`: reads `sync`, writes `async(flags: .barrier)`.
private final class BarrierGuarded: @unchecked Sendable {  // Sendable: barrier writes run apart from reads.
    private let queue = DispatchQueue(label: "bench.read-mostly", attributes: .concurrent)
    private let value = UnsafeMutablePointer<[Int]>.allocate(capacity: 1)

    init(_ initial: [Int]) {
        value.initialize(to: initial)
    }

    deinit {
        value.deinitialize(count: 1)
        value.deallocate()
    }

    func read<R>(_ body: ([Int]) -> R) -> R {
        queue.sync { body(value.pointee) }
    }

    func write(slot: Int) {
        queue.async(flags: .barrier) { self.value.pointee[slot] &+= 1 }
    }

    /// Returns once every block submitted before it has run.
    func drain() {
        queue.sync(flags: .barrier) {}
    }
}
