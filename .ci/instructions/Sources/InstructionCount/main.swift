// One scenario per run: `InstructionCount SCENARIO N` performs N operations of SCENARIO and exits.
// Each scenario is a row of the benchmark (same name, same shape) or the baseline it is compared
// with. `.ci/instructions/run` runs every scenario at N and 2N under valgrind and divides the
// difference by N: what the process does once (start-up, the first operation's metadata lookups,
// creating queues and threads) cancels out.
import Dispatch
import QueueSafeValue
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// State the scenario's blocks share; they run one at a time (a serial queue, or one operation of
/// a queue at a time), or behind a lock.
final class Counter: @unchecked Sendable {  // Sendable: only ever touched by one block at a time
    var value = 0
}

final class MutexCounter: Sendable {
    let mutex = Mutex(0)
}

final class TaskCounter: Sendable {
    let mutex = Mutex(0)
    func increment() -> Int {
        mutex.withLock {
            $0 += 1
            return $0
        }
    }
}

actor CountingActor {
    var count = 0
    func increment() { count += 1 }
}

/// Runs `body` in a detached task (not on the main actor, which this blocked thread would never
/// drain) and waits for it.
func blockingAwait(_ body: @escaping @Sendable () async -> Void) {
    let done = DispatchSemaphore(value: 0)
    Task.detached {
        await body()
        done.signal()
    }
    done.wait()
}

func check(_ condition: Bool, _ message: String) {
    if !condition {
        print("InstructionCount: \(message)")
        exit(1)
    }
}

/// Starts a second thread that stays parked, so that the process is multi-threaded from the start,
/// as every real program is (glibc's locks skip their atomics while a process has one thread).
/// Not isolated to the main actor: the thread's closure must not check that it runs on it.
func startIdleThread() {
    var thread = pthread_t()
    pthread_create(
        &thread, nil,
        { _ in
            while true { sleep(1000) }
        }, nil)
}

/// `wait.set handed on`: every blocking command waits and is handed the value by a release (the
/// hand-off whose cost issue 44 traced the oversubscribed rows to). Two threads issue
/// `operations / 2` sets each; each closure yields its processor, and valgrind, which runs one
/// thread at a time, then runs the other thread, whose command finds the value held and queues.
/// Includes the waiting thread's polls: the head of the waiting order spins 32 polls before it
/// yields (Architecture, "More threads than cores"), which with one thread running at a time is
/// the holder's turn. Both threads start issuing only once both run: otherwise the first could
/// issue all its commands before the pool had started the second, and none would wait (with
/// valgrind pinned to one processor, that happened on every run of one build: 38 instructions per
/// command). Out of line, so that the switch's other rows (`wait.set uncontended`) compile as before.
@inline(never)
func blockingHandOn(_ operations: Int) {
    let value = QueueSafeValue(value: 0)
    let finished = DispatchGroup()
    let started = DispatchGroup()
    for _ in 0..<2 { started.enter() }
    for _ in 0..<2 {
        DispatchQueue.global().async(group: finished) {
            started.leave()
            started.wait()
            for _ in 0..<operations / 2 {
                value.wait.highestPriority.set {
                    $0 += 1
                    sched_yield()
                }
            }
        }
    }
    finished.wait()
    check(try! value.wait.highestPriority.get().get() == operations / 2 * 2, "handed-on blocking sets lost updates")
}

/// `await withLock handed on`: every awaiting command waits and is handed the value by a release,
/// the awaiting twin of `wait.set handed on`. Two tasks on one actor issue `operations / 2`
/// commands each; each section yields (`Task.yield()`, inside the section), so the actor runs the
/// other task, whose command finds the value held and suspends; the release hands the value on and
/// resumes it. On one actor the turns are the same in every run: every command but the first waits.
actor HandOnParty {
    func issue(_ value: QueueSafeValue<Int>, _ commands: Int) async {
        for _ in 0..<commands {
            try! await value.async.highestPriority.withLock { number in
                number += 1
                await Task.yield()
            }
        }
    }
}

