import Foundation

/// What the test process runs under.
enum TestEnvironment {
    /// Whether the test process runs under ThreadSanitizer (much slower: use fewer iterations).
    static let isThreadSanitizerActive: Bool = {
        guard let handle = dlopen(nil, RTLD_NOW) else { return false }
        return dlsym(handle, "__tsan_init") != nil
    }()

    /// Whether the test process runs under AddressSanitizer (several times slower).
    static let isAddressSanitizerActive: Bool = {
        guard let handle = dlopen(nil, RTLD_NOW) else { return false }
        return dlsym(handle, "__asan_init") != nil
    }()

    /// `normal`, or the smaller `sanitized` count under ThreadSanitizer.
    static func iterations(_ normal: Int, sanitized: Int) -> Int {
        isThreadSanitizerActive ? sanitized : normal
    }
}
