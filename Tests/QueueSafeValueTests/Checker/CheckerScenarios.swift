import Dispatch
import Foundation

@_spi(Testing) @testable import QueueSafeValue
@testable import QueueSafeValueTesting

/// A program for the controlled scheduler: what one run builds (values, queues, the threads of
/// the world), and what it checks at the end.
struct CheckerScenario: Sendable {
    let name: String
    /// How many preemptions a schedule may have; see `ScheduleExplorer`.
    let preemptionBound: Int
    /// It starts tasks (awaiting commands, a `CommandQueue`'s operations and the tasks that await
    /// them) that prefer the world as their executor, which needs macOS 15, iOS 18, tvOS 18,
    /// watchOS 11, visionOS 2: below those the scenario is skipped. Checked on every platform
    /// against what its runs start (`StorageChecker.expectEveryScheduleHolds`).
    var needsTaskExecutors = false
    /// The most engine-lock sections each named party may take in any run (its commands' places,
    /// parks, grants and releases: ``ControlledWorld/engineLockSections``); a run in which one
    /// takes more fails.
    var lockSectionLimits: [String: Int] = [:]
    /// Builds one run's world and returns its final check.
    let build: @Sendable (ControlledWorld) -> () -> String?
}

extension CheckerScenario {
    /// The same scenario with priority inheritance running `platform`'s policy (see
    /// `ControlledWorld.simulate(_:)`).
    func simulating(_ platform: RecordingPriorityBackend.Platform) -> CheckerScenario {
        let build = self.build
        return CheckerScenario(
            name: "\(name), under \(platform)", preemptionBound: preemptionBound,
            needsTaskExecutors: needsTaskExecutors,
            lockSectionLimits: lockSectionLimits
        ) { world in
            world.simulate(platform)
            return build(world)
        }
    }
}

/// A container that one step of a scenario releases (`value = nil`), while the other steps hold
/// only its schedules.
final class ContainerBox: @unchecked Sendable {  // @unchecked Sendable: released by one thread, once
    var value: QueueSafeValue<Int>?
    let engine: ValueEngine<Int>

    init(_ value: QueueSafeValue<Int>) {
        self.value = value
        engine = value.engine
    }
}

extension CheckerRun {
    /// The final checks every value scenario makes: each command ended once; the value counts the
    /// commands that ran; each dispatch command with a completion delivered it once.
    /// `reads` are shared reads: they must end too, but add nothing to the value.
    func finalCheck(
        _ value: ValueEngine<Int>, commands: [String], reads: [String] = [], delivering: [String] = [],
        freed: Bool = false
    ) -> String? {
        if let problem = expectEnded(commands + reads) { return problem }
        let ran = commands.filter { didRun($0) }.count
        let count: Int
        if freed {
            if !value.isValueFreed {
                return "the value was not freed after its container was released and the queue drained"
            }
            count = ran
        } else {
            count =
                value.withBlockingAccess(priority: .highest, site: CallSite(file: #fileID, line: #line), timeout: nil) {
                    $0
                }.valueOrZero
        }
        if count != ran { return "the value counts \(count) commands but \(ran) ran: an update was lost" }
        for name in delivering where outcome(of: name) != "not issued" && deliveryCount(name) != 1 {
            return "\(name) delivered \(deliveryCount(name)) times"
        }
        return nil
    }
}

enum CheckerScenarios {
    // MARK: The engine's commands (what EngineModel explored, on the real storage)

    static let mixedCommands = commandMix(
        name: "blocking, timed, dispatch and awaiting commands of mixed priorities", label: "mixed",
        fairness: .strictPriority, priorities: [.low, .high, .high, .low, .highest])

    /// One command of each shape from three threads: blocking `c0` then dispatch `c1`, timed `c2`
    /// then awaiting `c3`, blocking `c4`, at `priorities` (in that order), on a value of `fairness`.
    private static func commandMix(
        name: String, label: String, fairness: CommandFairness, priorities: [CommandPriority]
    ) -> CheckerScenario {
        CheckerScenario(name: name, preemptionBound: 2, needsTaskExecutors: true) { world in
            let run = CheckerRun(world)
            let value = QueueSafeValue(value: 0, label: label, fairness: fairness)
            let queue = DispatchQueue(label: "\(label) queue")
            world.quiescentCheck = run.quiescentCheck([value.engine])
            world.spawn("A") {
                run.blocking("c0", value.wait, priorities[0])
                run.dispatch("c1", value, priorities[1], on: queue)
            }
            world.spawn("B") {
                run.blocking("c2", value.wait(timeout: .seconds(60)), priorities[2])
                run.awaiting("c3", value.async, priorities[3])
            }
            world.spawn("C") { run.blocking("c4", value.wait, priorities[4]) }
            return { run.finalCheck(value.engine, commands: ["c0", "c1", "c2", "c3", "c4"], delivering: ["c1"]) }
        }
    }

    static let arrivalOrder = CheckerScenario(name: "one issuer's commands keep their order", preemptionBound: 2) {
        world in
        let run = CheckerRun(world)
        let value = QueueSafeValue(value: 0, label: "ordered")
        let queue = DispatchQueue(label: "ordered queue")
        world.quiescentCheck = run.quiescentCheck([value.engine])
        world.spawn("issuer") {
            // Issued while the issuer holds the value: they wait, in this order.
            value.wait.highestPriority.set { _ in
                run.dispatch("d1", value, .medium, on: queue, completion: false)
                run.dispatch("d2", value, .medium, on: queue, completion: false)
                run.dispatch("d3", value, .high, on: queue, completion: false)
            }
        }
        world.spawn("other") { run.blocking("b", value.wait, .medium) }
        return {
            if let problem = run.finalCheck(value.engine, commands: ["d1", "d2", "d3", "b"]) { return problem }
            let order = run.runOrder.filter { $0.hasPrefix("d") }
            return order == ["d3", "d1", "d2"] ? nil : "\(order): a command ran before one which waits ahead of it"
        }
    }

    static let deadlines = CheckerScenario(name: "deadlines pass while the grant races them", preemptionBound: 2) {
        world in
        let run = CheckerRun(world)
        let value = QueueSafeValue(value: 0, label: "deadlines")
        world.quiescentCheck = run.quiescentCheck([value.engine])
        world.spawn("A") { run.blocking("t0", value.wait(timeout: .seconds(60)), .low) }
        world.spawn("B") { run.blocking("t1", value.wait(timeout: .seconds(60)), .high) }
        world.spawn("C") { run.blocking("b2", value.wait, .medium) }
        return { run.finalCheck(value.engine, commands: ["t0", "t1", "b2"]) }
    }

    /// A monitor (issue 46; one of the scenario's own, not the process's) watches the value while
    /// commands hand it on, its watchdog sampling twice: a hold it reports is named by its own call
    /// site or by none (a command that took the value a few instructions ago), never by the previous
    /// holder's; and a hold that ended is never still reported as held (the machine's invariant, at
    /// every step). The threshold is 0, so that every sample of a held value reports; the events
    /// reach the handler through the monitor's throttle and its queue.
    static let monitorWatchdog = CheckerScenario(
        name: "the monitor's watchdog samples holders as they hand on", preemptionBound: 2
    ) { world in
        let run = CheckerRun(world)
        let value = QueueSafeValue(value: 0, label: "watched")
        world.quiescentCheck = run.quiescentCheck([value.engine])
        let reports = Mailbox<[QueueMonitor.Event]>()
        reports.value = []
        let monitor = QueueMonitor(
            thresholds: QueueMonitor.Thresholds(checkingLongHold: 0), queue: DispatchQueue(label: "monitor events")
        ) { event in reports.value = (reports.value ?? []) + [event] }
        monitor.watch(value.engine)
        let lines = Mailbox<[String: Int]>()
        lines.value = [:]
        world.spawn("A") {
            lines.value?["A"] = #line + 1
            value.wait.set { $0 += 1 }
        }
        world.spawn("B") {
            lines.value?["B"] = #line + 1
            value.wait.priority(.high).set { $0 += 1 }
        }
        world.spawn("watchdog") {
            for _ in 0..<2 { monitor.sample() }
        }
        return {
            guard (try? value.wait.read { $0 }) == 2 else {
                return "the value counts \(String(describing: try? value.wait.read { $0 })) of 2 commands"
            }
            for event in reports.value ?? [] {
                guard let line = event.callSite?.line else { continue }  // taken a moment ago: not named
                // The thread named as the holder (read with the call site, under the lock) issued that line.
                let party = event.diagnostics?.holder?.party ?? ""
                let issuer = (lines.value ?? [:]).first { $0.value == line }?.key
                guard let issuer, party.contains("thread '\(issuer)'") else {
                    return "a long hold held by \(party) was named by line \(line), another command's: \(event)"
                }
            }
            return nil
        }
    }

