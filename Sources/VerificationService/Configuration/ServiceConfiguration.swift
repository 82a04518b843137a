import DerivedCredentials
import SystemSupport

/// Everything about how the verification service listens and defends itself; what it verifies
/// with is given separately (a `TokenVerifying` value from AuthTokens), so one configuration fits every
/// verifier.
///
/// The defaults suit one instance behind a reverse proxy on the same host: plain HTTP on
/// `127.0.0.1:8080`, 2 seconds to send a request head and 10 for a whole request, 1024 connections
/// at most and 256 from one address, small header limits (a token is at most ``maximumTokenSize``
/// bytes; nothing else needs more), and at most 10 per-request log lines a second with a summary
/// every minute.
public struct ServiceConfiguration: Sendable, Equatable {
    /// The largest `X-Good-GD-AuthToken` value accepted, in bytes; a larger one is answered 400.
    public static let maximumTokenSize = 4096

    /// The listen backlog asked for: connections the kernel completes and queues before the service
    /// accepts them (the kernel caps it at `net.core.somaxconn`, 4096 by default since Linux 5.4).
    public static let listenBacklog = 4096

    /// Where to listen. Port 0 asks the kernel for a free port (see ``portFile``).
    public var listen: ListenAddress
    /// Where `GET /metrics` is served, on a listener of its own; `nil` serves no metrics. Keep it
    /// off the address app servers reach (loopback, or an address only the monitoring reaches).
    public var metricsListen: ListenAddress?
    /// The certificate and key to serve HTTPS with; `nil` serves plain HTTP (behind a proxy that
    /// terminates TLS, or on localhost).
    public var tls: TLSFiles?
    /// A JWKS document (`{"keys":[…]}`) served at `/.well-known/jwks.json`, re-read when the
    /// file changes; `nil` answers that path 404.
    public var jwksFile: String?
    /// A file that receives the bound port (decimal, one line) once the service listens, written
    /// atomically: a reader sees the whole number or no file.
    public var portFile: String?
    /// Event-loop threads. NIO counts the cores of the cgroup and cpuset but not a `taskset`
    /// affinity, so a pinned process says here how many it has.
    public var threads: Int
    /// The time a connection has to deliver a whole request: from connecting (including the TLS
    /// handshake) or from its previous response to the end of the request head, and from the head
    /// to the end of the body. A client that takes longer (a slowloris) is disconnected.
    public var requestTimeout: Duration
    /// The time a connection has to deliver a whole request head: from connecting (including the
    /// TLS handshake) to the first head, and on a kept-alive connection from the first byte after
    /// an answer to the next head. A slower client is disconnected, so that a slowloris holds a
    /// connection for this long at most. A kept-alive connection that sends nothing is left to
    /// ``requestTimeout``.
    public var headTimeout: Duration
    /// Connections served at once; more wait in the listen backlog.
    public var maximumConnections: Int
    /// Connections one client address may have open at once (an IPv6 address counts with its
    /// /64); one more is closed as soon as it is accepted. Behind a reverse proxy every connection
    /// comes from the proxy's address: there, set it to ``maximumConnections`` (a value at or
    /// above it limits nothing).
    public var maximumConnectionsPerAddress: Int
    /// Per-request log lines written at `info` a second at most; every request is still counted
    /// in the summary line. At `debug` every request is logged.
    public var requestLogLinesPerSecond: Int
    /// How often the summary line (requests by outcome, connections cut or refused, lines not
    /// written) goes out; one more goes out when the service stops.
    public var logSummaryInterval: Duration
    /// The largest single header field (name and value) the HTTP decoder accepts; a larger one
    /// is answered 400 and the connection closed.
    public var maximumHeaderFieldSize: Int
    /// The largest request head (request line and all fields) the HTTP decoder accepts.
    public var maximumHeaderListSize: Int
    /// The most header fields one request may have.
    public var maximumHeaderCount: Int
    /// How long a graceful shutdown (SIGTERM, SIGINT) waits for requests in flight before it
    /// cancels them.
    public var shutdownGracePeriod: Duration

