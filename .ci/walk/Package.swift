// swift-tools-version: 6.0
// A client of QueueSafeValue that issues one command of each shape between two markers, for
// `.ci/walk/run`, which steps through it under gdb and lists the library's files the command passes
// through, in order (see Architecture's "A command's walk"). A debug build: every function is where
// its source is.
import PackageDescription

let package = Package(
    name: "Walk",
    dependencies: [.package(name: "QueueSafeValue", path: "../..")],
    targets: [
        .executableTarget(
            name: "Walk",
            dependencies: [.product(name: "QueueSafeValue", package: "QueueSafeValue")]
        )
    ]
)
