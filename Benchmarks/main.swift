import Foundation

// Benchmarks for QueueSafeValue. See the Benchmarks article of the DocC catalog (Sources/QueueSafeValue/QueueSafeValue.docc/Benchmarks.md), or run with --help.

let options = Options.parse(Array(CommandLine.arguments.dropFirst()))

// Every row runs in a multi-threaded process, as a user's program is: while a process has one
// thread, glibc's `pthread_mutex_lock` skips its atomic instruction (`__libc_single_threaded`), so
// a lock baseline measured first would look twice as fast as the same lock in any real program
// (and `--filter` would report a different ratio than the full run). An idle thread, started
// before anything is measured, ends that: the flag never comes back.
let idleThread = Thread { while true { sleep(3_600) } }
idleThread.start()

#if DEBUG
    // Written unbuffered, so it is the first thing in the output even when stdout is a pipe.
    FileHandle.standardOutput.write(
        Data(
            """
            NOTE: this is a debug build without optimization; its numbers are not representative.
            For real numbers build for release: swift run -c release Benchmarks


            """.utf8
        )
    )
#endif

let configuration = options.quick ? RunConfiguration.quick : RunConfiguration.full
let allScenarios =
    Baselines.all + BlockingScenarios.all + DispatchScenarios.all + AsyncScenarios.all + QueueDepthScenarios.all
    + SharedReadScenarios.all + PriorityInversionScenarios.all + WidthScenarios.all + MonitorScenarios.all
    + TimeoutScenarios.all
let scenarios = Comparison.select(allScenarios, filter: options.filter)
if scenarios.isEmpty {
    printError("Benchmarks: no scenario name contains '\(options.filter ?? "")'. Scenarios:")
    for scenario in allScenarios { printError("  \(scenario.name)") }
    exit(2)
}

let loadBefore = Machine.loadAverage
let runStarted = Clock.now()
let (results, comparisons) = Runner.run(scenarios, configuration: configuration) { printError($0) }
let totalSeconds = Double(Clock.now() - runStarted) / 1e9
let loadAfter = Machine.loadAverage

print(Report.text(results, comparisons))
print("\nTotal run time " + String(format: "%.1f s", totalSeconds) + (options.quick ? " (--quick)." : "."))
let processors = ProcessInfo.processInfo.activeProcessorCount
print("\(processors) processors, \(Machine.cpuModel ?? "unknown CPU").", terminator: "")
if let loadBefore, let loadAfter {
    print(" 1-minute load average \(loadBefore) at the start, \(loadAfter) at the end.", terminator: "")
}
print()

do {
    if let path = options.jsonPath {
        try Report.json(
            results,
            comparisons,
            quick: options.quick,
            totalSeconds: totalSeconds,
            loadAverages: [loadBefore, loadAfter].compactMap { $0 }
        )
        .write(to: URL(fileURLWithPath: path))
        printError("Wrote \(path)")
    }
    if let path = options.svgPath {
        try Report.svg(comparisons).write(toFile: path, atomically: true, encoding: .utf8)
        printError("Wrote \(path)")
    }
} catch {
    printError("Benchmarks: could not write output: \(error)")
    exit(1)
}

let missed = comparisons.filter { $0.passed == false }
if options.check && !missed.isEmpty {
    printError("Benchmarks: \(missed.count) target(s) missed: " + missed.map(\.library.name).joined(separator: ", "))
    exit(3)
}
