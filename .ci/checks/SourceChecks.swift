// Two checks of what Sources/ will do on Apple platforms, which no build on Linux can see. Run by
// the toolchain's interpreter (about a second each, no build), through `.ci/availability` and
// `.ci/32-bit`.
//
//   swift .ci/checks/SourceChecks.swift availability DIRECTORY
//   swift .ci/checks/SourceChecks.swift 32-bit DIRECTORY
//
// Both read the text, not the types: what they match is matched outside comments and string
// literals. Each exits 1 and lists every finding.
//
// ## availability
//
// Every use of an API newer than the package's deployment floor (macOS 10.15, iOS 13, tvOS 13,
// watchOS 6; visionOS 1) sits where Apple platforms only reach it on a system new enough: inside a
// declaration marked `@available(...)` with at least those versions, an `if #available` block, the
// rest of a scope after `guard #available ... else`, or a branch that Apple platforms do not
// compile (`#if os(Linux)`, `#if canImport(Glibc)`, the `#elseif`/`#else` after `#if
// canImport(Darwin)`, …). The compiler checks availability only for the platform it builds for,
// and CI builds for Linux. Each symbol below is matched as a whole word, and its context is found
// from the braces, attributes and `#if` lines around it. (Not understood: an `@available` on a
// declaration without a body, such as a typealias, also covers the next body that opens.)
//
// HOW A NEW API GETS ONTO THE LIST: when a change uses an API that Apple introduced after the
// floor, add a row to `symbols` below: the word to match (`receiver.member` matches that member on
// a receiver of that name: `scenario.task` is `scenario.task(…)`, `Task.name` the current task's
// name), the versions it needs on each platform, and where they come from. For the standard library, read the declaration's availability in the
// Swift repository (`@available(SwiftStdlib 6.0, *)`) and translate the macro with the table in
// `swift/utils/availability-macros.def`: SwiftStdlib 5.7 = macOS 13, iOS 16, tvOS 16, watchOS 9;
// 5.9 = macOS 14, iOS 17, tvOS 17, watchOS 10, visionOS 1; 6.0 = macOS 15, iOS 18, tvOS 18,
// watchOS 11, visionOS 2; 6.2 = macOS 26, iOS 26, tvOS 26, watchOS 26, visionOS 26. For
// Foundation, Dispatch and `os`, take the versions from Apple's SDK documentation (the
// declaration's "Availability" box, or the `API_AVAILABLE` in its header). Then guard every use,
// and run `.ci/availability`.
//
// STRING ALGORITHMS. The standard library's string algorithms (SE-0357) need SwiftStdlib 5.7
// (macOS 13, iOS 16, tvOS 16, watchOS 9) and compile on Linux without a word. Where the name alone
// says so (`firstRange`, `trimmingPrefix`, `trimPrefix`, `firstMatch`, `wholeMatch`, `prefixMatch`,
// `Regex`) the name is on the list. Where an older API has the same name, the form of the call
// decides, since the text cannot see types:
//
// - `ranges(of:` and `matches(of:` (bare `ranges` and `matches` are common names).
// - `split(separator:` with a string literal that can only be a `String`: one that holds other
//   than exactly one character, spans lines, or interpolates. A one-character literal is a
//   `Character`, and `split(separator:)` with an element is as old as the language.
// - `contains(` with such a literal, in a file that does not `import Foundation` itself:
//   Foundation's `StringProtocol.contains(_:)` reaches the floor, and the compiler picks it where
//   the file imports Foundation. The import is read per file, as `MemberImportVisibility` (on for
//   the package's targets) reads it; in a target without that feature an import in another file
//   of the target would do too, which the check does not count on.
//
// Not seen: an argument that is not a literal (`text.contains(word)` with a `String` variable, or
// `split(separator: comma)`): the text cannot tell a `String` from a `Character` or an element.
// Flagged though right: a literal of two or more characters that is an element
// (`names.contains("Ann")` on an array of strings) in a file without Foundation; import Foundation
// there. `replacing(_:with:)` is not on the list (the name is a common method name).
//
// ## 32-bit
//
// No `Int` arithmetic that assumes 64 bits: an Apple Watch (arm64_32) has a 32-bit `Int`, where a
// shift by 32 or more gives 0 and a literal above `Int32.max` does not fit. A line fails when it
// shifts by a literal of 32 or more while it converts with `Int(`/`UInt(` or names no 64-bit
// fixed-width type (`UInt64`, `Int64`), or when it holds an integer literal above `Int32.max` and
// names no fixed-width type that holds it (`UInt64`, `Int64`, or `UInt32` up to its maximum) nor a
// floating-point one. It also fails on every `Int(clamping:` and `Int(truncatingIfNeeded:` (and
// their `UInt(` forms): narrowing a 64-bit value to `Int` compiles the same on both widths, but
// where `Int` has 32 bits it silently saturates or drops the high bits of anything past 2^31 (a
// period of 2.1 s in nanoseconds), and the text cannot tell whether the argument is 64 bits wide.
// (A conversion split across lines, `Int(` on one and `clamping:` on the next, is not seen.)
// Pack words in fixed-width types (words that hold pointers stay pointer-sized); a line that is
// right as it stands carries `// 32-bit: REASON` at its end or on the line above, the reason saying
// why the value fits or why saturating is what the code wants.

