import Testing

/// The interleaving explorers, one exploration at a time: each is seconds of single-threaded CPU
/// work on a thread of its own, so serializing them leaves the other core to the rest of the
/// suite instead of two explorations starving it. (Nothing they check depends on each other.)
@Suite(.runsAlongsideOthers, .serialized) enum Explorers {}
