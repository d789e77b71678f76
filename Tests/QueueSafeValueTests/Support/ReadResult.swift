import QueueSafeValue

extension WaitScheduling where Value: Sendable {
    /// The blocking shared read's outcome as a `Result`, for tests that assert on why a read did not
    /// run: `try read { … }` folded back into the answer the read gives on the dispatch schedule.
    func readResult<R>(_ body: (Value) -> R) -> Result<R, QueueSafeValueError> {
        Result { () throws(QueueSafeValueError) -> R in try read(body) }
    }
}
