extension Result {
    var isSuccess: Bool {
        if case .success = self { return true }
        return false
    }

    /// The error, or `nil` for a success.
    var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}

extension Result where Success == Int {
    /// The value, or 0 for a failure (for sums in assertions).
    var valueOrZero: Int {
        if case .success(let value) = self { return value }
        return 0
    }
}
