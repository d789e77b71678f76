import Foundation

/// How long any single wait in the tests may take before it counts as a hang. Generous on purpose:
/// the tests never assert on speed, only on what happened; a wait that runs out is a failure.
let hangTimeout: TimeInterval = 30
