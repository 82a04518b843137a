import DerivedCredentials
import Glibc
import NIOCore
import ServiceLifecycle
import SystemSupport

/// A listener's service (the verification service's own, or the metrics listener) whose failure
/// to bind is the one line every listener of the toolkit says: the address in use, or not this
/// host's (`ListenAddress.cannotListen(errno:listener:)`, exit 69), never NIO's `bind(…)` text.
struct ListeningService<Base: Service>: Service {
    /// The service that listens.
    let base: Base
    /// Where it was asked to listen.
    let address: ListenAddress
    /// Which listener it is, for the remedy's words.
    let listener: DCError.Remedy.Listener

    func run() async throws {
        do {
            try await base.run()
        } catch let error as IOError where [EADDRINUSE, EADDRNOTAVAIL, EACCES].contains(error.errnoCode) {
            throw address.cannotListen(errno: error.errnoCode, listener: listener)
        }
    }
}
