import QueueSafeValueShims

// The platform: which thread and which task the caller runs in, the processor's pause hint, and a
// cheap clock. Each is one instruction or one call into the C shim.

/// A nonzero identifier of the calling thread.
@inlinable
@inline(__always)
func currentThreadID() -> Int {
    Int(bitPattern: qsv_current_thread_id())
}

/// Tells the processor the caller is busy-waiting.
@inline(__always)
func cpuRelax() {
    qsv_cpu_relax()
}

/// The identity of the task the caller runs in (its address, the same one `UnsafeCurrentTask`
/// wraps), or 0 outside any task, read without the call `withUnsafeCurrentTask` makes into the
/// runtime (<doc:Benchmarks#Why-the-code-is-shaped-this-way> has both costs): an awaiting
/// command's idle path records its task with it.
@usableFromInline
@inline(__always)
func currentTaskID() -> Int {
    Int(bitPattern: qsv_current_task())
}
