import Testing

@_spi(Testing) @testable import QueueSafeValue

/// The waiting order's two parts: arrivals in increasing key order go to the FIFO run, overtaking
/// ones to the heap, and every pop takes the smallest key of both.
@Suite(.runsAlongsideOthers) struct CommandHeapTests {
    private static func drain(_ heap: inout CommandHeap) -> [UInt64] {
        var popped: [UInt64] = []
        while let entry = heap.popFirst() {
            heap.checkInvariants()
            popped.append(entry.key)
        }
        return popped
    }

    @Test func removingOneSlot_keepsTheOrderOfTheRest() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<200 {
            var heap = CommandHeap()
            var model: [UInt32: UInt64] = [:]
            for sequence in 0..<UInt64.random(in: 1...80, using: &generator) {
                let priority = CommandPriority(rawValue: [128, 128, 128, 200, 3].randomElement()!)
                let key = CommandHeap.key(priority: priority, sequence: sequence)
                heap.insert(.init(key: key, slot: UInt32(sequence)))
                model[UInt32(sequence)] = key
                if Bool.random(using: &generator), let popped = heap.popFirst() { model[popped.slot] = nil }
            }
            for _ in 0..<Int.random(in: 0...5, using: &generator) {
                guard let slot = model.keys.randomElement() else { break }
                heap.remove(slot: slot)
                model[slot] = nil
                heap.checkInvariants()
                #expect(heap.count == model.count)
            }
            heap.remove(slot: .max)  // absent: nothing changes
            #expect(Self.drain(&heap) == model.values.sorted())
        }
    }

    @Test func interleavedInsertsAndPops_matchASortedModel() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<200 {
            var heap = CommandHeap()
            var model: [UInt64] = []
            var sequence: UInt64 = 0
            for _ in 0..<300 {
                if model.isEmpty || Int.random(in: 0..<3, using: &generator) > 0 {
                    // Mostly one priority (the run), sometimes a higher or lower one (the heap).
                    let priority = CommandPriority(rawValue: [128, 128, 128, 200, 3].randomElement()!)
                    let key = CommandHeap.key(priority: priority, sequence: sequence)
                    sequence += 1
                    heap.insert(.init(key: key, slot: UInt32(sequence)))
                    model.append(key)
                } else {
                    model.sort()
                    #expect(heap.popFirst()?.key == model.removeFirst())
                }
                #expect(heap.count == model.count)
                #expect(heap.first?.key == model.min())
            }
            heap.checkInvariants()
            #expect(Self.drain(&heap) == model.sorted())
        }
    }

    @Test func longRun_compactsAndKeepsFIFOOrder() {
        var heap = CommandHeap()
        for sequence in 0..<1_000 as Range<UInt64> {
            heap.insert(.init(key: CommandHeap.key(priority: .medium, sequence: sequence), slot: UInt32(sequence)))
            if sequence % 3 == 2 { _ = heap.popFirst() }
        }
        let popped = Self.drain(&heap)
        #expect(popped == popped.sorted())
        #expect(popped.count == 1_000 - 333)
        #expect(heap.isEmpty)
    }

    @Test func removeAllWhere_keepsTheOrderOfBothParts() {
        var heap = CommandHeap()
        let keys: [UInt64] = [10, 20, 30, 5, 40, 1, 50, 25]  // 5, 1 and 25 overtake: heap
        for (slot, key) in keys.enumerated() { heap.insert(.init(key: key, slot: UInt32(slot))) }
        _ = heap.popFirst()  // 1
        heap.removeAll { $0.key == 20 || $0.key == 25 }
        heap.checkInvariants()
        #expect(Self.drain(&heap) == [5, 10, 30, 40, 50])
    }

    @Test func equalContents_areEqualWhereverTheRunStarts() {
        var popped = CommandHeap()
        for key in [1, 2, 3] as [UInt64] { popped.insert(.init(key: key, slot: UInt32(key))) }
        _ = popped.popFirst()
        var fresh = CommandHeap()
        for key in [2, 3] as [UInt64] { fresh.insert(.init(key: key, slot: UInt32(key))) }
        #expect(popped == fresh)
        #expect(popped.hashValue == fresh.hashValue)
    }
}
