import Testing

@_spi(Testing) @testable import QueueSafeValue

/// The executor's pure state machine, driven without threads, tasks or sleepers: each scenario is a
/// table of inputs and what each one must return (events, tasks to cancel, the driver to resume,
/// the callers' outcomes, the step).
@Suite(.runsAlongsideOthers) struct RecurringStateMachineTests {
    /// Driver: an `Int`; jobs and callers: names.
    typealias Machine = RecurringStateMachine<Int, String, String>
    typealias Kind = RecurringExecutorEvent.Kind

    /// One transition of the machine.
    enum Input: Sendable {
        case decide
        case runNow
        case runNowAndWait
        case setPolicy(RecurringPolicy)
        case stop
        case attachSleep(token: UInt64, String)
        case attachDriver(token: UInt64, Int)
        case elapsed(token: UInt64)
        case sleepFailed(token: UInt64, TestError?)  // `nil`: a `CancellationError`
        case attachRun(UInt64, String)
        case runEnded(UInt64, TestError?, cancellation: Bool = false)
        case attachCaller(UInt64, String)
        case cancelCaller(UInt64)
        case abandonCaller(UInt64)
    }

    /// What a transition returned. `result` is the transition's own return value, as text.
    struct Output: Equatable, CustomStringConvertible {
        var events: [Kind] = []
        var cancel: [String] = []
        var driver: Int?
        var outcomes: [String] = []
        var ended = false
        var result: String?

        var description: String {
            "events \(events), cancel \(cancel), driver \(String(describing: driver)), outcomes \(outcomes), "
                + "ended \(ended), result \(result ?? "-")"
        }
    }

    struct Scenario: Sendable, CustomTestStringConvertible {
        let name: String
        let policy: RecurringPolicy
        let rows: [(Input, Output)]

        var testDescription: String { name }
    }

    // MARK: The tables

    static let failure = TestError.thrown(id: 1)
    static let tenSeconds = try! RecurringPolicy.interval(seconds: 10)
    static let twentySeconds = try! RecurringPolicy.interval(seconds: 20)

    /// The machine asleep for its first 10-second interval (sleep `sleep1`), its driver `driver`
    /// suspended until the sleep ends.
    static func sleepingTenSeconds(driver: Int) -> [(Input, Output)] {
        [
            (
                .decide,
                Output(events: [.waiting(nextRunIn: 10)], result: "wait(token: 1, nanoseconds: Optional(10000000000))")
            ),
            (.attachSleep(token: 1, "sleep1"), Output()),
            (.attachDriver(token: 1, driver), Output(result: "nil")),
        ]
    }

    /// The machine up to run 1, started for the collapsed requests of callers `c1` and `c2`.
    static let run1ServingCallers1And2: [(Input, Output)] = [
        (.decide, Output(events: [.waiting(nextRunIn: nil)], result: "wait(token: 1, nanoseconds: nil)")),
        (.runNowAndWait, Output(events: [.requested(request: 1)], result: "Optional(1)")),
        (.attachCaller(1, "c1"), Output(result: "stored")),
        (.runNowAndWait, Output(events: [.requested(request: 2)], result: "Optional(2)")),
        (.attachCaller(2, "c2"), Output(result: "stored")),
        (.decide, Output(events: [.started(run: 1, trigger: .runNow(request: 2))], result: "run(number: 1)")),
    ]

    /// A `runNowAndWait()` whose run 1 started and ended before its caller attached (on demand).
    static let run1EndedBeforeItsCallerAttached: [(Input, Output)] = [
        (.decide, Output(events: [.waiting(nextRunIn: nil)], result: "wait(token: 1, nanoseconds: nil)")),
        (.runNowAndWait, Output(events: [.requested(request: 1)], result: "Optional(1)")),
        (.decide, Output(events: [.started(run: 1, trigger: .runNow(request: 1))], result: "run(number: 1)")),
        (.runEnded(1, nil), Output(events: [.finished(run: 1)])),
    ]

    /// The machine up to run 1, started for caller `c1`'s `runNowAndWait()` (on demand).
    static let run1ServingCaller1: [(Input, Output)] = [
        (.decide, Output(events: [.waiting(nextRunIn: nil)], result: "wait(token: 1, nanoseconds: nil)")),
        (.runNowAndWait, Output(events: [.requested(request: 1)], result: "Optional(1)")),
        (.attachCaller(1, "c1"), Output(result: "stored")),
        (.decide, Output(events: [.started(run: 1, trigger: .runNow(request: 1))], result: "run(number: 1)")),
    ]