    /// A configuration with the defaults, changed by the arguments given.
    public init(
        listen: ListenAddress = ListenAddress(host: "127.0.0.1", port: 8080),
        tls: TLSFiles? = nil,
        jwksFile: String? = nil,
        portFile: String? = nil,
        threads: Int = 1,
        requestTimeout: Duration = .seconds(10),
        headTimeout: Duration = .seconds(2),
        maximumConnections: Int = 1024,
        maximumConnectionsPerAddress: Int = 256,
        requestLogLinesPerSecond: Int = 10,
        logSummaryInterval: Duration = .seconds(60),
        maximumHeaderFieldSize: Int = 8192,
        maximumHeaderListSize: Int = 16384,
        maximumHeaderCount: Int = 64,
        shutdownGracePeriod: Duration = .seconds(10)
    ) {
        self.listen = listen
        self.tls = tls
        self.jwksFile = jwksFile
        self.portFile = portFile
        self.threads = threads
        self.requestTimeout = requestTimeout
        self.headTimeout = headTimeout
        self.maximumConnections = maximumConnections
        self.maximumConnectionsPerAddress = maximumConnectionsPerAddress
        self.requestLogLinesPerSecond = requestLogLinesPerSecond
        self.logSummaryInterval = logSummaryInterval
        self.maximumHeaderFieldSize = maximumHeaderFieldSize
        self.maximumHeaderListSize = maximumHeaderListSize
        self.maximumHeaderCount = maximumHeaderCount
        self.shutdownGracePeriod = shutdownGracePeriod
    }

    /// Refuses values the service cannot run with, naming the setting (exit 64 in the CLI).
    public func validate() throws {
        func require(_ condition: Bool, _ message: String) throws {
            if !condition { throw DCError(.usage, message) }
        }
        try require((1...256).contains(threads), "threads must be between 1 and 256, not \(threads)")
        try require(
            requestTimeout >= .milliseconds(100) && requestTimeout <= .seconds(3600),
            "the request timeout must be between 0.1 and 3600 seconds")
        try require(
            (1...1_000_000).contains(maximumConnections),
            "the maximum number of connections must be between 1 and 1000000, not \(maximumConnections)")
        try require(
            headTimeout >= .milliseconds(100) && headTimeout <= .seconds(3600),
            "the head timeout must be between 0.1 and 3600 seconds")
        try require(
            (1...1_000_000).contains(maximumConnectionsPerAddress),
            "the maximum number of connections per address must be between 1 and 1000000, not \(maximumConnectionsPerAddress)"
        )
        try require(requestLogLinesPerSecond >= 0, "the per-request log lines a second must not be negative")
        try require(logSummaryInterval >= .seconds(1), "the log summary interval must be at least 1 second")
        try require(
            maximumHeaderFieldSize >= ServiceConfiguration.maximumTokenSize + 64,
            "the header field limit must leave room for a \(ServiceConfiguration.maximumTokenSize)-byte token")
        try require(
            maximumHeaderListSize >= maximumHeaderFieldSize, "the header list limit must not be below the field limit")
        try require(maximumHeaderCount >= 8, "the header count limit must be at least 8")
        try require(shutdownGracePeriod >= .zero, "the shutdown grace period must not be negative")
        try require(
            metricsListen == nil || metricsListen != listen || listen.port == 0,
            "the metrics must listen on another address or port than the verification service")
    }
}

/// A host and port to listen on: SystemSupport's `ListenAddress`, the one `HOST:PORT` rule that
/// every listening tool's `--listen` and `dcverify`'s configuration file follow.
public typealias ListenAddress = SystemSupport.ListenAddress

/// The files HTTPS is served with. Both are read by `CredentialCoding`'s reader, so either may
/// be PEM, DER or (unencrypted) PKCS#12, and one file may hold both; the certificate file may
/// carry the chain after the leaf.
public struct TLSFiles: Sendable, Equatable {
    /// The server certificate (and its chain).
    public var certificate: String
    /// The private key of the certificate; encrypted only with ``keyPassphrase``.
    public var key: String
    /// The passphrase of an encrypted key (PKCS#8, legacy PEM or PKCS#12), read from a file or a
    /// descriptor, never a flag's value; nil for a key that is not encrypted.
    public var keyPassphrase: SecretBytes?

    /// The two paths, and the key's passphrase if it is encrypted.
    public init(certificate: String, key: String, keyPassphrase: SecretBytes? = nil) {
        self.certificate = certificate
        self.key = key
        self.keyPassphrase = keyPassphrase
    }
}
