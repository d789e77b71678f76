@testable import QueueSafeValue

// The world the helping explorer runs: one engine (the real `EngineStateMachine`, with its helper
// registry), one *serial* dispatch queue whose blocks run one at a time, and actors that issue
// dispatch commands for that queue and blocking commands — some from a block running on the queue.
//
// It models what `CommandEngine`, `BlockingWaiter` and `DispatchedCommand` do around helping, step by
// atomic step. The dispatched holder's slot is empty, holds a granted command whose block has not
// started, or says "started". A release that grants a dispatch command publishes it in the same lock
// section (or, if a waiter on its queue is registered as a helper, marks the slot started and hands
// the command to that waiter as a job); a command that took a free section publishes itself right
// after. Its block claims it with a compare-and-swap to "started", or finds it taken over; a block
// whose command delivers nothing claims its granted successor inline. A blocking waiter that runs on
// a tagged queue takes over a published command (waiting while the holder is a dispatch command that
// has yet to publish itself): it runs it if it runs on the command's queue, or else publishes it
// again under the lock (or hands it to a helper) and queues a block for it; then it registers as a
// helper, checks again, and runs jobs until granted. A waiter on no tagged queue never takes over. A timed waiter may give up while parked, and then runs a job
// handed to it before it left.
//
// It checks: no world ends stuck (a waiter on the queue never waits for a block that cannot run);
// every dispatch command runs exactly once, on its queue (its block, or a helper running on the
// queue), and delivers its completion once; at most one command holds the section.

struct HelpingCommand: Hashable {
    enum Kind: Hashable {
        /// A dispatch command with a completion to deliver.
        case dispatch
        /// A dispatch command without a completion: its block runs a granted successor inline.
        case dispatchSilent
        case blocking
        /// A blocking command with a deadline, which may pass while it is parked.
        case timedBlocking
    }

    var kind: Kind
    var priority: CommandPriority

    var isDispatch: Bool { kind == .dispatch || kind == .dispatchSilent }
}

struct HelpingScenario {
    var name: String
    var commands: [HelpingCommand]
    /// Each actor issues its commands in order; `onQueue` actors run as one block of the queue.
    var actors: [(onQueue: Bool, commands: [Int])]
    /// Actors off the queue that run on another tagged queue: as waiters they take over a published
    /// command, find it is not for their queue, and publish it again (or hand it to a helper).
    var onOtherQueue: Set<Int> = []
}

struct HelpingWorld: ExplorableWorld {
    typealias Machine = EngineStateMachine<Int>

    enum Block: Hashable {
        /// An actor's program, running on the queue.
        case actor(Int)
        /// A granted command's block: it claims the command, or finds it taken over.
        case claim(Int)
        /// A completion, delivered after the hand-off.
        case delivery(Int)
    }

    enum Executor: Hashable {
        case block
        case helper(Int)
    }

    /// The engine's slot for the dispatched holder (word 4).
    enum Slot: Hashable {
        case empty
        case published(Int)
        case started
    }

    enum Phase: Hashable {
        case notIssued
        // Submission (by the issuing actor's thread).
        case fastAcquire
        case enqueue
        case enqueueStore(word: Int, admission: Admission)
        // A blocking waiter.
        case takeOver(second: Bool)
        /// Took over `command`, which is not for its queue: publishes it again under the lock, or
        /// hands it to a helper.
        case republish(command: Int, second: Bool)
        case republishPerform(command: Int, helper: Int?, second: Bool)
        case registerHelper
        case waitDecide
        case parked
        case leave
        case runJobAfterLeaving
        case awaitGrant
        // Holding (the closure runs between the grant and this).
        case releaseClearSlot
        case releaseFast
        case releaseLocked
        case releasePerform(next: Int?, job: Int?)
        case done
        // A dispatch command between its grant and its execution.
        case dispatched
    }

    /// The submitting thread's steps after its dispatch command was granted at once.
    enum Submission: Hashable {
        case publish
        case queueBlock
    }

    enum Admission: Hashable {
        case granted
        case queued
    }