    static let cancellation = CheckerScenario(
        name: "tasks cancelled before, while and after they wait", preemptionBound: 2, needsTaskExecutors: true
    ) {
        world in
        let run = CheckerRun(world)
        let value = QueueSafeValue(value: 0, label: "cancelled")
        let task = Mailbox<Task<Void, Never>>()
        world.quiescentCheck = run.quiescentCheck([value.engine])
        world.spawn("holder") { run.blocking("b0", value.wait, .high) }
        world.spawn("issuer") { run.awaiting("a1", value.async, .medium, tasks: task) }
        world.spawn("canceller") { task.value?.cancel() }
        return { run.finalCheck(value.engine, commands: ["b0", "a1"]) }
    }

    static let manualCompletions = CheckerScenario(
        name: "manual completions: inside, dropped inside, called and dropped later", preemptionBound: 2
    ) { world in
        let run = CheckerRun(world)
        let value = QueueSafeValue(value: 0, label: "manual")
        let queue = DispatchQueue(label: "manual queue")
        let handedOut = Parker()
        let laterBlocking = Mailbox<HeldCompletion>(handedOut)
        let laterDispatch = Mailbox<HeldCompletion>(handedOut)
        world.quiescentCheck = run.quiescentCheck([value.engine])
        world.spawn("A") {
            run.blockingManual("m0", value.wait, .medium, done: .later, later: laterBlocking)
        }
        world.spawn("B") {
            run.dispatchManual("m1", value, .high, on: queue, done: .droppedInside)
            run.dispatchManual("m2", value, .low, on: queue, done: .later, later: laterDispatch)
        }
        world.spawn("completer") {
            // Calls or drops each completion once it is handed out (a busy-wait of the world).
            // Each of the two closures hands one out, and wakes the completer once.
            for _ in 0..<2 {
                handedOut.park()
                if let done = laterBlocking.take() {
                    done.call()
                } else {
                    laterDispatch.take()?.drop()
                }
            }
        }
        return { run.finalCheck(value.engine, commands: ["m0", "m1", "m2"], delivering: ["m1", "m2"]) }
    }

    static let containerRelease = CheckerScenario(
        name: "the container is released while commands hold, wait and arrive", preemptionBound: 2,
        needsTaskExecutors: true
    ) { world in
        let run = CheckerRun(world)
        let box = ContainerBox(QueueSafeValue(value: 0, label: "released"))
        let (wait, async) = (box.value!.wait, box.value!.async)
        let queue = DispatchQueue(label: "released queue")
        world.quiescentCheck = run.quiescentCheck([box.engine])
        world.spawn("A") {
            if let value = box.value { run.dispatch("d0", value, .low, on: queue) } else { run.end("d0", "not issued") }
        }
        world.spawn("B") {
            run.blocking("b1", wait, .high)
            box.value = nil
        }
        world.spawn("C") { run.awaiting("a2", async, .medium) }
        return {
            run.finalCheck(box.engine, commands: ["d0", "b1", "a2"], delivering: ["d0"], freed: true)
        }
    }

    // MARK: CommandQueue

    static let cancelAllOperations = CheckerScenario(
        name: "command queue: cancelAll against running, waiting and finished operations", preemptionBound: 2,
        needsTaskExecutors: true
    ) { world in
        let run = CheckerRun(world)
        let queue = CommandQueue(label: "cancelled queue")
        world.quiescentCheck = run.quiescentCheck([queue.engine])
        world.spawn("A") {
            run.operation("o0", queue, .medium)
            run.operation("o2", queue, .medium)
        }
        world.spawn("B") {
            run.operation("o1", queue, .high)
            queue.cancelAll()
        }
        return { run.expectEnded(["o0", "o1", "o2"]) }
    }

    static let attachRaces = CheckerScenario(
        name: "command queue: task cancellation and cancelAll around attach", preemptionBound: 2,
        needsTaskExecutors: true
    ) { world in
        let run = CheckerRun(world)
        let queue = CommandQueue(label: "attach queue")
        let task = Mailbox<Task<Void, any Error>>()
        world.quiescentCheck = run.quiescentCheck([queue.engine])
        world.spawn("A") {
            run.operation("o0", queue, .low)
            task.value = run.operation("o1", queue, .medium)
        }
        world.spawn("B") {
            task.value?.cancel()
            queue.cancelAll()
        }
        return { run.expectEnded(["o0", "o1"]) }
    }

    static let discardable = CheckerScenario(
        name: "command queue: discardable operations, granted or waiting, replaced by later ones", preemptionBound: 2,
        needsTaskExecutors: true
    ) { world in
        let run = CheckerRun(world)
        let queue = CommandQueue(label: "discardable queue")
        world.quiescentCheck = run.quiescentCheck([queue.engine])
        world.spawn("A") { run.operation("d0", queue, .medium, policy: .discardable) }
        world.spawn("B") { run.operation("s1", queue, .low) }
        return {
            if let problem = run.expectEnded(["d0", "s1"]) { return problem }
            if run.outcome(of: "s1") != "ran" { return "s1 is not discardable, yet it ended \(run.outcome(of: "s1")!)" }
            // d0 may begin only if it asked to before the later operation was enqueued.
            let notes = world.notes
            let enqueued = notes.firstIndex(of: "a discardable operation is enqueued")!
            let asked = notes.firstIndex(of: "a discardable operation asks to begin")
            let later = notes.indices.first { $0 > enqueued && notes[$0] == "an operation is enqueued" }
            if run.didRun("d0"), let later, asked.map({ $0 > later }) ?? true {
                return "d0 began after a later operation was enqueued"
            }
            return nil
        }
    }

    static let standardOperations = CheckerScenario(
        name: "command queue: standard operations are never discarded", preemptionBound: 1, needsTaskExecutors: true
    ) { world in
        let run = CheckerRun(world)
        let queue = CommandQueue(label: "standard queue")
        world.quiescentCheck = run.quiescentCheck([queue.engine])
        world.spawn("A") {
            run.operation("s0", queue, .medium)
            run.operation("s1", queue, .medium)
        }
        world.spawn("B") { run.operation("s2", queue, .medium) }
        return {
            if let problem = run.expectEnded(["s0", "s1", "s2"]) { return problem }
            for name in ["s0", "s1", "s2"] where run.outcome(of: name) != "ran" {
                return "\(name) is not discardable, yet it ended \(run.outcome(of: name)!)"
            }
            return nil
        }
    }

    // MARK: CommandQueue of width n

    /// The checks every scenario of a queue of width n makes at the end: each operation ended, and
    /// no slot is still taken (a running operation gives its slot back however it ends).
    private static func widthFinalCheck(_ run: CheckerRun, _ queue: CommandQueue, _ names: [String]) -> String? {
        if let problem = run.expectEnded(names) { return problem }
        if let holder = queue.diagnostics.holder {
            return
                "every operation ended, yet \(max(1, holder.sharedReads)) slot(s) are still taken: a slot was never given back"
        }
        return nil
    }

