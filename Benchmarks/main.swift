import Dispatch
import Foundation
import QueueSafeValue

let v = QueueSafeValue(value: 0)
let sem = DispatchSemaphore(value: 0)
Task.detached {
    let a = QueueSafeValue(value: 0)
    await withTaskGroup(of: Void.self) { group in
        for _ in 0..<200 {
            group.addTask {
                try! await a.async.highestPriority.set { v in
                    let x = v
                    await Task.yield()
                    v = x + 1
                }
            }
        }
    }
    print("await", try! await a.async.lowestPriority.get())
    let cq = CommandQueue()
    var tasks: [Task<Int, any Error>] = []
    for i in 0..<1000 {
        tasks.append(
            cq.enqueue {
                await Task.yield()
                return i
            })
    }
    var ok = true
    for (i, t) in tasks.enumerated() { if try! await t.value != i { ok = false } }
    print("cq", ok)
    print(v.wait.highestPriority.set { _ in print("inner", v.wait.lowestPriority.get()) })
    let r = try? await a.async.highestPriority.set { _ in
        do { try await a.async.lowestPriority.get() } catch { print("nested", error) }
    }
    print(r as Any)
    sem.signal()
}
sem.wait()
