import Foundation

@testable import QueueSafeValue

// The world the interleaving explorer runs: the real `EngineStateMachine` (with command numbers as
// its waiters), and around it a step-by-step model of what `CommandEngine` and the three waiters
// do with the state word, the lock, hand-off words, semaphores, continuations and tasks.
//
// Each step is one atomic action of the real code: a compare-and-swap on the word, one locked
// section (split where the real code does an atomic operation on the word inside it, because the
// idle path can run between the two), or one action performed after unlocking. Every other
// command and actor may run between any two steps.

typealias ModelMachine = EngineStateMachine<Int>

// MARK: - Scenarios

/// A command of a scenario.
struct ModelCommand: Hashable {
    enum Kind: Hashable {
        /// `value.wait`: a thread blocks.
        case blocking
        /// `value.wait(timeout:)`: a thread blocks, and its deadline may pass at any moment.
        case timedBlocking
        /// `value.async(performIn:)`: runs on a dispatch queue; delivers a completion.
        case dispatch
        /// `value.async`: a task suspends.
        case awaiting
        /// A `CommandQueue` operation: a task of its own.
        case operation
    }

    /// What the closure of a manual-completion command does with its `done`.
    enum Manual: Hashable {
        case none
        /// Calls it before returning.
        case doneInside
        /// Lets it go uncalled before returning (a dropped completion).
        case droppedInside
        /// Hands it out; it is called at any later moment, from another thread.
        case doneLater
        /// Hands it out; whoever kept it lets it go uncalled at any later moment.
        case droppedLater

        var isLater: Bool { self == .doneLater || self == .droppedLater }
        var drops: Bool { self == .droppedInside || self == .droppedLater }
    }

    var kind: Kind
    var priority: CommandPriority
    var manual: Manual = .none
    /// An operation with `CommandQueue.Policy.discardable`.
    var discardable = false

    var engineKind: CommandKind {
        switch kind {
        case .blocking, .timedBlocking: return .blocking
        case .dispatch: return .dispatched
        case .awaiting: return .awaiting
        case .operation: return .operation
        }
    }
}

/// What an actor (a thread or task of the scenario) does, in order.
enum ModelAction: Hashable, CustomStringConvertible {
    /// Issues command `n` (a blocking or awaiting command ends before the actor goes on).
    case issue(Int)
    /// Cancels the task of command `n` (an awaiting command or an operation).
    case cancelTask(Int)
    /// `CommandQueue.cancelAll()`.
    case cancelAll
    /// Releases the container.
    case close

    var description: String {
        switch self {
        case .issue(let command): return "issue #\(command)"
        case .cancelTask(let command): return "cancel the task of #\(command)"
        case .cancelAll: return "cancelAll"
        case .close: return "release the container"
        }
    }
}

/// A small concurrent program over one engine.
struct ModelScenario {
    var name: String
    var commands: [ModelCommand]
    var actors: [[ModelAction]]
    /// The engine's bounded-overtaking policy (`CommandFairness`); `nil` for strict priority.
    var maxOvertakes: Int? = nil
}

// MARK: - The world

struct EngineWorld: ExplorableWorld {
    enum Outcome: Hashable {
        case ran
        case timedOut
        case cancelled
        case refused
    }

    /// The steps of one command, mirroring the real code path of its kind.
    enum Phase: Hashable {
        case notIssued
        case fastAcquire
        case enqueue
        /// Stores the word and unlocks; then resumes the discardable operation this enqueue
        /// discarded, if it was suspended.
        case enqueueStore(word: Int, resume: Int?)
        // A blocking waiter.
        case spinning
        case parked
        case leaving
        case consumingSignal
        // An awaiting waiter (value command or operation task).
        case enterScope
        case scopeOnCancel
        case park
        case suspended
        case readVerdict
        case checkCancelled
        /// A discardable operation asks whether it may begin (under the lock).
        case beginDiscardable
        // A dispatched command.
        case waitingInQueue
        case dispatched
        case deliverFailure
        // Holding the section (the closure runs between its grant and its release).
        case manualBegin
        case manualInside
        case manualReturn
        case awaitingCompletion
        case releaseFast
        case releaseLocked
        case releasePerform(next: Int?, free: Bool)
        case done
    }

