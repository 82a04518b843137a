import ArgumentParser
import AuthTokens
import CommandLineSupport
import CoreMetrics
import DerivedCredentials
import Foundation
import Logging
import Prometheus
import VerificationService

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Serve token verification over HTTP or HTTPS until SIGTERM or SIGINT.",
        discussion: """
            Paths: GET /verifyGDAuthToken (the token in X-Good-GD-AuthToken, exactly once, at most 4096 \
            bytes, else 400; otherwise 200 with X-Good-GD-AuthResponseCode: 100 OK and the identity headers \
            \(identityHeaders), or 101 Invalid Token, 102 Expired Token or 103 Revoked and no identity), \
            GET or HEAD /health (liveness: 200 while serving; the body says where the trust stands), GET or HEAD \
            /ready (readiness: 200 when the trust is loaded and fresh, else 503), GET /.well-known/jwks.json (the \
            --jwks file), and GET /metrics (Prometheus text) on the --metrics-listen address only. Other paths \
            404, other methods 405. \
            SIGHUP re-reads the configuration file's log level, the revocation list and the JWKS file (the files \
            are also re-read when they change, \
            checked at most every 10 ms). With --trust-url instead of --issuers and --revocations, the trust \
            is the signed list dcprovision publish writes (trust.jws under that URL), fetched with conditional \
            requests as often as its Cache-Control max-age says (1 s to 5 min), accepted only when signed by \
            --trust-key and numbered above the one in force; while the source is down the last good list \
            stays, and past --trust-max-age without a confirmation (or past the list's next update by as much) \
            every token answers 101 until a fresh list arrives; SIGHUP fetches at once. SIGTERM or SIGINT stops accepting, lets the requests in flight \
            finish (10 s at most) and exits 0. Logs go to standard error (label dcverify); they never \
            contain a token, a challenge or a key. At info, at most 10 per-request lines a second are written; \
            every request is counted in a summary line (requests by outcome code, connections cut or refused, \
            lines not written) each minute and at exit; errors are always written; debug writes every request. \
            A request's line names the client address, the path, the HTTP status, the answer code and the time \
            taken (dc.latency-us); --log-format json writes each line as one JSON object. \
            --config FILE reads the same settings from a JSON object whose keys are the long flag names \
            without the dashes, such as {"issuers": "issuers.jwks", "revocations": "revocations.json", \
            "listen": "0.0.0.0:8443", "tls-certificate": "server.pem", "tls-key": "server.key", "threads": 2, \
            "request-timeout": 10, "head-timeout": 2, "max-connections": 1024, "max-connections-per-address": 256, \
            "log-level": "info", "log-format": "json", "metrics-listen": "127.0.0.1:9464"}; flags win over the file, relative paths are relative to the file, an unknown key is an error.
            """
    )

    /// The identity headers as help lists them, from the protocol's one list: `X-Good-GD-AuthChallenge,
    /// -Server, … and -AuthTokenCreationTime`.
    static var identityHeaders: String {
        let prefix = "X-Good-GD"
        let names = VerificationHeaders.identity
        let rest = names.dropFirst().map { $0.hasPrefix(prefix) ? String($0.dropFirst(prefix.count)) : $0 }
        return ([names[0]] + rest.dropLast()).joined(separator: ", ") + (rest.last.map { " and " + $0 } ?? "")
    }

    @Option(help: ArgumentHelp("A JSON configuration file with the same settings (see above).", valueName: "file"))
    var config: String?

    @Option(help: ArgumentHelp("The trusted token-issuing keys: a JWKS file the provider writes.", valueName: "file"))
    var issuers: String?

    @Option(
        help: ArgumentHelp(
            "The revocation list (revoked issuing keys and delegations, retired containers), re-read without a restart.",
            valueName: "file"))
    var revocations: String?

    @Option(
        help: ArgumentHelp(
            "Fetch the trust from this URL (the directory dcprovision publish writes) instead of --issuers and --revocations; needs the TLS trait.",
            valueName: "url"))
    var trustURL: String?

    @Option(
        help: ArgumentHelp(
            """
            With --trust-url: the key that must sign the list, the trust-key.jwks dcprovision publish writes \
            (default, for an https:// URL: that file, taken from the URL over TLS when the service starts).
            """,
            valueName: "file"))
    var trustKey: String?

    @Option(
        help: ArgumentHelp(
            "With an https:// --trust-url: the certificate authorities (PEM) that authenticate its server (default: the system's).",
            valueName: "file"))
    var trustCA: String?

    @Option(
        help: ArgumentHelp(
            "With --trust-url: how long the last good list serves without a confirmation from the source before every token answers 101 (default 15m; 2 s to 7 days; a bare number is seconds).",
            valueName: "duration"))
    var trustMaxAge: DurationArgument<BareSeconds>?

    @Flag(
        help: ArgumentHelp(
            """
            With an http:// --trust-url: fetch without TLS. The signature still decides what is trusted, but \
            anyone on the path can then withhold newer lists (answering 304) until the list in force is past its \
            next update and --trust-max-age; use it for a server on this host or a network you trust.
            """))
    var trustOverHTTP = false

    @Option(help: ArgumentHelp("A JWKS document to serve at /.well-known/jwks.json (default: 404).", valueName: "file"))
    var jwks: String?

    @Option(
        help: ArgumentHelp(
            "Where to listen, HOST:PORT or [IPv6]:PORT (default 127.0.0.1:8080); port 0 picks a free port.",
            valueName: "host:port"))
    var listen: ListenAddress?

    @Option(
        help: ArgumentHelp(
            "Serve HTTPS with this certificate (PEM, DER or PKCS#12; the chain may follow the leaf; needs the TLS trait).",
            valueName: "file"))
    var tlsCertificate: String?

    @Option(
        help: ArgumentHelp(
            "The certificate's private key (PEM, DER or PKCS#12; encrypted with --passphrase-file or --passphrase-fd).",
            valueName: "file"))
    var tlsKey: String?

    /// The passphrase of an encrypted TLS key: from a file or an inherited descriptor, never a flag's value.
    @OptionGroup(title: "The passphrase of an encrypted --tls-key") var passphrase: PassphraseOptions

    @Option(help: ArgumentHelp("Write the bound port to this file, atomically, once listening.", valueName: "file"))
    var portFile: String?

    @Option(
        help: ArgumentHelp(
            "Event-loop threads (default: the cores this process may run on, as taskset sets them).", valueName: "n"))
    var threads: Int?

    @Option(
        help: ArgumentHelp(
            """
            The time a connection has to deliver a whole request, from connecting (TLS included) or its last \
            answer, and from the request's head to its end; slower clients are disconnected (default 10s; a bare \
            number is seconds).
            """, valueName: "duration"))
    var requestTimeout: DurationArgument<BareSeconds>?

    @Option(
        help: ArgumentHelp(
            """
            The time a connection has to deliver a whole request head, from connecting (TLS included) or from \
            its first byte after an answer; slower clients are disconnected (default 2s; a bare number is \
            seconds).
            """, valueName: "duration"))
    var headTimeout: DurationArgument<BareSeconds>?

    @Option(help: ArgumentHelp("Connections served at once (default 1024).", valueName: "n"))
    var maxConnections: Int?

    @Option(
        help: ArgumentHelp(
            """
            Connections one client address (an IPv6 /64) may have open at once; more are closed when accepted \
            (default 256; behind a reverse proxy, the same as --max-connections).
            """, valueName: "n"))
    var maxConnectionsPerAddress: Int?

    @Option(
        help: ArgumentHelp(
            """
            trace, debug (a line per request), info (default: at most 10 request lines a second and a summary \
            line), notice, warning, error or critical.
            """, valueName: "level"))
    var logLevel: LogLevelArgument?

    @Option(
        help: ArgumentHelp(
            "text (default: one line of key=value pairs) or json (one JSON object a line).", valueName: "format"))
    var logFormat: LogFormat?

    @Option(
        help: ArgumentHelp(
            """
            Serve GET /metrics (Prometheus text: verifications by answer code, their duration, open connections, \
            the trust's number and age) on this HOST:PORT, a listener of its own (default: no metrics).
            """, valueName: "host:port"))
    var metricsListen: ListenAddress?

    func run() async throws {
        let file = try config.map { try ConfigurationFile.read($0) } ?? ConfigurationFile()
        let level = try logLevel?.level ?? Self.logLevel(file.logLevel ?? "info")
        let format = try logFormat ?? file.logFormat.map(LogFormat.parse) ?? .text
        let levelSetting = LogLineHandler.LevelSetting(level)
        LoggingSystem.bootstrap { LogLineHandler(label: $0, following: levelSetting, format: format.lineFormat) }
        let logger = Logger(label: "dcverify")
        // SIGHUP re-reads the configuration file too: its log level takes effect at once (unless
        // --log-level set one); the other settings need a restart, and a file that cannot be read
        // keeps the level in force.
        let configPath = config
        let levelFlag = logLevel != nil
        let reloadConfiguration: @Sendable () -> Void = {
            guard let configPath, !levelFlag else { return }
            do {
                let reread = try ConfigurationFile.read(configPath)
                let level = try Self.logLevel(reread.logLevel ?? "info")
                if level != levelSetting.level {
                    levelSetting.set(level)
                    logger.notice("re-read the configuration file: log level \(level)")
                }
            } catch {
                logger.error("kept the configuration in force: \(error)")
            }
        }
        var configuration = ServiceConfiguration(threads: ServiceConfiguration.availableCores)
        if let listen = try listen ?? file.listen.map(ListenAddress.init(parsing:)) { configuration.listen = listen }
        configuration.metricsListen = try metricsListen ?? file.metricsListen.map(ListenAddress.init(parsing:))
        let registry = PrometheusCollectorRegistry()
        if configuration.metricsListen != nil {
            var factory = PrometheusMetricsFactory(registry: registry)
            // A verification takes about a tenth of a millisecond: buckets from 50 µs to 1 s.
            factory.defaultDurationHistogramBuckets = [
                .microseconds(50), .microseconds(100), .microseconds(250), .microseconds(500), .milliseconds(1),
                .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(100),
                .seconds(1),
            ]
            MetricsSystem.bootstrap(factory)
        }
        switch (tlsCertificate ?? file.tlsCertificate, tlsKey ?? file.tlsKey) {
        case (nil, nil):
            guard passphrase.passphraseFile == nil, passphrase.passphraseFd == nil else {
                throw DCError(.usage, "a passphrase is for an encrypted --tls-key; no TLS key was given")
            }
        case (let certificate?, let key?):
            configuration.tls = TLSFiles(certificate: certificate, key: key, keyPassphrase: try passphrase.read())
        default: throw DCError(.usage, "give --tls-certificate and --tls-key together")
        }
        configuration.jwksFile = jwks ?? file.jwks
        configuration.portFile = portFile ?? file.portFile
        if let threads = threads ?? file.threads { configuration.threads = threads }
        if let seconds = requestTimeout?.seconds ?? file.requestTimeout {
            guard seconds.isFinite, seconds > 0, seconds <= 3600 else {
                throw DCError(.usage, "the request timeout must be between 0.1 and 3600 seconds")
            }
            configuration.requestTimeout = .milliseconds(Int64((seconds * 1000).rounded()))
        }
        if let seconds = headTimeout?.seconds ?? file.headTimeout {
            guard seconds.isFinite, seconds > 0, seconds <= 3600 else {
                throw DCError(.usage, "the head timeout must be between 0.1 and 3600 seconds")
            }
            configuration.headTimeout = .milliseconds(Int64((seconds * 1000).rounded()))
        }
        if let count = maxConnections ?? file.maxConnections { configuration.maximumConnections = count }
        if let count = maxConnectionsPerAddress ?? file.maxConnectionsPerAddress {
            configuration.maximumConnectionsPerAddress = count
        }
        let trustGauges = TrustGauges(registry: registry)
        /// The text /metrics answers: the trust's gauges as they are now, then every metric.
        func exposition(_ trust: @escaping @Sendable () -> TrustStatus) -> @Sendable () -> [UInt8] {
            {
                trustGauges.record(trust())
                var bytes: [UInt8] = []
                registry.emit(into: &bytes)
                return bytes
            }
        }
        if let url = trustURL ?? file.trustURL {
            let fetcher = try await fetcher(url: url, file: file, logger: logger)
            // One fetch before listening, so that a verifier that reaches its source answers from the first request.
            await fetcher.fetchOnce()
            let fetched = fetcher.trust
            let verifier = AuthTokenVerifier(issuers: { fetched.issuers() }, revocations: { fetched.revocations })
            let trust: @Sendable () -> TrustStatus = { Self.status(of: fetched.freshness()) }
            let server = try VerificationServer(
                configuration: configuration, verifier: verifier, logger: logger,
                onReload: {
                    reloadConfiguration()
                    logger.notice("fetching the trust list now (SIGHUP)")
                    fetcher.fetchSoon()
                }, trust: trust, exposition: exposition(trust))
            let fetching = Task { await fetcher.run() }
            defer { fetching.cancel() }
            return try await Self.serve(server, on: configuration.listen)
        }
        guard trustKey == nil, file.trustKey == nil, trustCA == nil, file.trustCA == nil, trustMaxAge == nil,
            file.trustMaxAge == nil, !trustOverHTTP, file.trustOverHTTP == nil
        else {
            throw DCError(
                .usage, "--trust-key, --trust-ca, --trust-max-age and --trust-over-http are for --trust-url")
        }
        guard let issuers = issuers ?? file.issuers, let revocations = revocations ?? file.revocations else {
            throw DCError(.usage, "give --issuers FILE and --revocations FILE, or --trust-url URL (or in --config)")
        }
        let (verifier, reload, trust) = try Self.verifier(issuers: issuers, revocations: revocations, logger: logger)
        let server = try VerificationServer(
            configuration: configuration, verifier: verifier, logger: logger,
            onReload: {
                reloadConfiguration()
                reload()
            }, trust: trust, exposition: exposition(trust))
        try await Self.serve(server, on: configuration.listen)
    }

    /// Where fetched trust stands, for /health, /ready and /metrics: ready while a list is in force
    /// and fresh; past the staleness bound, failing closed (every token 101), and saying why. The
    /// summary is served on the public port: it names no URL and repeats no error text a server
    /// sent (those are in the log).
    static func status(of freshness: TrustFreshness) -> TrustStatus {
        var summary = "trust list"
        if let number = freshness.number { summary += " number \(number)" }
        if let age = freshness.age { summary += ", confirmed \(Int(age.rounded())) s ago" }
        if freshness.isStale {
            summary += "; failing closed, every token is refused: \(freshness.staleReason ?? "stale")"
        }
        if freshness.lastError != nil { summary += "; the last fetch failed (the log says why)" }
        return TrustStatus(
            isReady: freshness.loaded && !freshness.isStale, isFailingClosed: freshness.isStale, summary: summary,
            number: freshness.number, ageSeconds: freshness.age, fetchErrors: freshness.failures)
    }

    /// Runs `server` until it stops.
    static func serve(_ server: VerificationServer, on listen: ListenAddress) async throws {
        do {
            try await server.run()
        } catch let error as DCError {
            throw error
        } catch {
            throw DCError(.cannotServe, "cannot serve on \(listen): \(error)")
        }
    }

    /// The fetcher of `--trust-url`, its settings checked: a build without the TLS trait refuses
    /// first (exit 69), then the key (its file, or for `https` without one, `trust-key.jwks` taken
    /// from the URL over TLS), the bound, and local trust files given as well.
    func fetcher(url text: String, file: ConfigurationFile, logger: Logger) async throws -> TrustFetcher {
        let url = try TrustURL(parsing: text)
        try TrustFetcher.checkBuilt(url)
        // Without TLS the source is not authenticated: a 304 or a replayed list would hold newer
        // revocations back. That is the operator's choice to make, not a default.
        guard url.isHTTPS || trustOverHTTP || file.trustOverHTTP == true else {
            throw DCError(
                .usage, "an http:// trust URL is not authenticated: a network path could withhold revocations",
                subject: url.text, hint: "use an https:// URL, or allow plain HTTP with --trust-over-http")
        }
        guard issuers == nil, revocations == nil, file.issuers == nil, file.revocations == nil else {
            throw DCError(.usage, "--trust-url replaces --issuers and --revocations: give one or the other")
        }
        let authorities = trustCA ?? file.trustCA
        guard url.isHTTPS || authorities == nil else {
            throw DCError(.usage, "--trust-ca is for an https:// trust URL", subject: url.text)
        }
        if let authorities, !FileManager.default.isReadableFile(atPath: authorities) {
            throw DCError(
                .fileNotFound, "cannot read the certificate authorities for the trust URL", subject: authorities)
        }
        let keyPath = trustKey ?? file.trustKey
        guard keyPath != nil || url.isHTTPS else {
            throw DCError(
                .usage, "an http:// --trust-url needs --trust-key FILE",
                hint: "give the trust-key.jwks dcprovision publish writes, or use an https:// URL")
        }
        var settings = try await TrustSourceSettings.resolving(url: url, keyFile: keyPath, authorities: authorities)
        if keyPath == nil { logger.notice("took the trust key \(settings.key.thumbprint) from \(url.keyURL)") }
        if let seconds = trustMaxAge?.seconds ?? file.trustMaxAge {
            guard seconds.isFinite, seconds >= 2, seconds <= 7 * 86_400 else {
                throw DCError(.usage, "the trust max age must be between 2 seconds and 7 days")
            }
            settings.maximumAge = .milliseconds(Int64((seconds * 1000).rounded()))
        }
        return try TrustFetcher(settings: settings, logger: logger)
    }

    /// The verifier the service asks, what SIGHUP calls, and where the trust stands: the trusted
    /// issuing keys (a JWKS) and the revocation list, each read now (an unreadable or malformed
    /// file is an error here) and read again when it changes or on SIGHUP. A broken update keeps
    /// the last good list in force and is logged. Local files are always ready; their age is the
    /// revocation list's, from its issue time.
    static func verifier(issuers: String, revocations: String, logger: Logger) throws -> (
        any TokenVerifying, @Sendable () -> Void, @Sendable () -> TrustStatus
    ) {
        let trusted = try Reloading(issuersAt: issuers)
        let revoked = try Reloading(revocationsAt: revocations)
        let reload: @Sendable () -> Void = {
            for (name, read) in [("issuers", { try trusted.reload() }), ("revocations", { try revoked.reload() })] {
                do {
                    try read()
                    logger.notice("re-read the \(name) file")
                } catch {
                    logger.error("kept the last good \(name): \(error)")
                }
            }
        }
        let trust: @Sendable () -> TrustStatus = {
            let list = revoked.value
            var status = TrustStatus.localFiles
            status.ageSeconds = max(0, Date().timeIntervalSince1970 - Double(list.issued))
            if revoked.lastError != nil || trusted.lastError != nil {
                status.summary +=
                    "; the last change to a file was refused, the last good copy is in force (the log says why)"
            }
            return status
        }
        return (AuthTokenVerifier(issuers: trusted, revocations: revoked), reload, trust)
    }

    static func logLevel(_ name: String) throws -> Logger.Level {
        guard let level = Logger.Level(rawValue: name) else {
            throw DCError(
                .usage, "unknown log level '\(name.escapingControlCharacters)'",
                hint: "use trace, debug, info, notice, warning, error or critical")
        }
        return level
    }
}

