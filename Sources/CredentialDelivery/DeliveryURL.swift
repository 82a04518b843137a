import CredentialCoding
import DerivedCredentials
import Foundation

/// The eight messages of the conversation, as URLs. They are world-readable (a launched
/// handler's argv is in `/proc/PID/cmdline`), so they carry only a version, single-use ids, a
/// time or sequence number, a status, and a digest, MAC or signature — never a secret. Parsing is
/// strict: `scheme:/path` with no authority, the exact parameters in the order written here, each
/// once, from fixed character sets, under a length cap; anything else is refused.
///
/// - `<provider-scheme>:/new?v=2&client=ID&request=HEX32&time=N&sig=HEX128` — the client asks for
///   a credential; signed with the client's message-signing key, which the provider pinned when it
///   paired with the client.
/// - `<client-scheme>:/deliver?v=2&client=ID&request=HEX32&digest=HEX64&seq=N&sig=HEX128` — the
///   sealed payload is in the client's spool as `<request>.cms`, with this SHA-256; signed with the
///   provider's key, which the client pinned; `seq` grows with every delivery to the client.
/// - `<provider-scheme>:/result?v=2&request=HEX32&status=STATUS&mac=HEX64` — the client's
///   answer, authenticated with the key sealed in the payload.
/// - `<provider-scheme>:/available?v=2&client=ID&time=N&sig=HEX128` — the client's secure
///   services became available: queued deliveries may go now; signed like `new`.
/// - `<client-scheme>:/policy?v=2&client=ID&seq=N&state=STATE&autolock=SECONDS&message=B64[&tokenlogin=secure-services]&time=N&sig=HEX128`
///   — the provider's policy for the client (``ClientPolicy``): its authorization state, the
///   message for the user (unpadded base64url, ``PolicyText``), the auto-lock lifetime and, when
///   it is not the passphrase, how programs log in to the PKCS#11 token; signed with the
///   provider's key; `seq` grows with every change.
/// - `<provider-scheme>:/ack?v=2&client=ID&seq=N&of=SUBJECT&policy=STATE&message=B64&time=N&sig=HEX128`
///   — the app's acknowledgement of policy `seq` (`of=auth` or `of=fileio`, ``PolicySubject``):
///   `applied`, `error` or `unsupported` (``PolicyState``), with its message; signed like `new`.
/// - `<client-scheme>:/delegation?v=2&client=ID&id=HEX32&digest=HEX64&time=N&sig=HEX128` — the
///   provider's auth-token delegation with the id `id` is in the client's spool as `<id>.dlg`,
///   with this SHA-256; signed with the provider's key at `time`. A delegation is too long for a
///   URL (and names the user), so only its digest travels in one.
/// - `<provider-scheme>:/jwt?v=2&client=ID&request=HEX32&audience=B64&scope=B64&time=N&sig=HEX128` —
///   the client asks for an identity JWT for the relying party `audience` with `scope` (both
///   printable ASCII, unpadded base64url like a policy message); signed like `new`. The provider
///   answers by writing the JWT to the client's spool as `<request>.jwt`.
///
/// A signature covers ``signingInput(scheme:)``: a fixed context line, then the URL as written
/// without its `&sig=` parameter, so it binds the scheme, the path and every value.
public enum DeliveryMessage: Sendable, Equatable {
    /// A client asks its provider for a credential, under a fresh request id, at `time` (seconds
    /// since 1970), with its Ed25519 `signature` in hex.
    case new(client: String, request: String, time: Int64, signature: String)
    /// A client's secure services became available at `time`; queued deliveries to it may go.
    case available(client: String, time: Int64, signature: String)
    /// A provider tells a client that `<request>.cms` is in its spool, with this SHA-256 in hex,
    /// as its delivery number `sequence` to that client, with its Ed25519 `signature` in hex.
    case deliver(client: String, request: String, digest: String, sequence: UInt64, signature: String)
    /// A client answers a delivery with a status (`ok` or an error name) and its HMAC-SHA-256 in hex.
    case result(request: String, status: String, mac: String)
    /// A provider gives a client its policy, number `policy.sequence`, signed at `time`.
    case policy(client: String, policy: ClientPolicy, time: Int64, signature: String)
    /// An app acknowledges policy number `sequence`: how it handled `subject`, and why.
    case acknowledgement(
        client: String, sequence: UInt64, subject: PolicySubject, state: PolicyState, message: String, time: Int64,
        signature: String)
    /// A provider tells a client that its auth-token delegation `id` is in its spool as `<id>.dlg`,
    /// with this SHA-256 in hex, signed at `time`.
    case delegation(client: String, id: String, digest: String, time: Int64, signature: String)
    /// A client asks for an identity JWT for the relying party `audience` with `scope`, under a
    /// fresh request id, at `time`.
    case identityRequest(
        client: String, request: String, audience: String, scope: String, time: Int64, signature: String)

