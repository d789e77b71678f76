// Reentrancy: a command that would wait for a section its own caller holds fails at once with
// `.reentrantAccess` (Architecture.md, "ThreadSanitizer, reentrancy, lifetime").

// MARK: - Critical sections of the current task

/// One critical section a task is inside: its engine, and an exclusive task section's generation or
/// a shared read's token (`isSharedRead` tells them apart, so a token may use all 64 bits).
@usableFromInline
struct SectionEntry: Sendable, Equatable {
    @usableFromInline let engine: ObjectIdentifier
    @usableFromInline let section: UInt64
    @usableFromInline let isSharedRead: Bool

    /// An exclusive task section, by its generation.
    @inlinable
    init(engine: ObjectIdentifier, generation: Int) {
        self.engine = engine
        self.section = UInt64(UInt(bitPattern: generation))
        self.isSharedRead = false
    }

    /// A shared read, by its token.
    @inlinable
    init(engine: ObjectIdentifier, readerToken: UInt64) {
        self.engine = engine
        self.section = readerToken
        self.isSharedRead = true
    }
}

/// The critical sections the current task (and its child tasks) run inside. The first three live
/// inline: the type is trivial, so pushing it moves bytes and touches no reference count; deeper
/// ones live in ``CriticalSectionContext/deeper``.
@usableFromInline
struct SectionStack: Sendable {
    @usableFromInline var first: SectionEntry?
    @usableFromInline var second: SectionEntry?
    @usableFromInline var third: SectionEntry?
    /// How many sections the task is inside; those beyond three are in `deeper`.
    @usableFromInline var depth = 0

    @inlinable
    init() {}

    /// The stack with `entry` added: inline while there is room, otherwise only counted.
    @inlinable
    func pushing(_ entry: SectionEntry) -> SectionStack {
        var copy = self
        switch depth {
        case 0: copy.first = entry
        case 1: copy.second = entry
        case 2: copy.third = entry
        default: break
        }
        copy.depth += 1
        return copy
    }

    @inlinable
    var overflows: Bool { depth > 3 }

    /// Whether the stack may name a section of `engine`: one of the first three does, or it has more.
    @inlinable
    func mayName(_ engine: ObjectIdentifier) -> Bool {
        depth > 0 && (overflows || first?.engine == engine || second?.engine == engine || third?.engine == engine)
    }

    /// The tokens of the shared reads of `engine` this task is inside.
    func readerTokens(of engine: ObjectIdentifier) -> [UInt64] {
        var tokens: [UInt64] = []
        for entry in [first, second, third] {
            if let entry, entry.engine == engine, entry.isSharedRead { tokens.append(entry.section) }
        }
        if overflows {
            for entry in CriticalSectionContext.deeper.get() where entry.engine == engine && entry.isSharedRead {
                tokens.append(entry.section)
            }
        }
        return tokens
    }

    func contains(_ entry: SectionEntry) -> Bool {
        if first == entry || second == entry || third == entry { return true }
        return overflows && CriticalSectionContext.deeper.get().contains(entry)
    }
}

@usableFromInline
enum CriticalSectionContext {
    @usableFromInline
    static let sections = TaskLocal(wrappedValue: SectionStack())
    /// The sections beyond the third, innermost last (see ``SectionStack``).
    @usableFromInline
    static let deeper = TaskLocal<[SectionEntry]>(wrappedValue: [])
}

// MARK: - Task sections of an engine

extension CommandEngine {
    /// Marks the current task as inside this engine's section, which it holds; returns the
    /// task-local stack to run the section's body with. ``leaveTaskSection()`` before releasing.
    @usableFromInline
    final func enterTaskSection() -> (stack: SectionStack, entry: SectionEntry) {
        // Only the holder writes it. The generation wraps to 1 (after 2^31 sections on 32 bits): a
        // stale record could match again only if a task kept it across all of them.
        let ended = taskSection.loadRelaxed()
        let generation = ended == -Int.max ? 1 : -ended + 1
        taskSection.storeRelease(generation)
        ownerTask.storeRelease(currentTaskID())
        let entry = SectionEntry(engine: ObjectIdentifier(self), generation: generation)
        return (CriticalSectionContext.sections.get().pushing(entry), entry)
    }