    /// The machine up to run 1 for a `runNow()`, with its task attached (on demand).
    static let runningRun1: [(Input, Output)] = [
        (.decide, Output(events: [.waiting(nextRunIn: nil)], result: "wait(token: 1, nanoseconds: nil)")),
        (.attachDriver(token: 1, 1), Output(result: "nil")),
        (.runNow, Output(events: [.requested(request: 1)], driver: 1)),
        (.decide, Output(events: [.started(run: 1, trigger: .runNow(request: 1))], result: "run(number: 1)")),
        (.attachRun(1, "run1"), Output()),
    ]

    static let scenarios: [Scenario] = [
        Scenario(
            name: "on demand: wait, runNow wakes the driver, the run starts, finishes, wait again",
            policy: .onDemand,
            rows: runningRun1 + [
                (.runEnded(1, nil), Output(events: [.finished(run: 1)])),
                (.decide, Output(events: [.waiting(nextRunIn: nil)], result: "wait(token: 2, nanoseconds: nil)")),
            ]),
        Scenario(
            name: "interval: the sleep elapses, the driver wakes without cancelling it, an interval run starts",
            policy: tenSeconds,
            rows: sleepingTenSeconds(driver: 7) + [
                (.elapsed(token: 1), Output(events: [.intervalElapsed], driver: 7)),
                (.elapsed(token: 1), Output()),
                (.decide, Output(events: [.started(run: 1, trigger: .interval)], result: "run(number: 1)")),
            ]),
        Scenario(
            name: "runNow while running cancels the run once; the latest request wins the next run",
            policy: .onDemand,
            rows: runningRun1 + [
                (.runNow, Output(events: [.requested(request: 2)], cancel: ["run1"])),
                (.runNow, Output(events: [.requested(request: 3)])),
                (.runEnded(1, failure), Output(events: [.cancelled(run: 1)])),
                (.decide, Output(events: [.started(run: 2, trigger: .runNow(request: 3))], result: "run(number: 2)")),
            ]),
        Scenario(
            name: "a run asked to stop before its task exists is cancelled when the task arrives",
            policy: .onDemand,
            rows: Array(runningRun1.dropLast()) + [
                (.runNow, Output(events: [.requested(request: 2)])),
                (.attachRun(1, "run1"), Output(cancel: ["run1"])),
                (.runEnded(1, nil), Output(events: [.finished(run: 1)])),
            ]),
        Scenario(
            name: "setPolicy restarts the wait, carries the previous policy, and the abandoned sleep is ignored",
            policy: tenSeconds,
            rows: sleepingTenSeconds(driver: 1) + [
                (.setPolicy(tenSeconds), Output()),
                (
                    .setPolicy(twentySeconds),
                    Output(events: [.policyChanged(from: tenSeconds, to: twentySeconds)], cancel: ["sleep1"], driver: 1)
                ),
                (.elapsed(token: 1), Output()),
                (.sleepFailed(token: 1, nil), Output()),
                (
                    .decide,
                    Output(
                        events: [.waiting(nextRunIn: 20)], result: "wait(token: 2, nanoseconds: Optional(20000000000))")
                ),
                (.setPolicy(.onDemand), Output(events: [.policyChanged(from: twentySeconds, to: .onDemand)])),
            ]),
        Scenario(
            name: "a stale sleep of wait 1 ending while wait 2 is live is ignored; wait 2 ends on its own sleep",
            policy: tenSeconds,
            rows: sleepingTenSeconds(driver: 1) + [
                (
                    .setPolicy(twentySeconds),
                    Output(events: [.policyChanged(from: tenSeconds, to: twentySeconds)], cancel: ["sleep1"], driver: 1)
                ),
                (
                    .decide,
                    Output(
                        events: [.waiting(nextRunIn: 20)], result: "wait(token: 2, nanoseconds: Optional(20000000000))")
                ),
                (.attachSleep(token: 2, "sleep2"), Output()),
                (.attachDriver(token: 2, 2), Output(result: "nil")),
                (.elapsed(token: 1), Output()),
                (.sleepFailed(token: 1, nil), Output()),
                (.elapsed(token: 2), Output(events: [.intervalElapsed], driver: 2)),
                (.decide, Output(events: [.started(run: 1, trigger: .interval)], result: "run(number: 1)")),
            ]),
        Scenario(
            name: "a sleep or driver that arrives after its wait was woken is cancelled or resumed at once",
            policy: tenSeconds,
            rows: [
                (
                    .decide,
                    Output(
                        events: [.waiting(nextRunIn: 10)], result: "wait(token: 1, nanoseconds: Optional(10000000000))")
                ),
                (.runNow, Output(events: [.requested(request: 1)])),
                (.attachSleep(token: 1, "sleep1"), Output(cancel: ["sleep1"])),
                (.attachDriver(token: 1, 4), Output(result: "Optional(4)")),
                (.decide, Output(events: [.started(run: 1, trigger: .runNow(request: 1))], result: "run(number: 1)")),
            ]),
        Scenario(
            name: "a live sleep that throws emits sleeperFailed and stops; later requests are ignored",
            policy: tenSeconds,
            rows: sleepingTenSeconds(driver: 1) + [
                (
                    .sleepFailed(token: 1, failure),
                    Output(events: [.sleeperFailed(RecurringExecutorFailure(failure))], driver: 1)
                ),
                (.runNow, Output()),
                (.runNowAndWait, Output(result: "nil")),
                (.setPolicy(.onDemand), Output()),
                (.decide, Output(events: [.stopped], ended: true, result: "end")),
                (.decide, Output(result: "end")),
            ]),
        Scenario(
            name: "a live sleep that throws CancellationError without being cancelled is a failure too",
            policy: tenSeconds,
            rows: [
                (
                    .decide,
                    Output(
                        events: [.waiting(nextRunIn: 10)], result: "wait(token: 1, nanoseconds: Optional(10000000000))")
                ),
                (
                    .sleepFailed(token: 1, nil),
                    Output(events: [.sleeperFailed(RecurringExecutorFailure(CancellationError()))])
                ),
                (.decide, Output(events: [.stopped], ended: true, result: "end")),
            ]),
        Scenario(
            name: "runNowAndWait: the caller gets the outcome of the run that served it",
            policy: .onDemand,
            rows: run1ServingCallers1And2 + [
                (
                    .runEnded(1, failure),
                    Output(
                        events: [.failed(run: 1, error: RecurringExecutorFailure(failure))],
                        outcomes: [
                            "c1: failed(run: 1, error: test error 1)", "c2: failed(run: 1, error: test error 1)",
                        ])
                )
            ]),
        Scenario(
            name: "runNowAndWait: a run preempted by a later request hands its callers on to that request's run",
            policy: .onDemand,
            rows: run1ServingCaller1 + [
                (.attachRun(1, "run1"), Output()),
                (.runNowAndWait, Output(events: [.requested(request: 2)], cancel: ["run1"], result: "Optional(2)")),
                (.attachCaller(2, "c2"), Output(result: "stored")),
                (.runEnded(1, nil, cancellation: true), Output(events: [.cancelled(run: 1)])),
                (.decide, Output(events: [.started(run: 2, trigger: .runNow(request: 2))], result: "run(number: 2)")),
                (
                    .runEnded(2, nil),
                    Output(events: [.finished(run: 2)], outcomes: ["c1: finished(run: 2)", "c2: finished(run: 2)"])
                ),
            ]),
        Scenario(
            name: "runNowAndWait: a preempted run that returns normally still serves its callers",
            policy: .onDemand,
            rows: run1ServingCaller1 + [
                (.runNow, Output(events: [.requested(request: 2)])),
                (.runEnded(1, nil), Output(events: [.finished(run: 1)], outcomes: ["c1: finished(run: 1)"])),
            ]),
        Scenario(
            name: "runNowAndWait: a run that cancels itself, with no later request, reports cancelled",
            policy: .onDemand,
            rows: run1ServingCaller1 + [
                (
                    .runEnded(1, nil, cancellation: true),
                    Output(events: [.cancelled(run: 1)], outcomes: ["c1: cancelled(run: 1)"])
                )
            ]),
        Scenario(
            name: "stop: a waiting caller gets stopped at once, the running run's caller its run's outcome",
            policy: .onDemand,
            rows: run1ServingCaller1 + [
                (.attachRun(1, "run1"), Output()),
                (.runNowAndWait, Output(events: [.requested(request: 2)], cancel: ["run1"], result: "Optional(2)")),
                (.attachCaller(2, "c2"), Output(result: "stored")),
                (.stop, Output(outcomes: ["c2: stopped"])),
                (.stop, Output()),
                (
                    .runEnded(1, nil, cancellation: true),
                    Output(events: [.cancelled(run: 1)], outcomes: ["c1: cancelled(run: 1)"])
                ),
                (.decide, Output(events: [.stopped], ended: true, result: "end")),
            ]),
        Scenario(
            name: "a caller cancelled before its continuation arrives leaves; the request still runs",
            policy: .onDemand,
            rows: [
                (.decide, Output(events: [.waiting(nextRunIn: nil)], result: "wait(token: 1, nanoseconds: nil)")),
                (.runNowAndWait, Output(events: [.requested(request: 1)], result: "Optional(1)")),
                (.cancelCaller(1), Output(result: "left(nil)")),
                (.attachCaller(1, "c1"), Output(result: "cancelled")),
                (.decide, Output(events: [.started(run: 1, trigger: .runNow(request: 1))], result: "run(number: 1)")),
                (.runEnded(1, nil), Output(events: [.finished(run: 1)])),
            ]),
        Scenario(
            name: "a caller cancelled while its run runs leaves; the run is not cancelled and others are served",
            policy: .onDemand,
            rows: run1ServingCallers1And2 + [
                (.attachRun(1, "run1"), Output()),
                (.cancelCaller(1), Output(result: "left(Optional(\"c1\"))")),
                (.cancelCaller(1), Output(result: "stays")),
                (.runEnded(1, nil), Output(events: [.finished(run: 1)], outcomes: ["c2: finished(run: 1)"])),
            ]),
        Scenario(
            name: "an outcome known before the continuation arrives is handed over on attach, and beats a cancellation",
            policy: .onDemand,
            rows: run1EndedBeforeItsCallerAttached + [
                (.cancelCaller(1), Output(result: "stays")),
                (.attachCaller(1, "c1"), Output(outcomes: ["c1: finished(run: 1)"], result: "stored")),
            ]),
        Scenario(
            name: "a caller cancelled before its call leaves even when its run ended first; the request ran",
            policy: .onDemand,
            rows: run1EndedBeforeItsCallerAttached + [
                (.abandonCaller(1), Output()),
                (.attachCaller(1, "c1"), Output(result: "cancelled")),
            ]),
    ]

