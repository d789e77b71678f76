import Dispatch
import Foundation
import QueueSafeValue
import XCTest

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
    printedLines.withLock { $0.append(PrintedLine(text: text, queue: currentQueueLabel())) }
    Swift.print("[README sample] \(text)", terminator: terminator)
}

// MARK: - SeedSampleTests

final class SeedSampleTests: XCTestCase {
    override func setUp() {
        super.setUp()
        printedLines.set([])
    }

    /// Waits until the samples printed `expected.count` lines, then checks the lines (text and
    /// queue) in any order, since the two options of a sample run concurrently.
    private func expectPrinted(
        _ expected: [(String, DispatchQueue)],
        file: StaticString = #filePath,
        line: UInt = #line
    ) {
        expectEventually("\(expected.count) printed lines", file: file, line: line) {
            printedLines.value.count >= expected.count
        }
        // Anything printed late (more lines than expected) would show up here.
        sleepBriefly(milliseconds: 20)
        RunLoop.main.run(until: Date().addingTimeInterval(0.02))
        let actual = printedLines.value.map(\.description).sorted()
        let wanted = expected.map { PrintedLine(text: $0.0, queue: $0.1.label).description }.sorted()
        XCTAssertEqual(actual, wanted, file: file, line: line)
    }

    /// Waits until the main queue has run everything enqueued on it so far.
    private func drainMainQueue(file: StaticString = #filePath, line: UInt = #line) {
        let drained = Locked(false)
        DispatchQueue.main.async { drained.set(true) }
        expectEventually("the main queue to drain", file: file, line: line) { drained.value }
    }

    // MARK: Synchronous commands

    // swift-format-ignore
    func test_readmeSample_sync1_get_returnsCurrentValue() {
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
        XCTAssertEqual(queueSafeValue.waitBounded.lowestPriority.get(), .success(true))
        XCTAssertEqual(queueSafeSyncedValue.lowestPriority.get(), .success("a"))
    }

    // swift-format-ignore
    func test_readmeSample_sync2_getWithCommandClosure_passesCurrentValue() {
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
    func test_readmeSample_sync3_getWithManualCompletion_passesCurrentValueAndEndsOnDone() {
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
        XCTAssertEqual(queueSafeValue.waitBounded.lowestPriority.get(), .success(4.44))
        XCTAssertEqual(queueSafeSyncedValue.lowestPriority.get(), .success(4.45))
        XCTAssertEqual(queueSafeValue.abandonedCompletionCount, 0)
        XCTAssertEqual(queueSafeSyncedValue.abandonedCompletionCount, 0)
    }

    // swift-format-ignore
    func test_readmeSample_sync4_setNewValue_returnsUpdatedValue() {
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
        XCTAssertEqual(queueSafeValue.waitBounded.lowestPriority.get(), .success(2))
        XCTAssertEqual(queueSafeSyncedValue.lowestPriority.get(), .success("b1"))
    }

    // swift-format-ignore
    func test_readmeSample_sync5_setWithAccessClosure_onMainQueue_returnsUpdatedValue() {
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
        XCTAssertEqual(lines.count, 2)
        XCTAssertEqual(lines.first, PrintedLine(text: "3", queue: DispatchQueue.main.label))
        // A dictionary prints its pairs in an unspecified order.
        XCTAssertTrue(
            [#"["a": 1, "b": 2]"#, #"["b": 2, "a": 1]"#].map { PrintedLine(text: $0, queue: DispatchQueue.main.label) }
                .contains(lines.last), "\(lines)")
        XCTAssertEqual(queueSafeValue.waitBounded.lowestPriority.get(), .success(3))
        XCTAssertEqual(queueSafeSyncedValue.lowestPriority.get(), .success(["a": 1, "b": 2]))
    }

    // swift-format-ignore
    func test_readmeSample_sync6_setWithManualCompletion_onMainQueue_returnsUpdatedValue() {
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
        XCTAssertEqual(queueSafeValue.waitBounded.lowestPriority.get(), .success("value 2"))
        XCTAssertEqual(queueSafeSyncedValue.lowestPriority.get(), .success("value b"))
    }

    // swift-format-ignore
    func test_readmeSample_sync7_map_returnsTransformedValue() {
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
        XCTAssertEqual(queueSafeValue.waitBounded.lowestPriority.get(), .success(5))
        XCTAssertEqual(queueSafeSyncedValue.lowestPriority.get(), .success("1"))
    }

    // MARK: Asynchronous commands

    // swift-format-ignore
    func test_readmeSample_async1_getWithCommandClosure_runsOnGivenQueue() {
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
    func test_readmeSample_async2_getWithManualCompletion_runsOnGivenQueueAndEndsOnDone() {
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
        XCTAssertEqual(queueSafeValue.waitBounded.lowestPriority.get(), .success("test"))
        let next = DispatchSemaphore(value: 0)
        queueSafeAsyncedValue.lowestPriority.get { result in
            XCTAssertEqual(result, .success("super test"))
            next.signal()
        }
        waitOrFail(next, "a command after the sample's command")
        XCTAssertEqual(queueSafeValue.abandonedCompletionCount, 0)
        XCTAssertEqual(queueSafeAsyncedValue.abandonedCompletionCount, 0)
    }

    // swift-format-ignore
    func test_readmeSample_async3_setNewValue_appliesInIssueOrderAndReportsUpdatedValue() {
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
        XCTAssertEqual(queueSafeValue.waitBounded.lowestPriority.get(), .success(9))
        let next = DispatchSemaphore(value: 0)
        queueSafeAsyncedValue.lowestPriority.get { result in
            XCTAssertEqual(result, .success(9))
            next.signal()
        }
        waitOrFail(next, "a command after the sample's commands")
    }

    // swift-format-ignore
    func test_readmeSample_async4_setWithAccessClosure_appliesInIssueOrderAndReportsUpdatedValue() {
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
        XCTAssertEqual(queueSafeValue.waitBounded.lowestPriority.get(), .success(11))
        let next = DispatchSemaphore(value: 0)
        queueSafeAsyncedValue.lowestPriority.get { result in
            XCTAssertEqual(result, .success(11))
            next.signal()
        }
        waitOrFail(next, "a command after the sample's commands")
    }

    // swift-format-ignore
    func test_readmeSample_async5_setWithManualCompletion_appliesInIssueOrderAndReportsUpdatedValue() {
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
        XCTAssertEqual(queueSafeValue.waitBounded.lowestPriority.get(), .success(999.3))
        let next = DispatchSemaphore(value: 0)
        queueSafeAsyncedValue.lowestPriority.get { result in
            XCTAssertEqual(result, .success(1000.3))
            next.signal()
        }
        waitOrFail(next, "a command after the sample's commands")
        XCTAssertEqual(queueSafeValue.abandonedCompletionCount, 0)
        XCTAssertEqual(queueSafeAsyncedValue.abandonedCompletionCount, 0)
    }
}