    /// Width 2, operations of three priorities from three threads, and the width raised to 3 while
    /// they run. At every quiet step the machine's invariant holds: no slot granted past the width, and no
    /// operation waits first in line while a slot is free.
    static let widthSlots = CheckerScenario(
        name: "command queue of width 2: slots, their order, the width raised", preemptionBound: 1,
        needsTaskExecutors: true
    ) { world in
        let run = CheckerRun(world)
        let queue = try! CommandQueue(label: "wide queue", width: 2)
        world.quiescentCheck = run.quiescentCheck([queue.engine])
        world.spawn("A") {
            run.submitted("a1", queue, .medium)
            run.submitted("a2", queue, .low)
        }
        world.spawn("B") {
            run.submitted("b1", queue, .high)
            try! queue.setWidth(3)
        }
        world.spawn("C") { run.submitted("c1", queue, .medium) }
        return { widthFinalCheck(run, queue, ["a1", "a2", "b1", "c1"]) }
    }

    /// Width 2, lowered to 1 while operations run and wait, then raised to 2 again: running
    /// operations finish, the waiting ones turn exclusive and back.
    static let widthLowered = CheckerScenario(
        name: "command queue of width 2: the width lowered to 1 and raised again", preemptionBound: 1,
        needsTaskExecutors: true
    ) { world in
        let run = CheckerRun(world)
        let queue = try! CommandQueue(label: "narrowing queue", width: 2)
        world.quiescentCheck = run.quiescentCheck([queue.engine])
        world.spawn("A") {
            run.submitted("a1", queue, .medium)
            run.submitted("a2", queue, .high)
        }
        world.spawn("B") {
            try! queue.setWidth(1)
            run.submitted("b1", queue, .medium)
            try! queue.setWidth(2)
        }
        return { widthFinalCheck(run, queue, ["a1", "a2", "b1"]) }
    }

    /// A waiting operation re-prioritized while the queue's slots are taken, and grants racing the
    /// change. Once the machine has made the change, the operation, if it still waits, stands in
    /// the waiting order once, at its new priority.
    static let widthReprioritized = CheckerScenario(
        name: "command queue of width 2: a waiting operation re-prioritized", preemptionBound: 1,
        needsTaskExecutors: true
    ) { world in
        let run = CheckerRun(world)
        let queue = try! CommandQueue(label: "reprioritized queue", width: 2)
        // The moved operation's ticket, not the operation (whose task holds the world, its executor
        // preference), and the world unowned: the quiescent check lives as long as the world.
        let moved = Mailbox<EngineStateMachine.Ticket>()
        let invariants = run.quiescentCheck([queue.engine])
        world.quiescentCheck = { [unowned world] in
            if let problem = invariants() { return problem }
            guard let ticket = moved.value, world.notes.contains("an operation is re-prioritized") else { return nil }
            return queue.engine.withMachine { machine, _ in
                let entries = machine.table.waitingEntries.filter { $0.slot == ticket.slot }
                guard machine.isWaiting(ticket) else { return nil }
                if entries.count != 1 { return "the re-prioritized operation stands \(entries.count) times in line" }
                let priority = CommandHeap.priority(of: entries[0].key)
                return priority == .highest
                    ? nil
                    : "the re-prioritized operation waits at \(priority), not at its new .highest: it kept its old place"
            }
        }
        world.spawn("A") {
            run.submitted("a1", queue, .medium)
            run.submitted("a2", queue, .medium)
            let late = run.submitted("late", queue, .low)
            moved.value = late.waiter.ticket
            late.setPriority(.highest)
        }
        world.spawn("B") { run.submitted("b1", queue, .high) }
        return { widthFinalCheck(run, queue, ["a1", "a2", "late", "b1"]) }
    }

    /// A running operation of a queue of width 2 cancelled while it holds its slot: it gives the
    /// slot back when it ends, and the waiting operations run.
    static let widthCancelRunning = CheckerScenario(
        name: "command queue of width 2: a running operation cancelled", preemptionBound: 2, needsTaskExecutors: true
    ) { world in
        let run = CheckerRun(world)
        let queue = try! CommandQueue(label: "cancelling queue", width: 2)
        let cancelled = Mailbox<QueuedOperation<Void>>()
        world.quiescentCheck = run.quiescentCheck([queue.engine])
        world.spawn("A") {
            cancelled.value = run.submitted("c", queue, .medium)
            run.submitted("a1", queue, .medium)
            run.submitted("a2", queue, .medium)
        }
        world.spawn("B") { cancelled.value?.cancel() }
        return {
            cancelled.value = nil  // the operation's task holds the world
            return widthFinalCheck(run, queue, ["c", "a1", "a2"])
        }
    }

    /// `cancel()` racing the grant of the operation it cancels, a re-prioritization and a width
    /// change: whenever `cancel()` answers that the operation had not begun (`.waiting`), it never
    /// runs, and right after the call its state is `.cancelled` and `setPriority` changes nothing.
    static let cancelRacingTheGrant = CheckerScenario(
        name: "command queue: a cancel racing the grant, a re-prioritization and a width change", preemptionBound: 1,
        needsTaskExecutors: true
    ) { world in
        let run = CheckerRun(world)
        let queue = try! CommandQueue(label: "cancel queue", width: 2)
        let target = Mailbox<QueuedOperation<Void>>()
        let answer = Mailbox<QueuedOperationState>()
        world.quiescentCheck = run.quiescentCheck([queue.engine])
        world.spawn("A") {
            run.submitted("a1", queue, .medium)
            target.value = run.submitted("t", queue, .low)
            run.submitted("a2", queue, .medium)
        }
        world.spawn("B") {
            guard let operation = target.value else { return }
            let found = operation.cancel()
            answer.value = found
            guard found == .waiting else { return }
            let (state, moved) = (operation.state, operation.setPriority(.highest))
            if state != .cancelled || moved != .cancelled {
                run.report("right after cancel() found t waiting, its state is \(state) and setPriority says \(moved)")
            }
        }
        world.spawn("C") {
            try! queue.setWidth(1)
            run.submitted("c1", queue, .high)
            try! queue.setWidth(2)
        }
        return {
            target.value = nil  // the operation's task holds the world
            if let problem = widthFinalCheck(run, queue, ["a1", "t", "a2", "c1"]) { return problem }
            if answer.value == .waiting && run.didRun("t") {
                return "t ran although cancel() found it waiting, before it began"
            }
            return nil
        }
    }

    /// A release racing the deadline of a blocking waiter: the holder releases early, or only once
    /// the engine's clock (the checker's step clock) is past the waiter's deadline. Then the waiter
    /// must not run: it gives up by itself, or the release passes it over.
    static let releaseRacingADeadline = CheckerScenario(
        name: "a release racing a waiter's deadline", preemptionBound: 2
    ) { world in
        let run = CheckerRun(world)
        let value = QueueSafeValue(value: 0, label: "deadline race")
        let deadline = Mailbox<UInt64>()
        let releasedLate = Mailbox<Bool>()
        world.quiescentCheck = run.quiescentCheck([value.engine])
        world.spawn("holder") {
            let result = value.wait.set { _ in
                let waiterRanBefore = run.didRun("t")
                // Each look takes the engine lock: a step, so the clock moves on.
                var looks = 0
                while looks < 8 && value.engine.pendingCount == 0 { looks += 1 }
                let late = deadline.value.map { $0 + 2_000 } ?? .max
                while looks < 24 && SyncPoints.now().uptimeNanoseconds < late {
                    looks += 1
                    _ = value.engine.pendingCount
                }
                // The waiter waits now (it can leave, but not arrive, before this release).
                releasedLate.value =
                    !waiterRanBefore && SyncPoints.now().uptimeNanoseconds >= late && value.engine.pendingCount == 1
            }
            if case .failure(let error) = result { run.report("the holder failed: \(error)") }
        }
        world.spawn("waiter") {
            deadline.value = SyncPoints.now().uptimeNanoseconds + 12_000
            run.blocking("t", value.wait(timeout: .microseconds(12)), .medium)
        }
        return {
            if let problem = run.finalCheck(value.engine, commands: ["t"]) { return problem }
            if releasedLate.value == true && run.didRun("t") {
                return "t ran although the value was released after its deadline"
            }
            return nil
        }
    }

