import Dispatch
import Foundation
import QueueSafeValue
import Testing

/// The two defects issue 9 found through the public API, each as it was reported and in the
/// variations around it. Both fail on the engine before the state machine.
@Suite(.runsAlongsideOthers) struct EngineDefectTests {
    // MARK: cancelAll() and finished work

    @Test func cancelAll_doesNotCancelAnOperationThatAlreadyFinished() async throws {
        let queue = CommandQueue()
        let done = queue.enqueue { 1 }
        _ = await done.result
        queue.cancelAll()
        #expect(!done.isCancelled, "a finished operation was cancelled")
    }

    @Test func cancelAll_afterAFinishedOperation_stillCancelsTheRunningOne() async throws {
        let queue = CommandQueue()
        let finished = queue.enqueue { 1 }
        _ = await finished.result
        let started = Gate()
        let release = Gate()
        let running = queue.enqueue { () -> Bool in
            started.open()
            await release.wait()
            return Task.isCancelled
        }
        await started.wait()
        queue.cancelAll()
        release.open()
        #expect(try await running.value, "the running operation did not see the cancellation")
        #expect(!finished.isCancelled)
    }

    // MARK: The value's lifetime

    final class Payload: Sendable {}

    @Test func keptSchedule_doesNotKeepTheValueAlive() {
        var payload: Payload? = Payload()
        weak let watch = payload
        var container: QueueSafeValue<Payload>? = QueueSafeValue(value: payload!)
        payload = nil
        let reader = container!.wait.lowestPriority
        container = nil
        if case .failure(let error) = reader.get() {
            #expect(error == .valueContainerDeinited)
        } else {
            Issue.record("a read after the container was released succeeded")
        }
        #expect(watch == nil, "the value outlived its container while nothing used it")
    }

    @Test func everyKeptHandle_letsTheValueGo() {
        var payload: Payload? = Payload()
        weak let watch = payload
        var container: QueueSafeValue<Payload>? = QueueSafeValue(value: payload!)
        payload = nil
        let handles: [Any] = [
            container!.wait, container!.wait.highestPriority, container!.wait(timeout: .seconds(1)),
            container!.async, container!.async.lowestPriority, container!.async(performIn: .global()),
            container!.async(performIn: .global()).priority(.high),
        ]
        let kept = Locked<CommandCompletionClosure?>(nil)
        container!.wait.highestPriority.get { _, done in
            kept.set(done)
            done()
        }
        container = nil
        #expect(watch == nil, "a schedule, a commands value or a completion closure kept the value alive")
        withExtendedLifetime(handles) {}
        kept.value?()  // calling a kept completion again afterwards is harmless
    }

    @Test func syncedAndAsyncedValues_letTheirValueGo() {
        var payload: Payload? = Payload()
        weak let syncedWatch = payload
        var synced: QueueSafeSyncedValue<Payload>? = QueueSafeSyncedValue(value: payload!)
        let syncedCommands = synced!.lowestPriority
        synced = nil
        payload = Payload()
        weak let asyncedWatch = payload
        var asynced: QueueSafeAsyncedValue<Payload>? = QueueSafeAsyncedValue(value: payload!, queue: .global())
        let asyncedCommands = asynced!.highestPriority
        asynced = nil
        payload = nil
        #expect(syncedWatch == nil)
        #expect(asyncedWatch == nil)
        withExtendedLifetime((syncedCommands, asyncedCommands)) {}
    }

    @Test func releasedContainer_keepsTheValueUntilQueuedCommandsRan_thenFreesIt() {
        var payload: Payload? = Payload()
        weak let watch = payload
        var container: QueueSafeValue<Payload>? = QueueSafeValue(value: payload!)
        payload = nil
        let queue = DispatchQueue(label: "EngineDefectTests.queued")
        let holding = DispatchSemaphore(value: 0)
        let heldDone = Locked<CommandCompletionClosure?>(nil)
        container!.async(performIn: queue).highestPriority.get { _, done in
            heldDone.set(done)
            holding.signal()
        }
        #expect(holding.wait(timeout: .now() + 30) == .success)
        let ran = DispatchSemaphore(value: 0)
        let sawValue = Locked(false)
        container!.async(performIn: queue).lowestPriority.get { result in
            sawValue.set((try? result.get()) != nil)
            ran.signal()
        }
        container = nil
        #expect(watch != nil, "freed while a command held it")
        heldDone.value?()
        #expect(ran.wait(timeout: .now() + 30) == .success)
        #expect(sawValue.value, "a command queued before the release did not get the value")
        // The last command's release, right after its closure signalled, frees the value.
        #expect(waitUntil { watch == nil }, "the value outlived the drained queue")
    }
}
