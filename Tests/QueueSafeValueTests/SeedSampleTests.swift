import Dispatch
import Foundation
import QueueSafeValue
import Testing

// API-compatibility fixtures: every code sample of the original QueueSafeValue library's README,
// copied token for token (only indentation restored) into one test method per sample. They must
// compile unchanged with a plain `import QueueSafeValue` in the Swift 6 language mode and behave as
// the README describes.
//
// The samples report through `print`. This file shadows `print` with a function that records each
// printed line together with the dispatch queue it was printed on (and still writes it to standard
// output), so a test can wait for the sample's asynchronous work and check what it printed and
// where, without changing a line of the sample. Samples that dispatch onto the main queue work
// because the waits below spin the main run loop, which drains the main queue (also on Linux).
// The sample methods are excluded from formatting so they stay exactly as published.

// MARK: - Recording `print`

/// One line a sample printed, and the label of the queue it printed it on.
private struct PrintedLine: Hashable, CustomStringConvertible {
    let text: String
    let queue: String

    var description: String { "\(text) @ \(queue)" }
}

private let printedLines = Locked<[PrintedLine]>([])

/// Shadows `Swift.print` for the samples in this file.
private func print(_ items: Any..., separator: String = " ", terminator: String = "\n") {
    let text = items.map { String(describing: $0) }.joined(separator: separator)
    printedLines.withLock { $0.append(PrintedLine(text: text, queue: TaggedQueue.currentLabel())) }
    Swift.print("[README sample] \(text)", terminator: terminator)
}

// MARK: - SeedSampleTests

// Serialized: the samples print through one shared recording, which each test resets.
@Suite(.runsAlongsideOthers, .serialized) struct SeedSampleTests {
    init() {
        printedLines.set([])
    }

    /// Waits until the samples printed `expected.count` lines, then checks the lines (text and
    /// queue) in any order, since the two options of a sample run concurrently.
    private func expectPrinted(
        _ expected: [(String, DispatchQueue)],
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        waitUntil("\(expected.count) printed lines", sourceLocation: sourceLocation) {
            printedLines.value.count >= expected.count
        }
        // Anything printed late (more lines than expected) would show up here.
        sleepBriefly(milliseconds: 20)
        RunLoop.main.run(until: Date().addingTimeInterval(0.02))
        let actual = printedLines.value.map(\.description).sorted()
        let wanted = expected.map { PrintedLine(text: $0.0, queue: $0.1.label).description }.sorted()
        #expect(actual == wanted, sourceLocation: sourceLocation)
    }

    /// Waits until the main queue has run everything enqueued on it so far.
    private func drainMainQueue(sourceLocation: SourceLocation = #_sourceLocation) {
        let drained = Locked(false)
        DispatchQueue.main.async { drained.set(true) }
        waitUntil("the main queue to drain", sourceLocation: sourceLocation) { drained.value }
    }

    // MARK: Synchronous commands

    // swift-format-ignore
    @Test func readmeSample_sync1_get_returnsCurrentValue() throws {
        // Option 1
        let queueSafeValue = QueueSafeValue(value: true)
        DispatchQueue.global(qos: .utility).async {
            let result = queueSafeValue.wait.lowestPriority.get()
            switch result {
            case .failure(let error): print(error)
            case .success(let value): print(value)
            }
        }

        // Option 2
        let queueSafeSyncedValue = QueueSafeSyncedValue(value: "a")
        DispatchQueue.global(qos: .utility).async {
            let result = queueSafeSyncedValue.lowestPriority.get()
            switch result {
            case .failure(let error): print(error)
            case .success(let value): print(value)
            }
        }

        expectPrinted([("true", .global(qos: .utility)), ("a", .global(qos: .utility))])
        #expect(queueSafeValue.waitBounded.lowestPriority.get() == .success(true))
        #expect(queueSafeSyncedValue.lowestPriority.get() == .success("a"))
    }

    // swift-format-ignore
    @Test func readmeSample_sync2_getWithCommandClosure_passesCurrentValue() throws {
        // Option 1
        let queueSafeValue = QueueSafeValue(value: 6)
        DispatchQueue.global(qos: .unspecified).async {
            queueSafeValue.wait.lowestPriority.get { result in
                switch result {
                case .failure(let error): print(error)
                case .success(let value): print(value)
                }
            }
        }

        // Option 2
        let queueSafeSyncedValue = QueueSafeSyncedValue(value: [1,2,3])
        DispatchQueue.global(qos: .utility).async {
            queueSafeSyncedValue.lowestPriority.get { result in
                switch result {
                case .failure(let error): print(error)
                case .success(let value): print(value)
                }
            }
        }

        expectPrinted([("6", .global(qos: .unspecified)), ("[1, 2, 3]", .global(qos: .utility))])
    }

