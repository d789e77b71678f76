/// The one error type of the tests: thrown on purpose by an operation under test, or by a bounded
/// wait that ran out (a hang turned into a failure).
enum TestError: Error, Equatable, CustomStringConvertible {
    /// Thrown on purpose; `id` tells two such errors apart.
    case thrown(id: Int)
    /// A bounded wait ran out.
    case hang(String)
    /// What the test needs is missing where it must not be (under `CI=true`).
    case unavailable(String)

    var description: String {
        switch self {
        case .thrown(let id): return "test error \(id)"
        case .hang(let message): return message
        case .unavailable(let message): return message
        }
    }
}