    struct CommandState: Hashable {
        var phase: Phase = .notIssued
        var submission: Submission?
        var actor = -1
        var ticket: Machine.Ticket?
        var executor: Executor?
        var executions = 0
        var deliveries = 0
        var holds = false
        var timedOut = false
        // A blocking waiter's hand-off word.
        var granted = false
        var jobBit = false
        var parked = false
        var semaphore = 0
        var job: Int?
        /// While a waiter runs a taken-over or handed-over command, the phase to come back to.
        var helping: Int?
        var resumeAfterHelping: Phase?
    }

    struct ActorState: Hashable {
        var next = 0
        var waitingFor: Int?
        var started = false
    }

    enum Step {
        case actor(Int)
        case command(Int)
        /// The thread that submitted a dispatch command granted at once publishes it, then queues its block.
        case submit(Int)
        /// A timed waiter's deadline passes while it is parked.
        case deadline(Int)
        case queue
    }

    let scenario: HelpingScenario
    var machine = Machine()
    var word = 0
    var lock: Int?
    var slot = Slot.empty
    var queue: [Block] = []
    var running: Block?
    var actors: [ActorState]
    var commands: [CommandState]
    var error: String?

    init(_ scenario: HelpingScenario) {
        self.scenario = scenario
        actors = Array(repeating: ActorState(), count: scenario.actors.count)
        commands = Array(repeating: CommandState(), count: scenario.commands.count)
        for (index, actor) in scenario.actors.enumerated() where actor.onQueue { queue.append(.actor(index)) }
    }

    private static let queueID = 42
    private static let otherQueueID = 43

    private var holderIsDispatch: Bool { word & EngineWord.holderMask == CommandKind.dispatched.wordBits }

    // MARK: Who may step

    /// Whether `actor` may run now: an actor on the queue only while its block runs.
    private func canRun(actor: Int) -> Bool {
        !scenario.actors[actor].onQueue || running == .actor(actor)
    }

    /// Whether the thread executing `command`'s steps may run now: a dispatch command being executed
    /// runs on its executor's thread; anything else on its actor's thread, unless that thread is busy
    /// running another command (helping).
    private func canRun(command index: Int) -> Bool {
        let command = commands[index]
        if command.executor != nil { return true }
        if command.helping != nil { return false }
        return canRun(actor: command.actor)
    }

    func enabledSteps() -> [Step] {
        var steps: [Step] = []
        if running == nil, !queue.isEmpty { steps.append(.queue) }
        for (index, actor) in actors.enumerated()
        where actor.waitingFor == nil && actor.next < scenario.actors[index].commands.count && canRun(actor: index) {
            steps.append(.actor(index))
        }
        for (index, command) in commands.enumerated() where command.submission != nil {
            if canRun(actor: command.actor) { steps.append(.submit(index)) }
        }
        for (index, command) in commands.enumerated() where command.actor >= 0 && canRun(command: index) {
            switch command.phase {
            case .notIssued, .done, .dispatched:
                continue
            case .enqueue, .registerHelper, .releaseLocked, .leave, .republish:
                if lock == nil { steps.append(.command(index)) }
            case .takeOver:
                // Waits while the holder is a dispatch command that has yet to publish itself.
                if !(holderIsDispatch && slot == .empty) { steps.append(.command(index)) }
            case .parked:
                if command.semaphore > 0 { steps.append(.command(index)) }
                // The deadline wins only while nothing was posted (the compare-and-swap parked → 0).
                if scenario.commands[index].kind == .timedBlocking, command.parked, !command.granted, !command.jobBit {
                    steps.append(.deadline(index))
                }
            case .runJobAfterLeaving:
                if command.job == nil || command.jobBit { steps.append(.command(index)) }
            case .awaitGrant:
                if command.granted { steps.append(.command(index)) }
            default:
                steps.append(.command(index))
            }
        }
        return steps
    }