    // swift-format-ignore
    @Test func readmeSample_sync3_getWithManualCompletion_passesCurrentValueAndEndsOnDone() throws {
        // Option 1
        let queueSafeValue = QueueSafeValue(value: 4.44)
        DispatchQueue.global(qos: .unspecified).async {
            queueSafeValue.wait.highestPriority.get { result, done in
                switch result {
                case .failure(let error): print(error)
                case .success(let value): print(value)
                }
                done() // Must always be executed (called). Can be called in another DispatchQueue.
            }
        }

        // Option 2
        let queueSafeSyncedValue = QueueSafeSyncedValue(value: 4.45)
        DispatchQueue.global(qos: .utility).async {
            queueSafeSyncedValue.highestPriority.get { result, done in
                switch result {
                case .failure(let error): print(error)
                case .success(let value): print(value)
                }
                done() // Must always be executed (called). Can be called in another DispatchQueue.
            }
        }

        expectPrinted([("4.44", .global(qos: .unspecified)), ("4.45", .global(qos: .utility))])
        // The commands ended (done was called), so the values are free again.
        #expect(queueSafeValue.waitBounded.lowestPriority.get() == .success(4.44))
        #expect(queueSafeSyncedValue.lowestPriority.get() == .success(4.45))
        #expect(queueSafeValue.abandonedCompletionCount == 0)
        #expect(queueSafeSyncedValue.abandonedCompletionCount == 0)
    }

    // swift-format-ignore
    @Test func readmeSample_sync4_setNewValue_returnsUpdatedValue() throws {
        // Option 1
        let queueSafeValue = QueueSafeValue<Int>(value: 1)
        DispatchQueue.global(qos: .userInitiated).async {
            let result = queueSafeValue.wait.lowestPriority.set(newValue: 2)
            switch result {
            case .failure(let error): print(error)
            case .success(let value): print(value)
            }
        }

        // Option 2
        let queueSafeSyncedValue = QueueSafeSyncedValue(value: "b")
        DispatchQueue.global(qos: .userInitiated).async {
            let result = queueSafeSyncedValue.lowestPriority.set(newValue: "b1")
            switch result {
            case .failure(let error): print(error)
            case .success(let value): print(value)
            }
        }

        expectPrinted([("2", .global(qos: .userInitiated)), ("b1", .global(qos: .userInitiated))])
        #expect(queueSafeValue.waitBounded.lowestPriority.get() == .success(2))
        #expect(queueSafeSyncedValue.lowestPriority.get() == .success("b1"))
    }

    // swift-format-ignore
    @Test func readmeSample_sync5_setWithAccessClosure_onMainQueue_returnsUpdatedValue() throws {
        // Option 1
        let queueSafeValue = QueueSafeValue(value: 1)
        DispatchQueue.main.async {
            let result = queueSafeValue.wait.lowestPriority.set { $0 = 3 }
            switch result {
            case .failure(let error): print(error)
            case .success(let value): print(value)
            }
        }

        // Option 2
        let queueSafeSyncedValue = QueueSafeSyncedValue(value: ["a":1])
        DispatchQueue.main.async {
            let result = queueSafeSyncedValue.lowestPriority.set { $0["b"] = 2 }
            switch result {
            case .failure(let error): print(error)
            case .success(let value): print(value)
            }
        }

        drainMainQueue()
        let lines = printedLines.value
        #expect(lines.count == 2)
        #expect(lines.first == PrintedLine(text: "3", queue: DispatchQueue.main.label))
        // A dictionary prints its pairs in an unspecified order.
        #expect([#"["a": 1, "b": 2]"#, #"["b": 2, "a": 1]"#].map { PrintedLine(text: $0, queue: DispatchQueue.main.label) } .contains(lines.last), "\(lines)")
        #expect(queueSafeValue.waitBounded.lowestPriority.get() == .success(3))
        #expect(queueSafeSyncedValue.lowestPriority.get() == .success(["a": 1, "b": 2]))
    }

