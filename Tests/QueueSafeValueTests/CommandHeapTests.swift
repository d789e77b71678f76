import XCTest

@testable import QueueSafeValue

final class CommandHeapTests: XCTestCase {
    // MARK: Keys

    func test_key_ordersHigherPriorityFirst_thenLowerSequence() {
        let priorities: [CommandPriority] = [.lowest, CommandPriority(rawValue: 1), .low, .medium, .high, .highest]
        for (lower, higher) in zip(priorities, priorities.dropFirst()) {
            // A higher priority comes first even when it arrived much later.
            XCTAssertLessThan(
                CommandHeap.key(priority: higher, sequence: 1_000_000), CommandHeap.key(priority: lower, sequence: 0))
        }
        for priority in priorities {
            XCTAssertLessThan(
                CommandHeap.key(priority: priority, sequence: 41), CommandHeap.key(priority: priority, sequence: 42))
        }
        XCTAssertLessThan(
            CommandHeap.key(priority: .highest, sequence: 0x00FF_FFFF_FFFF_FFFE),
            CommandHeap.key(priority: CommandPriority(rawValue: 254), sequence: 0))
    }

    // MARK: Basic behaviour

    func test_emptyHeap_popsNothing() {
        var heap = CommandHeap()
        XCTAssertTrue(heap.isEmpty)
        XCTAssertEqual(heap.count, 0)
        XCTAssertNil(heap.popFirst())
        XCTAssertEqual(heap.removeAll().count, 0)
        heap.checkInvariants()
    }

    func test_popFirst_returnsPriorityOrder_FIFOWithinPriority() {
        let priorities: [CommandPriority] = [.low, .high, .low, .highest, .high, .lowest, .low, .highest]
        var heap = CommandHeap()
        let commands = priorities.enumerated().map { index, priority in
            makeCommand(priority: priority, sequence: UInt64(index))
        }
        for command in commands { heap.insert(command) }
        heap.checkInvariants()
        XCTAssertEqual(heap.count, priorities.count)
        var popped: [Int] = []
        while let command = heap.popFirst() {
            popped.append(commands.firstIndex { $0 === command }!)
            heap.checkInvariants()
        }
        XCTAssertEqual(popped, expectedRunOrder(priorities))
        XCTAssertTrue(heap.isEmpty)
    }

    func test_removedCommands_areSkipped_andNotCounted() {
        var heap = CommandHeap()
        let commands = (0..<10).map { makeCommand(priority: .medium, sequence: UInt64($0)) }
        for command in commands { heap.insert(command) }
        for index in [0, 3, 4, 9] {
            commands[index].status = .cancelled
            heap.noteRemoved()
        }
        heap.checkInvariants()
        XCTAssertEqual(heap.count, 6)
        var popped: [Int] = []
        while let command = heap.popFirst() { popped.append(commands.firstIndex { $0 === command }!) }
        XCTAssertEqual(popped, [1, 2, 5, 6, 7, 8])
        XCTAssertTrue(heap.isEmpty)
        heap.checkInvariants()
    }

    func test_manyRemovals_compactTheHeap_andKeepOrder() {
        var heap = CommandHeap()
        let commands = (0..<200).map { makeCommand(priority: allTestPriorities[$0 % 7], sequence: UInt64($0)) }
        for command in commands { heap.insert(command) }
        // Remove all but every fifth: dead entries soon outnumber live ones and trigger a sweep.
        for (index, command) in commands.enumerated() where index % 5 != 0 {
            command.status = .cancelled
            heap.noteRemoved()
            heap.checkInvariants()
        }
        XCTAssertEqual(heap.count, 40)
        let live = commands.indices.filter { $0 % 5 == 0 }
        let priorities = live.map { allTestPriorities[$0 % 7] }
        var popped: [Int] = []
        while let command = heap.popFirst() { popped.append(commands.firstIndex { $0 === command }!) }
        XCTAssertEqual(popped, expectedRunOrder(priorities).map { live[$0] })
    }

    func test_removeAll_returnsLiveCommandsInOrder_andEmptiesHeap() {
        var heap = CommandHeap()
        let priorities: [CommandPriority] = [.medium, .highest, .lowest, .medium, .high, .highest]
        let commands = priorities.enumerated().map { makeCommand(priority: $1, sequence: UInt64($0)) }
        for command in commands { heap.insert(command) }
        commands[3].status = .cancelled
        heap.noteRemoved()
        let removed = heap.removeAll().map { command in commands.firstIndex { $0 === command }! }
        XCTAssertEqual(removed, expectedRunOrder(priorities).filter { $0 != 3 })
        XCTAssertTrue(heap.isEmpty)
        XCTAssertEqual(heap.count, 0)
        heap.checkInvariants()
        // Still usable afterwards.
        let next = makeCommand(priority: .low, sequence: 100)
        heap.insert(next)
        XCTAssertTrue(heap.popFirst() === next)
    }

    // MARK: Against a model

    func test_randomOperations_matchSortedArrayModel() {
        let seed: UInt64 = 0xC0FF_EE00_4EA9
        print("CommandHeapTests seed: 0x\(String(seed, radix: 16))")
        var random = SplitMix64(seed: seed)
        for round in 0..<20 {
            var heap = CommandHeap()
            // The model: live commands sorted by key.
            var model: [PendingCommand] = []
            var sequence: UInt64 = 0
            // Odd rounds remove far more than they pop, so dead entries pile up and get swept.
            let (insertBelow, popBelow) = round % 2 == 0 ? (50, 80) : (45, 55)
            for step in 0..<600 {
                let roll = Int.random(in: 0..<100, using: &random)
                if roll < insertBelow || model.isEmpty {
                    let priority = CommandPriority(rawValue: UInt8.random(in: 0...255, using: &random))
                    let command = makeCommand(
                        priority: Bool.random(using: &random) ? priority : allTestPriorities[roll % 7],
                        sequence: sequence)
                    sequence += 1
                    heap.insert(command)
                    let position = model.firstIndex { $0.key > command.key } ?? model.count
                    model.insert(command, at: position)
                } else if roll < popBelow {
                    let popped = heap.popFirst()
                    let expected = model.removeFirst()
                    XCTAssertTrue(popped === expected, "round \(round) step \(step): popped the wrong command")
                    popped?.status = .granted
                } else {
                    let index = Int.random(in: 0..<model.count, using: &random)
                    model.remove(at: index).status = .cancelled
                    heap.noteRemoved()
                }
                heap.checkInvariants()
                XCTAssertEqual(heap.count, model.count, "round \(round) step \(step)")
                XCTAssertEqual(heap.isEmpty, model.isEmpty)
                if heap.count != model.count { return }
            }
            // Drain: the rest leaves in model order.
            for expected in model {
                XCTAssertTrue(heap.popFirst() === expected, "round \(round): drain order")
            }
            XCTAssertNil(heap.popFirst())
        }
    }

    // MARK: Helpers

    private func makeCommand(priority: CommandPriority, sequence: UInt64) -> PendingCommand {
        let command = PendingCommand()
        command.key = CommandHeap.key(priority: priority, sequence: sequence)
        return command
    }
}
