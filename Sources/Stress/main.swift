import Foundation

// A soak of QueueSafeValue through its public API. See "Proving the engine" in
// Sources/QueueSafeValue/QueueSafeValue.docc/Architecture.md, or run with --help.

/// The command line.
struct Options {
    var ops = 1_000_000
    var threads = 8
    var seed = UInt64.random(in: 1...UInt64.max)
    var seconds: Double?

    static let usage = """
        Usage: Stress [--ops N] [--threads T] [--seed S] [--seconds S]

        Issues N commands (default 1,000,000) from T threads (default 8) and T/2 tasks at once:
        every schedule and priority, manual completions called at once, late or never, deadlines,
        task cancellation, CommandQueue operations and cancelAll(), and container releases while
        commands hold and wait. Stops after N commands, or S seconds if given. Then it checks that
        each value equals the number of successful increments, that each issuer's commands of one
        priority ran in issue order, that no command ran after it was reported as timed out,
        cancelled or refused, and that every released value was freed. A watchdog fails the run,
        with a dump of the queues, when nothing reports for 10 s. Exits non-zero on any finding.
        Replay a run with the seed it prints (hex or decimal).
        """

    static func parse(_ arguments: [String]) -> Options {
        var options = Options()
        var remaining = arguments[...]
        func value(for flag: String) -> String {
            guard let next = remaining.popFirst() else { fail("\(flag) needs a value") }
            return next
        }
        func number(for flag: String) -> Int {
            let text = value(for: flag).replacingOccurrences(of: "_", with: "")
            guard let number = Int(text), number > 0 else { fail("\(flag) needs a positive whole number") }
            return number
        }
        while let argument = remaining.popFirst() {
            switch argument {
            case "--ops": options.ops = number(for: argument)
            case "--threads": options.threads = number(for: argument)
            case "--seconds":
                guard let seconds = Double(value(for: argument)), seconds > 0 else {
                    fail("--seconds needs a positive number")
                }
                options.seconds = seconds
            case "--seed":
                let text = value(for: argument)
                let seed = text.hasPrefix("0x") ? UInt64(text.dropFirst(2), radix: 16) : UInt64(text)
                guard let seed else { fail("--seed needs a number") }
                options.seed = seed
            case "--help", "-h":
                print(usage)
                exit(0)
            default: fail("unknown argument '\(argument)'")
            }
        }
        return options
    }

    private static func fail(_ message: String) -> Never {
        printError("Stress: \(message)\n\n\(usage)")
        exit(2)
    }
}

let options = Options.parse(Array(CommandLine.arguments.dropFirst()))
#if DEBUG
    printError("NOTE: a debug build; for real throughput: swift run -c release Stress")
#endif
print(
    "Stress: \(options.ops) commands from \(options.threads) threads and \(max(2, options.threads / 2)) tasks, "
        + "seed 0x\(String(options.seed, radix: 16))"
        + (options.seconds.map { ", at most \($0) s" } ?? ""))
let audit = Soak(options: options).run()
let rate = Double(audit.operations) / audit.seconds
print(
    "\(audit.operations) operations in \(String(format: "%.1f", audit.seconds)) s: "
        + "\(Int(rate.rounded())) operations/second over \(audit.generations) containers")
print("  \(audit.outcomes)")
print("  lost updates: \(audit.lostUpdates)")
print("  order violations: \(audit.orderViolations)")
print("  ran after timed out, cancelled or refused: \(audit.ranAfterFailure)")
print("  operations cancelled after they ended: \(audit.cancelledAfterEnd)")
print("  inconsistent outcomes: \(audit.inconsistentOutcomes)")
print("  shared reads that saw a half-applied write: \(audit.tornReads)")
print("  observers: \(audit.observations) values seen, \(audit.observerViolations) out of order or not ending final")
print("  values outliving their container: \(audit.valuesOutlivingContainers)")
print("  hangs: \(audit.hangs)")
print("  command queue statistics: " + audit.statistics.replacingOccurrences(of: "\n", with: "\n  "))
if let report = audit.hangReport { print(report) }
print(audit.failures == 0 ? "PASS" : "FAIL: \(audit.failures) findings")
exit(audit.failures == 0 ? 0 : 1)