    func describe(_ step: Step) -> String {
        switch step {
        case .queue: return "queue runs \(queue.first.map { "\($0)" } ?? "nothing")"
        case .actor(let index): return "actor \(index) issues #\(scenario.actors[index].commands[actors[index].next])"
        case .command(let index): return "#\(index) (\(scenario.commands[index].kind)): \(commands[index].phase)"
        case .submit(let index): return "#\(index)'s submitter: \(commands[index].submission.map { "\($0)" } ?? "-")"
        case .deadline(let index): return "#\(index)'s deadline passes"
        }
    }

    // MARK: Applying

    mutating func apply(_ step: Step) {
        switch step {
        case .queue: runBlock()
        case .actor(let index): issue(index)
        case .command(let index): stepCommand(index)
        case .submit(let index): submit(index)
        case .deadline(let index):
            commands[index].parked = false
            commands[index].phase = .leave
        }
        check()
    }

    private mutating func runBlock() {
        let block = queue.removeFirst()
        switch block {
        case .actor(let index):
            running = block
            actors[index].started = true
            if scenario.actors[index].commands.isEmpty { running = nil }
        case .claim(let index):
            if slot == .published(index) {
                slot = .started
                running = block
                execute(index, by: .block)
            }
        case .delivery(let index):
            commands[index].deliveries += 1
        }
    }

    private mutating func issue(_ actor: Int) {
        let index = scenario.actors[actor].commands[actors[actor].next]
        commands[index].actor = actor
        commands[index].phase = .fastAcquire
        actors[actor].waitingFor = index
    }

    /// The actor of `command` goes on (a dispatch command once placed, a blocking one once done).
    private mutating func actorGoesOn(after index: Int) {
        let actor = commands[index].actor
        guard actors[actor].waitingFor == index else { return }
        actors[actor].waitingFor = nil
        actors[actor].next += 1
        if scenario.actors[actor].onQueue, actors[actor].next == scenario.actors[actor].commands.count {
            running = nil  // the actor's block ends
        }
    }

    private mutating func execute(_ index: Int, by executor: Executor) {
        if commands[index].executions > 0 { fail("#\(index) ran twice") }
        if case .helper(let helper) = executor, !scenario.actors[commands[helper].actor].onQueue {
            fail("#\(index) ran on a waiter that does not run on its queue")
        }
        commands[index].executions += 1
        commands[index].executor = executor
        startHolding(index)
    }

    private mutating func startHolding(_ index: Int) {
        if let other = commands.indices.first(where: { commands[$0].holds }) {
            fail("#\(index) and #\(other) hold the section at once")
        }
        commands[index].holds = true
        commands[index].phase = scenario.commands[index].isDispatch ? .releaseClearSlot : .releaseFast
    }