import Foundation

struct Versions: CustomStringConvertible {
    var macOS: [Int], iOS: [Int], tvOS: [Int], watchOS: [Int], visionOS: [Int]

    subscript(platform: String) -> [Int] {
        switch platform {
        case "macOS": macOS
        case "iOS": iOS
        case "tvOS": tvOS
        case "watchOS": watchOS
        default: visionOS
        }
    }

    var description: String {
        "macOS \(macOS.map(String.init).joined(separator: ".")), iOS \(iOS.map(String.init).joined(separator: ".")), "
            + "tvOS \(tvOS.map(String.init).joined(separator: ".")), watchOS \(watchOS.map(String.init).joined(separator: ".")), "
            + "visionOS \(visionOS.map(String.init).joined(separator: "."))"
    }
}

let platforms = ["macOS", "iOS", "tvOS", "watchOS", "visionOS"]
/// The package's floor (Package.swift; visionOS's first release where the package names none).
let floor = Versions(macOS: [10, 15], iOS: [13], tvOS: [13], watchOS: [6], visionOS: [1])

let stdlib5_7 = Versions(macOS: [13], iOS: [16], tvOS: [16], watchOS: [9], visionOS: [1])
let stdlib5_9 = Versions(macOS: [14], iOS: [17], tvOS: [17], watchOS: [10], visionOS: [1])
let stdlib6_0 = Versions(macOS: [15], iOS: [18], tvOS: [18], watchOS: [11], visionOS: [2])
let stdlib6_2 = Versions(macOS: [26], iOS: [26], tvOS: [26], watchOS: [26], visionOS: [26])

