import AuthTokens
import CredentialCoding
import DerivedCredentials
import Foundation
import Logging
import Synchronization

#if TLS
    import AsyncHTTPClient
    import NIOCore
    import NIOHTTP1
    import NIOSSL

    /// Fetches the signed trust list from a ``TrustURL`` for as long as ``run()`` runs, into
    /// ``trust``: what the verifier reads on every call.
    ///
    /// Each fetch is a conditional `GET` (`If-None-Match` with the last accepted `ETag`); a `304`
    /// confirms the list in force, a `200` is verified (AuthTokens' `FetchedTrust.offer(_:at:)`) before it
    /// replaces the list in one swap, and anything else, or a refused document, keeps the list in
    /// force. The next fetch is the answer's `Cache-Control: max-age` later, within the settings'
    /// floor and ceiling; after a failure, one second later, doubling to that ceiling. Every outcome
    /// is logged (never a token), and so is each passage into and out of staleness. Built only
    /// with the `TLS` trait: AsyncHTTPClient needs swift-nio-ssl.
    public final class TrustFetcher: Sendable {
        /// The trust the verifier reads.
        public let trust: FetchedTrust
        /// Where and how it fetches.
        public let settings: TrustSourceSettings
        private let client: HTTPClient
        private let logger: Logger
        /// Set by ``fetchSoon()`` (SIGHUP), taken by the loop.
        private let woken = Atomic<Bool>(false)

        /// A fetcher for `settings`; nothing is fetched before ``fetchOnce()`` or ``run()``.
        public init(settings: TrustSourceSettings, logger: Logger) throws {
            self.settings = settings
            self.trust = FetchedTrust(key: settings.key, maximumAge: settings.maximumAge)
            self.logger = logger
            client = try Self.client(authorities: settings.certificateAuthorities)
        }

        /// An HTTP client that follows no redirect and, for `https`, trusts the certificate
        /// authorities in the PEM file `authorities` (nil: the system's).
        private static func client(authorities: String?) throws -> HTTPClient {
            var configuration = HTTPClient.Configuration(redirectConfiguration: .disallow)
            configuration.timeout = .init(connect: .seconds(5), read: .seconds(10))
            if let authorities {
                var tls = TLSConfiguration.makeClientConfiguration()
                do {
                    let certificates = try NIOSSLCertificate.fromPEMFile(authorities)
                    guard !certificates.isEmpty else { throw DCError(.invalid, "no certificate in it") }
                    tls.trustRoots = .certificates(certificates)
                } catch {
                    throw DCError(
                        .invalid, "cannot read the certificate authorities for the trust URL: \(Self.reason(error))",
                        subject: authorities)
                }
                configuration.tlsConfiguration = tls
            }
            return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        }

        /// Fetches the key that signs the lists, `trust-key.jwks` (one key), from an `https`
        /// directory: the server's certificate, checked against `authorities` (nil: the system's),
        /// is what makes it the provider's. Throws `DCError.Code.usage` for an `http` URL, and
        /// `DCError.Code.trustKeyUnavailable` (naming the URL and why) when it cannot be fetched or is not
        /// one valid key.
        public static func fetchKey(
            from url: TrustURL, authorities: String?, timeout: Duration = .seconds(10)
        ) async throws -> TokenPublicKey {
            guard url.isHTTPS else {
                throw DCError(
                    .usage, "the trust key is taken from the trust URL over TLS only", subject: url.text,
                    remedy: .givePublishedTrustKey)
            }
            let client = try client(authorities: authorities)
            do {
                let key = try await keyExchange(client, url: url.keyURL, timeout: timeout)
                try? await client.shutdown()
                return key
            } catch {
                try? await client.shutdown()
                throw DCError(
                    .trustKeyUnavailable, "cannot take the trust key from \(url.keyURL): \(Self.reason(error))",
                    remedy: .givePublishedTrustKey)
            }
        }

        /// One GET of the key file within `timeout`, its body read whole and strictly.
        private static func keyExchange(_ client: HTTPClient, url: String, timeout: Duration) async throws
            -> TokenPublicKey
        {
            var request = HTTPClientRequest(url: url)
            request.headers.add(name: "User-Agent", value: "dcverify")
            let prepared = request
            return try await within(timeout) {
                let response = try await client.execute(prepared, timeout: TimeAmount(timeout))
                guard response.status.code == 200 else {
                    _ = try? await response.body.collect(upTo: 1 << 16)
                    throw DCError(.invalid, "HTTP \(response.status.code)")
                }
                let body = try await response.body.collect(upTo: TrustedIssuers.maximumFileSize)
                let set = try TrustedIssuers(jwks: Array(buffer: body))
                guard set.keys.count == 1, let key = set.keys.values.first else {
                    throw DCError(.invalid, "it holds \(set.keys.count) keys, not one")
                }
                return key
            }
        }

        /// What `work` returns, or ``FetchTimedOut`` when it has not ended within `limit`.
        /// AsyncHTTPClient's own deadline ends with the head, and a source that sends its body a
        /// byte at a time would otherwise hold the fetch (and, at start, the listening) for as long
        /// as it likes: the whole exchange, body included, runs under this one.
        private static func within<T: Sendable>(
            _ limit: Duration, _ work: @escaping @Sendable () async throws -> T
        ) async throws -> T {
            try await withThrowingTaskGroup(of: T?.self) { group in
                group.addTask { try await work() }
                group.addTask {
                    try await Task.sleep(for: limit)
                    return nil
                }
                let first = try await group.next() ?? nil
                group.cancelAll()
                guard let first else { throw FetchTimedOut(limit: limit) }
                return first
            }
        }

        /// Returns: this build can fetch `url` (the stub without the `TLS` trait throws).
        public static func checkBuilt(_ url: TrustURL) throws {}

        /// Makes the loop fetch at its next tick, whatever the last answer's `max-age` said (SIGHUP).
        public func fetchSoon() { woken.store(true, ordering: .relaxed) }

        /// What one fetch did, for the loop's timing.
        private struct Answer: Sendable {
            var ok: Bool
            var maxAge: Int?
        }

        /// The ETag of the list in force, sent as `If-None-Match`.
        private let etag = Mutex<String?>(nil)

        /// Fetches once, hands the answer to ``trust`` and logs the outcome; returns whether the list in
        /// force is now confirmed.
        @discardableResult
        public func fetchOnce() async -> Bool { await fetch().ok }

        private func fetch() async -> Answer {
            let url = settings.url.listURL
            var request = HTTPClientRequest(url: url)
            request.headers.add(name: "User-Agent", value: "dcverify")
            let sent = etag.withLock { $0 }
            if let sent, trust.number != nil { request.headers.add(name: "If-None-Match", value: sent) }
            // A fetch never waits past half the staleness bound (AsyncHTTPClient retries a refused
            // connection until the deadline), so a source that comes back is asked again in time.
            let limit = min(settings.requestTimeout, max(settings.minimumInterval, settings.maximumAge / 2))
            do {
                let prepared = request
                return try await Self.within(limit) {
                    try await self.exchange(prepared, timeout: TimeAmount(limit), url: url)
                }
            } catch {
                let reason = "\(url): \(error)"
                trust.failed(reason)
                logger.error("cannot fetch the trust list from \(reason)")
                return Answer(ok: false, maxAge: nil)
            }
        }

        /// A fetch that did not end within its limit.
        private struct FetchTimedOut: Error, CustomStringConvertible {
            var limit: Duration
            var description: String { "no whole answer within \(limit)" }
        }

        /// One request and its answer, handed to ``trust``; throws when the exchange fails.
        private func exchange(_ request: HTTPClientRequest, timeout: TimeAmount, url: String) async throws -> Answer {
            do {
                let response = try await client.execute(request, timeout: timeout)
                let maxAge = response.headers.first(name: "Cache-Control").flatMap(TrustSourceSettings.maxAge)
                switch response.status.code {
                case 304:
                    trust.confirm()
                    logger.debug("trust list \(trust.number ?? 0) not modified at \(url)")
                    return Answer(ok: true, maxAge: maxAge)
                case 200:
                    let body = try await response.body.collect(upTo: SignedTrustList.maximumLength + 1)
                    do {
                        switch try trust.offer(Array(buffer: body)) {
                        case .accepted(let number):
                            logger.notice("accepted trust list \(number) from \(url)")
                        case .unchanged(let number):
                            logger.debug("trust list \(number) unchanged at \(url)")
                        }
                        etag.withLock { $0 = response.headers.first(name: "ETag") }
                        return Answer(ok: true, maxAge: maxAge)
                    } catch {
                        logger.error(
                            "refused the trust list from \(url): \(Self.reason(error)); kept \(trust.number.map { "list \($0)" } ?? "no list")"
                        )
                        return Answer(ok: false, maxAge: nil)
                    }
                default:
                    _ = try? await response.body.collect(upTo: 1 << 16)
                    let reason = "HTTP \(response.status.code) from \(url)"
                    trust.failed(reason)
                    logger.error("cannot fetch the trust list: \(reason)")
                    return Answer(ok: false, maxAge: nil)
                }
            }
        }

        /// Fetches until the task is cancelled, then shuts the HTTP client down. Beside the fetches,
        /// a watch logs each passage into and out of staleness within 50 ms, also while a fetch waits
        /// for a source that does not answer.
        public func run() async {
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await self.fetchLoop() }
                group.addTask { await self.watchLoop() }
                await group.waitForAll()
            }
            try? await client.shutdown()
        }

        /// Fetches when the last answer's interval has passed, or at once after ``fetchSoon()``.
        private func fetchLoop() async {
            var retry = settings.minimumInterval
            var next = ContinuousClock.now
            while !Task.isCancelled {
                if ContinuousClock.now >= next || woken.exchange(false, ordering: .relaxed) {
                    let answer = await fetch()
                    if answer.ok {
                        retry = settings.minimumInterval
                        next = .now + settings.interval(maxAge: answer.maxAge)
                    } else {
                        next = .now + retry
                        retry = min(retry * 2, settings.interval(maxAge: nil))
                    }
                }
                try? await Task.sleep(for: .milliseconds(50))
            }
        }

        /// Logs each passage into and out of staleness.
        private func watchLoop() async {
            var wasStale = trust.freshness().isStale
            while !Task.isCancelled {
                let freshness = trust.freshness()
                if freshness.isStale != wasStale {
                    wasStale = freshness.isStale
                    if let reason = freshness.staleReason {
                        logger.critical("the trust is stale (\(reason)): every token is refused until a fresh list")
                    } else {
                        logger.notice("the trust is fresh again: trust list \(freshness.number ?? 0)")
                    }
                }
                try? await Task.sleep(for: .milliseconds(50))
            }
        }

        /// An error's message, without the error type's decoration.
        private static func reason(_ error: any Error) -> String {
            (error as? DCError)?.message ?? "\(error)"
        }
    }