    enum Handoff: Hashable {
        case waiting
        case granted
        case parked
    }

    struct CommandState: Hashable {
        var phase: Phase = .notIssued
        var actor = -1
        var admission: Admission?
        var handoff: Handoff = .waiting
        var semaphore = 0
        var continuationStored = false
        var resumes = 0
        var isGranted = false
        /// The section was granted to it (it may not have noticed yet), and it has not released.
        var owns = false
        /// Between observing its grant and releasing.
        var holds = false
        /// Its release happened (it no longer holds, and never will).
        var released = false
        var taskCancelled = false
        var inScope = false
        var arrival: Int?
        var isQueued = false
        var hasLeft = false
        var hasRun = false
        var cancelledAfterGrant = false
        var tokenAlive = false
        var completionArrived = false
        var pendingSignal = false
        var cancelAllTarget = false
        /// A discardable operation that had not begun when a later operation was enqueued: it must
        /// never begin.
        var superseded = false
        var deliveries = 0
        var outcome: Outcome?
        /// Grants to commands that arrived after it, while it waited.
        var overtakes = 0
    }

    /// The machine's admission, with the ticket replaced by what it meant.
    enum Admission: Hashable {
        case granted
        case queued
        case refused
    }

    enum ActorPhase: Hashable {
        case ready
        case waitingFor(Int)
        case submitting(Int)
        case attach(Int)
        case cancelling(Int)
        case onCancelLeave(Int)
        case onCancelResume(Int)
        case closeStore(word: Int, free: Bool)
        case closeFree
        case cancelAllPerform(resume: [Int], cancel: [Int])
    }

    struct ActorState: Hashable {
        var next = 0
        var phase: ActorPhase = .ready
    }

    enum Owner: Hashable {
        case actor(Int)
        case command(Int)
    }

    enum Step {
        case actor(Int)
        case command(Int, Choice)
        /// The completion a manual command handed out is called or dropped.
        case completion(Int)
        /// The completion's thread wakes the blocked thread of its command.
        case completionSignal(Int)
    }

    enum Choice {
        case only
        case wake
        case timeout
    }

    let scenario: ModelScenario
    /// Commands whose task some action of the scenario may cancel.
    let cancellable: [Bool]
    var machine = ModelMachine()
    var word = 0
    var lock: Owner?
    var actors: [ActorState]
    var commands: [CommandState]
    var tickets: [ModelMachine.Ticket?]
    var arrivals = 0
    var valueFrees = 0
    var closed = false
    var error: String?

    init(_ scenario: ModelScenario) {
        self.scenario = scenario
        machine = ModelMachine(maxOvertakes: scenario.maxOvertakes)
        actors = Array(repeating: ActorState(), count: scenario.actors.count)
        commands = Array(repeating: CommandState(), count: scenario.commands.count)
        tickets = Array(repeating: nil, count: scenario.commands.count)
        let hasCancelAll = scenario.actors.joined().contains(.cancelAll)
        cancellable = scenario.commands.indices.map { index in
            scenario.actors.joined().contains(.cancelTask(index))
                || (hasCancelAll && scenario.commands[index].kind == .operation)
        }
    }

    // MARK: Enabled steps

    /// The steps that may happen next, reduced without losing a behaviour: when an entity can take
    /// a *local* step (one that reads and writes only state no other entity touches in this
    /// situation), that step commutes with every step of every other entity, so exploring it alone
    /// reaches the same states and the same ends as exploring it in every position (a singleton
    /// ample set, as in partial-order reduction). No check is weakened by it: a local step changes
    /// nothing another entity's step or another command's check reads.
    func enabledSteps() -> [Step] {
        let steps = allEnabledSteps()
        if Self.reduces, let local = steps.first(where: isLocal) { return [local] }
        return steps
    }

    /// `EXPLORER_NO_REDUCTION=1` explores every interleaving without the reduction, to check that
    /// both reach the same end states.
    static let reduces = ProcessInfo.processInfo.environment["EXPLORER_NO_REDUCTION"] != "1"

