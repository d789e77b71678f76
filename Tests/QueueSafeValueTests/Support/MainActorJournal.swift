/// Main-actor state, changed synchronously by main-actor operations.
@MainActor
final class MainActorJournal<Entry> {
    var entries: [Entry] = []
}