/// The APIs newer than the floor that this package uses, or is expected to: (word, versions, source).
/// The types the checked files declare themselves under an `@available` above the floor are added
/// to it as they are found (see ``declaredAboveTheFloor(in:)``).
var symbols: [(word: String, needs: Versions, source: String)] = [
    // Executors (SE-0392, SE-0417).
    ("TaskExecutor", stdlib6_0, "SwiftStdlib 6.0: protocol TaskExecutor"),
    ("ExecutorJob", stdlib5_9, "SwiftStdlib 5.9: struct ExecutorJob"),
    ("UnownedJob", stdlib5_9, "SwiftStdlib 5.9: UnownedJob.init(_: ExecutorJob), the only way to make one"),
    ("asUnownedTaskExecutor", stdlib6_0, "SwiftStdlib 6.0: TaskExecutor.asUnownedTaskExecutor()"),
    ("UnownedTaskExecutor", stdlib6_0, "SwiftStdlib 6.0: struct UnownedTaskExecutor"),
    ("runSynchronously", stdlib6_0, "SwiftStdlib 6.0: UnownedJob.runSynchronously(on: UnownedTaskExecutor)"),
    ("executorPreference", stdlib6_0, "SwiftStdlib 6.0: Task(executorPreference:) and Task.detached(executorPreference:)"),
    ("withTaskExecutorPreference", stdlib6_0, "SwiftStdlib 6.0: withTaskExecutorPreference(_:operation:)"),
    ("globalConcurrentExecutor", stdlib6_0, "SwiftStdlib 6.0: globalConcurrentExecutor"),
    // Priority escalation (SE-0462).
    ("withTaskPriorityEscalationHandler", stdlib6_2, "SwiftStdlib 6.2: withTaskPriorityEscalationHandler"),
    ("escalatePriority", stdlib6_2, "SwiftStdlib 6.2: Task.escalatePriority(to:), UnsafeCurrentTask.escalatePriority(to:)"),
    // Time (SE-0329).
    ("Duration", stdlib5_7, "SwiftStdlib 5.7: struct Duration"),
    ("ContinuousClock", stdlib5_7, "SwiftStdlib 5.7: struct ContinuousClock"),
    ("SuspendingClock", stdlib5_7, "SwiftStdlib 5.7: struct SuspendingClock"),
    ("InstantProtocol", stdlib5_7, "SwiftStdlib 5.7: protocol InstantProtocol"),
    // Synchronization (SE-0410, SE-0433).
    ("Mutex", stdlib6_0, "SwiftStdlib 6.0: Synchronization.Mutex"),
    ("Atomic", stdlib6_0, "SwiftStdlib 6.0: Synchronization.Atomic"),
    // Task groups that discard their results (SE-0381).
    ("withDiscardingTaskGroup", stdlib5_9, "SwiftStdlib 5.9: withDiscardingTaskGroup"),
    ("withThrowingDiscardingTaskGroup", stdlib5_9, "SwiftStdlib 5.9: withThrowingDiscardingTaskGroup"),
    // Task names (SE-0469): reading the current task's name (naming a task is older: the name is
    // dropped below). `receiver.member` matches that member on a receiver of that name.
    ("Task.name", stdlib6_2, "SwiftStdlib 6.2: Task.name, the current task's name"),
    // String algorithms and regular expressions (SE-0357, SE-0350); `contains`, `split`, `ranges`
    // and `matches` are matched by their form instead (see "String algorithms" in the header).
    ("firstRange", stdlib5_7, "SwiftStdlib 5.7: Collection.firstRange(of:)"),
    ("trimmingPrefix", stdlib5_7, "SwiftStdlib 5.7: Collection.trimmingPrefix(_:), trimmingPrefix(while:)"),
    ("trimPrefix", stdlib5_7, "SwiftStdlib 5.7: RangeReplaceableCollection.trimPrefix(_:)"),
    ("firstMatch", stdlib5_7, "SwiftStdlib 5.7: firstMatch(of:)"),
    ("wholeMatch", stdlib5_7, "SwiftStdlib 5.7: wholeMatch(of:)"),
    ("prefixMatch", stdlib5_7, "SwiftStdlib 5.7: prefixMatch(of:)"),
    ("Regex", stdlib5_7, "SwiftStdlib 5.7: struct Regex"),
    // QueueSafeValueTesting's own (`receiver.member` matches that member on a receiver of that
    // name, as the docs name an exploration's scenario).
    ("scenario.task", stdlib6_0, "QueueSafeValueTesting: Exploration.Scenario.task(_:_:), whose jobs need task executors"),
    // os: unified logging and signposts (Apple's SDK documentation).
    ("Logger", Versions(macOS: [11], iOS: [14], tvOS: [14], watchOS: [7], visionOS: [1]), "os: Logger (macOS 11, iOS 14)"),
    ("OSSignposter", Versions(macOS: [12], iOS: [15], tvOS: [15], watchOS: [8], visionOS: [1]), "os: OSSignposter (macOS 12, iOS 15)"),
    ("OSSignpostIntervalState", Versions(macOS: [12], iOS: [15], tvOS: [15], watchOS: [8], visionOS: [1]), "os: OSSignpostIntervalState"),
]

/// A file's own import of Foundation (attributes and an access level allowed; `import struct
/// Foundation.X` imports one declaration and does not count), in its code (comments blanked).
let foundationImport =
    "(?m)^[ \\t]*(?:@\\w+(?:\\([^)]*\\))?[ \\t]+)*(?:(?:public|package|internal|fileprivate|private)[ \\t]+)?"
    + "import[ \\t]+Foundation[ \\t]*$"

/// The names of the types (classes, structs, enums, actors, protocols, typealiases) the files declare.
func typesDeclared(in files: [String]) -> Set<String> {
    let declaration = try! NSRegularExpression(pattern: "\\b(?:class|struct|enum|actor|protocol|typealias)\\s+(\\w+)")
    var names: Set<String> = []
    for file in files {
        guard let text = try? String(contentsOfFile: file, encoding: .utf8) else { continue }
        let stripped = String(code(of: text))
        for match in declaration.matches(in: stripped, range: NSRange(stripped.startIndex..., in: stripped)) {
            if let name = Range(match.range(at: 1), in: stripped) { names.insert(String(stripped[name])) }
        }
    }
    return names
}