    /// Whether `step` only touches state no other entity reads or writes now; see `enabledSteps()`.
    func isLocal(_ step: Step) -> Bool {
        switch step {
        case .actor(let index):
            let actor = actors[index]
            switch actor.phase {
            case .ready:
                // Issuing writes only the command's phase; an awaiting command also reads whether
                // its task was cancelled, which a canceller may write.
                guard case .issue(let command) = scenario.actors[index][actor.next] else { return false }
                return scenario.commands[command].kind != .awaiting || !cancellable[command]
            case .onCancelResume, .closeFree:
                // After the leave (and the close) nobody else stores that continuation or frees.
                return true
            default:
                return false
            }
        case .command(let index, let choice):
            switch commands[index].phase {
            case .dispatched, .deliverFailure:
                return true
            case .releasePerform(let next, _):
                // Starting a next command writes its hand-off word, which it reads.
                return next == nil
            case .enterScope, .checkCancelled:
                return !cancellable[index]
            case .parked, .consumingSignal, .awaitingCompletion:
                // The one signal for this wait has arrived: nobody writes this semaphore again.
                return choice == .wake
            default:
                return false
            }
        case .completionSignal:
            // Only the command's own thread reads its semaphore, and it waits for this signal.
            return true
        case .completion:
            return false
        }
    }

    private func allEnabledSteps() -> [Step] {
        var steps: [Step] = []
        let lockFree = lock == nil
        for (index, actor) in actors.enumerated() where actorCanStep(index, actor, lockFree: lockFree) {
            steps.append(.actor(index))
        }
        for (index, command) in commands.enumerated() {
            let spec = scenario.commands[index]
            if command.tokenAlive && spec.manual.isLater && lockFree { steps.append(.completion(index)) }
            if command.pendingSignal { steps.append(.completionSignal(index)) }
            switch command.phase {
            case .notIssued, .suspended, .waitingInQueue, .done:
                break
            case .enqueue, .leaving, .scopeOnCancel, .park, .readVerdict, .manualBegin, .manualInside, .manualReturn,
                .releaseLocked, .beginDiscardable:
                if lockFree { steps.append(.command(index, .only)) }
            case .enqueueStore:
                if lock == .command(index) { steps.append(.command(index, .only)) }
            case .parked:
                // A timed wait whose signal has arrived returns it, not a timeout (libdispatch
                // re-checks the count); the race of a timeout with a grant still happens when the
                // deadline passes before the grant's signal.
                if command.semaphore > 0 {
                    steps.append(.command(index, .wake))
                } else if spec.kind == .timedBlocking {
                    steps.append(.command(index, .timeout))
                }
            case .consumingSignal:
                if command.semaphore > 0 { steps.append(.command(index, .wake)) }
            case .awaitingCompletion:
                if spec.engineKind == .blocking && command.semaphore > 0 { steps.append(.command(index, .wake)) }
            default:
                steps.append(.command(index, .only))
            }
        }
        return steps
    }

    private func actorCanStep(_ index: Int, _ actor: ActorState, lockFree: Bool) -> Bool {
        switch actor.phase {
        case .ready:
            guard actor.next < scenario.actors[index].count else { return false }
            switch scenario.actors[index][actor.next] {
            case .cancelAll, .close: return lockFree
            case .issue, .cancelTask: return true
            }
        case .waitingFor, .submitting:
            return false
        case .attach, .onCancelLeave:
            return lockFree
        case .closeStore:
            return lock == .actor(index)
        case .cancelling, .onCancelResume, .closeFree, .cancelAllPerform:
            return true
        }
    }

    func describe(_ step: Step) -> String {
        switch step {
        case .actor(let index):
            let actor = actors[index]
            if actor.phase == .ready { return "actor \(index): \(scenario.actors[index][actor.next])" }
            return "actor \(index): \(actor.phase)"
        case .command(let index, let choice):
            let what = choice == .only ? "" : " → \(choice)"
            return "#\(index) (\(scenario.commands[index].kind)): \(commands[index].phase)\(what)"
        case .completion(let index):
            return "#\(index)'s done is \(scenario.commands[index].manual.drops ? "dropped" : "called")"
        case .completionSignal(let index):
            return "#\(index)'s done wakes its thread"
        }
    }

    // MARK: Applying a step

