import QueueSafeValueShims

// Which thread and which task the caller runs in: each one call into the C shim.

/// A nonzero identifier of the calling thread.
@inlinable
@inline(__always)
func currentThreadID() -> Int {
    Int(bitPattern: qsv_current_thread_id())
}

/// The address of the task the caller runs in, or 0, without the runtime call
/// `withUnsafeCurrentTask` makes (<doc:Benchmarks#Why-the-code-is-shaped-this-way>).
@usableFromInline
@inline(__always)
func currentTaskID() -> Int {
    Int(bitPattern: qsv_current_task())
}