/// The types (classes, structs, enums, actors, protocols) the files declare under an `@available`
/// that names versions above the floor: a use of one of them needs those versions too.
func declaredAboveTheFloor(in files: [String]) -> [(word: String, needs: Versions, source: String)] {
    let declaration = try! NSRegularExpression(
        pattern: "@available\\(([^)]*)\\)(?:\\s|@\\w+|public|internal|private|fileprivate|final|package|open)*"
            + "(?:class|struct|enum|actor|protocol)\\s+(\\w+)")
    var found: [(word: String, needs: Versions, source: String)] = []
    for file in files {
        guard let text = try? String(contentsOfFile: file, encoding: .utf8) else { continue }
        let stripped = String(code(of: text))
        for match in declaration.matches(in: stripped, range: NSRange(stripped.startIndex..., in: stripped)) {
            guard let arguments = Range(match.range(at: 1), in: stripped).map({ String(stripped[$0]) }),
                let name = Range(match.range(at: 2), in: stripped).map({ String(stripped[$0]) })
            else { continue }
            let (versions, unavailable) = parseAvailability(arguments)
            guard !unavailable, !versions.isEmpty else { continue }
            let needs = Versions(
                macOS: versions["macOS"] ?? floor.macOS, iOS: versions["iOS"] ?? floor.iOS,
                tvOS: versions["tvOS"] ?? floor.tvOS, watchOS: versions["watchOS"] ?? floor.watchOS,
                visionOS: versions["visionOS"] ?? floor.visionOS)
            found.append((name, needs, "declared @available(\(arguments)) in \(file)"))
        }
    }
    return found
}

// MARK: - Reading a file

/// The text with comments and the contents of string literals replaced by spaces (newlines kept),
/// so that neither a doc comment nor a message can match a symbol.
func code(of text: String) -> [Character] {
    let chars = Array(text)
    var out = chars
    var i = 0
    func blank(_ range: Range<Int>) { for k in range where out[k] != "\n" { out[k] = " " } }
    while i < chars.count {
        let c = chars[i]
        let next: Character? = i + 1 < chars.count ? chars[i + 1] : nil
        if c == "/" && next == "/" {
            var j = i
            while j < chars.count && chars[j] != "\n" { j += 1 }
            blank(i..<j)
            i = j
        } else if c == "/" && next == "*" {
            var depth = 0
            var j = i
            repeat {
                if j + 1 < chars.count && chars[j] == "/" && chars[j + 1] == "*" {
                    depth += 1
                    j += 2
                } else if j + 1 < chars.count && chars[j] == "*" && chars[j + 1] == "/" {
                    depth -= 1
                    j += 2
                } else {
                    j += 1
                }
            } while depth > 0 && j < chars.count
            blank(i..<j)
            i = j
        } else if c == "\"" || (c == "#" && next == "\"") {
            // A string literal: raw (#"…"#), multi-line ("""…"""), or plain; interpolations are
            // blanked too (they hold expressions, never a use of a listed API here).
            var hashes = 0
            var j = i
            while j < chars.count && chars[j] == "#" {
                hashes += 1
                j += 1
            }
            let triple = j + 2 < chars.count && chars[j + 1] == "\"" && chars[j + 2] == "\""
            let quotes = triple ? 3 : 1
            j += quotes
            while j < chars.count {
                if chars[j] == "\\" && hashes == 0 {
                    j += 2
                    continue
                }
                if chars[j] == "\"" {
                    var k = j
                    var run = 0
                    while k < chars.count && chars[k] == "\"" && run < quotes {
                        run += 1
                        k += 1
                    }
                    var h = 0
                    while h < hashes && k < chars.count && chars[k] == "#" {
                        h += 1
                        k += 1
                    }
                    if run == quotes && h == hashes {
                        j = k
                        break
                    }
                }
                if !triple && chars[j] == "\n" { break }
                j += 1
            }
            blank(i..<j)
            i = j
        } else {
            i += 1
        }
    }
    return out
}

/// The versions an `@available(...)` or `#available(...)` argument list names, by platform; `*`
/// alone names none. `nil` for `unavailable` (a context no Apple platform calls), empty for a
/// deprecation or a renaming without versions.
func parseAvailability(_ arguments: String) -> (versions: [String: [Int]], unavailable: Bool) {
    var versions: [String: [Int]] = [:]
    var unavailable = false
    for part in arguments.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) {
        let words = part.split(separator: " ").map(String.init)
        if words.contains("unavailable") { unavailable = true }
        guard words.count >= 2, platforms.contains(words[0]) || words[0].hasSuffix("ApplicationExtension") else {
            continue
        }
        let platform = words[0].replacingOccurrences(of: "ApplicationExtension", with: "")
        if words[1] == "unavailable" { continue }
        let version = (words[1] == "introduced:" && words.count > 2 ? words[2] : words[1])
        let numbers = version.split(separator: ".").compactMap { Int($0) }
        if !numbers.isEmpty { versions[platform] = numbers }
    }
    return (versions, unavailable)
}