extension DCError.Code {
    /// The service cannot listen: the address is in use, or not one of this host's (exit 69).
    static let cannotServe = Self(
        "cannotServe", .unavailable, hint: "choose another address or port with --listen, or stop what uses it")
}

/// `--log-format`: how each log line is written.
enum LogFormat: String, ExpressibleByArgument, CaseIterable {
    case text, json

    /// The log handler's format.
    var lineFormat: LogLineHandler.Format { self == .json ? .json : .text }

    /// The format a configuration file names.
    static func parse(_ name: String) throws -> LogFormat {
        guard let format = LogFormat(rawValue: name) else {
            throw DCError(
                .usage, "unknown log format '\(name.escapingControlCharacters)'", hint: "use text or json")
        }
        return format
    }
}

/// The trust's gauges, set from its ``TrustStatus`` at each scrape: they change between scrapes
/// without a request to count.
struct TrustGauges: Sendable {
    private let ready: Prometheus.Gauge
    private let failingClosed: Prometheus.Gauge
    private let age: Prometheus.Gauge
    private let number: Prometheus.Gauge
    private let fetchErrors: Prometheus.Gauge

    init(registry: PrometheusCollectorRegistry) {
        func gauge(_ name: String, _ help: String) -> Prometheus.Gauge {
            registry.makeGauge(
                descriptor: MetricNameDescriptor(
                    namespace: "dcverify", subsystem: "trust", metricName: name, unitName: "", helpText: help))
        }
        ready = gauge("ready", "1 while the trust is loaded and fresh")
        failingClosed = gauge("failing_closed", "1 while every token is answered 101: the trust is stale")
        age = gauge("age_seconds", "Seconds since the trust in force was issued")
        number = gauge("number", "The revocation list's number, 0 when it has none")
        fetchErrors = gauge("fetch_errors", "Fetches of the trust that failed since the service started")
    }

    func record(_ status: TrustStatus) {
        ready.set(Double(status.isReady ? 1 : 0))
        failingClosed.set(Double(status.isFailingClosed ? 1 : 0))
        age.set(status.ageSeconds ?? 0)
        number.set(Double(status.number ?? 0))
        fetchErrors.set(Double(status.fetchErrors))
    }
}
