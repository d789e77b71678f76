extension QueueSafeValue {
    /// Whether the caller runs inside this value's critical section: in the closure of one of its
    /// commands, shared reads included, on the thread that runs a `wait` or `async(performIn:)`
    /// closure, or in the task — or a child task of it — that runs an awaiting closure. `false`
    /// everywhere else, including on another thread while the section is held (by an exclusive
    /// command or by other shared reads), and in a manual-completion command after its closure
    /// returned and before `done()` (the value is held, but no code runs inside).
    public var isInsideCriticalSection: Bool { engine.isCallerInside() }

    /// Stops the program with `message` unless the caller runs inside this value's critical section
    /// (see ``isInsideCriticalSection``): an assertion for code that must only touch state guarded by
    /// this value, like `dispatchPrecondition(condition: .onQueue(_:))` for a queue. Checked in
    /// release builds too, like `precondition`.
    public func preconditionInsideCriticalSection(
        _ message: @autoclosure () -> String = String(),
        file: StaticString = #fileID,
        line: UInt = #line
    ) {
        engine.preconditionCallerInside(message, what: "QueueSafeValue", file: file, line: line)
    }
}

extension QueueSafeSyncedValue {
    /// Whether the caller runs inside this value's critical section; see
    /// ``QueueSafeValue/QueueSafeValue/isInsideCriticalSection``.
    public var isInsideCriticalSection: Bool { engine.isCallerInside() }

    /// Stops the program with `message` unless the caller runs inside this value's critical section;
    /// see ``QueueSafeValue/QueueSafeValue/preconditionInsideCriticalSection(_:file:line:)``.
    public func preconditionInsideCriticalSection(
        _ message: @autoclosure () -> String = String(),
        file: StaticString = #fileID,
        line: UInt = #line
    ) {
        engine.preconditionCallerInside(message, what: "QueueSafeSyncedValue", file: file, line: line)
    }
}

extension QueueSafeAsyncedValue {
    /// Whether the caller runs inside this value's critical section; see
    /// ``QueueSafeValue/QueueSafeValue/isInsideCriticalSection``.
    public var isInsideCriticalSection: Bool { engine.isCallerInside() }

    /// Stops the program with `message` unless the caller runs inside this value's critical section;
    /// see ``QueueSafeValue/QueueSafeValue/preconditionInsideCriticalSection(_:file:line:)``.
    public func preconditionInsideCriticalSection(
        _ message: @autoclosure () -> String = String(),
        file: StaticString = #fileID,
        line: UInt = #line
    ) {
        engine.preconditionCallerInside(message, what: "QueueSafeAsyncedValue", file: file, line: line)
    }
}

extension CommandQueue {
    /// Whether the caller runs inside one of this queue's operations: in the operation's task, or a
    /// child task of it. `false` in any other task or thread, and in an unstructured task started
    /// from an operation once that operation has ended. Always `false` on a
    /// ``CommandQueue/Ordering/startsInOrder`` queue, whose operations give up their turn as they
    /// start.
    public var isInsideOperation: Bool { engine.isCallerInside() }

    /// Stops the program with `message` unless the caller runs inside one of this queue's operations
    /// (see ``isInsideOperation``): an assertion that code which relies on the queue's serialization
    /// really runs serialized by it. Checked in release builds too, like `precondition`.
    public func preconditionSerialized(
        _ message: @autoclosure () -> String = String(),
        file: StaticString = #fileID,
        line: UInt = #line
    ) {
        engine.preconditionCallerInside(message, what: "CommandQueue", file: file, line: line)
    }
}
