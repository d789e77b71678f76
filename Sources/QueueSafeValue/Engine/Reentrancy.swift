// Reentrancy: a command that would wait for a section its own caller holds fails at once with
// `.reentrantAccess` instead of waiting for itself.
//
// - Threads: the engine's `ownerThread` word holds the id of the thread running a synchronous
//   closure in the section (written by the holder, so a thread that reads its own id is inside).
// - Tasks: an awaiting closure, and every `CommandQueue` operation, runs with a task-local
//   `SectionStack` that records `(engine, generation)` for each section the task is inside; the
//   engine's `taskSection` word holds the generation of the task section being held. Child tasks
//   inherit the stack. A stale record, inherited by an unstructured task that runs after the
//   section ended, never matches: the generation moved on.

// MARK: - Critical sections of the current task

/// One critical section a task is inside: which engine, and which of its sections.
@usableFromInline
struct SectionEntry: Sendable, Equatable {
    @usableFromInline let engine: ObjectIdentifier
    @usableFromInline let generation: Int

    @inlinable
    init(engine: ObjectIdentifier, generation: Int) {
        self.engine = engine
        self.generation = generation
    }
}

/// The critical sections the current task (and its child tasks) run inside.
///
/// A value type with room for three entries inline, so entering a section costs a task-local push
/// and no heap allocation; deeper nesting spills into an array.
@usableFromInline
struct SectionStack: Sendable {
    @usableFromInline var first: SectionEntry?
    @usableFromInline var second: SectionEntry?
    @usableFromInline var third: SectionEntry?
    @usableFromInline var more: [SectionEntry] = []

    @inlinable
    init() {}

    /// This stack with `entry` added.
    @inlinable
    func pushing(_ entry: SectionEntry) -> SectionStack {
        var copy = self
        if copy.first == nil {
            copy.first = entry
        } else if copy.second == nil {
            copy.second = entry
        } else if copy.third == nil {
            copy.third = entry
        } else {
            copy.more.append(entry)
        }
        return copy
    }

    func contains(_ entry: SectionEntry) -> Bool {
        first == entry || second == entry || third == entry || more.contains(entry)
    }
}

/// The sections the current task runs inside; child tasks inherit it.
@usableFromInline
enum CriticalSectionContext {
    /// A plain `TaskLocal` (not the property wrapper) so that inlinable code can push onto it.
    @usableFromInline
    static let sections = TaskLocal(wrappedValue: SectionStack())
}

// MARK: - Task sections of an engine

extension CommandEngine {
    /// Marks the current task as inside this engine's section; returns the task-local stack to run
    /// the section's body with (see `ValueStorage.withAwaitingAccess`), so a nested command on the
    /// same engine from this task or its child tasks is recognised as reentrant instead of waiting
    /// for itself. Call it while holding the section, and ``leaveTaskSection()`` before releasing.
    @usableFromInline
    final func enterTaskSection() -> SectionStack {
        // Only the holder writes `taskSection`, so a load and a store do.
        let generation = -taskSection.loadRelaxed() + 1
        taskSection.storeRelease(generation)
        ownerTask.storeRelease(currentTaskID())
        return CriticalSectionContext.sections.get().pushing(
            SectionEntry(engine: ObjectIdentifier(self), generation: generation))
    }

    /// Ends the task section begun by ``enterTaskSection()``.
    @usableFromInline
    final func leaveTaskSection() {
        ownerTask.storeRelaxed(0)
        taskSection.storeRelease(-taskSection.loadRelaxed())
    }

    /// Runs `body` as the body of the section the current task holds (see ``enterTaskSection()``),
    /// in the caller's isolation, then leaves the section and releases it (as a holder of `kind`),
    /// whether `body` returns or throws. The one place where a task's section begins and ends.
    @inlinable
    final func runHeldTaskSection<R>(
        _ kind: CommandKind,
        isolation: isolated (any Actor)?,
        _ body: nonisolated(nonsending) () async throws -> R
    ) async rethrows -> R {
        let sections = enterTaskSection()
        defer {
            leaveTaskSection()
            release(kind)
        }
        return try await CriticalSectionContext.sections.withValue(sections) {
            // Capturing the isolated parameter keeps this closure on the caller's executor
            // (a closure that does not capture it is nonisolated and would hop off).
            _ = isolation
            return try await body()
        }
    }

    /// Whether the current task runs inside the section this engine has granted now. A task-local
    /// record of an ended section never matches: the engine's generation has moved on.
    @usableFromInline
    final func isInsideRunningSection() -> Bool {
        let generation = taskSection.loadAcquire()
        guard generation > 0 else { return false }
        return CriticalSectionContext.sections.get().contains(
            SectionEntry(engine: ObjectIdentifier(self), generation: generation))
    }
}