    // MARK: Running a table

    @Test(arguments: scenarios)
    func transitions(_ scenario: Scenario) {
        var machine = Machine(policy: scenario.policy)
        for (index, (input, expected)) in scenario.rows.enumerated() {
            let output = Self.apply(input, to: &machine)
            #expect(output == expected, "row \(index): \(input)")
        }
    }

    @Test func stopWhileWaiting_wakesTheDriver_cancelsTheSleep_andTheNextDecisionEnds() {
        var machine = Machine(policy: Self.tenSeconds)
        _ = machine.decide()
        _ = machine.attachSleep(1, "sleep1")
        #expect(machine.attachDriver(1, 3) == nil)
        let stop = machine.stop()
        #expect(stop.cancel == ["sleep1"])
        #expect(stop.resumeDriver == 3)
        #expect(stop.events.isEmpty)
        #expect(machine.stopRequested)
        #expect(!machine.isEnded)
        let (step, actions) = machine.decide()
        #expect(step == .end)
        #expect(actions.events == [.stopped])
        #expect(actions.ended)
        #expect(machine.isEnded)
    }

    @Test func cancellationErrors_areRecognised() {
        #expect(Machine.isCancellation(CancellationError()))
        #expect(Machine.isCancellation(QueueSafeValueError.cancelled))
        #expect(!Machine.isCancellation(QueueSafeValueError.reentrantAccess))
        #expect(!Machine.isCancellation(TestError.thrown(id: 1)))
    }