    // swift-format-ignore
    @Test func readmeSample_sync6_setWithManualCompletion_onMainQueue_returnsUpdatedValue() throws {
        // Option 1
        let queueSafeValue = QueueSafeValue(value: "value 1")
        DispatchQueue.main.async {
            let result = queueSafeValue.wait.lowestPriority.set { currentValue, done in
                currentValue = "value 2"
                done() // Must always be executed (called). Can be called in another DispatchQueue.
            }
            switch result {
            case .failure(let error): print(error)
            case .success(let value): print(value)
            }
        }

        // Option 2
        let queueSafeSyncedValue = QueueSafeSyncedValue(value: "value a")
        DispatchQueue.main.async {
            let result = queueSafeSyncedValue.lowestPriority.set { currentValue, done in
                currentValue = "value b"
                done() // Must always be executed (called). Can be called in another DispatchQueue.
            }
            switch result {
            case .failure(let error): print(error)
            case .success(let value): print(value)
            }
        }

        expectPrinted([("value 2", .main), ("value b", .main)])
        #expect(queueSafeValue.waitBounded.lowestPriority.get() == .success("value 2"))
        #expect(queueSafeSyncedValue.lowestPriority.get() == .success("value b"))
    }

    // swift-format-ignore
    @Test func readmeSample_sync7_map_returnsTransformedValue() throws {
        // Option 1
        let queueSafeValue = QueueSafeValue(value: 5)
        DispatchQueue.global(qos: .background).async {
            let result = queueSafeValue.wait.lowestPriority.map { "\($0)" }
            switch result {
            case .failure(let error): print(error)
            case .success(let value): print(value)
            }
        }

        // Option 2
        let queueSafeSyncedValue = QueueSafeSyncedValue(value: "1")
        DispatchQueue.global(qos: .background).async {
            let result = queueSafeSyncedValue.lowestPriority.map { Int($0) }
            switch result {
            case .failure(let error): print(error)
            case .success(let value): print(String(describing: value))
            }
        }

        expectPrinted([("5", .global(qos: .background)), ("Optional(1)", .global(qos: .background))])
        // `map` does not change the value.
        #expect(queueSafeValue.waitBounded.lowestPriority.get() == .success(5))
        #expect(queueSafeSyncedValue.lowestPriority.get() == .success("1"))
    }

    // MARK: Asynchronous commands

    // swift-format-ignore
    @Test func readmeSample_async1_getWithCommandClosure_runsOnGivenQueue() throws {
        // Option 1
        let queueSafeValue = QueueSafeValue(value: true)
        queueSafeValue.async(performIn: .global(qos: .utility)).highestPriority.get { result in
            switch result {
            case .failure(let error): print(error)
            case .success(let value): print(value)
            }
        }

        // Option 2
        let queueSafeAsyncedValue = QueueSafeAsyncedValue(value: true, queue: .global(qos: .utility))
        queueSafeAsyncedValue.highestPriority.get { result in
            switch result {
            case .failure(let error): print(error)
            case .success(let value): print(value)
            }
        }

        expectPrinted([("true", .global(qos: .utility)), ("true", .global(qos: .utility))])
    }

    // swift-format-ignore
    @Test func readmeSample_async2_getWithManualCompletion_runsOnGivenQueueAndEndsOnDone() throws {
        // Option 1
        let queueSafeValue = QueueSafeValue(value: "test")
        queueSafeValue.async(performIn: .global(qos: .utility)).highestPriority.get { result, done in
            switch result {
            case .failure(let error): print(error)
            case .success(let value): print(value)
            }
            done() // Must always be executed (called). Can be called in another DispatchQueue.
        }

        // Option 2
        let queueSafeAsyncedValue = QueueSafeAsyncedValue(value: "super test", queue: .global(qos: .background))
        queueSafeAsyncedValue.highestPriority.get { result, done in
            switch result {
            case .failure(let error): print(error)
            case .success(let value): print(value)
            }
            done() // Must always be executed (called). Can be called in another DispatchQueue.
        }

        expectPrinted([("test", .global(qos: .utility)), ("super test", .global(qos: .background))])
        // Both commands ended: later commands get the values.
        #expect(queueSafeValue.waitBounded.lowestPriority.get() == .success("test"))
        let next = DispatchSemaphore(value: 0)
        let received = Recorder<Result<String, QueueSafeValueError>>()
        queueSafeAsyncedValue.lowestPriority.get { result in
            received.append(result)
            next.signal()
        }
        waitOrFail(next, "a command after the sample's command")
        #expect(received.snapshot == [.success("super test")])
        #expect(queueSafeValue.abandonedCompletionCount == 0)
        #expect(queueSafeAsyncedValue.abandonedCompletionCount == 0)
    }

