import Testing

@_spi(Testing) @testable import QueueSafeValue

/// Issue 41: the words the engine packs are fixed-width, so they mean the same on a 32-bit Apple
/// Watch (arm64_32, where `Int` has 32 bits) as here. A ticket packs into a `UInt64` (the wait-for
/// graph's ticket, and a shared read's token) and back, at its extremes: the packing these replace
/// (`Int.min + Int(slot) << 32 + generation`) trapped here for a slot at or above 2^31, and lost the
/// slot where `Int` has 32 bits.
@Suite(.runsAlongsideOthers) struct FixedWidthPackingTests {
    typealias Ticket = CommandEngine.Ticket

    static let extremes: [(slot: UInt32, generation: UInt32)] = [
        (0, 0), (0, .max), (.max, 0), (.max, .max), (UInt32(Int32.max), .max), (UInt32(Int32.max) + 1, 1), (1, 1),
    ]

    @Test(arguments: extremes.indices)
    func aTicket_roundTripsThroughItsPackedWord(_ index: Int) {
        let (slot, generation) = Self.extremes[index]
        let ticket = Ticket(slot: slot, generation: generation)
        #expect(Ticket(packed: ticket.packed) == ticket)
    }

    /// Distinct tickets pack into distinct words (the slot in the high half, the generation in the
    /// low one), so a stale read's token never names a live read.
    @Test func distinctTickets_packDistinctly() {
        let tickets = Self.extremes.map { Ticket(slot: $0.slot, generation: $0.generation) }
        #expect(Set(tickets.map(\.packed)).count == Set(tickets).count)
        #expect(Ticket(slot: 1, generation: 0).packed == 1 << 32)
    }

    /// A shared read's record in a task's stack of sections never equals an exclusive section's,
    /// even where the read's token and the section's generation are the same number.
    @Test func aReadsEntry_isNeverAnExclusiveSectionsEntry() {
        let engine = ObjectIdentifier(FixedWidthPackingTests.self)
        let read = SectionEntry(engine: engine, readerToken: 7)
        let exclusive = SectionEntry(engine: engine, generation: 7)
        #expect(read != exclusive)
        #expect(SectionStack().pushing(read).readerTokens(of: engine) == [7])
        #expect(SectionStack().pushing(exclusive).readerTokens(of: engine).isEmpty)
    }
}
