// Each scenario warms the value up with one command (so that nothing is done for the first time),
// then issues the command it walks between `walkBegin` and `walkEnd`. `.ci/walk/run` steps through
// the code between the two markers; the dispatch scenario's block, on the queue's thread, is
// walked from where the engine starts it up to `walkQueueDone`, which its completion calls.
import Dispatch
import Foundation
import QueueSafeValue

@inline(never) func walkBegin() { FileHandle.standardError.write(Data("begin\n".utf8)) }
@inline(never) func walkEnd() { FileHandle.standardError.write(Data("end\n".utf8)) }
@inline(never) func walkQueueDone() { FileHandle.standardError.write(Data("queue done\n".utf8)) }

let value = QueueSafeValue(value: 0)
try value.wait.withLock { $0 += 1 }

switch CommandLine.arguments.dropFirst().first {
case "idle-blocking":
    walkBegin()
    try value.wait.withLock { $0 += 1 }
    walkEnd()

case "contended-blocking":
    // Another thread holds the value until this one waits for it (however slowly it is
    // stepped through); this one then gets its turn, runs, releases.
    let holding = DispatchSemaphore(value: 0)
    Thread.detachNewThread {
        try? value.wait.withLock { _ in
            holding.signal()
            while value.diagnostics.waiting.isEmpty { usleep(1000) }
        }
    }
    holding.wait()
    walkBegin()
    try value.wait.withLock { $0 += 1 }
    walkEnd()

case "contended-release":
    // This thread holds the value while another waits for it (parked: it has waited longer than
    // its spin); the walk is this thread's release, which hands the value on.
    try value.wait.withLock { _ in
        Thread.detachNewThread { try? value.wait.withLock { $0 += 1 } }
        while value.diagnostics.waiting.isEmpty { usleep(1000) }
        usleep(200_000)
        walkBegin()
    }
    walkEnd()

case "dispatch":
    let schedule = value.async(performIn: DispatchQueue(label: "walk"))
    let done = DispatchSemaphore(value: 0)
    walkBegin()
    schedule.set(
        accessClosure: { $0 += 1 },
        completion: { _ in
            walkQueueDone()
            done.signal()
        })
    walkEnd()
    done.wait()

case "awaiting":
    let done = DispatchSemaphore(value: 0)
    Task.detached {  // detached: top-level code is on the main actor, which `done.wait()` blocks
        try await value.async.withLock { $0 += 1 }
        walkBegin()
        try await value.async.withLock { $0 += 1 }
        walkEnd()
        done.signal()
    }
    done.wait()

default:
    FileHandle.standardError.write(
        Data("usage: Walk idle-blocking|contended-blocking|contended-release|dispatch|awaiting\n".utf8))
    exit(2)
}
