/// The file and line a command was issued from, as the public command received them. A
/// `StaticString` literal lives as long as the process, so the engine keeps its address.
@usableFromInline
struct CallSite {
    @usableFromInline let file: StaticString
    @usableFromInline let line: UInt

    @inlinable
    @inline(__always)
    init(file: StaticString, line: UInt) {
        self.file = file
        self.line = line
    }

    /// The address of the file's text (0 for a single-scalar literal), read from the string's words
    /// so that it costs no checks where the literal is a constant.
    @inlinable
    @inline(__always)
    var fileAddress: Int {
        // `StaticString` is frozen: its start (or scalar), its count, its flags (bit 0: a scalar).
        let words = unsafeBitCast(file, to: (Int, Int, UInt8).self)
        return words.2 & 1 == 0 ? words.0 : 0
    }

    @inlinable
    @inline(__always)
    var kept: KeptCallSite {
        KeptCallSite(file: UnsafeRawPointer(bitPattern: fileAddress), line: line)
    }
}

/// A call site as the engine keeps it, copied like integers; ``QueueDiagnostics/CallSite`` is what
/// reports show.
// @unchecked Sendable: `file` is the address of a literal in the binary's constant data, never written or freed
@usableFromInline
struct KeptCallSite: Equatable, @unchecked Sendable {
    @usableFromInline let file: UnsafeRawPointer?
    @usableFromInline let line: UInt32

    @inlinable
    @inline(__always)
    init(file: UnsafeRawPointer?, line: UInt) {
        self.file = file
        self.line = UInt32(truncatingIfNeeded: line <= UInt(UInt32.max) ? line : 0)
    }

    /// What reports show, or `nil` when nothing is known.
    var shown: QueueDiagnostics.CallSite? {
        guard let file else { return nil }
        return QueueDiagnostics.CallSite(
            // 32-bit: a line past Int32.max (no source file has one) shows as Int.max
            fileID: String(cString: file.assumingMemoryBound(to: CChar.self)), line: Int(clamping: line))
    }
}