    mutating func apply(_ step: Step) {
        switch step {
        case .actor(let index): applyActor(index)
        case .command(let index, let choice): applyCommand(index, choice)
        case .completion(let index): completionArrives(index, dropped: scenario.commands[index].manual.drops)
        case .completionSignal(let index):
            commands[index].pendingSignal = false
            commands[index].semaphore += 1
        }
        checkAfterStep()
    }

    private mutating func applyActor(_ index: Int) {
        switch actors[index].phase {
        case .ready:
            let action = scenario.actors[index][actors[index].next]
            switch action {
            case .issue(let command):
                issue(command, by: index)
            case .cancelTask(let command):
                actors[index].phase = .cancelling(command)
                applyActor(index)
            case .cancelAll:
                cancelAllLocked(by: index)
            case .close:
                let observed = word
                word |= EngineWord.closed
                let (free, newWord) = machine.close(observed: observed)
                closed = true
                lock = .actor(index)
                actors[index].phase = .closeStore(word: newWord, free: free)
            }
        case .attach(let command):
            guard let ticket = tickets[command] else { return fail("#\(command) has no ticket to attach") }
            switch machine.attach(ticket) {
            case .keep, .drop:
                finishAction(index)
            case .cancelNow:
                if !commands[command].cancelAllTarget {
                    fail("attach cancelled #\(command), which no cancelAll() reached while it was live")
                }
                actors[index].phase = .cancelling(command)
            }
        case .cancelling(let command):
            commands[command].taskCancelled = true
            if commands[command].inScope {
                actors[index].phase = .onCancelLeave(command)
            } else {
                finishAction(index)
            }
        case .onCancelLeave(let command):
            if leave(command) != nil {
                actors[index].phase = .onCancelResume(command)
            } else {
                finishAction(index)
            }
        case .onCancelResume(let command):
            if commands[command].continuationStored { resume(command) }
            finishAction(index)
        case .closeStore(let newWord, let free):
            word = newWord
            lock = nil
            if free { actors[index].phase = .closeFree } else { finishAction(index) }
        case .closeFree:
            freeValue()
            finishAction(index)
        case .cancelAllPerform(let resumed, let cancelled):
            for command in resumed { resume(command) }
            for command in cancelled {
                if !commands[command].cancelAllTarget { fail("cancelAll cancelled #\(command), which had ended") }
                commands[command].taskCancelled = true
            }
            finishAction(index)
        case .waitingFor, .submitting:
            fail("actor \(index) stepped while waiting")
        }
    }

    private mutating func finishAction(_ index: Int) {
        actors[index].phase = .ready
        actors[index].next += 1
    }

    private mutating func issue(_ command: Int, by actor: Int) {
        let spec = scenario.commands[command]
        commands[command].actor = actor
        switch spec.kind {
        case .blocking, .timedBlocking:
            commands[command].phase = .fastAcquire
            actors[actor].phase = .waitingFor(command)
        case .awaiting:
            actors[actor].phase = .waitingFor(command)
            // `withAwaitingAccess` checks for cancellation before anything else.
            if commands[command].taskCancelled {
                end(command, .cancelled)
            } else {
                commands[command].phase = .fastAcquire
            }
        case .dispatch:
            commands[command].phase = .fastAcquire
            actors[actor].phase = .submitting(command)
        case .operation:
            // Operations always go through the machine: their place is taken under the lock.
            commands[command].phase = .enqueue
            actors[actor].phase = .submitting(command)
        }
    }

    private mutating func cancelAllLocked(by actor: Int) {
        // Everything that is live now is a legitimate target.
        for index in commands.indices where scenario.commands[index].kind == .operation {
            // Live in the machine: it took its place (under the lock, as this is) and has not ended.
            let command = commands[index]
            if tickets[index] != nil && !command.released && !command.hasLeft && command.outcome == nil {
                commands[index].cancelAllTarget = true
            }
        }
        let result = machine.cancelAll()
        var resumed: [Int] = []
        var cancelled: [Int] = []
        for command in result.left {
            commands[command].hasLeft = true
            commands[command].isQueued = false
            if commands[command].continuationStored { resumed.append(command) }
            if attachedTask(command) { cancelled.append(command) }
        }
        if let holder = result.holder {
            if commands[holder].released || commands[holder].outcome != nil {
                fail("cancelAll reached #\(holder), which had already ended")
            }
            cancelled.append(holder)
        }
        actors[actor].phase = .cancelAllPerform(resume: resumed, cancel: cancelled)
    }

