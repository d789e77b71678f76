@_spi(Testing) @testable import QueueSafeValue

/// Records every `LostUpdate` the library reports, for the whole test process. The handler is
/// process-wide and tests run in parallel, so it is installed once and never restored; a test
/// reads the reports of the values it labelled itself.
enum LostUpdateRecorder {
    private static let reports = Locked<[LostUpdate]>([])

    private static let installed: Void = {
        LostUpdates.handler = { report in reports.withLock { $0.append(report) } }
    }()

    /// Installs the recorder (once); call before the commands whose reports a test reads.
    static func install() {
        _ = installed
    }

    /// The reports for the value labelled `label`.
    static func reports(forLabel label: String) -> [LostUpdate] {
        reports.value.filter { $0.value == "'\(label)'" }
    }
}
