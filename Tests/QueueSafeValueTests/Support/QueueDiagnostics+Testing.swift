@_spi(Testing) @testable import QueueSafeValue

extension QueueDiagnostics {
    /// An empty snapshot, for errors built in tests.
    static let placeholder = QueueDiagnostics(name: "", holder: nil, waiting: [:], isContainerReleased: false)
}
