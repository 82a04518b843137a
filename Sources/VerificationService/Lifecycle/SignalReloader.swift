import ServiceLifecycle
import UnixSignals

/// A service that calls `reload` each time the process receives SIGHUP, until a graceful
/// shutdown: how the verifier's revocation list (and the JWKS file) is re-read without a restart.
///
/// Make it (it traps SIGHUP from then on, so a SIGHUP that arrives before the service group runs
/// is not fatal) and add it to the service group after the server.
public struct SignalReloader: Service, CustomStringConvertible {
    private let signals: UnixSignalsSequence
    private let reload: @Sendable () -> Void

    /// Traps SIGHUP now; `reload` runs once per signal received.
    public init(reload: @escaping @Sendable () -> Void) async {
        signals = await UnixSignalsSequence(trapping: .sighup)
        self.reload = reload
    }

    /// `SignalReloader(SIGHUP)`, as the service group logs it.
    public var description: String { "SignalReloader(SIGHUP)" }

    /// Calls `reload` for each SIGHUP; returns on graceful shutdown.
    public func run() async throws {
        for await _ in signals.cancelOnGracefulShutdown() {
            reload()
        }
    }
}
