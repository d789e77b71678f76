import Foundation

// MARK: - Formatting

enum Format {
    /// A per-op value with precision that fits its size.
    static func number(_ value: Double) -> String {
        if !value.isFinite { return "-" }
        switch abs(value) {
        case 1_000...: return grouped(value)
        case 100...: return String(format: "%.0f", value)
        case 10...: return String(format: "%.1f", value)
        default: return String(format: "%.2f", value)
        }
    }

    static func grouped(_ value: Double) -> String {
        let digits = String(format: "%.0f", value)
        var result = ""
        for (index, character) in digits.reversed().enumerated() {
            if index > 0 && index % 3 == 0 && character != "-" { result.append(",") }
            result.append(character)
        }
        return String(result.reversed())
    }

    static func rate(_ value: Double) -> String {
        switch value {
        case 1e9...: return String(format: "%.2f G", value / 1e9)
        case 1e6...: return String(format: "%.2f M", value / 1e6)
        case 1e3...: return String(format: "%.1f k", value / 1e3)
        default: return String(format: "%.0f", value)
        }
    }

    static func ratio(_ value: Double) -> String {
        value < 10 ? String(format: "%.2f×", value) : String(format: "%.1f×", value)
    }

    /// A target ratio, with as many decimals as it has (up to three): 0.625 must not read 0.62.
    static func limit(_ value: Double) -> String {
        (value * 100).rounded() == value * 100 ? ratio(value) : String(format: "%.3f×", value)
    }

    static func value(_ result: ScenarioResult) -> String {
        switch result.unit {
        case .bytes: return "\(number(result.median)) B"
        case .milliseconds: return "\(number(result.median)) ms"
        case .microseconds: return "\(number(result.median)) µs"
        case .nanoseconds: return number(result.median)
        }
    }

    static func spread(_ result: ScenarioResult) -> String {
        "\(number(result.minimum))–\(number(result.maximum))"
    }

    /// Renders rows as a text table; columns after the first are right-aligned.
    static func table(_ header: [String], _ rows: [[String]]) -> String {
        let all = [header] + rows
        let widths = header.indices.map { column in all.map { $0[column].count }.max() ?? 0 }
        func render(_ row: [String]) -> String {
            row.enumerated().map { column, cell in
                let padding = String(repeating: " ", count: widths[column] - cell.count)
                return column == 0 ? cell + padding : padding + cell
            }.joined(separator: "  ")
        }
        let rule = widths.map { String(repeating: "-", count: $0) }.joined(separator: "  ")
        return ([render(header), rule] + rows.map(render)).joined(separator: "\n")
    }
}

// MARK: - Report

enum Report {
    /// The results table and the library-versus-baseline table, as printed at the end of a run.
    static func text(_ results: [ScenarioResult], _ comparisons: [ComparisonResult]) -> String {
        let resultRows = results.map { result in
            [
                result.name,
                Format.value(result),
                result.unit == .nanoseconds ? Format.rate(result.operationsPerSecond) : "-",
                Format.spread(result),
                "\(result.values.count) × \(Format.grouped(Double(result.operationsPerSample)))",
            ]
        }
        var text = Format.table(["Scenario", "median ns/op", "ops/s", "min–max", "samples × ops"], resultRows)
        if !comparisons.isEmpty {
            let rows = comparisons.map { row -> [String] in
                let baselineName: String
                if let baseline = row.baseline {
                    baselineName = baseline.name
                } else if let name = row.comparison.baseline {
                    baselineName = "\(name) (not run)"
                } else {
                    baselineName = "absolute"
                }
                var spread = "-"
                if let low = row.minimumRatio, let high = row.maximumRatio {
                    spread = Format.ratio(low) + "–" + Format.ratio(high)
                }
                let median: String = row.medianRatio.map(Format.ratio) ?? "-"
                let baselineValue: String = row.baseline.map(Format.value) ?? "-"
                return [
                    row.library.name, Format.value(row.library), baselineName, baselineValue, median, spread,
                    row.targetText, row.resultText,
                ]
            }
            text += "\n\n"
            text += Format.table(
                ["Library scenario", "ns/op", "Baseline", "ns/op", "ratio", "min–max", "target", "result"], rows)
            text += "\n\n" + legend
        }
        return text
    }

    /// How to read the comparison table.
    static let legend = """
        ratio: library ns/op ÷ baseline ns/op, computed in every round from two samples taken back to
        back, median over the rounds (min–max: the lowest and highest round). Lower is better; below
        1.00× the library is faster than its baseline. target: the highest median ratio (or, for an
        absolute row, the highest value) the project accepts. pass: the median meets the target in
        this run. MISS: it does not (the run exits with status 3 under --check).
        """

    // MARK: JSON

    struct JSONResult: Encodable {
        let name: String
        let nsPerOp: Double
        let opsPerSecond: Double
        let samples: Int
        let unit: String
        let summary: String
        let minNsPerOp: Double
        let maxNsPerOp: Double
        let operationsPerSample: Int
        let sampleValues: [Double]
        let extras: [String: Double]?
        let baseline: String?
        let baselineNsPerOp: Double?
        let ratio: Double?
        let target: Double?
        let targetKind: String?
        let pass: Bool?
    }