    // MARK: A bound on starvation

    static let boundedOvertaking = CheckerScenario(
        name: "a bound of one overtake: a low command among later high ones", preemptionBound: 2
    ) { world in
        let run = CheckerRun(world)
        let value = QueueSafeValue(value: 0, label: "bounded", fairness: try! .bounded(maxOvertakes: 1))
        let queue = DispatchQueue(label: "bounded queue")
        world.quiescentCheck = run.quiescentCheck([value.engine])
        world.spawn("holder") {
            // Issued while the holder holds the value: the low one first, then two high ones, then
            // a third from another thread, racing the release.
            value.wait.highestPriority.set { _ in
                run.dispatch("low", value, .lowest, on: queue, completion: false)
                run.dispatch("high 1", value, .highest, on: queue, completion: false)
                run.dispatch("high 2", value, .highest, on: queue, completion: false)
                world.spawn("late") { run.blocking("high 3", value.wait, .highest) }
            }
        }
        return {
            if let problem = run.finalCheck(value.engine, commands: ["low", "high 1", "high 2", "high 3"]) {
                return problem
            }
            // At most one command that arrived after it went first.
            let order = run.runOrder
            let lowAt = order.firstIndex(of: "low")!
            return lowAt <= 1 ? nil : "\(order): the low command was overtaken past the bound of 1"
        }
    }

    /// The eventually fair mode, bound 30 µs of the checker's step clock (a microsecond a step): a
    /// thread issues commands back to back (it takes the value ahead of a waiting thread while the
    /// bound allows), another waits at the same priority, a third at a higher one. At every quiet
    /// step nobody was overtaken by a lower priority, and nobody waited past the bound and one hold
    /// (`CheckerRun.fairnessViolation`).
    static let eventualFairness = CheckerScenario(
        name: "eventual fairness: a stream barges, a waiter of its priority and a higher one", preemptionBound: 2
    ) { world in
        let run = CheckerRun(world)
        let value = QueueSafeValue(
            value: 0, label: "eventual", fairness: try! .eventual(starvationBound: .microseconds(30)))
        world.quiescentCheck = run.quiescentCheck([value.engine])
        world.spawn("stream") {
            for index in 1...3 { run.blocking("s\(index)", value.wait, .medium) }
        }
        world.spawn("waiter") { run.blocking("w", value.wait, .medium) }
        world.spawn("urgent") { run.blocking("h", value.wait(timeout: .seconds(60)), .high) }
        return { run.finalCheck(value.engine, commands: ["s1", "s2", "s3", "w", "h"]) }
    }

    /// One issuer's commands keep their order in the eventually fair mode too: its `wait` command
    /// never takes a freed value ahead of the dispatch command it issued before, still waiting.
    static let eventualIssuerOrder = CheckerScenario(
        name: "eventual fairness: one issuer's dispatch command, then its wait", preemptionBound: 2
    ) { world in
        let run = CheckerRun(world)
        let value = QueueSafeValue(
            value: 0, label: "eventual issuer", fairness: try! .eventual(starvationBound: .milliseconds(1)))
        let queue = DispatchQueue(label: "eventual issuer queue")
        world.quiescentCheck = run.quiescentCheck([value.engine])
        world.spawn("issuer") {
            // Issued while the issuer holds the value (behind the waiter, if it came first); its
            // wait arrives right after the release, which may have freed the value for the waiter.
            value.wait.set { _ in run.dispatch("d1", value, .medium, on: queue, completion: false) }
            run.blocking("b2", value.wait, .medium)
        }
        world.spawn("waiter") { run.blocking("w", value.wait, .medium) }
        return {
            if let problem = run.finalCheck(value.engine, commands: ["w", "d1", "b2"]) { return problem }
            let order = run.runOrder
            return order.firstIndex(of: "d1")! < order.firstIndex(of: "b2")!
                ? nil : "\(order): the issuer's wait ran before the dispatch command it issued first"
        }
    }

    /// Every kind of command on an eventually fair value: a dispatch or awaiting command may take
    /// the free value ahead of a waiting thread, and is itself always handed the value directly.
    static let eventualMixedCommands = commandMix(
        name: "eventual fairness: blocking, timed, dispatch and awaiting commands", label: "eventual mixed",
        fairness: try! .eventual(starvationBound: .microseconds(30)),
        priorities: [.medium, .medium, .medium, .medium, .high])

    // MARK: Helping (what HelpingModel explored, on the real storage)

    /// A dispatch command for `queue` that checks it runs on that queue (its own block, or a waiter
    /// that runs on the queue and took it over).
    private static func dispatchOnItsQueue(
        _ run: CheckerRun, _ name: String, _ value: QueueSafeValue<Int>, _ priority: CommandPriority,
        on queue: DispatchQueue, completion: Bool = true
    ) {
        let commands = value.async(performIn: queue).priority(priority)
        let access: @Sendable (inout Int) -> Void = { count in
            run.enter(name)
            if QueueTag.current?.label != queue.label { run.report("\(name) ran off its queue") }
            count += 1
            run.exit(name)
            if !completion { run.end(name, "ran") }
        }
        if completion {
            commands.set(accessClosure: access) { result in
                run.deliver(name)
                run.end(name, CheckerRun.describe(result))
            }
        } else {
            commands.set(accessClosure: access)
        }
    }

    static let waiterBehindItsQueue = CheckerScenario(
        name: "a waiter on the queue behind a dispatch command for it", preemptionBound: 2
    ) { world in
        let run = CheckerRun(world)
        let value = QueueSafeValue(value: 0, label: "helped")
        let queue = DispatchQueue(label: "Q")
        world.quiescentCheck = run.quiescentCheck([value.engine])
        world.spawn("off") { run.blocking("c0", value.wait, .highest) }
        world.submit(
            {
                dispatchOnItsQueue(run, "c1", value, .high, on: queue)
                run.blocking("c2", value.wait, .low)
            }, to: queue)
        return { run.finalCheck(value.engine, commands: ["c0", "c1", "c2"], delivering: ["c1"]) }
    }

    static let twoDispatchAndTwoWaiters = CheckerScenario(
        name: "two dispatch commands, a waiter on the queue and one off it", preemptionBound: 2
    ) { world in
        let run = CheckerRun(world)
        let value = QueueSafeValue(value: 0, label: "helped")
        let queue = DispatchQueue(label: "Q")
        world.quiescentCheck = run.quiescentCheck([value.engine])
        world.submit(
            {
                dispatchOnItsQueue(run, "c0", value, .medium, on: queue)
                dispatchOnItsQueue(run, "c1", value, .high, on: queue)
                run.blocking("c2", value.wait, .low)
            }, to: queue)
        world.spawn("off") { run.blocking("c3", value.wait, .medium) }
        return { run.finalCheck(value.engine, commands: ["c0", "c1", "c2", "c3"], delivering: ["c0", "c1"]) }
    }

