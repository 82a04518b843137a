import Testing

/// Waits until `condition` holds, checking every 20 ms, then records an issue at the caller's line
/// when it still does not after `timeout`, with what `explanation` says then.
///
/// The timeout is long on purpose: a condition that waits on another process or on one of the
/// test's own tasks (an app's event loop, a stream's watcher) waits on a machine that runs several
/// tests at once, each with its child processes. A condition that is never met still fails, later.
public func eventually(
    timeout: Duration = .seconds(60), sourceLocation: SourceLocation = #_sourceLocation,
    explanation: () -> String = { "" }, _ condition: () throws -> Bool
) async throws {
    let deadline = ContinuousClock.now + timeout
    while try !condition(), ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
    if try !condition() {
        #expect(try condition(), "\(explanation())", sourceLocation: sourceLocation)
    }
}
