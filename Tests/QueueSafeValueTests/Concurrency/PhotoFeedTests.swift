import Dispatch
import Foundation
import QueueSafeValue
import Testing

@testable import QueueSafeValueTesting

/// The photo feed of Concurrency.md ("A photo feed: visible first, four at a time"), as shown
/// there: visible cells load before prefetched ones, four downloads at once, a prefetched cell
/// that scrolls into view becomes urgent, and a cell that scrolls away cancels its load.
@MainActor
private final class PhotoFeed {
    private let downloads = try! CommandQueue(label: "photo downloads", width: 4)
    private var loads: [Int: QueuedOperation<[UInt8]>] = [:]
    private let fetch: @Sendable (Int) async throws -> [UInt8]

    init(fetch: @escaping @Sendable (Int) async throws -> [UInt8]) {
        self.fetch = fetch
    }

    /// A cell comes into view: its photo is urgent. A prefetch already waiting moves ahead of
    /// every waiting prefetch; one already running is escalated.
    func cellWillAppear(_ photo: Int) -> QueuedOperation<[UInt8]> {
        if let load = loads[photo] {
            load.setPriority(.high)
            return load
        }
        return load(photo, priority: .high)
    }

    /// A cell is about to come into view: load its photo when nothing more urgent waits.
    func prefetch(_ photo: Int) {
        if loads[photo] == nil { _ = load(photo, priority: .low) }
    }

    /// A cell left the view: a load that waits never starts; one that runs is cancelled.
    func cellDidDisappear(_ photo: Int) {
        loads.removeValue(forKey: photo)?.cancel()
    }

    private func load(_ photo: Int, priority: CommandPriority) -> QueuedOperation<[UInt8]> {
        let fetch = self.fetch
        let load = downloads.submit(priority: priority) { try await fetch(photo) }
        loads[photo] = load
        return load
    }
}

/// What the downloads did: how many ran at once and in which order they started (``SlotProbe``),
/// which finished, and the gate each waits at.
private final class DownloadLog: @unchecked Sendable {  // @unchecked Sendable: `lock` guards the gates
    private let lock = NSLock()
    private var gates: [Int: Gate] = [:]
    private let slots = SlotProbe<Int>()
    private let finished = Recorder<Int>()

    func gate(_ photo: Int) -> Gate {
        lock.withLock {
            if let gate = gates[photo] { return gate }
            let gate = Gate()
            gates[photo] = gate
            return gate
        }
    }

    func start(_ photo: Int) {
        slots.enter(photo)
    }

    func end(_ photo: Int, finished didFinish: Bool) {
        if didFinish { finished.append(photo) }
        slots.exit()
    }

    var mostAtOnce: Int { slots.mostAtOnce }
    var startOrder: [Int] { slots.startOrder }
    var finishedPhotos: Set<Int> { Set(finished.snapshot) }
}

/// The feed's four behaviours, through the public API.
@Suite(.runsAlone) @MainActor struct PhotoFeedTests {
    @Test func visibleFirstFourAtATimeUrgentPrefetchesAndCancelledLoads() async throws {
        let log = DownloadLog()
        let feed = PhotoFeed { photo in
            log.start(photo)
            await log.gate(photo).wait()
            let cancelled = Task.isCancelled
            log.end(photo, finished: !cancelled)
            if cancelled { throw CancellationError() }
            return [UInt8(photo)]
        }
        // Four cells on screen, eight prefetched below them.
        let visible = (0..<4).map { feed.cellWillAppear($0) }
        for photo in 4..<12 { feed.prefetch(photo) }
        try await waitUntil("four downloads run") { log.startOrder.count == 4 }
        #expect(Set(log.startOrder) == [0, 1, 2, 3])
        // Photo 9 scrolls into view: it moves ahead of every waiting prefetch. Photo 5 scrolls away
        // before it starts, and photo 1, which is downloading, scrolls away too.
        let urgent = feed.cellWillAppear(9)
        feed.cellDidDisappear(5)
        feed.cellDidDisappear(1)
        // Photo 1's download ends by its cancellation, and the slot goes to photo 9.
        log.gate(1).open()
        try await waitUntil("the urgent prefetch starts") { log.startOrder.count == 5 }
        #expect(log.startOrder[4] == 9)
        // The rest, one slot at a time.
        for photo in [0, 2, 3, 9, 4, 6, 7, 8, 10, 11, 5] { log.gate(photo).open() }
        #expect(try await urgent.value == [9])
        for (photo, load) in visible.enumerated() where photo != 1 { #expect(try await load.value == [UInt8(photo)]) }
        await #expect(throws: (any Error).self) { try await visible[1].value }
        try await waitUntil("every download ended") { log.startOrder.count == 11 }
        // At most four at once; photo 9 started before every waiting prefetch; the cancelled
        // loads never finished (5 never started, 1 ended by its cancellation).
        #expect(log.mostAtOnce == 4)
        #expect(
            log.startOrder.firstIndex(of: 9)! < [4, 6, 7, 8, 10, 11].map { log.startOrder.firstIndex(of: $0)! }.min()!)
        #expect(!log.startOrder.contains(5))
        #expect(!log.finishedPhotos.contains(1) && !log.finishedPhotos.contains(5))
        #expect(log.finishedPhotos == [0, 2, 3, 4, 6, 7, 8, 9, 10, 11])
    }

    @Test func aDrainOfFortyJobsKeepsFourSlotsBusy() async throws {
        var generator = SplitMix64(seed: 45)
        let durations = (0..<40).map { _ in Int.random(in: 20...200, using: &generator) }
        let log = DownloadLog()
        let feed = PhotoFeed { photo in
            log.start(photo)
            try await Task.sleep(nanoseconds: UInt64(durations[photo]) * 1_000_000)
            log.end(photo, finished: true)
            return [UInt8(photo)]
        }
        let start = DispatchTime.now().uptimeNanoseconds
        let loads = (0..<40).map { feed.cellWillAppear($0) }
        for load in loads { _ = try await load.value }
        let elapsed = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e6
        let ideal = Double(durations.reduce(0, +)) / 4
        #expect(log.mostAtOnce == 4)
        // The slots never stand idle while jobs wait: the drain takes at most 1.2 × the work ÷ 4.
        #expect(elapsed <= 1.2 * ideal, "drain \(elapsed) ms, the work ÷ 4 is \(ideal) ms")
    }
}