    static let dispatchArrivingFromOffTheQueue = CheckerScenario(
        name: "dispatch commands arriving from off the queue while a waiter on it waits", preemptionBound: 2
    ) { world in
        let run = CheckerRun(world)
        let value = QueueSafeValue(value: 0, label: "helped")
        let queue = DispatchQueue(label: "Q")
        world.quiescentCheck = run.quiescentCheck([value.engine])
        world.submit({ run.blocking("c0", value.wait, .low) }, to: queue)
        world.spawn("off 1") {
            dispatchOnItsQueue(run, "c1", value, .high, on: queue)
            run.blocking("c2", value.wait, .medium)
        }
        world.spawn("off 2") { dispatchOnItsQueue(run, "c3", value, .highest, on: queue) }
        return { run.finalCheck(value.engine, commands: ["c0", "c1", "c2", "c3"], delivering: ["c1", "c3"]) }
    }

    static let timedWaiterOnTheQueue = CheckerScenario(
        name: "a timed waiter on the queue gives up around a command handed to it", preemptionBound: 2
    ) { world in
        let run = CheckerRun(world)
        let value = QueueSafeValue(value: 0, label: "helped")
        let queue = DispatchQueue(label: "Q")
        world.quiescentCheck = run.quiescentCheck([value.engine])
        world.spawn("off 1") { run.blocking("c0", value.wait, .highest) }
        world.submit({ run.blocking("c1", value.wait(timeout: .seconds(60)), .low) }, to: queue)
        world.spawn("off 2") { dispatchOnItsQueue(run, "c2", value, .high, on: queue) }
        return { run.finalCheck(value.engine, commands: ["c0", "c1", "c2"], delivering: ["c2"]) }
    }

    static let silentSuccessorsInline = CheckerScenario(
        name: "silent dispatch commands run their successors inline while a waiter on the queue takes over",
        preemptionBound: 2
    ) { world in
        let run = CheckerRun(world)
        let value = QueueSafeValue(value: 0, label: "helped")
        let queue = DispatchQueue(label: "Q")
        world.quiescentCheck = run.quiescentCheck([value.engine])
        world.spawn("off 1") { run.blocking("c0", value.wait, .highest) }
        world.spawn("off 2") {
            dispatchOnItsQueue(run, "c1", value, .high, on: queue, completion: false)
            dispatchOnItsQueue(run, "c2", value, .high, on: queue, completion: false)
        }
        world.submit({ run.blocking("c3", value.wait, .low) }, to: queue)
        return { run.finalCheck(value.engine, commands: ["c0", "c1", "c2", "c3"]) }
    }

    /// The machine lets a releasing block run its successor inline only for the same queue.
    static let silentCommandsOfTwoQueues = CheckerScenario(
        name: "silent dispatch commands of two queues, granted one after another", preemptionBound: 2
    ) { world in
        let run = CheckerRun(world)
        let value = QueueSafeValue(value: 0, label: "two queues")
        let first = DispatchQueue(label: "Q")
        let second = DispatchQueue(label: "R")
        world.quiescentCheck = run.quiescentCheck([value.engine])
        world.spawn("off") {
            run.blocking("c0", value.wait, .highest)
            dispatchOnItsQueue(run, "c1", value, .high, on: first, completion: false)
        }
        world.spawn("other") {
            dispatchOnItsQueue(run, "c2", value, .high, on: second, completion: false)
            dispatchOnItsQueue(run, "c3", value, .high, on: first, completion: false)
        }
        return { run.finalCheck(value.engine, commands: ["c0", "c1", "c2", "c3"]) }
    }

    /// Dispatch commands queue behind a thread, one with a completion and one without, from one
    /// issuer: the thread's release grants the first, whose block delivers its completion only
    /// after it started the second (a grant for the same queue, by a block that must not run it
    /// inline behind a delivery).
    static let dispatchBehindAThread = CheckerScenario(
        name: "dispatch commands queued behind a thread, one with a completion", preemptionBound: 2
    ) { world in
        let run = CheckerRun(world)
        let value = QueueSafeValue(value: 0, label: "behind a thread")
        let queue = DispatchQueue(label: "Q")
        world.quiescentCheck = run.quiescentCheck([value.engine])
        world.spawn("holder") { run.blocking("c0", value.wait, .highest) }
        world.spawn("off") {
            dispatchOnItsQueue(run, "c1", value, .high, on: queue)
            dispatchOnItsQueue(run, "c2", value, .medium, on: queue, completion: false)
        }
        return { run.finalCheck(value.engine, commands: ["c0", "c1", "c2"], delivering: ["c1"]) }
    }

    static let waiterOnAnotherQueue = CheckerScenario(
        name: "a waiter on another queue takes over the command while a waiter on its queue registers",
        preemptionBound: 2
    ) { world in
        let run = CheckerRun(world)
        let value = QueueSafeValue(value: 0, label: "helped")
        let queue = DispatchQueue(label: "Q")
        let other = DispatchQueue(label: "R")
        world.quiescentCheck = run.quiescentCheck([value.engine])
        world.spawn("off") {
            run.blocking("c0", value.wait, .highest)
            dispatchOnItsQueue(run, "c1", value, .high, on: queue)
        }
        world.submit({ run.blocking("c2", value.wait, .low) }, to: queue)
        world.submit({ run.blocking("c3", value.wait, .medium) }, to: other)
        return { run.finalCheck(value.engine, commands: ["c0", "c1", "c2", "c3"], delivering: ["c1"]) }
    }

    /// Issue 18: the queue is tagged only when the dispatch command is submitted, after the waiter
    /// on it may have parked: the waiter must learn then that it runs on that queue.
    static let queueTaggedAfterTheWaiterParked = CheckerScenario(
        name: "a queue tagged only after a waiter on it parked", preemptionBound: 2
    ) { world in
        let run = CheckerRun(world)
        let value = QueueSafeValue(value: 0, label: "late tag")
        let queue = DispatchQueue(label: "Q")
        world.quiescentCheck = run.quiescentCheck([value.engine])
        world.spawn("holder") { run.blocking("c0", value.wait, .highest) }
        world.submitUntagged({ run.blocking("c1", value.wait, .low) }, to: queue)
        world.spawn("off") { dispatchOnItsQueue(run, "c2", value, .high, on: queue) }
        return { run.finalCheck(value.engine, commands: ["c0", "c1", "c2"], delivering: ["c2"]) }
    }

    // MARK: Priority inheritance

    /// A task waiter raises the holder while it waits, and may be cancelled at any moment: a raise
    /// never begins once the waiter no longer waits, and never outlives the hold.
    static let boostAndCancellation = CheckerScenario(
        name: "a waiter raises the holder while it is cancelled and the holder releases", preemptionBound: 2,
        needsTaskExecutors: true
    ) { world in
        let run = CheckerRun(world)
        let value = QueueSafeValue(value: 0, label: "boosted")
        let task = Mailbox<Task<Void, Never>>()
        world.quiescentCheck = run.quiescentCheck([value.engine])
        world.spawn("holder") { run.blocking("b0", value.wait, .high) }
        world.spawn("issuer") { run.awaiting("a1", value.async, .medium, tasks: task) }
        world.spawn("canceller") { task.value?.cancel() }
        world.spawn("late") { run.blocking("b2", value.wait, .low) }
        return { run.finalCheck(value.engine, commands: ["b0", "a1", "b2"]) }
    }

    /// Issue 28: a chain of two values. X holds B; L holds A and waits for B; a real-time H (20)
    /// waits for A. Whenever no thread is passing a change along (see `inheritanceViolation`), L
    /// runs at H's urgency, L's wait for B passes it on, and X runs at it too; each drops it with
    /// the hold that needed it.
    static let inheritanceChain = chainOfTwo(
        name: "a real-time waiter at the end of a chain of two values", timedWaiter: false)

    /// Issue 28: the same chain, with a timed H that may give up at any point: its boost leaves with
    /// it, at every link, while L and X still hold.
    static let inheritanceChainTimedWaiter = chainOfTwo(
        name: "a timed real-time waiter leaves a chain of two values", timedWaiter: true)