    /// The protocol version every URL carries as `v=2`; any other is refused.
    public static let version = "2"
    /// The longest URL parsed, in UTF-8 bytes; longer ones are refused before anything else is read.
    public static let maximumLength = 1024
    /// What every signature starts with, so that no signature made for another purpose can pass.
    public static let signingContext = "derived-credentials delivery v2\n"

    /// The URL path without its slash: `new`, `available`, `deliver`, `result`, `policy`, `ack`,
    /// `delegation` or `jwt`.
    public var path: String {
        switch self {
        case .new: "new"
        case .available: "available"
        case .deliver: "deliver"
        case .result: "result"
        case .policy: "policy"
        case .acknowledgement: "ack"
        case .delegation: "delegation"
        case .identityRequest: "jwt"
        }
    }

    var parameters: [(String, String)] {
        switch self {
        case .new(let client, let request, let time, let signature):
            [("v", Self.version), ("client", client), ("request", request), ("time", String(time)), ("sig", signature)]
        case .available(let client, let time, let signature):
            [("v", Self.version), ("client", client), ("time", String(time)), ("sig", signature)]
        case .deliver(let client, let request, let digest, let sequence, let signature):
            [
                ("v", Self.version), ("client", client), ("request", request), ("digest", digest),
                ("seq", String(sequence)), ("sig", signature),
            ]
        case .result(let request, let status, let mac):
            [("v", Self.version), ("request", request), ("status", status), ("mac", mac)]
        case .policy(let client, let policy, let time, let signature):
            [
                ("v", Self.version), ("client", client), ("seq", String(policy.sequence)),
                ("state", policy.state.description), ("autolock", String(policy.autoLock)),
                ("message", PolicyText.encode(policy.message)),
            ]
                // Only when not the default, so that policies without it read as they always did.
                + (policy.tokenLogin == .passphrase ? [] : [("tokenlogin", policy.tokenLogin.rawValue)])
                + [("time", String(time)), ("sig", signature)]
        case .acknowledgement(let client, let sequence, let subject, let state, let message, let time, let signature):
            [
                ("v", Self.version), ("client", client), ("seq", String(sequence)), ("of", subject.rawValue),
                ("policy", state.description), ("message", PolicyText.encode(message)), ("time", String(time)),
                ("sig", signature),
            ]
        case .delegation(let client, let id, let digest, let time, let signature):
            [
                ("v", Self.version), ("client", client), ("id", id), ("digest", digest), ("time", String(time)),
                ("sig", signature),
            ]
        case .identityRequest(let client, let request, let audience, let scope, let time, let signature):
            [
                ("v", Self.version), ("client", client), ("request", request),
                ("audience", PolicyText.encode(audience)), ("scope", PolicyText.encode(scope)),
                ("time", String(time)), ("sig", signature),
            ]
        }
    }

    /// `scheme:/path?k=v&…` (RFC 3986; every value is from an unreserved character set).
    public func url(scheme: String) -> String {
        Self.render(scheme: scheme, path: path, parameters)
    }

    static func render(scheme: String, path: String, _ parameters: [(String, String)]) -> String {
        "\(scheme.lowercased()):/\(path)?" + parameters.map { "\($0.0)=\($0.1)" }.joined(separator: "&")
    }

    /// The bytes a signed message's signature covers: ``signingContext``, then the URL for
    /// `scheme` without its `sig` parameter. Empty for a `result`, which is MAC'd instead.
    public func signingInput(scheme: String) -> [UInt8] {
        guard case .result = self else {
            return Array(
                (Self.signingContext + Self.render(scheme: scheme, path: path, parameters.filter { $0.0 != "sig" }))
                    .utf8)
        }
        return []
    }

    /// The signature a signed message carries, in hex; nil for a `result`.
    public var signature: String? {
        switch self {
        case .new(_, _, _, let signature), .available(_, _, let signature), .deliver(_, _, _, _, let signature),
            .policy(_, _, _, let signature), .acknowledgement(_, _, _, _, _, _, let signature),
            .delegation(_, _, _, _, let signature), .identityRequest(_, _, _, _, _, let signature):
            signature
        case .result: nil
        }
    }

