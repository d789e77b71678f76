import Dispatch
import Testing

@_spi(Testing) @testable import QueueSafeValue

#if canImport(Glibc)
    // Unsafe: declared by hand (it lives in <malloc.h>, which Glibc's module does not export),
    // with glibc's signature; it only reads the chunk header of a live allocation.
    @_silgen_name("malloc_usable_size")
    private func mallocUsableSize(_ pointer: UnsafeMutableRawPointer?) -> Int
#elseif canImport(Darwin)
    import Darwin
#endif

/// The sizes the engine's comments promise, as checks: a size that grows fails here, in the commit
/// that grows it, instead of as a few percent on the benchmark later.
///
/// Each size is given for both pointer widths: 8-byte pointers (64-bit platforms) and 4-byte ones
/// (an Apple Watch's arm64_32; a watch simulator on a Mac with Apple silicon is 64-bit). The 4-byte
/// figures follow from Swift's layout rules (a copy of each type's fields, compiled for 32-bit ARM,
/// has them); no CI machine runs them.
@Suite(.runsAlongsideOthers) struct MemoryLayoutTests {
    typealias Machine = EngineStateMachine

    /// Whether pointers (and `Int`) are 8 bytes here rather than 4.
    static let pointersAre8Bytes = MemoryLayout<UnsafeRawPointer>.size == 8

    /// A record is 16 bytes, so a waiting command costs the machine 32 (its record and its heap
    /// entry). Where pointers are 4 bytes a record is 12 (its 4-byte generation, four one-byte
    /// fields and its waiter's reference), and a waiting command costs 28: the heap entry stays 16,
    /// a 64-bit key and two 32-bit words, on both.
    @Test func aWaitingCommandCostsTheMachine32Bytes() {
        let record = Self.pointersAre8Bytes ? 16 : 12
        #expect(MemoryLayout<Machine.Record>.size == record)
        #expect(MemoryLayout<Machine.Record>.stride == record)
        #expect(MemoryLayout<CommandHeap.Entry>.stride == 16)
    }

    /// What a transition returns is copied by every release: the grant carries how long its
    /// command waited (for the monitor's long waits) in 4 bytes that were padding, so with 8-byte
    /// pointers the actions stay 56 bytes (the grant 27: waiter, starter, the wait, a 5-byte urgency,
    /// kind and shared; then three flags, the ended holder, what was found and the rare actions'
    /// array). With 4-byte pointers the grant is 19 bytes and the actions 36 (32 before the wait).
    @Test func theActionsOfATransitionAre56Bytes() {
        #expect(MemoryLayout<Machine.Grant>.size == (Self.pointersAre8Bytes ? 27 : 19))
        #expect(MemoryLayout<Machine.Actions>.size == (Self.pointersAre8Bytes ? 56 : 36))
    }

    /// A record's role, the state only some kinds of command use, fits in the one byte the record
    /// has left for it (an enum of one-byte payloads: one byte at either pointer width).
    @Test func aRecordsRoleIsOneByte() {
        #expect(MemoryLayout<Machine.Role>.size == 1)
    }

    /// A dispatched command is one allocation of 96 bytes at most (the benchmark's memory per pending
    /// command, 128 bytes with the machine's record and heap entry): an 88-byte object. Swift's
    /// allocator asks `malloc` for the object's size, so what `malloc` gives back bounds it: glibc
    /// serves 81 to 88 bytes from a 96-byte chunk with 88 usable; Apple's allocator, from its
    /// 96-byte size class. Where pointers are 4 bytes the object's header and its pointer-sized
    /// fields halve, and it is 52 bytes: Apple's 64-byte size class, and at most 60 usable bytes
    /// from glibc (a 4-byte chunk header, chunks aligned to 8 or 16 bytes).
    ///
    /// The smallest of 32 live commands is measured: glibc may serve a request from a free chunk up
    /// to a minimum chunk larger (it does not split off less than 32 bytes), and did in a clean-clone
    /// CI run (104 usable bytes for one command, with other suites allocating beside it); a chunk
    /// split from fresh memory or taken from the exact size's bin gives the request's own size.
    @Test func aDispatchedCommandIsOneAllocationOf96BytesAtMost() {
        let value = QueueSafeValue(value: 0)
        let queue = DispatchQueue(label: "layout")
        let commands = (0..<32).map { _ in
            DispatchedCommand<Int>(
                engine: value.engine, queue: queue, operation: .access { $0 += 1 }, completion: { _ in })
        }
        let sizes = commands.map { command in
            let address = UnsafeMutableRawPointer(Unmanaged.passUnretained(command).toOpaque())
            #if canImport(Glibc)
                return mallocUsableSize(address)
            #elseif canImport(Darwin)
                return malloc_size(address)
            #else
                return 0  // no allocator query here
            #endif
        }
        #if canImport(Glibc)
            #expect(sizes.min()! <= (Self.pointersAre8Bytes ? 88 : 60), "usable sizes \(sizes)")
        #elseif canImport(Darwin)
            #expect(sizes.min()! <= (Self.pointersAre8Bytes ? 96 : 64), "sizes \(sizes)")
        #endif
        withExtendedLifetime(commands) {}
    }

    /// The record keeps its waiter in one word (part of its 16 bytes, or 12 where a word is 4).
    @Test func aRecordKeepsTheWaiterInOneWord() {
        #expect(MemoryLayout<Waiter?>.size == MemoryLayout<Int>.size)
    }
}