    /// The chain of two values of ``inheritanceChain``, with H waiting without or with a deadline.
    private static func chainOfTwo(name: String, timedWaiter: Bool) -> CheckerScenario {
        CheckerScenario(name: name, preemptionBound: 2) { world in
            let run = CheckerRun(world)
            let (a, b) = (QueueSafeValue(value: 0, label: "A"), QueueSafeValue(value: 0, label: "B"))
            world.quiescentCheck = run.quiescentCheck([a.engine, b.engine])
            world.spawn("X") { run.blocking("x", b.wait, .high) }
            world.spawn("L") { run.blockingNested("l outer", a, "l inner", b, .high) }
            world.spawn("H", urgency: 20) {
                run.blocking("h", timedWaiter ? a.wait(timeout: .seconds(60)) : a.wait, .high)
            }
            return {
                if let problem = run.expectEnded(["x", "l inner", "l outer", "h"]) { return problem }
                let raised = world.boostRegistry.contributions
                return raised.isEmpty ? nil : "a boost outlived every hold: \(raised)"
            }
        }
    }

    /// Issue 28: a mixed chain of three values. X, a thread, holds C; a task T holds B and awaits
    /// C; L, a thread, holds A and waits for B; a real-time H waits for A. The thread urgency
    /// passes through the task to X.
    static let inheritanceChainThroughATask = CheckerScenario(
        name: "a real-time waiter, a thread, a task and a thread: a chain of three values", preemptionBound: 1,
        needsTaskExecutors: true
    ) { world in
        let run = CheckerRun(world)
        let values = ["A", "B", "C"].map { QueueSafeValue(value: 0, label: $0) }
        world.quiescentCheck = run.quiescentCheck(values.map(\.engine))
        world.spawn("X") { run.blocking("x", values[2].wait, .high) }
        world.spawn("issuer") { run.awaitingNested("t", values[1], "t inner", values[2]) }
        world.spawn("L") { run.blockingNested("l outer", values[0], "l inner", values[1], .high) }
        world.spawn("H", urgency: 20) { run.blocking("h", values[0].wait, .high) }
        return {
            if let problem = run.expectEnded(["x", "t", "t inner", "l inner", "l outer", "h"]) { return problem }
            let raised = world.boostRegistry.contributions
            return raised.isEmpty ? nil : "a boost outlived every hold: \(raised)"
        }
    }

    /// Issue 41: a chain of three values through threads only. X holds C; M holds B and waits for
    /// C; L holds A and waits for B; a real-time H waits for A. H's urgency must reach X two links
    /// down (a walk stopped after one link leaves M passing on less than it inherits).
    static let inheritanceChainOfThreads = CheckerScenario(
        name: "a real-time waiter and three threads: a chain of three values", preemptionBound: 1
    ) { world in
        let run = CheckerRun(world)
        let values = ["A", "B", "C"].map { QueueSafeValue(value: 0, label: $0) }
        world.quiescentCheck = run.quiescentCheck(values.map(\.engine))
        world.spawn("X") { run.blocking("x", values[2].wait, .high) }
        world.spawn("M") { run.blockingNested("m outer", values[1], "m inner", values[2], .high) }
        world.spawn("L") { run.blockingNested("l outer", values[0], "l inner", values[1], .high) }
        world.spawn("H", urgency: 20) { run.blocking("h", values[0].wait, .high) }
        return {
            if let problem = run.expectEnded(["x", "m inner", "m outer", "l inner", "l outer", "h"]) { return problem }
            let raised = world.boostRegistry.contributions
            return raised.isEmpty ? nil : "a boost outlived every hold: \(raised)"
        }
    }

    // MARK: Priority inheritance on Apple platforms

    /// Issue 41: the Apple platforms' policy (QoS overrides, through the world's fake of the
    /// platform) on the scenarios that raise, move and end boosts: a task waiter cancelled while it
    /// raises a thread holder (a task's priority is a QoS class there), a timed waiter leaving a
    /// chain of two values, three threads in a chain, and a timed waiter raising a dispatch holder.
    /// At every quiet step each thread runs at exactly the higher of its own class and what it
    /// inherits, and after every run no override is left (each started one ended exactly once).
    static let onApplePlatforms: [CheckerScenario] = [
        boostAndCancellation, inheritanceChainTimedWaiter, inheritanceChainOfThreads, engineLockOrder,
    ].map { $0.simulating(.apple) }

    /// Issue 41: on Apple platforms a holder whose own QoS class reaches its waiter's is not given an
    /// override (Linux never raised such a thread; the Darwin branch used to start one), and a waiter
    /// of unspecified class raises nothing: the world's fake of the platform reports either as a
    /// misuse. Two threads at one class and one of none take one value in every order.
    static let appleHolderThatReachesItsWaiter = CheckerScenario(
        name: "holders at their waiter's class and a waiter of no class, under Apple's QoS overrides",
        preemptionBound: 2
    ) { world in
        world.simulate(.apple)
        let run = CheckerRun(world)
        let value = QueueSafeValue(value: 0, label: "QoS")
        world.quiescentCheck = run.quiescentCheck([value.engine])
        world.spawn("A at 25", urgency: 25) { run.blocking("a0", value.wait, .high) }
        world.spawn("B at 25", urgency: 25) { run.blocking("b1", value.wait, .high) }
        world.spawn("unspecified") { run.blocking("u2", value.wait, .low) }
        return { run.finalCheck(value.engine, commands: ["a0", "b1", "u2"]) }
    }

    // MARK: The engine's own locks

    /// Issue 29: the three shapes that once closed a cycle of the engine's own locks, on one value.
    /// A waiter registers for deadlock detection behind a shared read (the detector reads the
    /// readers under the boost lock); a dispatch command holds next, and a timed real-time waiter
    /// raises it (the boost lock, then the engine lock) and may give up meanwhile (its snapshot,
    /// under the engine lock, names the dispatch holder's queue). The lock-order check (see
    /// `LockOrder`) sees every nesting these take.
    static let engineLockOrder = CheckerScenario(
        name: "the engine's locks: a waiter behind reads, a timed waiter raising a dispatch holder", preemptionBound: 1
    ) { world in
        let run = CheckerRun(world)
        let value = QueueSafeValue(value: 0, label: "lock order")
        let queue = DispatchQueue(label: "holder's queue")
        world.quiescentCheck = run.quiescentCheck([value.engine])
        world.spawn("reader") {
            run.readBlocking("r0", value.wait, .highest)
            run.dispatch("d1", value, .high, on: queue)
        }
        world.spawn("behind the reads") { run.blocking("w2", value.wait, .medium) }
        world.spawn("timed", urgency: 20) { run.blocking("t3", value.wait(timeout: .seconds(60)), .low) }
        return { run.finalCheck(value.engine, commands: ["d1", "w2", "t3"], reads: ["r0"], delivering: ["d1"]) }
    }

    // MARK: Deadlocks

    /// Two threads take two values in opposite orders: no schedule hangs, at least one of the two
    /// inner commands is refused with `.deadlock` when both hold their first value, and a refused
    /// command never ran.
    static let lockOrderCycle = CheckerScenario(
        name: "two threads take two values in opposite orders", preemptionBound: 2
    ) {
        world in
        let run = CheckerRun(world)
        let first = QueueSafeValue(value: 0, label: "first")
        let second = QueueSafeValue(value: 0, label: "second")
        world.quiescentCheck = run.quiescentCheck([first.engine, second.engine])
        world.spawn("A") { run.blockingNested("A outer", first, "A inner", second) }
        world.spawn("B") { run.blockingNested("B outer", second, "B inner", first) }
        return {
            if let problem = run.expectEnded(["A outer", "B outer", "A inner", "B inner"]) { return problem }
            for inner in ["A inner", "B inner"] where run.outcome(of: inner) == "deadlock" && run.didRun(inner) {
                return "\(inner) ran although it was refused"
            }
            return nil
        }
    }