    /// This message signed with `key` for `scheme`: the same values, with the signature replaced.
    /// A `result` is returned unchanged (it is MAC'd, not signed).
    public func signed(with key: MessageSigningKey, scheme: String) throws -> DeliveryMessage {
        let signature = Digests.hex(try key.sign(signingInput(scheme: scheme)))
        switch self {
        case .new(let client, let request, let time, _):
            return .new(client: client, request: request, time: time, signature: signature)
        case .available(let client, let time, _):
            return .available(client: client, time: time, signature: signature)
        case .deliver(let client, let request, let digest, let sequence, _):
            return .deliver(client: client, request: request, digest: digest, sequence: sequence, signature: signature)
        case .policy(let client, let policy, let time, _):
            return .policy(client: client, policy: policy, time: time, signature: signature)
        case .acknowledgement(let client, let sequence, let subject, let state, let message, let time, _):
            return .acknowledgement(
                client: client, sequence: sequence, subject: subject, state: state, message: message, time: time,
                signature: signature)
        case .delegation(let client, let id, let digest, let time, _):
            return .delegation(client: client, id: id, digest: digest, time: time, signature: signature)
        case .identityRequest(let client, let request, let audience, let scope, let time, _):
            return .identityRequest(
                client: client, request: request, audience: audience, scope: scope, time: time, signature: signature)
        case .result:
            return self
        }
    }

    /// Whether the message's signature is `publicKey`'s over ``signingInput(scheme:)``; false for a
    /// `result` and for anything malformed.
    public func isSigned(by publicKey: [UInt8], scheme: String) -> Bool {
        guard let signature, let bytes = Digests.bytes(hex: signature) else { return false }
        return MessageSigningKey.verify(bytes, of: signingInput(scheme: scheme), publicKey: publicKey)
    }