    /// Whether the operation's task was attached (the real code keeps it in the waiter then).
    private func attachedTask(_ command: Int) -> Bool {
        guard let ticket = tickets[command] else { return false }
        return machine.summary(of: ticket)?.hasTask ?? false
    }

    private mutating func completionArrives(_ command: Int, dropped: Bool) {
        guard let ticket = tickets[command] else { return fail("#\(command) completed without a ticket") }
        commands[command].completionArrived = true
        commands[command].tokenAlive = false
        switch machine.manualCompletionArrived(ticket, dropped: dropped) {
        case .none:
            break
        case .finish(let waiter):
            if waiter != command { fail("finish for #\(waiter), not #\(command)") }
            if scenario.commands[command].engineKind == .blocking {
                commands[command].pendingSignal = true
            } else {
                // The completion's thread releases and delivers; modelled as the command's own steps.
                commands[command].phase = .releaseFast
            }
        case .release, .waitForCompletion:
            fail("a completion arrival answered like a closure return")
        }
    }

    private mutating func applyCommand(_ index: Int, _ choice: Choice) {
        let spec = scenario.commands[index]
        let bits = spec.engineKind.wordBits
        switch commands[index].phase {
        case .fastAcquire:
            if word == 0 {
                word = bits
                if queueIsNonEmpty { fail("#\(index) took the section on the idle path while commands waited") }
                commands[index].owns = true
                granted(index)
            } else {
                commands[index].phase = .enqueue
            }
        case .enqueue:
            let observed = word
            word |= EngineWord.slowRelease
            let admission: ModelMachine.Admission
            let newWord: Int
            var resume: Int?
            if spec.kind == .operation {
                // Every discardable operation that has not begun is superseded by this one.
                for other in commands.indices
                where scenario.commands[other].discardable && tickets[other] != nil && !commands[other].hasRun
                    && commands[other].outcome == nil
                {
                    commands[other].superseded = true
                }
                let discarded: Int?
                (admission, newWord, discarded) = machine.enqueueOperation(
                    index, priority: spec.priority, discardable: spec.discardable, observed: observed)
                if let discarded {
                    if !scenario.commands[discarded].discardable {
                        fail("#\(discarded) was discarded, but is not discardable")
                    }
                    commands[discarded].hasLeft = true
                    commands[discarded].isQueued = false
                    // Its continuation is read under the lock and resumed after unlocking.
                    if commands[discarded].continuationStored { resume = discarded }
                }
            } else {
                (admission, newWord) = machine.enqueue(
                    index, kind: spec.engineKind, priority: spec.priority, reentrant: false, observed: observed)
            }
            lock = .command(index)
            commands[index].phase = .enqueueStore(word: newWord, resume: resume)
            switch admission {
            case .granted(let ticket):
                if queueIsNonEmpty { fail("#\(index) was granted a free section while commands waited") }
                tickets[index] = ticket
                commands[index].admission = .granted
                commands[index].owns = true
            case .queued(let ticket):
                tickets[index] = ticket
                commands[index].admission = .queued
                commands[index].isQueued = true
                commands[index].arrival = arrivals
                arrivals += 1
            case .refused(let error):
                if error != .valueContainerDeinited || !closed { fail("#\(index) refused with \(error)") }
                commands[index].admission = .refused
            }
        case .enqueueStore(let newWord, let discarded):
            word = newWord
            lock = nil
            if let discarded { resume(discarded) }
            switch commands[index].admission {
            case .granted:
                if spec.kind == .operation {
                    submitted(index)
                    commands[index].phase = .checkCancelled  // the task starts, already granted
                } else {
                    granted(index)
                }
            case .queued:
                switch spec.kind {
                case .blocking, .timedBlocking:
                    commands[index].handoff = .waiting
                    commands[index].phase = .spinning
                case .awaiting:
                    commands[index].phase = .enterScope
                case .dispatch:
                    commands[index].phase = .waitingInQueue
                    submitted(index)
                case .operation:
                    commands[index].phase = .enterScope  // the task starts and waits for its turn
                    submitted(index)
                }
            case .refused, nil:
                if spec.kind == .dispatch {
                    commands[index].phase = .deliverFailure
                    submitted(index)
                } else {
                    end(index, .refused)
                }
            }
        case .spinning:
            if commands[index].handoff == .granted {
                startRunning(index)
            } else {
                commands[index].handoff = .parked
                commands[index].phase = .parked
            }
        case .parked:
            if choice == .timeout {
                commands[index].phase = .leaving
            } else {
                commands[index].semaphore -= 1
                startRunning(index)
            }
        case .leaving:
            if leave(index) != nil {
                end(index, .timedOut)
            } else {
                commands[index].phase = .consumingSignal
            }
        case .consumingSignal:
            commands[index].semaphore -= 1
            startRunning(index)
        case .enterScope:
            commands[index].inScope = true
            commands[index].phase = commands[index].taskCancelled ? .scopeOnCancel : .park
        case .scopeOnCancel:
            // Nothing to resume: the task has not suspended yet.
            _ = leave(index)
            commands[index].phase = .park
        case .park:
            guard let ticket = tickets[index] else { return fail("#\(index) parks without a ticket") }
            if machine.isWaiting(ticket) {
                commands[index].continuationStored = true
                commands[index].phase = .suspended
            } else {
                commands[index].resumes += 1
                commands[index].phase = .readVerdict
            }
        case .readVerdict:
            commands[index].inScope = false
            if commands[index].isGranted {
                commands[index].phase = .checkCancelled
            } else {
                if !commands[index].hasLeft { fail("#\(index) was resumed neither granted nor gone") }
                end(index, .cancelled)
            }
        case .checkCancelled:
            commands[index].holds = true
            if commands[index].taskCancelled {
                // Granted but cancelled before its closure began: it releases without running.
                commands[index].cancelledAfterGrant = true
                commands[index].phase = .releaseFast
            } else if spec.discardable {
                commands[index].phase = .beginDiscardable
            } else {
                startRunning(index)
            }
        case .beginDiscardable:
            guard let ticket = tickets[index] else { return fail("#\(index) begins without a ticket") }
            if machine.beginDiscardable(ticket) {
                startRunning(index)
            } else {
                // Discarded after its grant: it releases without running.
                commands[index].cancelledAfterGrant = true
                commands[index].phase = .releaseFast
            }
        case .dispatched:
            startRunning(index)
        case .deliverFailure:
            commands[index].deliveries += 1
            end(index, .refused)
        case .manualBegin:
            guard EngineWord.isHeld(word) else { return fail("#\(index) began a manual completion without holding") }
            let (ticket, newWord) = machine.beginManual(index, kind: spec.engineKind, observed: word)
            word = newWord
            tickets[index] = ticket
            commands[index].tokenAlive = true
            commands[index].phase = spec.manual.isLater ? .manualReturn : .manualInside
        case .manualInside:
            commands[index].phase = .manualReturn
            completionArrives(index, dropped: spec.manual.drops)
        case .manualReturn:
            guard let ticket = tickets[index] else { return fail("#\(index) has no manual ticket") }
            switch machine.manualClosureReturned(ticket) {
            case .release: commands[index].phase = .releaseFast
            case .waitForCompletion: commands[index].phase = .awaitingCompletion
            case .none, .finish: fail("#\(index): a closure return answered like a completion")
            }
        case .awaitingCompletion:
            commands[index].semaphore -= 1
            commands[index].phase = .releaseFast
        case .releaseFast:
            if word == bits {
                word = 0
                commands[index].holds = false
                commands[index].owns = false
                commands[index].released = true
                afterRelease(index)
            } else {
                commands[index].phase = .releaseLocked
            }
        case .releaseLocked:
            releaseLocked(index)
        case .releasePerform(let next, let free):
            if free { freeValue() }
            if let next { start(next) }
            afterRelease(index)
        case .notIssued, .suspended, .waitingInQueue, .done:
            fail("#\(index) stepped in phase \(commands[index].phase)")
        }
    }