    struct JSONComparison: Encodable {
        let library: String
        let baseline: String?
        let medianRatio: Double?
        let minRatio: Double?
        let maxRatio: Double?
        /// For a ratio target the highest median ratio, for an absolute one the highest value.
        let target: Double?
        let pass: Bool?
        /// The library's median in its unit (the value an absolute target is checked against).
        let libraryValue: Double
        let rounds: Int

        private enum CodingKeys: String, CodingKey {
            case library, baseline, medianRatio, minRatio, maxRatio, target, pass, libraryValue, rounds
        }

        /// Writes every key, with `null` where there is no value, so that readers need no defaults.
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(library, forKey: .library)
            try container.encode(baseline, forKey: .baseline)
            try container.encode(medianRatio, forKey: .medianRatio)
            try container.encode(minRatio, forKey: .minRatio)
            try container.encode(maxRatio, forKey: .maxRatio)
            try container.encode(target, forKey: .target)
            try container.encode(pass, forKey: .pass)
            try container.encode(libraryValue, forKey: .libraryValue)
            try container.encode(rounds, forKey: .rounds)
        }
    }

    struct JSONDocument: Encodable {
        let results: [JSONResult]
        let comparisons: [JSONComparison]
        let build: String
        let quick: Bool
        let processorCount: Int
        let cpuModel: String?
        /// The 1-minute load average at the start and at the end of the run.
        let loadAverages: [Double]
        let totalSeconds: Double
    }

    static func json(
        _ results: [ScenarioResult],
        _ comparisons: [ComparisonResult],
        quick: Bool,
        totalSeconds: Double,
        loadAverages: [Double]
    ) throws -> Data {
        // A result's own baseline fields describe its first comparison with a target (or its first).
        let rows = Dictionary(
            comparisons.sorted { ($0.comparison.target != nil ? 0 : 1) < ($1.comparison.target != nil ? 0 : 1) }
                .map { ($0.library.name, $0) },
            uniquingKeysWith: { first, _ in first }
        )
        let entries = results.map { result in
            let row = rows[result.name]
            var target: Double?
            var targetKind: String?
            switch row?.comparison.target {
            case .ratioAtMost(let limit)?:
                target = limit
                targetKind = "maximum ratio to baseline"
            case .valueAtMost(let limit)?:
                target = limit
                targetKind = "maximum \(result.unit.rawValue)"
            case nil:
                break
            }
            return JSONResult(
                name: result.name,
                nsPerOp: result.median,
                opsPerSecond: result.operationsPerSecond,
                samples: result.values.count,
                unit: result.unit.rawValue,
                summary: result.summary,
                minNsPerOp: result.minimum,
                maxNsPerOp: result.maximum,
                operationsPerSample: result.operationsPerSample,
                sampleValues: result.values,
                extras: result.extras.isEmpty ? nil : result.extras,
                baseline: row?.comparison.baseline,
                baselineNsPerOp: row?.baseline?.median,
                ratio: row?.medianRatio,
                target: target,
                targetKind: targetKind,
                pass: row?.passed
            )
        }
        #if DEBUG
            let build = "debug"
        #else
            let build = "release"
        #endif
        let document = JSONDocument(
            results: entries,
            comparisons: comparisons.map { row in
                JSONComparison(
                    library: row.library.name,
                    baseline: row.comparison.baseline,
                    medianRatio: row.medianRatio,
                    minRatio: row.minimumRatio,
                    maxRatio: row.maximumRatio,
                    target: row.targetValue,
                    pass: row.passed,
                    libraryValue: row.library.median,
                    rounds: row.ratios.count
                )
            },
            build: build,
            quick: quick,
            processorCount: ProcessInfo.processInfo.activeProcessorCount,
            cpuModel: Machine.cpuModel,
            loadAverages: loadAverages,
            totalSeconds: totalSeconds
        )
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        return try encoder.encode(document)
    }

    // MARK: SVG

    /// A horizontal bar chart of each library scenario's ratio to its baseline, on a log scale
    /// centred on 1×, with each target marked. Lower is better.
    static func svg(_ allRows: [ComparisonResult]) -> String {
        let rows = allRows.filter { $0.medianRatio != nil }
        let absolute = allRows.filter { $0.comparison.baseline == nil }

        var extremes: [Double] = [0.5, 2]
        for row in rows {
            extremes.append(row.minimumRatio!)
            extremes.append(row.maximumRatio!)
            if case .ratioAtMost(let limit)? = row.comparison.target { extremes.append(limit) }
        }
        let lowExponent = Int(floor(log2(extremes.min()!)))
        let highExponent = Int(ceil(log2(extremes.max()!)))

        let width = 960.0
        let labelWidth = 300.0
        let chartLeft = labelWidth + 10
        let chartWidth = width - chartLeft - 120
        let top = 70.0
        let rowHeight = 34.0
        let chartBottom = top + rowHeight * Double(rows.count)
        let height = chartBottom + 34 + 22 * Double(absolute.count)

        func x(_ ratio: Double) -> Double {
            let fraction = (log2(ratio) - Double(lowExponent)) / Double(highExponent - lowExponent)
            return chartLeft + fraction * chartWidth
        }
        func n(_ value: Double) -> String { String(format: "%.1f", value) }

        var svg: [String] = []
        svg.append(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"\(n(width))\" height=\"\(n(height))\" "
                + "viewBox=\"0 0 \(n(width)) \(n(height))\" font-family=\"Helvetica, Arial, sans-serif\" "
                + "font-size=\"13\">"
        )
        svg.append("<rect width=\"100%\" height=\"100%\" fill=\"white\"/>")
        svg.append(
            "<text x=\"12\" y=\"24\" font-size=\"16\" font-weight=\"bold\">QueueSafeValue: time per operation "
                + "relative to its baseline</text>"
        )
        svg.append(
            "<text x=\"12\" y=\"44\" fill=\"#555\">Ratio library ns/op ÷ baseline ns/op, log scale, lower is "
                + "better. Bar: median over the rounds; thin line: min–max. Black tick: target. Green: met; red: missed.</text>"
        )
        for exponent in lowExponent...highExponent {
            let ratio = pow(2, Double(exponent))
            let position = x(ratio)
            let stroke = exponent == 0 ? "#333" : "#ddd"
            svg.append(
                "<line x1=\"\(n(position))\" y1=\"\(n(top - 6))\" x2=\"\(n(position))\" y2=\"\(n(chartBottom))\" "
                    + "stroke=\"\(stroke)\" stroke-width=\"1\"/>"
            )
            svg.append(
                "<text x=\"\(n(position))\" y=\"\(n(chartBottom + 18))\" text-anchor=\"middle\" fill=\"#555\">"
                    + "\(escape(axisLabel(ratio)))</text>"
            )
        }
        for (index, row) in rows.enumerated() {
            let ratio = row.medianRatio!
            let middle = top + rowHeight * Double(index) + rowHeight / 2
            let color: String
            switch row.passed {
            case .some(true): color = "#2e7d32"
            case .some(false): color = "#c62828"
            case .none: color = "#90a4ae"
            }
            let barStart = min(x(1), x(ratio))
            let barWidth = max(abs(x(ratio) - x(1)), 1)
            svg.append(
                "<text x=\"\(n(labelWidth))\" y=\"\(n(middle - 2))\" text-anchor=\"end\">\(escape(row.library.name))"
                    + "</text>"
            )
            svg.append(
                "<text x=\"\(n(labelWidth))\" y=\"\(n(middle + 12))\" text-anchor=\"end\" fill=\"#777\" "
                    + "font-size=\"11\">vs \(escape(row.baseline!.name))</text>"
            )
            svg.append(
                "<rect x=\"\(n(barStart))\" y=\"\(n(middle - 9))\" width=\"\(n(barWidth))\" height=\"18\" "
                    + "fill=\"\(color)\"/>"
            )
            // The spread of the per-round ratios.
            svg.append(
                "<line x1=\"\(n(x(row.minimumRatio!)))\" y1=\"\(n(middle))\" x2=\"\(n(x(row.maximumRatio!)))\" "
                    + "y2=\"\(n(middle))\" stroke=\"#222\" stroke-width=\"1.5\"/>"
            )
            var label = Format.ratio(ratio)
            if case .ratioAtMost(let limit)? = row.comparison.target {
                let position = x(limit)
                svg.append(
                    "<line x1=\"\(n(position))\" y1=\"\(n(middle - 14))\" x2=\"\(n(position))\" "
                        + "y2=\"\(n(middle + 14))\" stroke=\"black\" stroke-width=\"3\"/>"
                )
                label += " (target \(row.targetText), \(row.resultText))"
            }
            let labelX = max(x(1), x(ratio), row.comparison.target.map { _ in x(targetRatio(row)) } ?? 0) + 6
            svg.append("<text x=\"\(n(labelX))\" y=\"\(n(middle + 4))\">\(escape(label))</text>")
        }
        var lineY = chartBottom + 44
        for row in absolute {
            let text =
                "\(row.library.name): \(Format.value(row.library))"
                + (row.library.unit == .bytes ? " per command " : row.library.unit.isLatency ? " " : " ns/op ")
                + "(target \(row.targetText), \(row.resultText))"
            svg.append("<text x=\"12\" y=\"\(n(lineY))\">\(escape(text))</text>")
            lineY += 22
        }
        svg.append("</svg>")
        return svg.joined(separator: "\n") + "\n"
    }

    private static func targetRatio(_ row: ComparisonResult) -> Double {
        if case .ratioAtMost(let limit)? = row.comparison.target { return limit }
        return 1
    }

    private static func axisLabel(_ ratio: Double) -> String {
        ratio >= 1 ? String(format: "%.0f×", ratio) : "1/\(Int((1 / ratio).rounded()))×"
    }

    private static func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;")
            .replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;")
            .replacingOccurrences(of: "\"", with: "&quot;")
    }
}
