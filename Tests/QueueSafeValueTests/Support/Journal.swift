/// State of one actor, changed synchronously by operations isolated to it.
actor Journal<Entry: Sendable> {
    var entries: [Entry] = []

    func write(_ entry: Entry) { entries.append(entry) }
}