    private mutating func releaseLocked(_ index: Int) {
        guard EngineWord.isHeld(word) else { return fail("#\(index) released a free section") }
        // The order every grant must follow: priority, then arrival, among the commands waiting now.
        let expected = commands.indices.filter { commands[$0].isQueued }.min { lhs, rhs in
            let (left, right) = (scenario.commands[lhs].priority, scenario.commands[rhs].priority)
            return left != right ? left > right : commands[lhs].arrival! < commands[rhs].arrival!
        }
        let (release, newWord) = machine.release(observed: word)
        word = newWord
        commands[index].holds = false
        commands[index].owns = false
        commands[index].released = true
        if let next = release.next {
            if commands[next].hasLeft { fail("#\(next) was granted after it left the queue") }
            if next != expected && !isPromotion(next) {
                fail("#\(next) was granted before #\(expected.map(String.init) ?? "none"), which waits ahead of it")
            }
            countOvertakes(by: next)
            commands[next].isQueued = false
            commands[next].isGranted = true
            if let owner = commands.indices.first(where: { commands[$0].owns }) {
                fail("#\(next) was granted while #\(owner) still owned the section")
            }
            commands[next].owns = true
        } else if let expected {
            fail("the section was released with #\(expected) waiting: a stall")
        }
        commands[index].phase = .releasePerform(next: release.next, free: release.freeValue)
    }

