import Dispatch
import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

@Suite(.runsAlongsideOthers) struct LifetimeTests {
    // MARK: No retain of the container

    @Test func schedulersAndCommandValues_doNotRetainContainer() throws {
        var value: QueueSafeValue<Int>? = QueueSafeValue(value: 1)
        weak let weakValue = value
        let waitSchedule = value!.wait
        let timedSchedule = value!.wait(timeout: .seconds(1))
        let waitCommands = value!.wait.highestPriority
        let dispatchSchedule = value!.async(performIn: .global())
        let qosSchedule = value!.async(performIn: .utility)
        let dispatchCommands = value!.async(performIn: .global()).lowestPriority
        let awaitSchedule = value!.async
        let awaitCommands = value!.async.priority(.medium)
        value = nil
        #expect(weakValue == nil, "a scheduler or command value kept the container alive")
        // The schedulers are still usable (and now report the release).
        #expect(waitSchedule.lowestPriority.get() == .failure(.valueContainerDeinited))
        #expect(timedSchedule.lowestPriority.get() == .failure(.valueContainerDeinited))
        #expect(waitCommands.get() == .failure(.valueContainerDeinited))
        withExtendedLifetime((dispatchSchedule, qosSchedule, dispatchCommands, awaitSchedule, awaitCommands)) {}
    }

    @Test func syncedAndAsyncedValueCommands_doNotRetainContainer() throws {
        var synced: QueueSafeSyncedValue<Int>? = QueueSafeSyncedValue(value: 1)
        weak let weakSynced = synced
        let syncedCommands = synced!.highestPriority
        synced = nil
        #expect(weakSynced == nil)
        #expect(syncedCommands.get() == .failure(.valueContainerDeinited))

        var asynced: QueueSafeAsyncedValue<Int>? = QueueSafeAsyncedValue(value: 1, queue: .global())
        weak let weakAsynced = asynced
        let asyncedCommands = asynced!.lowestPriority
        asynced = nil
        #expect(weakAsynced == nil)
        let finished = DispatchSemaphore(value: 0)
        let received = Recorder<Result<Int, QueueSafeValueError>>()
        asyncedCommands.get { result in
            received.append(result)
            finished.signal()
        }
        waitOrFail(finished)
        #expect(received.snapshot == [.failure(.valueContainerDeinited)])
    }

    @Test func runningCommand_doesNotRetainContainer() throws {
        // Only the storage is kept for a command that is running: the container goes away at once.
        var value: QueueSafeValue<Int>? = QueueSafeValue(value: 1)
        weak let weakValue = value
        let storedDone = Locked<CommandCompletionClosure?>(nil)
        let entered = DispatchSemaphore(value: 0)
        value!.async(performIn: .global()).lowestPriority.get { _, done in
            storedDone.set(done)
            entered.signal()
        }
        waitOrFail(entered)
        value = nil
        #expect(weakValue == nil)
        storedDone.value?()
    }

    // MARK: Commands on a released container

