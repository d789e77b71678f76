import QueueSafeValueShims

#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

// MARK: - The hand-off floor

/// What a fair hand-off between two threads costs at the least on this machine: two threads take
/// strict turns through one atomic word, each spinning until it is its turn, and increment a shared
/// counter in between. No lock, no queue, no sleeping: just the cache lines moving between the two
/// processors. Any first-come-first-served mechanism whose two contenders alternate (as
/// `wait.set contended 2 threads` must) pays at least this per operation; an unfair lock or a
/// `DispatchQueue.sync` that lets one thread take the section again and again need not.
enum HandOffFloor {
    static var scenario: Scenario {
        Scenario(
            name: "hand-off floor 2 threads",
            summary: "2 threads take strict turns through one atomic word (spinning) and increment a counter: "
                + "the least a fair hand-off costs here",
            timeWindowed: true
        ) { window in
            let words = Words()
            let (elapsed, _, _) = Concurrency.runThreads(2, for: UInt64(window)) { index, timed in
                var performed = 0
                var polls = 0
                while true {
                    let turn = qsv_atomic_load_acquire(words.turn)
                    if turn % 2 == index {
                        words.counter.pointee += 1
                        performed += 1
                        // Each thread's first turn opens the window (turns 0 and 1 come before it).
                        if performed == 1 { timed.arrive() }
                        if performed % 64 == 0 && timed.isOpen && Clock.now() >= timed.closesAt {
                            qsv_atomic_store_release(words.stop, 1)  // the partner stops when it next waits
                        }
                        qsv_atomic_store_release(words.turn, turn + 1)
                    } else if qsv_atomic_load_acquire(words.stop) != 0 {
                        // Counted from the turn word below instead (the window opened after two turns).
                        return (performed, performed)
                    } else {
                        polls += 1
                        // A descheduled partner cannot take its turn: give it the processor now and then.
                        if polls % 16 == 0 { sched_yield() } else { qsv_cpu_relax() }
                    }
                }
            }
            let turns = qsv_atomic_load_acquire(words.turn)
            check(words.counter.pointee == turns, "hand-off floor counted \(words.counter.pointee) of \(turns)")
            // The window opened after the first two turns.
            return Sample(measured: Double(elapsed), operations: turns - 2)
        }
    }

    /// The two atomic words and the counter (a plain pointer, as a QueueSafeValue's storage is:
    /// no exclusivity check), each in an allocation of its own, freed with the object.
    private final class Words: @unchecked Sendable {
        let turn = UnsafeMutablePointer<Int>.allocate(capacity: 1)
        let stop = UnsafeMutablePointer<Int>.allocate(capacity: 1)
        let counter = UnsafeMutablePointer<Int>.allocate(capacity: 1)

        init() {
            turn.initialize(to: 0)
            stop.initialize(to: 0)
            counter.initialize(to: 0)
        }

        deinit {
            turn.deallocate()
            stop.deallocate()
            counter.deallocate()
        }
    }
}
