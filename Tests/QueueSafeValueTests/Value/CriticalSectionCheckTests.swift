import Dispatch
import Foundation
import Testing

@_spi(Testing) @testable import QueueSafeValue

/// `isInsideCriticalSection` / `isInsideOperation` and the preconditions built on them: true in the
/// closure of a command of that value (every schedule) or an operation of that queue, and in child
/// tasks of it; false outside, on other threads while it is held, and for another value.
@Suite(.runsAlongsideOthers) struct CriticalSectionCheckTests {
    @Test func blockingAndDispatchClosures_areInside_andNothingElseIs() throws {
        let value = QueueSafeValue(value: 0)
        let other = QueueSafeValue(value: 0)
        #expect(!value.isInsideCriticalSection)
        let inside = value.wait.highestPriority.map { _ in
            (value.isInsideCriticalSection, other.isInsideCriticalSection)
        }
        let (insideThis, insideOther) = try inside.get()
        #expect(insideThis && !insideOther)
        #expect(!value.isInsideCriticalSection, "still inside after the command ended")

        let queue = DispatchQueue(label: "CriticalSectionCheckTests")
        let seen = Locked<[Bool]>([])
        let done = DispatchSemaphore(value: 0)
        value.async(performIn: queue).lowestPriority.set(
            accessClosure: { _ in
                seen.withLock { $0.append(value.isInsideCriticalSection) }
            },
            completion: { _ in
                // Completions run after the hand-off: outside.
                seen.withLock { $0.append(value.isInsideCriticalSection) }
                done.signal()
            })
        waitOrFail(done)
        #expect(seen.value == [true, false])
    }

    @Test func anotherThread_whileTheValueIsHeld_isNotInside() throws {
        let value = QueueSafeValue(value: 0)
        let fromOtherThread = Locked<Bool?>(nil)
        value.wait.highestPriority.set { _ in
            let checked = DispatchSemaphore(value: 0)
            Thread {
                fromOtherThread.set(value.isInsideCriticalSection)
                checked.signal()
            }.start()
            waitOrFail(checked)
        }
        #expect(fromOtherThread.value == false)
    }

    @Test func awaitingClosure_isInside_acrossSuspensions_andInChildTasks() async throws {
        let value = QueueSafeValue(value: 0, label: "checked")
        let (direct, afterSleep, child) = try await value.async.highestPriority.map { _ in
            let direct = value.isInsideCriticalSection
            try? await Task.sleep(nanoseconds: 1_000_000)
            let afterSleep = value.isInsideCriticalSection
            async let child = value.isInsideCriticalSection
            return (direct, afterSleep, await child)
        }
        #expect(direct && afterSleep && child)
        #expect(!value.isInsideCriticalSection)
        value.wait.highestPriority.set { _ in value.preconditionInsideCriticalSection() }  // does not stop
    }

    @Test func syncedAndAsyncedContainers_answerForTheirOwnSection() throws {
        let synced = QueueSafeSyncedValue(value: 1)
        #expect(try synced.highestPriority.map { _ in synced.isInsideCriticalSection }.get())
        #expect(!synced.isInsideCriticalSection)
        let queue = DispatchQueue(label: "CriticalSectionCheckTests.asynced")
        let asynced = QueueSafeAsyncedValue(value: 1, queue: queue)
        let seen = Locked<Bool?>(nil)
        let done = DispatchSemaphore(value: 0)
        asynced.highestPriority.get { _ in
            seen.set(asynced.isInsideCriticalSection)
            done.signal()
        }
        waitOrFail(done)
        #expect(seen.value == true)
        #expect(!asynced.isInsideCriticalSection)
    }

    @Test func commandQueueOperations_areSerialized_andOutsideIsNot() async throws {
        let queue = CommandQueue(label: "checked")
        let other = CommandQueue()
        let (inside, inOther, inChild) = try await queue.perform { () async -> (Bool, Bool, Bool) in
            queue.preconditionSerialized("the operation runs on the queue")
            async let child = queue.isInsideOperation
            return (queue.isInsideOperation, other.isInsideOperation, await child)
        }
        #expect(inside && !inOther && inChild)
        #expect(!queue.isInsideOperation)
    }