    private mutating func stepCommand(_ index: Int) {
        let isDispatch = scenario.commands[index].isDispatch
        let kind: CommandKind = isDispatch ? .dispatched : .blocking
        switch commands[index].phase {
        case .fastAcquire:
            if word == 0 {
                word = kind.wordBits
                granted(index)
            } else {
                commands[index].phase = .enqueue
            }
        case .enqueue:
            let observed = word
            word |= EngineWord.slowRelease
            lock = index
            let (admission, newWord) = machine.enqueue(
                index, kind: kind, priority: scenario.commands[index].priority, reentrant: false, observed: observed)
            switch admission {
            case .granted:
                commands[index].phase = .enqueueStore(word: newWord, admission: .granted)
            case .queued(let ticket):
                commands[index].ticket = ticket
                commands[index].phase = .enqueueStore(word: newWord, admission: .queued)
            case .refused(let error):
                fail("#\(index) refused: \(error)")
            }
        case .enqueueStore(let newWord, let admission):
            word = newWord
            lock = nil
            if admission == .granted {
                granted(index)
            } else if isDispatch {
                commands[index].phase = .dispatched
                actorGoesOn(after: index)
            } else {
                commands[index].phase = .takeOver(second: false)
            }
        case .takeOver(let second):
            let actor = commands[index].actor
            let onQueue = scenario.actors[actor].onQueue
            let tagged = onQueue || scenario.onOtherQueue.contains(actor)
            let next: Phase = second ? .waitDecide : .registerHelper
            guard tagged else {
                // A thread that runs on no tagged queue never takes over, nor helps.
                commands[index].phase = .waitDecide
                return
            }
            if holderIsDispatch, case .published(let taken) = slot {
                slot = .started
                if onQueue {
                    help(index, with: taken, thenResume: next)
                } else {
                    commands[index].phase = .republish(command: taken, second: second)
                }
            } else {
                commands[index].phase = next
            }
        case .republish(let taken, let second):
            let helper = machine.hasHelpers ? machine.helper(forQueue: Self.queueID) : nil
            if let helper {
                commands[helper].job = taken
            } else {
                slot = .published(taken)
            }
            commands[index].phase = .republishPerform(command: taken, helper: helper, second: second)
        case .republishPerform(let taken, let helper, let second):
            if let helper { post(helper, job: true) } else { queue.append(.claim(taken)) }
            commands[index].phase = second ? .waitDecide : .registerHelper
        case .registerHelper:
            let onQueue = scenario.actors[commands[index].actor].onQueue
            if let ticket = commands[index].ticket {
                machine.registerHelper(ticket, queues: [onQueue ? Self.queueID : Self.otherQueueID])
            }
            commands[index].phase = .takeOver(second: true)
        case .waitDecide:
            if commands[index].granted {
                startHolding(index)
            } else if commands[index].jobBit {
                runJob(index, thenResume: .waitDecide)
            } else {
                commands[index].parked = true
                commands[index].phase = .parked
            }
        case .parked:
            commands[index].semaphore -= 1
            commands[index].phase = .waitDecide
        case .leave:
            if let ticket = commands[index].ticket, machine.leave(ticket) != nil {
                commands[index].timedOut = true
                commands[index].phase = .runJobAfterLeaving
            } else {
                commands[index].phase = .awaitGrant
            }
        case .runJobAfterLeaving:
            // Handed a job before it left (under the lock): it runs it, or that command never runs.
            if commands[index].job != nil {
                runJob(index, thenResume: .runJobAfterLeaving)
            } else {
                commands[index].phase = .done
                actorGoesOn(after: index)
            }
        case .awaitGrant:
            startHolding(index)
        case .releaseClearSlot:
            slot = .empty
            commands[index].phase = .releaseFast
        case .releaseFast:
            if word == kind.wordBits {
                word = 0
                commands[index].holds = false
                afterRelease(index, next: nil)
            } else {
                commands[index].phase = .releaseLocked
            }
        case .releaseLocked:
            let (release, newWord) = machine.release(observed: word)
            word = newWord
            commands[index].holds = false
            var job: Int?
            if let next = release.next, release.nextKind == .dispatched {
                if machine.hasHelpers, let helper = machine.helper(forQueue: Self.queueID) {
                    slot = .started
                    commands[helper].job = next
                    job = helper
                } else {
                    slot = .published(next)
                }
            }
            commands[index].phase = .releasePerform(next: job == nil ? release.next : nil, job: job)
        case .releasePerform(let next, let job):
            if let job {
                post(job, job: true)
                afterRelease(index, next: nil)
            } else if let next, !scenario.commands[next].isDispatch {
                post(next, job: false)
                afterRelease(index, next: nil)
            } else {
                afterRelease(index, next: next)
            }
        case .dispatched, .notIssued, .done:
            fail("#\(index) stepped in \(commands[index].phase)")
        }
    }

    private mutating func submit(_ index: Int) {
        switch commands[index].submission {
        case .publish?:
            slot = .published(index)
            commands[index].submission = .queueBlock
        case .queueBlock?:
            queue.append(.claim(index))
            commands[index].submission = nil
            actorGoesOn(after: index)
        case nil:
            fail("#\(index) submitted twice")
        }
    }

    private mutating func granted(_ index: Int) {
        if scenario.commands[index].isDispatch {
            commands[index].phase = .dispatched
            commands[index].submission = .publish
        } else {
            startHolding(index)
        }
    }