    /// Performs one input and describes what the machine returned.
    private static func apply(_ input: Input, to machine: inout Machine) -> Output {
        func output(_ actions: Machine.Actions, result: String? = nil) -> Output {
            Output(
                events: actions.events, cancel: actions.cancel, driver: actions.resumeDriver,
                outcomes: actions.outcomes.map { "\($0.caller): \($0.outcome)" }, ended: actions.ended,
                result: result)
        }
        switch input {
        case .decide:
            let (step, actions) = machine.decide()
            return output(actions, result: "\(step)")
        case .runNow:
            return output(machine.runNow())
        case .runNowAndWait:
            let (caller, actions) = machine.runNowAndWait()
            return output(actions, result: "\(String(describing: caller))")
        case .setPolicy(let policy):
            return output(machine.setPolicy(policy))
        case .stop:
            return output(machine.stop())
        case .attachSleep(let token, let job):
            return output(machine.attachSleep(token, job))
        case .attachDriver(let token, let driver):
            return Output(result: "\(String(describing: machine.attachDriver(token, driver)))")
        case .elapsed(let token):
            return output(machine.intervalElapsed(token))
        case .sleepFailed(let token, let error):
            return output(machine.sleepFailed(token, error: error ?? CancellationError()))
        case .attachRun(let number, let job):
            return output(machine.attachRun(number, job))
        case .runEnded(let number, let error, let cancellation):
            let result: Result<Void, any Error> =
                cancellation ? .failure(CancellationError()) : error.map { .failure($0) } ?? .success(())
            return output(machine.runEnded(number, result: result))
        case .attachCaller(let id, let caller):
            let (cancelled, actions) = machine.attachCaller(id, caller)
            return output(actions, result: cancelled ? "cancelled" : "stored")
        case .cancelCaller(let id):
            guard let record = machine.cancelCaller(id) else { return Output(result: "stays") }
            return Output(result: "left(\(String(describing: record.continuation)))")
        case .abandonCaller(let id):
            machine.abandonCaller(id)
            return Output()
        }
    }
}