/// A scope (a pair of braces), and what it knows.
struct Scope {
    var versions: [String: [Int]] = [:]
    /// No Apple platform compiles or calls it.
    var excluded = false
    /// A `guard #available` whose else-body this scope is: when it closes, the enclosing scope
    /// gains these versions for the rest of its body.
    var guardVersions: [String: [Int]]?
}

/// What one `#if` block knows: whether the branch now read excludes Apple platforms, and whether an
/// earlier branch was taken on every Apple platform (so the later ones never are).
struct Conditional {
    var excludesApple: Bool
    var appleTookAnEarlierBranch: Bool
}

let impliesApple = ["canImport(Darwin)", "os(macOS)", "os(iOS)", "os(tvOS)", "os(watchOS)", "os(visionOS)"]
let excludesApple = [
    "os(Linux)", "os(Windows)", "os(Android)", "os(WASI)", "os(FreeBSD)", "os(OpenBSD)", "canImport(Glibc)",
    "canImport(Musl)", "canImport(CDispatch)", "!canImport(Darwin)", "canImport(WinSDK)",
]

func merged(_ a: [String: [Int]], _ b: [String: [Int]]) -> [String: [Int]] {
    a.merging(b) { $0.lexicographicallyPrecedes($1) ? $1 : $0 }
}

struct Finding {
    let file: String
    let line: Int
    let message: String
}

