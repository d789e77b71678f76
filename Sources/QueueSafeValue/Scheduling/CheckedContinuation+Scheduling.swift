import QueueSafeValueShims

extension CheckedContinuation where T: Sendable, E == any Error {
    /// Resumes the suspended task from a thread other than its own (the executor's delivery queue,
    /// a cancellation handler, a refresh's task), hiding the resume's own memory accesses from
    /// ThreadSanitizer, for the reason given at `UnsafeContinuation.resumeFromAnotherThread()`: a
    /// task resumed before it finished suspending goes on without any ordering the sanitizer sees.
    /// What the resumed task reads next is ordered by the lock it was handed over under.
    func resumeFromAnotherThread(with result: Result<T, any Error>) {
        qsv_sanitizer_ignore_accesses_begin()
        resume(with: result)
        qsv_sanitizer_ignore_accesses_end()
    }
}