    /// Issue 30: a task that holds a value registers its wait for deadlock detection (one that
    /// holds nothing does not: see `CommandEngine.waitForTurn`), so a cycle through a task and a
    /// thread is refused, whoever closes it, and no schedule hangs.
    static let lockOrderCycleWithATask = lockOrderCycleWithATask(
        name: "a task and a thread take two values in opposite orders", taskReads: false)

    /// The same cycle through a task's shared read, which holds on the idle path when it comes
    /// first: whoever waits for it finds it only once the boost lock lists it.
    static let lockOrderCycleThroughATaskRead = lockOrderCycleWithATask(
        name: "a task reading one value and a thread take two values in opposite orders", taskReads: true)

    static func lockOrderCycleWithATask(name: String, taskReads: Bool) -> CheckerScenario {
        CheckerScenario(name: name, preemptionBound: 2, needsTaskExecutors: true) { world in
            let run = CheckerRun(world)
            let first = QueueSafeValue(value: 0, label: "first")
            let second = QueueSafeValue(value: 0, label: "second")
            world.quiescentCheck = run.quiescentCheck([first.engine, second.engine])
            world.spawn("issuer") { run.awaitingNested("T outer", first, "T inner", second, outerReads: taskReads) }
            world.spawn("B") { run.blockingNested("B outer", second, "B inner", first) }
            return {
                if let problem = run.expectEnded(["T outer", "B outer", "T inner", "B inner"]) { return problem }
                for inner in ["T inner", "B inner"] where !["ran", "deadlock"].contains(run.outcome(of: inner)) {
                    return "\(inner) ended with \(run.outcome(of: inner)!)"
                }
                for outer in ["T outer", "B outer"] where run.outcome(of: outer) != "ran" {
                    return "\(outer) ended with \(run.outcome(of: outer)!)"
                }
                return nil
            }
        }
    }

    /// A chain without a cycle: nobody is refused.
    static let lockOrderChain = CheckerScenario(
        name: "three threads, a chain of values without a cycle", preemptionBound: 2
    ) {
        world in
        let run = CheckerRun(world)
        let values = (0..<3).map { QueueSafeValue(value: 0, label: "v\($0)") }
        world.quiescentCheck = run.quiescentCheck(values.map(\.engine))
        for index in 0..<2 {
            world.spawn("T\(index)") {
                run.blockingNested("outer \(index)", values[index], "inner \(index)", values[index + 1])
            }
        }
        world.spawn("T2") { run.blocking("inner 2", values[2].wait, .highest) }
        return {
            if let problem = run.expectEnded(["outer 0", "outer 1", "inner 0", "inner 1", "inner 2"]) {
                return problem
            }
            let refused = ["inner 0", "inner 1", "inner 2"].filter { run.outcome(of: $0) == "deadlock" }
            return refused.isEmpty ? nil : "\(refused) refused a wait that closed no cycle"
        }
    }

    // MARK: Shared reads

    static let sharedReads = CheckerScenario(
        name: "shared reads of every schedule beside a writer", preemptionBound: 2, needsTaskExecutors: true
    ) { world in
        let run = CheckerRun(world)
        let value = QueueSafeValue(value: 0, label: "shared")
        let queue = DispatchQueue(label: "readers")
        world.quiescentCheck = run.quiescentCheck([value.engine])
        world.spawn("A") {
            run.readBlocking("r0", value.wait, .medium)
            run.readDispatch("r1", value, .medium, on: queue)
        }
        world.spawn("B") { run.writeBlocking("w0", value.wait, .medium) }
        world.spawn("C") { run.readAwaiting("r2", value.async, .high) }
        return { run.finalCheck(value.engine, commands: ["w0"], reads: ["r0", "r1", "r2"]) }
    }

    /// Issued in one order while a read holds the value: a read of higher priority than the waiting
    /// writer joins at once, a read of the writer's priority never overtakes it, and a late reader
    /// keeps the rules too.
    static let readsAndTheWaitingOrder = CheckerScenario(
        name: "reads never overtake a writer waiting ahead of them", preemptionBound: 2
    ) { world in
        let run = CheckerRun(world)
        let value = QueueSafeValue(value: 0, label: "ordered reads")
        let (writes, early, late) = (DispatchQueue(label: "W"), DispatchQueue(label: "R1"), DispatchQueue(label: "R2"))
        world.quiescentCheck = run.quiescentCheck([value.engine])
        world.spawn("issuer") {
            _ = value.wait.highestPriority.readResult { _ in
                run.dispatch("w1", value, .medium, on: writes, completion: false)
                run.readDispatch("r1", value, .medium, on: early)
                run.readDispatch("r2", value, .high, on: late)
            }
        }
        world.spawn("late reader") { run.readBlocking("r3", value.wait, .medium) }
        return {
            if let problem = run.finalCheck(value.engine, commands: ["w1"], reads: ["r1", "r2", "r3"]) {
                return problem
            }
            let order = run.runOrder
            guard let w1 = order.firstIndex(of: "w1"), let r1 = order.firstIndex(of: "r1"),
                let r2 = order.firstIndex(of: "r2")
            else { return "\(order): a command did not run" }
            if r2 > w1 { return "\(order): the high-priority read ran after the medium writer" }
            if r1 < w1 { return "\(order): a read overtook the writer waiting ahead of it at its priority" }
            return nil
        }
    }

    /// Blocking reads on the idle path (one compare-and-swap each way, no lock): a writer arrives
    /// while one holds and another races in; a read issued once the writer waits must not join past
    /// it, and the last idle reader, whichever it is, must hand the section on.
    static let idleReadersAndAWriter = CheckerScenario(
        name: "idle readers: a writer arrives while they hold, a read after it waits", preemptionBound: 2
    ) { world in
        let run = CheckerRun(world)
        let value = QueueSafeValue(value: 0, label: "idle reads")
        let writes = DispatchQueue(label: "W")
        let writerWaits = Parker()
        world.quiescentCheck = run.quiescentCheck([value.engine])
        world.spawn("A") {
            let outer = value.wait.readResult { _ in
                run.dispatch("w1", value, .medium, on: writes, completion: false)
                writerWaits.unpark()
            }
            run.end("outer", CheckerRun.describe(outer))
        }
        world.spawn("B") { run.readBlocking("r0", value.wait, .medium) }
        world.spawn("C") {
            writerWaits.park()
            run.readBlocking("r2", value.wait, .medium)
        }
        return {
            if let problem = run.finalCheck(value.engine, commands: ["w1"], reads: ["outer", "r0", "r2"]) {
                return problem
            }
            let order = run.runOrder
            guard let w1 = order.firstIndex(of: "w1"), let r2 = order.firstIndex(of: "r2") else {
                return "\(order): a command did not run"
            }
            if r2 < w1 { return "\(order): a read overtook the writer waiting ahead of it at its priority" }
            return nil
        }
    }

    /// An idle reader that saw `slowRelease` (a dispatch read it issued joined it, listed) leaves
    /// through the lock, while the listed read's release clears `slowRelease` again and another
    /// read joins on the word and stays: no count may be lost.
    static let idleAndListedReaders = CheckerScenario(
        name: "idle readers: one leaves through the lock while the word reopens", preemptionBound: 2
    ) { world in
        let run = CheckerRun(world)
        let value = QueueSafeValue(value: 0, label: "idle and listed reads")
        let queue = DispatchQueue(label: "listed reader")
        let leave = Parker()
        world.quiescentCheck = run.quiescentCheck([value.engine])
        world.spawn("A") {
            let outer = value.wait.readResult { _ in run.readDispatch("r1", value, .medium, on: queue) }
            run.end("r0", CheckerRun.describe(outer))
            leave.unpark()
        }
        world.spawn("C") {
            let read = value.wait.readResult { _ in leave.park() }
            run.end("r2", CheckerRun.describe(read))
            run.writeBlocking("w3", value.wait, .medium)
        }
        return { run.finalCheck(value.engine, commands: ["w3"], reads: ["r0", "r1", "r2"]) }
    }