    /// A waiter runs `command` on its own thread, then comes back to `phase`.
    private mutating func help(_ waiter: Int, with command: Int, thenResume phase: Phase) {
        commands[waiter].helping = command
        commands[waiter].resumeAfterHelping = phase
        execute(command, by: .helper(waiter))
    }

    private mutating func runJob(_ waiter: Int, thenResume phase: Phase) {
        commands[waiter].jobBit = false
        guard let job = commands[waiter].job else { return }
        commands[waiter].job = nil
        help(waiter, with: job, thenResume: phase)
    }

    private mutating func post(_ waiter: Int, job: Bool) {
        if job { commands[waiter].jobBit = true } else { commands[waiter].granted = true }
        if commands[waiter].parked {
            commands[waiter].parked = false
            commands[waiter].semaphore += 1
        }
    }

    /// The command released the section; `next` is a granted dispatch command to start.
    private mutating func afterRelease(_ index: Int, next: Int?) {
        guard scenario.commands[index].isDispatch else {
            if let next { queue.append(.claim(next)) }  // start(): its block, which claims it
            commands[index].phase = .done
            actorGoesOn(after: index)
            return
        }
        let delivers = scenario.commands[index].kind == .dispatch
        switch commands[index].executor {
        case .block?:
            if let next {
                if !delivers {
                    // Runs its successor inline, in this same block, unless a waiter took it over.
                    commands[index].phase = .done
                    if slot == .published(next) {
                        slot = .started
                        execute(next, by: .block)
                    } else {
                        running = nil
                    }
                    return
                }
                queue.append(.claim(next))
            }
            if delivers { commands[index].deliveries += 1 }  // inline, at the end of its block
            commands[index].phase = .done
            running = nil
        case .helper(let waiter)?:
            if let next { queue.append(.claim(next)) }
            if delivers { queue.append(.delivery(index)) }  // in a block of its own
            commands[index].phase = .done
            commands[waiter].helping = nil
            commands[waiter].phase = commands[waiter].resumeAfterHelping ?? .waitDecide
            commands[waiter].resumeAfterHelping = nil
        case nil:
            fail("#\(index) released without an executor")
        }
    }

    // MARK: Checks

    private mutating func fail(_ message: String) {
        if error == nil { error = message }
    }

    private mutating func check() {
        if lock == nil, let violation = machine.invariantViolation(word: word) { fail(violation) }
    }

    func violation() -> String? { error }

    func terminalViolation() -> String? {
        for (index, actor) in actors.enumerated() where actor.next < scenario.actors[index].commands.count {
            return "actor \(index) is stuck (waiting for #\(actor.waitingFor.map(String.init) ?? "-"))"
        }
        for (index, command) in commands.enumerated() {
            if command.phase != .done || command.submission != nil { return "#\(index) is stuck in \(command.phase)" }
            let expected = scenario.commands[index].kind == .dispatch ? 1 : 0
            if scenario.commands[index].isDispatch && (command.executions != 1 || command.deliveries != expected) {
                return "#\(index) ran \(command.executions) and delivered \(command.deliveries) times"
            }
        }
        if running != nil || !queue.isEmpty { return "the queue did not drain" }
        if slot != .empty && word == 0 { return "the slot kept \(slot) after the section was freed" }
        return nil
    }

    // MARK: Fingerprint

    var fingerprint: StateFingerprint { StateFingerprint(feed) }

    private func feed(_ hasher: inout Hasher) {
        hasher.combine(word)
        hasher.combine(lock)
        hasher.combine(slot)
        hasher.combine(queue)
        hasher.combine(running)
        hasher.combine(actors)
        hasher.combine(commands)
        hasher.combine(error)
        hasher.combine(machine.waitingCount)
        hasher.combine(machine.hasHelpers)
        for entry in machine.waitingInOrder() { hasher.combine(entry.waiter) }
        for command in commands { hasher.combine(command.ticket.flatMap { machine.summary(of: $0) }) }
    }
}
