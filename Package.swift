// swift-tools-version: 6.2
// 6.2: awaiting commands take `nonisolated(nonsending)` closures, which run in the caller's isolation.
import PackageDescription

let package = Package(
    name: "QueueSafeValue",
    platforms: [.macOS(.v10_15), .iOS(.v13), .tvOS(.v13), .watchOS(.v6)],
    products: [
        .library(name: "QueueSafeValue", targets: ["QueueSafeValue"]),
        // Runs a test body under a controlled scheduler that explores the interleavings of its
        // commands (debug builds: the seam it drives is compiled out of release builds).
        .library(name: "QueueSafeValueTesting", targets: ["QueueSafeValueTesting"]),
    ],
    targets: [
        // Tiny C shim: atomics on a heap word, a CPU pause hint and the current thread's id.
        // Swift's `Synchronization.Atomic` needs macOS 15 / iOS 18, above our deployment floor.
        .target(name: "QueueSafeValueShims"),
        .target(
            name: "QueueSafeValue", dependencies: ["QueueSafeValueShims"],
            swiftSettings: [.enableUpcomingFeature("MemberImportVisibility")]),
        .target(
            name: "QueueSafeValueTesting", dependencies: ["QueueSafeValue", "QueueSafeValueShims"],
            swiftSettings: [.enableUpcomingFeature("MemberImportVisibility")]),
        // Real-time scheduling for the priority-inversion test and benchmark row (not the library's).
        .target(name: "RealtimeSupport"),
        // The benchmark uses the shim's atomics for its hand-off floor baseline.
        .executableTarget(
            name: "Benchmarks", dependencies: ["QueueSafeValue", "QueueSafeValueShims", "RealtimeSupport"],
            path: "Benchmarks"),
        // A soak through the public API: every schedule, manual completion, timeouts, cancellation,
        // cancelAll and container release at once, with a watchdog. `swift run -c release Stress`.
        .executableTarget(name: "Stress", dependencies: ["QueueSafeValue", "QueueSafeValueShims"]),
        .testTarget(
            name: "QueueSafeValueTests", dependencies: ["QueueSafeValue", "QueueSafeValueTesting", "RealtimeSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
