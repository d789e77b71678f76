import Dispatch
import Foundation

@_spi(Testing) @testable import QueueSafeValue

/// The schedules a command on a value can be issued with, for tests whose body differs only in the
/// schedule. Each command returns what the schedule reports: the blocking ones run on a thread of
/// their own (never parking a thread of the cooperative pool), the dispatch one delivers on a queue.
enum Schedule: String, CaseIterable, Sendable {
    /// `value.wait`, from a plain thread.
    case wait
    /// `value.wait(timeout:)` with the hang timeout, from a plain thread.
    case waitWithTimeout
    /// `value.async(performIn:)`, the result delivered on a serial queue.
    case dispatch
    /// `value.async`, from the calling task.
    case awaiting

    func get<Value: Sendable>(
        _ value: QueueSafeValue<Value>,
        priority: CommandPriority
    ) async -> Result<Value, QueueSafeValueError> {
        switch self {
        case .wait: return await Self.onThread { value.wait.priority(priority).get() }
        case .waitWithTimeout: return await Self.onThread { value.waitBounded.priority(priority).get() }
        case .dispatch:
            return await withCheckedContinuation { continuation in
                value.async(performIn: Self.queue).priority(priority).get { continuation.resume(returning: $0) }
            }
        case .awaiting:
            do { return .success(try await value.async.priority(priority).get()) } catch { return .failure(error) }
        }
    }

    func set<Value: Sendable>(
        _ value: QueueSafeValue<Value>,
        priority: CommandPriority,
        newValue: Value
    ) async -> Result<Value, QueueSafeValueError> {
        switch self {
        case .wait: return await Self.onThread { value.wait.priority(priority).set(newValue: newValue) }
        case .waitWithTimeout:
            return await Self.onThread { value.waitBounded.priority(priority).set(newValue: newValue) }
        case .dispatch:
            return await withCheckedContinuation { continuation in
                value.async(performIn: Self.queue).priority(priority).set(newValue: newValue) {
                    continuation.resume(returning: $0)
                }
            }
        case .awaiting:
            do {
                return .success(try await value.async.priority(priority).set(newValue: newValue))
            } catch {
                return .failure(error)
            }
        }
    }

    func set<Value: Sendable>(
        _ value: QueueSafeValue<Value>,
        priority: CommandPriority,
        _ access: @escaping @Sendable (inout Value) -> Void
    ) async -> Result<Value, QueueSafeValueError> {
        switch self {
        case .wait: return await Self.onThread { value.wait.priority(priority).set(completion: access) }
        case .waitWithTimeout:
            return await Self.onThread { value.waitBounded.priority(priority).set(completion: access) }
        case .dispatch:
            return await withCheckedContinuation { continuation in
                value.async(performIn: Self.queue).priority(priority).set(accessClosure: access) {
                    continuation.resume(returning: $0)
                }
            }
        case .awaiting:
            do {
                return .success(try await value.async.priority(priority).set { access(&$0) })
            } catch {
                return .failure(error)
            }
        }
    }

    func map<Value: Sendable, Mapped: Sendable>(
        _ value: QueueSafeValue<Value>,
        priority: CommandPriority,
        _ transform: @escaping @Sendable (Value) -> Mapped
    ) async -> Result<Mapped, QueueSafeValueError> {
        switch self {
        case .wait: return await Self.onThread { value.wait.priority(priority).map(completion: transform) }
        case .waitWithTimeout:
            return await Self.onThread { value.waitBounded.priority(priority).map(completion: transform) }
        case .dispatch:
            return await withCheckedContinuation { continuation in
                value.async(performIn: Self.queue).priority(priority).map(transform) {
                    continuation.resume(returning: $0)
                }
            }
        case .awaiting:
            do {
                return .success(try await value.async.priority(priority).map { transform($0) })
            } catch {
                return .failure(error)
            }
        }
    }

    /// Where dispatch commands run and deliver.
    private static let queue = DispatchQueue(label: "Schedule.dispatch")

    /// Runs `body` on a new plain thread and returns its result.
    private static func onThread<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            Thread { continuation.resume(returning: body()) }.start()
        }
    }
}