    /// A helper guarded by `preconditionInsideCriticalSection` runs inside a shared read on every
    /// schedule (it trapped there: reads were not counted as inside), including a read held beside
    /// another one; and a read's thread or task is outside again once the read ended.
    @Test func sharedReads_areInside_onEverySchedule() async throws {
        let value = QueueSafeValue(value: 0, label: "read")
        let other = QueueSafeValue(value: 0)
        // (The precondition itself is exercised in a child process below: here a regression is a
        // recorded failure, not a trap that ends the run.)
        @Sendable func guardedHelper(_ x: Int) -> Bool {
            value.isInsideCriticalSection && !other.isInsideCriticalSection
        }

        #expect(try value.wait.highestPriority.readResult(guardedHelper).get())
        #expect(!value.isInsideCriticalSection, "still inside after the blocking read ended")

        // A blocking read that another thread's read holds beside: both are inside, each on its own.
        let bothHold = DispatchGroup()
        bothHold.enter()
        bothHold.enter()
        let seen = Locked<[Bool]>([])
        let nestedEnded = DispatchSemaphore(value: 0)
        let outer = try value.wait.highestPriority.readResult { x -> Bool in
            Thread {
                let nested = try? value.wait.highestPriority.readResult { y -> Bool in
                    bothHold.leave()
                    _ = bothHold.wait(timeout: .now() + 10)
                    return guardedHelper(y)
                }.get()
                seen.withLock { $0.append(nested ?? false) }
                nestedEnded.signal()
            }.start()
            bothHold.leave()
            _ = bothHold.wait(timeout: .now() + 10)
            return guardedHelper(x)
        }.get()
        #expect(outer)
        waitOrFail(nestedEnded)
        #expect(seen.value == [true], "the read held beside another was not inside")

        let queue = DispatchQueue(label: "CriticalSectionCheckTests.read")
        let done = DispatchSemaphore(value: 0)
        let dispatched = Locked<[Bool]>([])
        value.async(performIn: queue).lowestPriority.read { result in
            dispatched.withLock { $0.append(guardedHelper((try? result.get()) ?? 0)) }
            queue.async {
                dispatched.withLock { $0.append(value.isInsideCriticalSection) }
                done.signal()
            }
        }
        waitOrFail(done)
        #expect(dispatched.value == [true, false])

        let (awaited, inChild) = try await value.async.highestPriority.read { x in
            async let child = value.isInsideCriticalSection
            return (guardedHelper(x), await child)
        }
        #expect(awaited && inChild)
        #expect(!value.isInsideCriticalSection, "still inside after the awaiting read ended")
    }

    /// `preconditionInsideCriticalSection` holds in the closure of a read on every schedule: the
    /// child process runs all three and exits normally (it trapped in the first before the fix).
    @Test func preconditionInsideARead_holdsOnEverySchedule() async {
        await #expect(processExitsWith: .success) {
            let value = QueueSafeValue(value: 0, label: "read")
            _ = value.wait.highestPriority.readResult { _ in value.preconditionInsideCriticalSection("blocking read") }
            let done = DispatchSemaphore(value: 0)
            value.async(performIn: DispatchQueue(label: "read")).highestPriority.read { _ in
                value.preconditionInsideCriticalSection("dispatch read")
                done.signal()
            }
            _ = done.wait(timeout: .now() + 10)
            _ = try? await value.async.highestPriority.read { _ in
                value.preconditionInsideCriticalSection("awaiting read")
            }
        }
    }

    @Test func preconditionOutsideTheSection_stopsTheProgram() async {
        await #expect(processExitsWith: .failure) {
            QueueSafeValue(value: 0, label: "guarded").preconditionInsideCriticalSection("must hold it")
        }
        await #expect(processExitsWith: .failure) {
            CommandQueue().preconditionSerialized()
        }
    }
}