func check(file: String) -> [Finding] {
    guard let text = try? String(contentsOfFile: file, encoding: .utf8) else {
        return [Finding(file: file, line: 0, message: "cannot read the file")]
    }
    let chars = code(of: text)
    var findings: [Finding] = []
    var scopes = [Scope()]
    var conditionals: [Conditional] = []
    /// Versions of an `@available` or `#available` that apply to the next `{` (and to what stands
    /// before it: a declaration's signature, a condition list).
    var pending: (versions: [String: [Int]], unavailable: Bool, isGuard: Bool)?
    var line = 1
    var i = 0
    var atLineStart = true

    func isWordChar(_ c: Character) -> Bool { c.isLetter || c.isNumber || c == "_" }
    func word(at index: Int) -> String {
        var j = index
        while j < chars.count && isWordChar(chars[j]) { j += 1 }
        return String(chars[index..<j])
    }
    /// The text of a parenthesized list starting at `open` (`(`), and the index after `)`.
    func parenthesized(at open: Int) -> (String, Int) {
        var depth = 0
        var j = open
        repeat {
            if chars[j] == "(" { depth += 1 }
            if chars[j] == ")" { depth -= 1 }
            j += 1
        } while depth > 0 && j < chars.count
        return (String(chars[(open + 1)..<(j - 1)]), j)
    }
    /// The file's own `import Foundation` (see "String algorithms" in the header).
    let importsFoundation = String(chars).range(of: foundationImport, options: .regularExpression) != nil
    /// The text of the file as written (`chars` has string literals blanked), index for index.
    let written = Array(text)
    /// The string literal that starts at `start` (after spaces), as the compiler reads it: whether
    /// it can only be a `String` (not a `Character`): it holds other than one character, spans
    /// lines, or interpolates.
    func isStringLiteral(at start: Int) -> Bool {
        var j = start
        while j < written.count && written[j] == " " { j += 1 }
        var hashes = 0
        while j < written.count && written[j] == "#" {
            hashes += 1
            j += 1
        }
        guard j < written.count, written[j] == "\"" else { return false }
        if j + 2 < written.count && written[j + 1] == "\"" && written[j + 2] == "\"" { return true }  // multi-line
        j += 1
        var content = ""
        while j < written.count && written[j] != "\n" {
            if written[j] == "\"" && written[(j + 1)...].prefix(hashes).allSatisfy({ $0 == "#" })
                && written.count - j - 1 >= hashes
            {
                return content.count != 1
            }
            if written[j] == "\\" && written[(j + 1)...].prefix(hashes).allSatisfy({ $0 == "#" }) {
                let escaped = j + 1 + hashes
                guard escaped < written.count else { return true }
                switch written[escaped] {
                case "(": return true  // an interpolation
                case "u":
                    // \u{…}: one scalar.
                    var k = escaped + 2
                    var digits = ""
                    while k < written.count && written[k] != "}" {
                        digits.append(written[k])
                        k += 1
                    }
                    if let value = UInt32(digits, radix: 16), let scalar = Unicode.Scalar(value) {
                        content.unicodeScalars.append(scalar)
                    }
                    j = k + 1
                default:
                    content.append("x")  // \n, \t, \\, \": one character
                    j = escaped + 1
                }
                continue
            }
            content.append(written[j])
            j += 1
        }
        return true  // unterminated: not a literal the compiler would take
    }
    /// A call of one of the standard library's string algorithms that need SwiftStdlib 5.7 (macOS 13,
    /// iOS 16) where its form shows it (see "String algorithms" in the header); `call` is the index
    /// after the name and its spaces.
    func stringAlgorithm(_ name: String, callAt call: Int) -> (source: String, foundationCovers: Bool)? {
        guard call < chars.count, chars[call] == "(" else { return nil }
        var argument = call + 1
        while argument < written.count && written[argument].isWhitespace { argument += 1 }
        func labelled(_ label: String) -> Int? {
            guard argument + label.count <= chars.count, String(chars[argument..<(argument + label.count)]) == label
            else { return nil }
            return argument + label.count
        }
        switch name {
        case "contains" where isStringLiteral(at: argument):
            return ("SwiftStdlib 5.7: Collection.contains(_ other:) with a String; or import Foundation, whose StringProtocol.contains(_:) reaches the floor", true)
        case "split":
            guard let value = labelled("separator:"), isStringLiteral(at: value) else { return nil }
            return ("SwiftStdlib 5.7: Collection.split(separator:) with a String separator", false)
        case "ranges", "matches":
            guard labelled("of:") != nil else { return nil }
            return ("SwiftStdlib 5.7: \(name)(of:)", false)
        default:
            return nil
        }
    }
    func context() -> (versions: [String: [Int]], excluded: Bool) {
        var versions: [String: [Int]] = [:]
        var excluded = conditionals.contains { $0.excludesApple || $0.appleTookAnEarlierBranch }
        for scope in scopes {
            versions = merged(versions, scope.versions)
            excluded = excluded || scope.excluded
        }
        if let pending {
            if pending.unavailable { excluded = true }
            if !pending.isGuard { versions = merged(versions, pending.versions) }
        }
        return (versions, excluded)
    }

    while i < chars.count {
        let c = chars[i]
        if c == "\n" {
            line += 1
            atLineStart = true
            i += 1
            continue
        }
        if atLineStart && c == "#" && ["if", "elseif", "else", "endif"].contains(word(at: i + 1)) {
            // A compiler directive: #if, #elseif, #else, #endif (not a macro such as `#expect(`,
            // whose line is code).
            var end = i
            while end < chars.count && chars[end] != "\n" { end += 1 }
            let directive = String(chars[i..<end]).trimmingCharacters(in: .whitespaces)
            let condition = directive.split(separator: " ", maxSplits: 1).dropFirst().first.map(String.init) ?? ""
            let compact = condition.replacingOccurrences(of: " ", with: "")
            if directive.hasPrefix("#if ") {
                conditionals.append(
                    Conditional(excludesApple: excludesApple.contains(compact), appleTookAnEarlierBranch: false))
                if impliesApple.contains(compact) { conditionals[conditionals.count - 1].excludesApple = false }
                lastIfImpliedApple.append(impliesApple.contains(compact))
            } else if directive.hasPrefix("#elseif "), !conditionals.isEmpty {
                let tookApple = lastIfImpliedApple.last == true || conditionals[conditionals.count - 1].appleTookAnEarlierBranch
                conditionals[conditionals.count - 1] = Conditional(
                    excludesApple: excludesApple.contains(compact), appleTookAnEarlierBranch: tookApple)
                lastIfImpliedApple[lastIfImpliedApple.count - 1] = impliesApple.contains(compact)
            } else if directive.hasPrefix("#else"), !conditionals.isEmpty {
                let tookApple = lastIfImpliedApple.last == true || conditionals[conditionals.count - 1].appleTookAnEarlierBranch
                conditionals[conditionals.count - 1] = Conditional(excludesApple: false, appleTookAnEarlierBranch: tookApple)
                lastIfImpliedApple[lastIfImpliedApple.count - 1] = false
            } else if directive.hasPrefix("#endif"), !conditionals.isEmpty {
                conditionals.removeLast()
                lastIfImpliedApple.removeLast()
            }
            i = end
            continue
        }
        if !c.isWhitespace { atLineStart = false }
        if c == "@" || c == "#", i + 1 < chars.count, word(at: i + 1) == "available" {
            let open = i + 1 + "available".count
            guard open < chars.count, chars[open] == "(" else {
                i += 1
                continue
            }
            let (arguments, after) = parenthesized(at: open)
            let (versions, unavailable) = parseAvailability(arguments)
            // `guard #available(...) else {`: the else-body is not available, what follows it is.
            var back = i - 1
            while back >= 0 && chars[back].isWhitespace { back -= 1 }
            var start = back
            while start >= 0 && isWordChar(chars[start]) { start -= 1 }
            let isGuard = c == "#" && back >= 0 && String(chars[(start + 1)...back]) == "guard"
            if let existing = pending {
                pending = (merged(existing.versions, versions), existing.unavailable || unavailable, isGuard)
            } else {
                pending = (versions, unavailable, isGuard)
            }
            for k in i..<after where chars[k] == "\n" { line += 1 }
            i = after
            continue
        }
        if c == "{" {
            var scope = Scope()
            if let taken = pending {
                if taken.isGuard {
                    scope.guardVersions = taken.versions
                } else {
                    scope.versions = taken.versions
                    scope.excluded = taken.unavailable
                }
                pending = nil
            }
            scopes.append(scope)
            i += 1
            continue
        }
        if c == "}" {
            if scopes.count > 1 {
                let closed = scopes.removeLast()
                if let versions = closed.guardVersions {
                    scopes[scopes.count - 1].versions = merged(scopes[scopes.count - 1].versions, versions)
                }
            }
            pending = nil
            i += 1
            continue
        }
        if isWordChar(c) && (i == 0 || !isWordChar(chars[i - 1])) {
            let name = word(at: i)
            var after = i + name.count
            while after < chars.count && chars[after] == " " { after += 1 }
            // For a member `receiver.name`, the receiver's word.
            var receiver: String?
            if i > 0 && chars[i - 1] == "." {
                var start = i - 1
                while start > 0 && isWordChar(chars[start - 1]) { start -= 1 }
                receiver = String(chars[start..<(i - 1)])
            }
            var symbol = symbols.first(where: { $0.word == name || (receiver.map { "\($0).\(name)" } == $0.word) })
            if symbol == nil, let rule = stringAlgorithm(name, callAt: after), !(rule.foundationCovers && importsFoundation) {
                symbol = (name, stdlib5_7, rule.source)
            }
            if let symbol {
                let (versions, excluded) = context()
                if !excluded {
                    let short = platforms.filter { platform in
                        let have = versions[platform] ?? floor[platform]
                        return have.lexicographicallyPrecedes(symbol.needs[platform])
                    }
                    if !short.isEmpty {
                        findings.append(
                            Finding(
                                file: file, line: line,
                                message: "\(name) needs \(symbol.needs) (\(symbol.source)); here it is reachable on "
                                    + short.map { "\($0) \((versions[$0] ?? floor[$0]).map(String.init).joined(separator: "."))" }
                                    .joined(separator: ", ")))
                    }
                }
            }
            i += max(name.count, 1)
            continue
        }
        i += 1
    }
    return findings
}

