// swift-tools-version: 6.0
// A client of QueueSafeValue, as a user's package would be: the commands are called across the
// package boundary, in a release build. `.ci/instructions/run` counts the instructions each
// scenario takes per operation.
import PackageDescription

let package = Package(
    name: "InstructionCount",
    dependencies: [.package(name: "QueueSafeValue", path: "../..")],
    targets: [
        .executableTarget(
            name: "InstructionCount",
            dependencies: [.product(name: "QueueSafeValue", package: "QueueSafeValue")]
        )
    ]
)
