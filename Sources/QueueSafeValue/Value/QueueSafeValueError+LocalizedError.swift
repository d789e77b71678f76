// The only file of the library that imports Foundation (FoundationEssentials where it exists, the
// smaller module of swift-foundation; Foundation on Apple platforms). The library target enables
// `MemberImportVisibility` (Package.swift), so this import cannot change which members or
// operators the other files see; `LocalizedErrorTests` checks that the library's dynamic
// `as? any Equatable` (in `RecurringExecutorFailure`) behaves as before.
#if canImport(FoundationEssentials)
    import FoundationEssentials
#elseif canImport(Foundation)
    import Foundation
#endif

#if canImport(FoundationEssentials) || canImport(Foundation)
    /// `error.localizedDescription` is ``QueueSafeValueError/errorDescription``: a sentence that
    /// says what happened. ``QueueSafeValueError/failureReason`` and
    /// ``QueueSafeValueError/recoverySuggestion`` say why and what to do.
    extension QueueSafeValueError: LocalizedError {}
#endif
