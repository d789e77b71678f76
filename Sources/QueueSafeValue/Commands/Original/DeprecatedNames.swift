// The original QueueSafeValue library's public type names, for code that spells them out (type
// annotations, helper signatures, test specs). Each is the same type under its new name, so such
// code compiles unchanged and behaves exactly as with the new name, with a deprecation warning
// whose fix-it renames it. Where the original had one class per priority (subclasses of a common
// base), this package has one struct for every priority: those names all alias that struct, which
// `is`/`as?` cannot tell apart by priority. See the Migration article.

// MARK: - Schedulers

/// The original name of ``WaitSchedule``, the blocking schedule (`value.wait`): the same type.
@available(*, deprecated, renamed: "WaitSchedule")
public typealias SyncScheduler<Value> = WaitSchedule<Value>

/// The original name of ``DispatchSchedule``, the dispatch schedule (`value.async(performIn:)`): the
/// same type.
@available(*, deprecated, renamed: "DispatchSchedule")
public typealias AsyncScheduler<Value> = DispatchSchedule<Value>

// MARK: - Blocking commands

/// The original name of the blocking commands' common type: ``WaitCommands``, the same type, at
/// whatever priority it was taken.
@available(*, deprecated, renamed: "WaitCommands")
public typealias SyncedCommandsWithPriority<Value> = WaitCommands<Value>

/// The original name of `value.wait.highestPriority`'s type: ``WaitCommands``, the same type for
/// every priority (`is`/`as?` cannot tell it from the other priorities' commands).
@available(*, deprecated, renamed: "WaitCommands")
public typealias HighestPrioritySyncedCommands<Value> = WaitCommands<Value>

/// The original name of `value.wait.lowestPriority`'s type: ``WaitCommands``, the same type for
/// every priority (`is`/`as?` cannot tell it from the other priorities' commands).
@available(*, deprecated, renamed: "WaitCommands")
public typealias LowestPrioritySyncedCommands<Value> = WaitCommands<Value>

// MARK: - Dispatch commands

/// The original name of the dispatch commands' common type: ``DispatchSchedule``, the same type, at
/// whatever priority it was taken.
@available(*, deprecated, renamed: "DispatchSchedule")
public typealias AsyncedCommandsWithPriority<Value> = DispatchSchedule<Value>

/// The original name of `value.async(performIn:).highestPriority`'s type: ``DispatchSchedule``, the
/// same type for every priority (`is`/`as?` cannot tell it from the other priorities' commands).
@available(*, deprecated, renamed: "DispatchSchedule")
public typealias HighestPriorityAsyncedCommands<Value> = DispatchSchedule<Value>

/// The original name of `value.async(performIn:).lowestPriority`'s type: ``DispatchSchedule``, the
/// same type for every priority (`is`/`as?` cannot tell it from the other priorities' commands).
@available(*, deprecated, renamed: "DispatchSchedule")
public typealias LowestPriorityAsyncedCommands<Value> = DispatchSchedule<Value>