    @Test func blockingCommands_onReleasedContainer_failWithValueContainerDeinited_andRunNoClosure() throws {
        var value: QueueSafeValue<Int>? = QueueSafeValue(value: 1)
        let commands = value!.wait.lowestPriority
        let timed = value!.wait(timeout: .seconds(30)).highestPriority
        value = nil

        var accessRan = false
        var received: [Result<Int, QueueSafeValueError>] = []
        #expect(commands.get() == .failure(.valueContainerDeinited))
        #expect(timed.get() == .failure(.valueContainerDeinited))
        #expect(commands.set(newValue: 2) == .failure(.valueContainerDeinited))
        #expect((commands.set { _ in accessRan = true }) == .failure(.valueContainerDeinited))
        #expect(
            commands.set { _, done in
                accessRan = true
                done()
            } == .failure(.valueContainerDeinited))
        #expect((commands.map { _ in accessRan = true }.map { _ in 0 }) == .failure(.valueContainerDeinited))
        commands.get { received.append($0) }
        commands.get { result, done in
            received.append(result)
            done()  // a no-op, harmless to call
            done()
        }
        #expect(!accessRan, "an access closure ran on a released container")
        #expect(received == [.failure(.valueContainerDeinited), .failure(.valueContainerDeinited)])
    }

    @Test func dispatchCommands_onReleasedContainer_deliverFailureOnQueue_andRunNoAccessClosure() throws {
        let queue = TaggedQueue(label: "released")
        var value: QueueSafeValue<Int>? = QueueSafeValue(value: 1)
        let commands = value!.async(performIn: queue.queue).highestPriority
        value = nil

        let accessRan = Locked(false)
        let failures = Recorder<(String, QueueSafeValueError?, Bool)>()
        let group = DispatchGroup()
        func report(_ name: String) -> @Sendable (Result<Int, QueueSafeValueError>) -> Void {
            group.enter()
            return { result in
                if case .failure(let error) = result {
                    failures.append((name, error, queue.isCurrent))
                } else {
                    failures.append((name, nil, queue.isCurrent))
                }
                group.leave()
            }
        }
        commands.get(completion: report("get"))
        let manualGet = report("get manual")
        commands.get { result, done in
            manualGet(result)
            done()
        }
        commands.set(newValue: 2, completion: report("set newValue"))
        commands.set(accessClosure: { _ in accessRan.set(true) }, completion: report("set access"))
        commands.set(
            manualCompletion: { _, done in
                accessRan.set(true)
                done()
            }, completion: report("set manual"))
        let mapped = report("map")
        commands.map { _ in
            accessRan.set(true)
        } completion: { result in
            mapped(result.map { _ in 0 })
        }
        waitOrFail(group)

        #expect(!accessRan.value, "an access closure or transform ran on a released container")
        let byName = Dictionary(uniqueKeysWithValues: failures.snapshot.map { ($0.0, ($0.1, $0.2)) })
        #expect(byName.count == 6)
        for (name, outcome) in byName {
            #expect(outcome.0 == .valueContainerDeinited, "\(name)")
            #expect(outcome.1, "\(name): the failure was not delivered on the command's queue")
        }
    }

    // MARK: Commands queued before the release

    @Test func commandsQueuedBeforeRelease_completeNormally_andLaterOnesFail() throws {
        var value: QueueSafeValue<[String]>? = QueueSafeValue(value: [])
        weak let weakValue = value
        let holder = SectionHolder(value!)
        let dispatchCommands = value!.async(performIn: DispatchQueue(label: "queued")).lowestPriority
        let waitCommands = value!.wait.lowestPriority
        let dispatchResult = Locked<Result<[String], QueueSafeValueError>?>(nil)
        let blockingResult = Locked<Result<[String], QueueSafeValueError>?>(nil)
        let group = DispatchGroup()
        group.enter()
        dispatchCommands.set {
            $0.append("dispatch")
        } completion: { result in
            dispatchResult.set(result)
            group.leave()
        }
        let threads = ThreadGroup()
        threads.spawn { blockingResult.set(waitCommands.set { $0.append("blocking") }) }
        waitForPending(value!.engine, count: 2)

        value = nil
        #expect(weakValue == nil, "queued commands kept the container alive")
        #expect(waitCommands.get() == .failure(.valueContainerDeinited), "a new command ran after the release")

        holder.release()
        threads.join()
        waitOrFail(group)
        // Both ran, in queue order: each result is the value its own command left. (The dispatch
        // completion and the blocking command's return race by design: the completion runs after
        // the hand-off.)
        #expect(dispatchResult.value == .success(["dispatch"]))
        #expect(blockingResult.value == .success(["dispatch", "blocking"]))
        #expect(waitCommands.get() == .failure(.valueContainerDeinited))
    }

    @Test func wrappedValue_isReleased_onceContainerAndCommandsAreGone() throws {
        final class Tracked: Sendable {
            let deinited: Locked<Bool>
            init(_ deinited: Locked<Bool>) { self.deinited = deinited }
            deinit { deinited.set(true) }
        }
        let deinited = Locked(false)
        var value: QueueSafeValue<Tracked>? = QueueSafeValue(value: Tracked(deinited))
        let finished = DispatchSemaphore(value: 0)
        value!.async(performIn: .global()).lowestPriority.get { _ in finished.signal() }
        value!.wait.lowestPriority.get { _ in }
        waitOrFail(finished)
        value = nil
        waitUntil("the wrapped value to be released") { deinited.value }
    }
}