    /// Under a bounded-overtaking policy a grant may skip the priority order only for the oldest
    /// waiting command, and only once enough commands arrived after it that it may have been
    /// overtaken `maxOvertakes` times.
    private func isPromotion(_ next: Int) -> Bool {
        guard let limit = scenario.maxOvertakes else { return false }
        let queued = commands.indices.filter { commands[$0].isQueued }
        guard let oldest = queued.min(by: { commands[$0].arrival! < commands[$1].arrival! }), oldest == next else {
            return false
        }
        return arrivals - 1 - commands[oldest].arrival! >= limit
    }

    /// `next` is granted: every command still waiting that arrived before it was overtaken once
    /// more, which the bound never allows past `maxOvertakes`.
    private mutating func countOvertakes(by next: Int) {
        guard let limit = scenario.maxOvertakes else { return }
        for index in commands.indices where index != next && commands[index].isQueued {
            guard commands[index].arrival! < commands[next].arrival! else { continue }
            commands[index].overtakes += 1
            if commands[index].overtakes > limit {
                fail("#\(index) was overtaken \(commands[index].overtakes) times, past the bound of \(limit)")
            }
        }
    }

    /// What a release's `start()` does for the command granted next.
    private mutating func start(_ command: Int) {
        switch scenario.commands[command].engineKind {
        case .blocking:
            let old = commands[command].handoff
            commands[command].handoff = .granted
            if old == .parked { commands[command].semaphore += 1 }
        case .dispatched:
            commands[command].phase = .dispatched
        case .awaiting, .operation:
            if commands[command].continuationStored { resume(command) }
        }
    }

    private mutating func resume(_ command: Int) {
        guard commands[command].phase == .suspended else {
            return fail("#\(command) resumed while \(commands[command].phase)")
        }
        commands[command].resumes += 1
        commands[command].continuationStored = false
        commands[command].phase = .readVerdict
    }

    private mutating func leave(_ command: Int) -> Int? {
        guard let ticket = tickets[command] else { return nil }
        let waiter = machine.leave(ticket)
        if let waiter {
            if waiter != command { fail("leave of #\(command) took #\(waiter) out") }
            commands[command].hasLeft = true
            commands[command].isQueued = false
        }
        return waiter
    }

    /// The command holds the section (its closure is about to run), or was dispatched to.
    private mutating func granted(_ index: Int) {
        switch scenario.commands[index].kind {
        case .dispatch:
            commands[index].phase = .dispatched
            submitted(index)
        default:
            startRunning(index)
        }
    }

    private mutating func startRunning(_ index: Int) {
        if !commands[index].owns { fail("#\(index) runs without being granted the section") }
        if commands[index].hasLeft { fail("#\(index) runs after it left the queue") }
        if commands[index].superseded {
            fail("discardable #\(index) began after a later operation was enqueued")
        }
        commands[index].hasRun = true
        commands[index].holds = true
        // The closure runs now, until the next step of this command (which touches shared state).
        commands[index].phase = scenario.commands[index].manual == .none ? .releaseFast : .manualBegin
    }