/// For each open `#if` block: whether the branch being read is taken on every Apple platform.
var lastIfImpliedApple: [Bool] = []

// MARK: - 32-bit

func check32Bit(file: String) -> [Finding] {
    guard let text = try? String(contentsOfFile: file, encoding: .utf8) else {
        return [Finding(file: file, line: 0, message: "cannot read the file")]
    }
    let raw = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    let stripped = String(code(of: text)).split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    let shift = try! NSRegularExpression(pattern: "(<<|>>)=?\\s*([0-9]+)\\b")
    let literal = try! NSRegularExpression(pattern: "(?<![\\w.])(0x[0-9A-Fa-f_]+|0b[01_]+|0o[0-7_]+|[0-9][0-9_]*)(?![\\w.])")
    let conversion = try! NSRegularExpression(pattern: "(?<![\\w.])U?Int\\(")
    let narrowing = try! NSRegularExpression(pattern: "(?<![\\w.])(U?Int)\\(\\s*(clamping|truncatingIfNeeded)\\s*:")
    func matches(_ regex: NSRegularExpression, _ line: String) -> [[String]] {
        let range = NSRange(line.startIndex..., in: line)
        return regex.matches(in: line, range: range).map { match in
            (0..<match.numberOfRanges).map { index in
                Range(match.range(at: index), in: line).map { String(line[$0]) } ?? ""
            }
        }
    }
    func value(of literal: String) -> UInt64? {
        let digits = literal.replacingOccurrences(of: "_", with: "")
        if digits.hasPrefix("0x") { return UInt64(digits.dropFirst(2), radix: 16) }
        if digits.hasPrefix("0b") { return UInt64(digits.dropFirst(2), radix: 2) }
        if digits.hasPrefix("0o") { return UInt64(digits.dropFirst(2), radix: 8) }
        return UInt64(digits) ?? .max
    }
    var findings: [Finding] = []
    for (index, line) in stripped.enumerated() {
        let marked = raw[index].contains("// 32-bit:") || (index > 0 && raw[index - 1].trimmingCharacters(in: .whitespaces).hasPrefix("// 32-bit:"))
        if marked { continue }
        let words = Set(line.split { !($0.isLetter || $0.isNumber || $0 == "_") }.map(String.init))
        let names64 = words.contains("UInt64") || words.contains("Int64")
        let converts = !matches(conversion, line).isEmpty
        for match in matches(shift, line) where (Int(match[2]) ?? 0) >= 32 && (converts || !names64) {
            findings.append(
                Finding(
                    file: file, line: index + 1,
                    message: "shifts by \(match[2])"
                        + (converts ? " a value converted with Int(/UInt(" : " on a line that names no UInt64 or Int64")
                        + ": where Int has 32 bits (arm64_32) that is 0; pack it in a fixed-width type"))
        }
        for match in matches(literal, line) {
            guard let number = value(of: match[1]), number > UInt64(Int32.max) else { continue }
            let holds =
                names64 || (number <= UInt64(UInt32.max) && words.contains("UInt32"))
                || words.contains("Double") || words.contains("Float")
            if !holds {
                findings.append(
                    Finding(
                        file: file, line: index + 1,
                        message: "the literal \(match[1]) is above Int32.max, on a line that names no fixed-width type"
                            + " that holds it: it does not fit an Int of 32 bits (arm64_32)"))
            }
        }
        for match in matches(narrowing, line) {
            findings.append(
                Finding(
                    file: file, line: index + 1,
                    message: "\(match[1])(\(match[2]):) narrows silently where Int has 32 bits (arm64_32): a value past"
                        + " \(match[1] == "Int" ? "2^31" : "2^32") is \(match[2] == "clamping" ? "saturated" : "cut to its low bits"); keep it in a"
                        + " fixed-width type, or say why it fits with '// 32-bit: REASON'"))
        }
    }
    return findings
}

