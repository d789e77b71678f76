import Dispatch
import Foundation

@testable import QueueSafeValue

/// A program for the controlled scheduler: what one run builds (values, queues, the threads of
/// the world), and what it checks at the end.
struct CheckerScenario: Sendable {
    let name: String
    /// How many preemptions a schedule may have; see `ScheduleExplorer`.
    let preemptionBound: Int
    /// Builds one run's world and returns its final check.
    let build: @Sendable (ControlledWorld) -> () -> String?
}

/// A container that one step of a scenario releases (`value = nil`), while the other steps hold
/// only its schedules.
final class ContainerBox: @unchecked Sendable {  // @unchecked Sendable: released by one thread, once
    var value: QueueSafeValue<Int>?
    let storage: ValueStorage<Int>

    init(_ value: QueueSafeValue<Int>) {
        self.value = value
        storage = value.storage
    }
}

extension CheckerRun {
    /// The final checks every value scenario makes: each command ended once; the value counts the
    /// commands that ran; each dispatch command with a completion delivered it once.
    func finalCheck(
        _ value: ValueStorage<Int>, commands: [String], delivering: [String] = [], freed: Bool = false
    ) -> String? {
        if let problem = expectEnded(commands) { return problem }
        let ran = commands.filter { didRun($0) }.count
        let count: Int
        if freed {
            if !value.isValueFreed {
                return "the value was not freed after its container was released and the queue drained"
            }
            count = ran
        } else {
            count = value.withBlockingAccess(priority: .highest, timeout: nil) { $0 }.valueOrZero
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

    static let mixedCommands = CheckerScenario(
        name: "blocking, timed, dispatch and awaiting commands of mixed priorities", preemptionBound: 1
    ) { world in
        let run = CheckerRun(world)
        let value = QueueSafeValue(value: 0, label: "mixed")
        let queue = DispatchQueue(label: "mixed queue")
        world.quiescentCheck = run.quiescentCheck([value.storage])
        world.spawn("A") {
            run.blocking("c0", value.wait, .low)
            run.dispatch("c1", value, .high, on: queue)
        }
        world.spawn("B") {
            run.blocking("c2", value.wait(timeout: .seconds(60)), .high)
            run.awaiting("c3", value.async, .low)
        }
        world.spawn("C") { run.blocking("c4", value.wait, .highest) }
        return { run.finalCheck(value.storage, commands: ["c0", "c1", "c2", "c3", "c4"], delivering: ["c1"]) }
    }

    static let arrivalOrder = CheckerScenario(name: "one issuer's commands keep their order", preemptionBound: 2) {
        world in
        let run = CheckerRun(world)
        let value = QueueSafeValue(value: 0, label: "ordered")
        let queue = DispatchQueue(label: "ordered queue")
        world.quiescentCheck = run.quiescentCheck([value.storage])
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
            if let problem = run.finalCheck(value.storage, commands: ["d1", "d2", "d3", "b"]) { return problem }
            let order = run.runOrder.filter { $0.hasPrefix("d") }
            return order == ["d3", "d1", "d2"] ? nil : "\(order): a command ran before one which waits ahead of it"
        }
    }

    static let deadlines = CheckerScenario(name: "deadlines pass while the grant races them", preemptionBound: 2) {
        world in
        let run = CheckerRun(world)
        let value = QueueSafeValue(value: 0, label: "deadlines")
        world.quiescentCheck = run.quiescentCheck([value.storage])
        world.spawn("A") { run.blocking("t0", value.wait(timeout: .seconds(60)), .low) }
        world.spawn("B") { run.blocking("t1", value.wait(timeout: .seconds(60)), .high) }
        world.spawn("C") { run.blocking("b2", value.wait, .medium) }
        return { run.finalCheck(value.storage, commands: ["t0", "t1", "b2"]) }
    }

    static let cancellation = CheckerScenario(
        name: "tasks cancelled before, while and after they wait", preemptionBound: 2
    ) {
        world in
        let run = CheckerRun(world)
        let value = QueueSafeValue(value: 0, label: "cancelled")
        let task = Mailbox<Task<Void, Never>>()
        world.quiescentCheck = run.quiescentCheck([value.storage])
        world.spawn("holder") { run.blocking("b0", value.wait, .high) }
        world.spawn("issuer") { run.awaiting("a1", value.async, .medium, tasks: task) }
        world.spawn("canceller") { task.value?.cancel() }
        return { run.finalCheck(value.storage, commands: ["b0", "a1"]) }
    }

    static let manualCompletions = CheckerScenario(
        name: "manual completions: inside, dropped inside, called and dropped later", preemptionBound: 1
    ) { world in
        let run = CheckerRun(world)
        let value = QueueSafeValue(value: 0, label: "manual")
        let queue = DispatchQueue(label: "manual queue")
        let handedOut = Parker()
        let laterBlocking = Mailbox<HeldCompletion>(handedOut)
        let laterDispatch = Mailbox<HeldCompletion>(handedOut)
        world.quiescentCheck = run.quiescentCheck([value.storage])
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
        return { run.finalCheck(value.storage, commands: ["m0", "m1", "m2"], delivering: ["m1", "m2"]) }
    }

    static let containerRelease = CheckerScenario(
        name: "the container is released while commands hold, wait and arrive", preemptionBound: 1
    ) { world in
        let run = CheckerRun(world)
        let box = ContainerBox(QueueSafeValue(value: 0, label: "released"))
        let (wait, async) = (box.value!.wait, box.value!.async)
        let queue = DispatchQueue(label: "released queue")
        world.quiescentCheck = run.quiescentCheck([box.storage])
        world.spawn("A") {
            if let value = box.value { run.dispatch("d0", value, .low, on: queue) } else { run.end("d0", "not issued") }
        }
        world.spawn("B") {
            run.blocking("b1", wait, .high)
            box.value = nil
        }
        world.spawn("C") { run.awaiting("a2", async, .medium) }
        return {
            run.finalCheck(box.storage, commands: ["d0", "b1", "a2"], delivering: ["d0"], freed: true)
        }
    }
}