    /// A dispatch command or operation has been placed: its actor goes on.
    private mutating func submitted(_ index: Int) {
        let actor = commands[index].actor
        guard actors[actor].phase == .submitting(index) else { return }
        if scenario.commands[index].kind == .operation {
            actors[actor].phase = .attach(index)
        } else {
            finishAction(actor)
        }
    }

    private mutating func afterRelease(_ index: Int) {
        if scenario.commands[index].kind == .dispatch {
            // The completion is delivered on the queue, after the hand-off.
            commands[index].deliveries += 1
            end(index, .ran)
        } else {
            end(index, commands[index].cancelledAfterGrant ? .cancelled : .ran)
        }
    }

    private mutating func end(_ index: Int, _ outcome: Outcome) {
        if let previous = commands[index].outcome {
            fail("#\(index) ended twice: \(previous), then \(outcome)")
        }
        commands[index].outcome = outcome
        commands[index].phase = .done
        let actor = commands[index].actor
        if actor >= 0, actors[actor].phase == .waitingFor(index) { finishAction(actor) }
    }

    private mutating func freeValue() {
        valueFrees += 1
        if valueFrees > 1 { fail("the value was freed twice") }
        if !closed { fail("the value was freed while its container lived") }
        if let user = commands.indices.first(where: { commands[$0].owns || commands[$0].isQueued }) {
            fail("the value was freed while #\(user) held or waited for it")
        }
    }

    private var queueIsNonEmpty: Bool { commands.contains { $0.isQueued } }

    private func isHolding(_ index: Int) -> Bool {
        commands[index].holds
    }

    // MARK: Checks

    private mutating func fail(_ message: String) {
        if error == nil { error = message }
    }

    private mutating func checkAfterStep() {
        let holders = commands.indices.filter { isHolding($0) }
        if holders.count > 1 { fail("#\(holders[0]) and #\(holders[1]) hold the section at once") }
        if let holder = holders.first, !EngineWord.isHeld(word), lock == nil {
            fail("#\(holder) holds the section but the word says it is free")
        }
        for (index, command) in commands.enumerated() where command.resumes > 1 {
            fail("#\(index) was resumed twice")
        }
        if lock == nil, let violation = machine.invariantViolation(word: word) { fail(violation) }
    }

    func violation() -> String? { error }

    func terminalViolation() -> String? {
        for (index, actor) in actors.enumerated()
        where actor.phase != .ready || actor.next < scenario.actors[index].count {
            return "stuck: actor \(index) never finished (\(actor.phase), action \(actor.next))"
        }
        for (index, command) in commands.enumerated() where command.phase != .notIssued {
            if command.outcome == nil { return "stuck: #\(index) never ended (\(command.phase))" }
            if scenario.commands[index].kind == .dispatch && command.deliveries != 1 {
                return "#\(index) delivered its completion \(command.deliveries) times"
            }
        }
        if lock != nil { return "the lock is still held" }
        if machine.waitingCount != 0 { return "commands still wait in the machine" }
        if closed && valueFrees != 1 {
            return "the container was released and the queue drained, but the value was not freed"
        }
        return nil
    }

    // MARK: Fingerprint

    var fingerprint: StateFingerprint { StateFingerprint(feed) }

    private func feed(_ hasher: inout Hasher) {
        hasher.combine(word)
        hasher.combine(lock)
        hasher.combine(actors)
        hasher.combine(commands)
        hasher.combine(arrivals)
        hasher.combine(valueFrees)
        hasher.combine(closed)
        hasher.combine(error)
        hasher.combine(machine.waitingCount)
        hasher.combine(machine.isClosed)
        hasher.combine(machine.isValueFreed)
        hasher.combine(machine.droppedCompletions)
        hasher.combine(machine.oldestOvertakes)
        for entry in machine.waitingInOrder() { hasher.combine(entry.waiter) }
        for ticket in tickets { hasher.combine(ticket.flatMap { machine.summary(of: $0) }) }
        hasher.combine(machine.trackedHolder.flatMap { holder in tickets.firstIndex { $0 == holder } })
        hasher.combine(machine.pendingDiscardable.flatMap { pending in tickets.firstIndex { $0 == pending } })
    }
}