    /// Parses a URL addressed to `scheme`, strictly.
    public static func parse(_ text: String, scheme: String) throws -> DeliveryMessage {
        func refuse(_ why: String) -> DCError {
            DCError(.invalid, "refused URL: \(why)", hint: "URLs are produced by dcprovision and dcclient only")
        }
        guard text.utf8.count <= maximumLength else { throw refuse("longer than \(maximumLength) bytes") }
        guard text.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) else {
            throw refuse("spaces, control or non-ASCII characters")
        }
        let prefix = scheme.lowercased() + ":"
        guard text.lowercased().hasPrefix(prefix) else { throw refuse("not for the scheme \(scheme)") }
        var rest = text.dropFirst(prefix.count)
        // "scheme:/path" only: no authority, not even an empty one ("scheme:///path"), and no
        // rootless path ("scheme:path").
        guard rest.hasPrefix("/") else { throw refuse("a path that does not start with '/'") }
        guard !rest.hasPrefix("//") else { throw refuse("an authority ('//'); write scheme:/path") }
        rest = rest.dropFirst()
        guard let question = rest.firstIndex(of: "?") else { throw refuse("no parameters") }
        let path = String(rest[..<question])
        let query = rest[rest.index(after: question)...]
        guard !query.contains("#") else { throw refuse("a fragment") }
        var values: [String: String] = [:]
        for pair in query.split(separator: "&", omittingEmptySubsequences: false) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.count == 2, !parts[0].isEmpty else { throw refuse("a malformed parameter") }
            guard values.updateValue(String(parts[1]), forKey: String(parts[0])) == nil else {
                throw refuse("parameter '\(parts[0])' given twice")
            }
        }
        func take(_ name: String, _ valid: (String) -> Bool) throws -> String {
            guard let value = values.removeValue(forKey: name) else { throw refuse("missing '\(name)'") }
            guard valid(value) else { throw refuse("invalid '\(name)'") }
            return value
        }
        guard let version = values["v"] else { throw refuse("missing 'v'") }
        guard version == Self.version else {
            // Refused like any other message that cannot be authenticated (exit 77), with a
            // message that says what to update.
            throw DCError(
                .refusedMessage,
                "refused URL: protocol version '\(version.escapingControlCharacters)'; this program speaks version \(Self.version)",
                hint: "update the program that made the URL (dcprovision and dcclient speak the same version)")
        }
        _ = try take("v", { $0 == Self.version })
        let message: DeliveryMessage
        switch path {
        case "new":
            message = .new(
                client: try take("client", isIdentifier), request: try take("request", { isHex($0, 32) }),
                time: Int64(try take("time", isNumber))!, signature: try take("sig", { isHex($0, 128) }))
        case "available":
            message = .available(
                client: try take("client", isIdentifier), time: Int64(try take("time", isNumber))!,
                signature: try take("sig", { isHex($0, 128) }))
        case "deliver":
            message = .deliver(
                client: try take("client", isIdentifier), request: try take("request", { isHex($0, 32) }),
                digest: try take("digest", { isHex($0, 64) }), sequence: UInt64(try take("seq", isNumber))!,
                signature: try take("sig", { isHex($0, 128) }))
        case "result":
            message = .result(
                request: try take("request", { isHex($0, 32) }), status: try take("status", isIdentifier),
                mac: try take("mac", { isHex($0, 64) }))
        case "policy":
            let client = try take("client", isIdentifier)
            let sequence = UInt64(try take("seq", isNumber))!
            let state = AuthState(name: try take("state", { AuthState(name: $0) != nil }))!
            let autoLock = Int(try take("autolock", { isNumber($0) && ClientPolicy.autoLockRange.contains(Int($0)!) }))!
            let text = PolicyText.decode(try take("message", { PolicyText.decode($0) != nil }))!
            let tokenLogin =
                values["tokenlogin"] == nil
                ? TokenLogin.passphrase
                : TokenLogin(rawValue: try take("tokenlogin", { TokenLogin(rawValue: $0) != nil }))!
            message = .policy(
                client: client,
                policy: ClientPolicy(
                    state: state, message: text, autoLock: autoLock, sequence: sequence, tokenLogin: tokenLogin),
                time: Int64(try take("time", isNumber))!, signature: try take("sig", { isHex($0, 128) }))
        case "ack":
            message = .acknowledgement(
                client: try take("client", isIdentifier), sequence: UInt64(try take("seq", isNumber))!,
                subject: PolicySubject(rawValue: try take("of", { PolicySubject(rawValue: $0) != nil }))!,
                state: PolicyState(name: try take("policy", { PolicyState(name: $0) != nil }))!,
                message: PolicyText.decode(try take("message", { PolicyText.decode($0) != nil }))!,
                time: Int64(try take("time", isNumber))!, signature: try take("sig", { isHex($0, 128) }))
        case "delegation":
            message = .delegation(
                client: try take("client", isIdentifier), id: try take("id", { isHex($0, 32) }),
                digest: try take("digest", { isHex($0, 64) }), time: Int64(try take("time", isNumber))!,
                signature: try take("sig", { isHex($0, 128) }))
        case "jwt":
            message = .identityRequest(
                client: try take("client", isIdentifier), request: try take("request", { isHex($0, 32) }),
                audience: PolicyText.decode(try take("audience", isClaimText))!,
                scope: PolicyText.decode(try take("scope", isClaimText))!, time: Int64(try take("time", isNumber))!,
                signature: try take("sig", { isHex($0, 128) }))
        default:
            throw refuse("unknown path '\(path.escapingControlCharacters)'")
        }
        guard values.isEmpty else { throw refuse("unexpected parameter '\(values.keys.sorted()[0])'") }
        // One spelling only: the parameters in the documented order, so that what was signed is
        // exactly what was sent.
        guard message.url(scheme: scheme) == prefix + "/" + String(rest) else {
            throw refuse("parameters out of order")
        }
        return message
    }

    /// Decimal digits, 1–18 of them, no leading zero: a time or a sequence number.
    static func isNumber(_ value: String) -> Bool {
        (1...18).contains(value.count) && !(value.hasPrefix("0") && value.count > 1)
            && value.unicodeScalars.allSatisfy { ("0"..."9").contains($0) }
    }

    /// Unpadded base64url of 1–200 bytes of printable ASCII with no space at either end: an
    /// identity request's audience or scope.
    static func isClaimText(_ value: String) -> Bool {
        guard let text = PolicyText.decode(value) else { return false }
        return !text.isEmpty && text.utf8.count <= 200 && text.utf8.allSatisfy { (32...126).contains($0) }
            && text.utf8.first != 32 && text.utf8.last != 32
    }

    /// Lowercase letters, digits and `-`, 1–64 characters, not starting with `-`.
    public static func isIdentifier(_ value: String) -> Bool {
        (1...64).contains(value.count) && !value.hasPrefix("-")
            && value.unicodeScalars.allSatisfy { ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "-" }
    }

    static func isHex(_ value: String, _ count: Int) -> Bool {
        value.count == count && value.unicodeScalars.allSatisfy { ("0"..."9").contains($0) || ("a"..."f").contains($0) }
    }
}

/// The statuses a client's `result` carries.
public enum ResultStatus {
    /// The credential was installed.
    public static let ok = "ok"
    /// The credential failed the client's validation; nothing was installed.
    public static let invalid = "invalid"
    /// The delivery was older than the installed credential (its sequence number was not above
    /// the installed one's); the client kept what it had.
    public static let stale = "stale"
}