    // swift-format-ignore
    @Test func readmeSample_async3_setNewValue_appliesInIssueOrderAndReportsUpdatedValue() throws {
        // Option 1
        let queueSafeValue = QueueSafeValue(value: 7)
        // Without completion block
        queueSafeValue.async(performIn: .main).highestPriority.set(newValue: 8)
        // With completion block
        queueSafeValue.async(performIn: .main).highestPriority.set(newValue: 9) { result in
            switch result {
            case .failure(let error): print(error)
            case .success(let value): print(value)
            }
        }

        // Option 2
        let queueSafeAsyncedValue = QueueSafeAsyncedValue(value: 7, queue: .global())
        // Without completion block
        queueSafeAsyncedValue.highestPriority.set(newValue: 8)
        // With completion block
        queueSafeAsyncedValue.highestPriority.set(newValue: 9) { result in
            switch result {
            case .failure(let error): print(error)
            case .success(let value): print(value)
            }
        }

        expectPrinted([("9", .main), ("9", .global())])
        #expect(queueSafeValue.waitBounded.lowestPriority.get() == .success(9))
        let next = DispatchSemaphore(value: 0)
        let received = Recorder<Result<Int, QueueSafeValueError>>()
        queueSafeAsyncedValue.lowestPriority.get { result in
            received.append(result)
            next.signal()
        }
        waitOrFail(next, "a command after the sample's commands")
        #expect(received.snapshot == [.success(9)])
    }

    // swift-format-ignore
    @Test func readmeSample_async4_setWithAccessClosure_appliesInIssueOrderAndReportsUpdatedValue() throws {
        // Option 1.
        let queueSafeValue = QueueSafeValue(value: 1)
        // Without completion block
        queueSafeValue.async(performIn: .background).highestPriority.set { $0 = 10 }
        // With completion block
        queueSafeValue.async(performIn: .background).highestPriority.set { currentValue in
            currentValue = 11
        } completion: { result in
            switch result {
            case .failure(let error): print(error)
            case .success(let value): print(value)
            }
        }

        // Option 2.
        let queueSafeAsyncedValue = QueueSafeAsyncedValue(value: 1, queue: .global(qos: .userInteractive))
        // Without completion block
        queueSafeAsyncedValue.highestPriority.set { $0 = 10 }
        // With completion block
        queueSafeAsyncedValue.highestPriority.set { currentValue in
            currentValue = 11
        } completion: { result in
            switch result {
            case .failure(let error): print(error)
            case .success(let value): print(value)
            }
        }

        expectPrinted([("11", .global(qos: .background)), ("11", .global(qos: .userInteractive))])
        #expect(queueSafeValue.waitBounded.lowestPriority.get() == .success(11))
        let next = DispatchSemaphore(value: 0)
        let received = Recorder<Result<Int, QueueSafeValueError>>()
        queueSafeAsyncedValue.lowestPriority.get { result in
            received.append(result)
            next.signal()
        }
        waitOrFail(next, "a command after the sample's commands")
        #expect(received.snapshot == [.success(11)])
    }

    // swift-format-ignore
    @Test func readmeSample_async5_setWithManualCompletion_appliesInIssueOrderAndReportsUpdatedValue() throws {
        // Option 1.
        let queueSafeValue = QueueSafeValue(value: 999.1)
        // Without completion block
        queueSafeValue.async(performIn: .background).highestPriority.set { currentValue, done in
            currentValue = 999.2
            done() // Must always be executed (called). Can be called in another DispatchQueue.
        }
        // With completion block
        queueSafeValue.async(performIn: .background).highestPriority.set { currentValue, done in
            currentValue = 999.3
            done() // Must always be executed (called). Can be called in another DispatchQueue.
        } completion: { result in
            switch result {
            case .failure(let error): print(error)
            case .success(let value): print(value)
            }
        }

        // Option 2.
        let queueSafeAsyncedValue = QueueSafeAsyncedValue(value: 1000.1, queue: .global(qos: .userInteractive))
        // Without completion block
        queueSafeAsyncedValue.highestPriority.set { currentValue, done in
            currentValue = 1000.2
            done() // Must always be executed (called). Can be called in another DispatchQueue.
        }
        // With completion block
        queueSafeAsyncedValue.highestPriority.set { currentValue, done in
            currentValue = 1000.3
            done() // Must always be executed (called). Can be called in another DispatchQueue.
        } completion: { result in
            switch result {
            case .failure(let error): print(error)
            case .success(let value): print(value)
            }
        }

        expectPrinted([("999.3", .global(qos: .background)), ("1000.3", .global(qos: .userInteractive))])
        #expect(queueSafeValue.waitBounded.lowestPriority.get() == .success(999.3))
        let next = DispatchSemaphore(value: 0)
        let received = Recorder<Result<Double, QueueSafeValueError>>()
        queueSafeAsyncedValue.lowestPriority.get { result in
            received.append(result)
            next.signal()
        }
        waitOrFail(next, "a command after the sample's commands")
        #expect(received.snapshot == [.success(1000.3)])
        #expect(queueSafeValue.abandonedCompletionCount == 0)
        #expect(queueSafeAsyncedValue.abandonedCompletionCount == 0)
    }
}
