// The surroundings the documentation's samples assume: the app's own types and services, which a
// sample names without declaring. Each is the smallest thing that lets a sample compile as shown;
// none of it is part of QueueSafeValue. A sample that declares a name itself shadows the one here.
import Dispatch
import Foundation
import QueueSafeValue
import QueueSafeValueTesting

// MARK: - Services

public struct Message: Sendable { public init() {} }

public struct Catalog: Sendable {
    public var version = 0
    public init() {}
}

/// A web service.
public final class API: Sendable {
    public func send(_ message: Message) async throws {}
    public func sendReadReceipts() async throws {}
    public func flush() async throws -> Int { 0 }
    public func fetchCatalog(since version: Int) async throws -> Catalog { Catalog() }
    public func download(_ url: String) async throws -> [UInt8] { [] }
    /// A slow, synchronous call (the stalled app of the "Finding what holds your value" article).
    public func downloadStock() -> [String: Int] { [:] }
}
public let api = API()

public final class Bank: Sendable {
    public func pendingDeposits() async -> Int { 0 }
}
public let bank = Bank()

public struct Inventory: Sendable {
    public var count = 0
    public init() {}
}
public final class Supplier: Sendable {
    public func deliveries() async -> Int { 0 }
}
public let supplier = Supplier()

public final class Inbox: Sendable {
    public func sync() async throws {}
}
public let inbox = Inbox()

public final class Feed: Sendable {
    public func reload() async throws {}
}
public let feed = Feed()

/// An app's image type and its downloader (the photo feed's samples), with Foundation's `URL`, which
/// an app file has from its own `import Foundation`.
public typealias URL = Foundation.URL
public struct Image: Sendable {}
public final class Downloader: Sendable {
    public func image(at url: URL) async throws -> Image { Image() }
}
public let downloader = Downloader()

public struct Logger: Sendable {
    public func debug(_ message: String) {}
}
public let logger = Logger()

/// A `CommandQueue` the app's database work runs on.
public let database = CommandQueue(label: "database")
public func uploadPendingRows() async throws {}

// MARK: - Tokens

public struct Token: Sendable {
    public var isExpired = true
    public var accessToken = ""
    public var refreshToken = ""
    public static let expired = Token()
}

public final class AuthAPI: Sendable {
    public func refreshedToken(from token: Token) async -> Token { token }
    public func refresh(using refreshToken: String) async throws -> Token { Token() }
}
public let authAPI = AuthAPI()

/// A completion-handler authentication API.
public final class LegacyAuth: Sendable {
    public func refresh(using refreshToken: String, completion: @escaping @Sendable (Result<Token, any Error>) -> Void) {
        completion(.success(Token()))
    }
}
public let legacyAuth = LegacyAuth()

// MARK: - Getting started

public let cache = QueueSafeValue(value: [String: Data]())
/// The account balance of the README's first sample, for the samples after it.
public let balance = QueueSafeValue(value: 100)
public let data = Data()
public func render(_ entries: [String: Data]) {}
public let ioQueue = DispatchQueue(label: "io")

public enum Disk: Sendable {
    case shared
    public func load(_ name: String, completion: @escaping @Sendable (Data?) -> Void) { completion(nil) }
}
public let disk = Disk.shared

public enum Theme: Sendable { case light, dark }
public struct Settings: Sendable {
    public var theme = Theme.light
    public init() {}
}

/// The value a priority sample works on.
public let value = QueueSafeValue(value: 0)

/// The avatar a sample loads (it may throw) or downloads.
public func loadAvatar() throws -> Data { Data() }
public func downloadAvatar() async -> Data { Data() }

// MARK: - Testing your code

/// A withdrawal that reads in one command and writes in another (the article's race).
public func withdraw(_ amount: Int, from balance: QueueSafeValue<Int>) throws {
    let current = try balance.wait.read { $0 }
    guard current >= amount else { return }
    try balance.wait.withLock { $0 = current - amount }
}

public enum Session: Sendable, Equatable {
    case signedIn(token: String, expiresAt: DispatchTime)
    case signedOut
}

/// The refresh endpoint: a second on the network, on the exploration's clock.
public func refreshToken() async throws -> Session {
    try await Exploration.sleep(nanoseconds: 1_000_000_000)
    return .signedIn(token: "fresh", expiresAt: Exploration.now + .seconds(30))
}