    /// A writer with a deadline waits between a manual read and a read behind it; the deadline, the
    /// completion and the grants race.
    static let readersAndADeadline = CheckerScenario(
        name: "a timed writer between readers leaves while they race", preemptionBound: 2
    ) { world in
        let run = CheckerRun(world)
        let value = QueueSafeValue(value: 0, label: "timed between reads")
        let handedOut = Parker()
        let later = Mailbox<HeldCompletion>(handedOut)
        world.quiescentCheck = run.quiescentCheck([value.engine])
        world.spawn("A") { run.readBlockingManual("r0", value.wait, .medium, done: .later, later: later) }
        world.spawn("B") { run.blocking("t1", value.wait(timeout: .seconds(60)), .medium) }
        world.spawn("C") { run.readBlocking("r2", value.wait, .medium) }
        world.spawn("completer") {
            handedOut.park()
            later.take()?.call()
        }
        return { run.finalCheck(value.engine, commands: ["t1"], reads: ["r0", "r2"]) }
    }

    /// Two dispatch reads for the queue a waiting thread blocks: the thread runs both.
    static let readsForTheWaitersQueue = CheckerScenario(
        name: "a waiter on the queue behind two dispatch reads for it", preemptionBound: 2
    ) { world in
        let run = CheckerRun(world)
        let value = QueueSafeValue(value: 0, label: "helped reads")
        let queue = DispatchQueue(label: "Q")
        world.quiescentCheck = run.quiescentCheck([value.engine])
        world.spawn("off") { run.writeBlocking("c0", value.wait, .highest) }
        world.submit(
            {
                run.readDispatch("r1", value, .high, on: queue)
                run.readDispatch("r2", value, .high, on: queue)
                run.blocking("c3", value.wait, .low)
            }, to: queue)
        return { run.finalCheck(value.engine, commands: ["c0", "c3"], reads: ["r1", "r2"]) }
    }

    static let readersAndContainerRelease = CheckerScenario(
        name: "the container is released while reads hold and wait", preemptionBound: 2, needsTaskExecutors: true
    ) { world in
        let run = CheckerRun(world)
        let box = ContainerBox(QueueSafeValue(value: 0, label: "released reads"))
        let (wait, async) = (box.value!.wait, box.value!.async)
        let queue = DispatchQueue(label: "released readers")
        world.quiescentCheck = run.quiescentCheck([box.engine])
        world.spawn("A") {
            if let value = box.value {
                run.readDispatch("r0", value, .low, on: queue)
            } else {
                run.end("r0", "not issued")
            }
            run.readBlocking("r1", wait, .low)
        }
        world.spawn("B") {
            run.readBlocking("r2", wait, .high)
            box.value = nil
        }
        world.spawn("C") { run.awaiting("a3", async, .medium) }
        return { run.finalCheck(box.engine, commands: ["a3"], reads: ["r0", "r1", "r2"], freed: true) }
    }

    static let lockOrderCycleThroughReads = CheckerScenario(
        name: "two threads read one value and write the other", preemptionBound: 2
    ) {
        world in
        let run = CheckerRun(world)
        let first = QueueSafeValue(value: 0, label: "first")
        let second = QueueSafeValue(value: 0, label: "second")
        world.quiescentCheck = run.quiescentCheck([first.engine, second.engine])
        world.spawn("A") {
            let outer = first.wait.highestPriority.readResult { _ in run.blocking("A inner", second.wait, .highest) }
            run.end("A outer", CheckerRun.describe(outer))
        }
        world.spawn("B") {
            let outer = second.wait.highestPriority.readResult { _ in run.blocking("B inner", first.wait, .highest) }
            run.end("B outer", CheckerRun.describe(outer))
        }
        return {
            if let problem = run.expectEnded(["A outer", "B outer", "A inner", "B inner"]) { return problem }
            for inner in ["A inner", "B inner"] where run.outcome(of: inner) == "deadlock" && run.didRun(inner) {
                return "\(inner) ran although it was refused"
            }
            return nil
        }
    }
}

// MARK: Lock sections per command

extension CheckerScenarios {
    /// The scenarios that count each command's sections of the engine's lock (see
    /// `CheckerScenario.lockSectionLimits`): a holder and one waiter of each shape; either may
    /// come first. A party that waits takes 1 to take its place and 1 to park or suspend (its
    /// urgency, the raise of its holder and its helper role included), and a resumed task 1 to
    /// read its verdict; its release takes 1 when someone waits behind it. A dispatch command takes 1 to take its place, and its block 1 to
    /// release. A timed waiter that gives up takes 2 more: to leave, and to count the timeout.
    /// The queue's party runs two commands, the dispatch command and the waiter that helps it.
    static let lockSections = [
        contended("blocking", limits: ["holder": 2, "waiter": 2]) { world, run, value, _ in
            world.spawn("waiter") { run.blocking("waiter", value.wait, .high) }
        },
        contended("blocking command of a real-time thread", limits: ["holder": 2, "waiter": 2]) {
            world, run, value, _ in
            world.spawn("waiter", urgency: 20) { run.blocking("waiter", value.wait, .high) }
        },
        contended("awaiting", tasks: true, limits: ["holder": 2, "waiter": 3]) { world, run, value, _ in
            if #available(macOS 15, iOS 18, tvOS 18, watchOS 11, visionOS 2, *) {
                StorageChecker.startedTask(in: world)
                Task(executorPreference: world.taskExecutor(named: "waiter")) {
                    _ = try? await value.async.priority(.high).set { count in
                        run.enter("waiter")
                        count += 1
                        run.exit("waiter")
                    }
                    run.end("waiter", "ran")
                }
            }
        },
        contended("dispatch", limits: ["holder": 2, "waiter": 1, "queue 'Q'": 1]) { world, run, value, queue in
            world.spawn("waiter") { run.dispatch("waiter", value, .high, on: queue) }
        },
        contended("timed blocking", limits: ["holder": 2, "waiter": 4]) { world, run, value, _ in
            world.spawn("waiter") { run.blocking("waiter", value.wait(timeout: .milliseconds(1)), .high) }
        },
        contended("blocking on its queue behind a dispatch command for it", limits: ["holder": 3, "queue 'Q'": 4]) {
            world, run, value, queue in
            world.submit(
                {
                    dispatchOnItsQueue(run, "dispatched", value, .high, on: queue)
                    run.blocking("waiter", value.wait, .low)
                }, to: queue)
        },
    ]

    /// A blocking holder at low priority, and the waiter `spawn` starts.
    private static func contended(
        _ shape: String, tasks: Bool = false, limits: [String: Int],
        spawn: @escaping @Sendable (ControlledWorld, CheckerRun, QueueSafeValue<Int>, DispatchQueue) -> Void
    ) -> CheckerScenario {
        CheckerScenario(
            name: "lock sections: a contended \(shape)", preemptionBound: 2, needsTaskExecutors: tasks,
            lockSectionLimits: limits
        ) { world in
            let run = CheckerRun(world)
            let value = QueueSafeValue(value: 0, label: "counted")
            let queue = DispatchQueue(label: "Q")
            world.quiescentCheck = run.quiescentCheck([value.engine])
            world.spawn("holder") { run.blocking("holder", value.wait, .low) }
            spawn(world, run, value, queue)
            return {
                let helped = shape.hasSuffix("for it")
                return run.finalCheck(
                    value.engine, commands: ["holder", "waiter"] + (helped ? ["dispatched"] : []),
                    delivering: shape == "dispatch" ? ["waiter"] : helped ? ["dispatched"] : [])
            }
        }
    }
}