@inline(never)
func awaitingHandOn(_ operations: Int) {
    let value = QueueSafeValue(value: 0)
    let party = HandOnParty()
    blockingAwait {
        async let first: Void = party.issue(value, operations / 2)
        async let second: Void = party.issue(value, operations / 2)
        _ = await (first, second)
    }
    check(try! value.wait.highestPriority.get().get() == operations / 2 * 2, "handed-on awaiting sections lost updates")
}

/// Performs `operations` operations of `scenario`. Not isolated to the main actor (top-level code
/// is): the tasks it starts run on the global executor, as a library user's would, while this
/// thread waits for them.
func run(_ scenario: String, _ operations: Int) {
    switch scenario {
    case "DispatchQueue.async serial":
        let queue = DispatchQueue(label: "count.async.serial")
        let counter = Counter()
        let allDone = DispatchSemaphore(value: 0)
        for _ in 0..<operations {
            queue.async {
                counter.value += 1
                if counter.value == operations { allDone.signal() }
            }
        }
        allDone.wait()

    case "async(performIn:).set":
        let value = QueueSafeValue(value: 0)
        let queue = DispatchQueue(label: "count.dispatch.set")
        let completed = Counter()
        let allDone = DispatchSemaphore(value: 0)
        for _ in 0..<operations {
            value.async(performIn: queue).highestPriority.set(
                accessClosure: { $0 += 1 },
                completion: { _ in
                    completed.value += 1
                    if completed.value == operations { allDone.signal() }
                }
            )
        }
        allDone.wait()
        check(try! value.wait.highestPriority.get().get() == operations, "async(performIn:).set lost updates")

    case "async(performIn:).set handed on", "async(performIn:).set handed on, monitor on":
        // Every command waits and is handed the value by a release (issue 46's contended hand-off):
        // a thread holds the value while the commands are issued, then lets go; each command's
        // block hands the value to the next. With the monitor on, a hand-off also reads the clock to
        // see whether the wait was long (thresholds no wait reaches), and the watchdog samples.
        let monitor =
            scenario.hasSuffix("monitor on")
            ? QueueSafeValue<Never>.monitor(
                thresholds: try! .init(longHold: .seconds(3600), longWait: .seconds(3600))
            ) { _ in } : nil
        let value = QueueSafeValue(value: 0)
        let queue = DispatchQueue(label: "count.dispatch.handedOn")
        let holding = DispatchSemaphore(value: 0)
        let letGo = DispatchSemaphore(value: 0)
        let holder = DispatchQueue(label: "count.dispatch.holder")
        holder.async {
            value.wait.highestPriority.set { _ in
                holding.signal()
                letGo.wait()
            }
        }
        holding.wait()
        let completed = Counter()
        let allDone = DispatchSemaphore(value: 0)
        for _ in 0..<operations {
            value.async(performIn: queue).highestPriority.set(
                accessClosure: { $0 += 1 },
                completion: { _ in
                    completed.value += 1
                    if completed.value == operations { allDone.signal() }
                }
            )
        }
        letGo.signal()
        allDone.wait()
        monitor?.stop()
        check(try! value.wait.highestPriority.get().get() == operations, "handed-on sets lost updates")

    case "wait.set uncontended, monitor on":
        let monitor = QueueSafeValue<Never>.monitor { _ in }
        let value = QueueSafeValue(value: 0)
        for _ in 0..<operations { value.wait.highestPriority.set { $0 += 1 } }
        monitor.stop()
        check(try! value.wait.highestPriority.get().get() == operations, "wait.set with a monitor lost updates")

    case "wait.set handed on":
        blockingHandOn(operations)

    case "mutex uncontended":
        let shared = MutexCounter()
        for _ in 0..<operations { shared.mutex.withLock { $0 += 1 } }
        check(shared.mutex.withLock { $0 } == operations, "mutex lost updates")

    case "wait.set uncontended":
        let value = QueueSafeValue(value: 0)
        for _ in 0..<operations { value.wait.highestPriority.set { $0 += 1 } }
        check(try! value.wait.highestPriority.get().get() == operations, "wait.set lost updates")

    case "wait.read uncontended":
        // The reads run in a throwing function, as a caller's `try` would: a `try!` around each read
        // keeps a retain and a release of the engine per call (86 instructions instead of 42), as its
        // trap path must keep the container alive.
        let value = QueueSafeValue(value: 1)
        func readAll() throws -> Int {
            var sum = 0
            for _ in 0..<operations { sum &+= try value.wait.highestPriority.read { $0 } }
            return sum
        }
        let sum = try! readAll()
        check(sum == operations, "wait.read summed \(sum)")

    case "wait.get uncontended":
        // The exclusive read: the engine path of the deprecated withValue (this row's name before).
        let value = QueueSafeValue(value: 1)
        var sum = 0
        for _ in 0..<operations { sum &+= try! value.wait.highestPriority.get().get() }
        check(sum == operations, "wait.get summed \(sum)")

    case "actor call":
        let actor = CountingActor()
        blockingAwait {
            for _ in 0..<operations { await actor.increment() }
            let count = await actor.count
            check(count == operations, "actor call lost updates")
        }

    case "await set uncontended":
        let value = QueueSafeValue(value: 0)
        blockingAwait {
            for _ in 0..<operations { try! await value.async.highestPriority.set { $0 += 1 } }
        }
        check(try! value.wait.highestPriority.get().get() == operations, "await set lost updates")

    case "await read uncontended":
        let value = QueueSafeValue(value: 1)
        blockingAwait {
            var sum = 0
            for _ in 0..<operations { sum &+= try! await value.async.highestPriority.read { $0 } }
            check(sum == operations, "await read summed \(sum)")
        }

    case "await withLock handed on":
        awaitingHandOn(operations)

    case "Task {} × N":
        let completed = TaskCounter()
        let allDone = DispatchSemaphore(value: 0)
        for _ in 0..<operations {
            Task {
                if completed.increment() == operations { allDone.signal() }
            }
        }
        allDone.wait()

    case "CommandQueue.enqueue":
        let queue = CommandQueue()
        let completed = Counter()
        let allDone = DispatchSemaphore(value: 0)
        for _ in 0..<operations {
            queue.enqueue {
                completed.value += 1
                if completed.value == operations { allDone.signal() }
            }
        }
        allDone.wait()

    case "Task create+await":
        blockingAwait {
            var sum = 0
            for index in 0..<operations { sum &+= await Task { index }.value }
            check(sum == operations * (operations - 1) / 2, "Task create+await summed \(sum)")
        }

    case "CommandQueue.perform":
        let queue = CommandQueue()
        blockingAwait {
            var sum = 0
            for index in 0..<operations { sum &+= try! await queue.perform { index } }
            check(sum == operations * (operations - 1) / 2, "CommandQueue.perform summed \(sum)")
        }

    case "CommandQueue(width: 4).perform":
        let queue = try! CommandQueue(width: 4)
        blockingAwait {
            var sum = 0
            for index in 0..<operations { sum &+= try! await queue.perform { index } }
            check(sum == operations * (operations - 1) / 2, "CommandQueue(width: 4).perform summed \(sum)")
        }

    case "re-prioritize of 100 waiting":
        // One operation holds the only slot; 100 wait; each step moves one of them to another priority.
        let queue = CommandQueue()
        let release = DispatchSemaphore(value: 0)
        let running = queue.submit { release.wait() }
        let waiting = (0..<100).map { _ in queue.submit(priority: .low) {} }
        // Their tasks start and suspend on other threads: let them, so that their own allocations
        // and instructions are not counted among the changes'.
        usleep(300_000)
        for index in 0..<operations {
            let moved = waiting[index % waiting.count].setPriority(index.isMultiple(of: 2) ? .high : .low)
            if moved != .waiting { check(false, "a waiting operation was \(moved)") }
        }
        release.signal()
        blockingAwait { _ = try? await running.value }

    default:
        print("InstructionCount: unknown scenario \(scenario)")
        exit(2)
    }
}

let arguments = CommandLine.arguments
guard arguments.count == 3, let operations = Int(arguments[2]), operations > 0 else {
    print("usage: InstructionCount SCENARIO N")
    exit(2)
}
startIdleThread()
run(arguments[1], operations)