#else
    /// Fetching trust in a build without the `TLS` trait: AsyncHTTPClient needs swift-nio-ssl, which
    /// compiles its own BoringSSL, so asking for `--trust-url` stops the service before it listens,
    /// with one line that says how to get it.
    public final class TrustFetcher: Sendable {
        /// The trust the verifier would read.
        public let trust: FetchedTrust

        /// Refuses: this build cannot fetch trust.
        public init(settings: TrustSourceSettings, logger: Logger) throws {
            trust = FetchedTrust(key: settings.key, maximumAge: settings.maximumAge)
            try Self.checkBuilt(settings.url)
        }

        /// Throws `notInThisBuild` (exit 69): this build cannot fetch `url`.
        public static func fetchKey(
            from url: TrustURL, authorities: String?, timeout: Duration = .seconds(10)
        ) async throws -> TokenPublicKey {
            try checkBuilt(url)
            throw DCError(.notInThisBuild, "this build cannot fetch trust (it was built without the TLS trait)")
        }
        /// Throws `notInThisBuild` (exit 69): this build cannot fetch `url`.
        public static func checkBuilt(_ url: TrustURL) throws {
            throw DCError(
                .notInThisBuild, "this build cannot fetch trust (it was built without the TLS trait)",
                subject: url.text, remedy: .buildWithTLSOrUseFiles)
        }
        /// Never called: no value of this type exists.
        public func fetchSoon() {}
        /// Never called: no value of this type exists.
        @discardableResult
        public func fetchOnce() async -> Bool { false }
        /// Never called: no value of this type exists.
        public func run() async {}
    }
#endif
