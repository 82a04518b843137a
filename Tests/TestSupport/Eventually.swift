import Testing

/// Waits until `condition` holds, checking every 20 ms, then records an issue at the caller's line
/// when it still does not after `timeout`.
///
/// The timeout is long on purpose: a condition that waits on one of the test's own tasks (an app's
/// event loop, a stream's watcher) needs a thread of the concurrency pool, and the pool has one
/// thread per core. While the suite runs in parallel, other tests hold those threads for as long as
/// they block (a test that waits on processes for half a minute), so a task of this test may not
/// run for that long. A condition that is never met still fails, later.
public func eventually(
    timeout: Duration = .seconds(60), sourceLocation: SourceLocation = #_sourceLocation,
    _ condition: () throws -> Bool
) async throws {
    let deadline = ContinuousClock.now + timeout
    while try !condition(), ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
    #expect(try condition(), sourceLocation: sourceLocation)
}
