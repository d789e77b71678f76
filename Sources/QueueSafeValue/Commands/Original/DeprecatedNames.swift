// The original QueueSafeValue library's public type names, for code that spells them out (type
// annotations, helper signatures, test specs). Each is the same type under its new name, so such
// code compiles unchanged, with a deprecation warning whose fix-it renames it. Where the original
// had one class per priority (subclasses of a common base), this package has one struct for every
// priority: those names all alias that struct. See the Migration article.

// MARK: - Schedulers

/// The original name of ``WaitSchedule``, the blocking schedule (`value.wait`).
///
/// The same type: it behaves exactly as ``WaitSchedule`` does.
@available(*, deprecated, renamed: "WaitSchedule")
public typealias SyncScheduler<Value> = WaitSchedule<Value>

/// The original name of ``DispatchSchedule``, the dispatch schedule (`value.async(performIn:)`).
///
/// The same type: it behaves exactly as ``DispatchSchedule`` does.
@available(*, deprecated, renamed: "DispatchSchedule")
public typealias AsyncScheduler<Value> = DispatchSchedule<Value>

// MARK: - Blocking commands

/// The original name of the blocking commands' common type: ``WaitCommands``.
///
/// The same type: it behaves exactly as ``WaitCommands`` does, at whatever priority it was taken.
@available(*, deprecated, renamed: "WaitCommands")
public typealias SyncedCommandsWithPriority<Value> = WaitCommands<Value>

/// The original name of `value.wait.highestPriority`'s type: ``WaitCommands``, which serves
/// every priority.
///
/// The same type: it behaves exactly as ``WaitCommands`` does. It is not a distinct type any more,
/// so `is`/`as?` cannot tell it from the other priorities' commands.
@available(*, deprecated, renamed: "WaitCommands")
public typealias HighestPrioritySyncedCommands<Value> = WaitCommands<Value>

/// The original name of `value.wait.lowestPriority`'s type: ``WaitCommands``, which serves every
/// priority.
///
/// The same type: it behaves exactly as ``WaitCommands`` does. It is not a distinct type any more,
/// so `is`/`as?` cannot tell it from the other priorities' commands.
@available(*, deprecated, renamed: "WaitCommands")
public typealias LowestPrioritySyncedCommands<Value> = WaitCommands<Value>

// MARK: - Dispatch commands

/// The original name of the dispatch commands' common type: ``DispatchSchedule``.
///
/// The same type: it behaves exactly as ``DispatchSchedule`` does, at whatever priority it was
/// taken.
@available(*, deprecated, renamed: "DispatchSchedule")
public typealias AsyncedCommandsWithPriority<Value> = DispatchSchedule<Value>

/// The original name of `value.async(performIn:).highestPriority`'s type: ``DispatchSchedule``,
/// which serves every priority.
///
/// The same type: it behaves exactly as ``DispatchSchedule`` does. It is not a distinct type any
/// more, so `is`/`as?` cannot tell it from the other priorities' commands.
@available(*, deprecated, renamed: "DispatchSchedule")
public typealias HighestPriorityAsyncedCommands<Value> = DispatchSchedule<Value>

/// The original name of `value.async(performIn:).lowestPriority`'s type: ``DispatchSchedule``,
/// which serves every priority.
///
/// The same type: it behaves exactly as ``DispatchSchedule`` does. It is not a distinct type any
/// more, so `is`/`as?` cannot tell it from the other priorities' commands.
@available(*, deprecated, renamed: "DispatchSchedule")
public typealias LowestPriorityAsyncedCommands<Value> = DispatchSchedule<Value>