    /// ``runHeldTaskSection(_:mutates:isolation:_:)`` for a section that may change an observed
    /// value, out of line so the common path stays short.
    @inlinable
    @inline(never)
    final func runHeldObservedTaskSection<R>(
        _ kind: CommandKind,
        isolation: isolated (any Actor)?,
        _ body: nonisolated(nonsending) () async throws -> R
    ) async rethrows -> R {
        try await runHeldTaskSection(kind, mutates: true, isolation: isolation, body)
    }

    /// Ends the task section begun by ``enterTaskSection()``.
    @usableFromInline
    final func leaveTaskSection() {
        ownerTask.storeRelaxed(0)
        taskSection.storeRelease(-taskSection.loadRelaxed())
    }

    /// Runs `body` as the body of the section the current task holds, in the caller's isolation,
    /// then leaves the section and releases it, whether `body` returns or throws.
    /// - Parameter mutates: `body` may change the value, which observers are then offered.
    @inlinable
    final func runHeldTaskSection<R>(
        _ kind: CommandKind,
        mutates: Bool = false,
        isolation: isolated (any Actor)?,
        _ body: nonisolated(nonsending) () async throws -> R
    ) async rethrows -> R {
        let (sections, entry) = enterTaskSection()
        defer {
            leaveTaskSection()
            if mutates && observing.loadRelaxed() != 0 {
                releaseObservedChange(kind)
            } else {
                release(kind)
            }
        }
        return try await withSections(sections, entry, isolation: isolation, body)
    }

    /// Runs `body` in the caller's isolation with `sections` (ending with `entry`) as the current
    /// task's stack of sections. Always inlined: as an async function of its own it cost every
    /// awaiting command two task switches and two task allocations
    /// (<doc:Benchmarks#Why-the-code-is-shaped-this-way>).
    @inlinable
    @inline(__always)
    final func withSections<R>(
        _ sections: SectionStack,
        _ entry: SectionEntry,
        isolation: isolated (any Actor)?,
        _ body: nonisolated(nonsending) () async throws -> R
    ) async rethrows -> R {
        guard sections.overflows else {
            return try await CriticalSectionContext.sections.withValue(sections) {
                // Capturing the isolated parameter keeps this closure on the caller's executor.
                _ = isolation
                return try await body()
            }
        }
        let deeper = CriticalSectionContext.deeper.get() + [entry]
        return try await CriticalSectionContext.sections.withValue(sections) {
            _ = isolation
            return try await CriticalSectionContext.deeper.withValue(deeper) {
                _ = isolation
                return try await body()
            }
        }
    }

    /// Whether the current task runs inside the section this engine has granted now.
    @usableFromInline
    final func isInsideRunningSection() -> Bool {
        let generation = taskSection.loadAcquire()
        guard generation > 0 else { return false }
        return CriticalSectionContext.sections.get().contains(
            SectionEntry(engine: ObjectIdentifier(self), generation: generation))
    }
}

// MARK: - Checking that code runs inside a critical section

extension CommandEngine {
    /// Whether the caller runs inside this engine's critical section: on its holding thread, in its
    /// holding task (or a child task), or in a shared read's closure.
    final func isCallerInside() -> Bool {
        let thread = currentThreadID()
        return ownerThread.loadRelaxed() == thread || isInsideRunningSection() || isInsideSharedRead(thread: thread)
    }

    final func preconditionCallerInside(
        _ message: () -> String,
        what: String,
        file: StaticString,
        line: UInt
    ) {
        guard !isCallerInside() else { return }
        let text = message()
        preconditionFailure(
            "not inside the critical section of \(displayName) (\(what))" + (text.isEmpty ? "" : ": \(text)"),
            file: file, line: line)
    }
}

// MARK: - Holders

extension CommandEngine {
    /// Who holds the section now, as far as deadlock detection can follow it: the holding thread,
    /// else the holding task; while shared reads hold, each of them that runs its closure.
    final var holderNodes: [WaitForGraph<DeadlockDetector.EngineHandle>.Node] {
        if EngineWord.readersHold(state.loadAcquire()) {
            return readerParties.map { $0.thread != 0 ? .thread($0.thread) : .task($0.task) }
                + idleReaderThreads().map { .thread($0) }
        }
        let thread = ownerThread.loadAcquire()
        if thread != 0 { return [.thread(thread)] }
        let task = ownerTask.loadAcquire()
        if task != 0 { return [.task(task)] }
        return []
    }
}