// MARK: - Main

let mode = CommandLine.arguments.count > 1 ? CommandLine.arguments[1] : ""
guard mode == "availability" || mode == "32-bit" else {
    print("usage: swift .ci/checks/SourceChecks.swift availability|32-bit DIRECTORY")
    exit(2)
}
let roots = CommandLine.arguments.count > 2 ? Array(CommandLine.arguments.dropFirst(2)) : ["Sources"]
let files = roots.flatMap { root in
    (FileManager.default.enumerator(atPath: root)?.compactMap { $0 as? String } ?? [])
        .filter { $0.hasSuffix(".swift") }.sorted().map { "\(root)/\($0)" }
}
if mode == "availability" {
    // A type the checked code declares itself shadows a platform API of that name (the samples'
    // stand-in `Logger` is not `os.Logger`); one it declares above the floor is checked as one.
    let declared = typesDeclared(in: files)
    symbols.removeAll { declared.contains($0.word) }
    symbols += declaredAboveTheFloor(in: files)
}
var findings: [Finding] = []
for file in files {
    lastIfImpliedApple = []
    findings += mode == "availability" ? check(file: file) : check32Bit(file: file)
}
for finding in findings { print("\(finding.file):\(finding.line): \(finding.message)") }
if mode == "availability" {
    if findings.isEmpty {
        print("every use of the \(symbols.count) listed APIs newer than the floor is guarded (\(files.count) files)")
    } else {
        print("\(findings.count) uses of APIs newer than the deployment floor are not guarded: add @available or #available")
        exit(1)
    }
} else {
    if findings.isEmpty {
        print("no Int arithmetic that assumes 64 bits (\(files.count) files)")
    } else {
        print("\(findings.count) lines assume a 64-bit Int: use a fixed-width type, or mark the line '// 32-bit: REASON'")
        exit(1)
    }
}
