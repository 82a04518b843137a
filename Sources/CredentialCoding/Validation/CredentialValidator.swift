import DerivedCredentials
import FoundationEssentials

/// Checks credential entries against the FPKI derived-PIV certificate profiles and
/// returns every finding. A profile violation is an error; advisories are warnings.
///
/// Finding codes are stable: `key-mismatch`, `key-usage-missing`, `key-usage-insufficient`,
/// `key-usage-extra`, `key-usage-ca`, `eku-mismatch`, `ca-certificate`,
/// `unknown-critical-extension`, `weak-rsa-key`, `unsupported-curve`, `unsupported-key-algorithm`,
/// `weak-signature`, `not-yet-valid`, `expired`, `expires-soon`, `chain-untrusted`,
/// `unreadable`, `credential-outlives-certificate`, `credential-expired`, and with a ``revocation`` policy `revoked`
/// (error), `revocation-unknown` (error, or a warning when the policy allows unchecked status)
/// and `revocation-good` (info).
public struct CredentialValidator: Sendable {
    /// Trust anchors for the chain check; no chain check when empty.
    public var trustAnchors: [Certificate]
    /// Untrusted intermediates that may complete a chain.
    public var intermediates: [Certificate]
    /// The time to validate at.
    public var now: Date
    /// Certificates that expire within this interval get an `expires-soon` warning.
    public var expiryWarningInterval: TimeInterval
    /// How to check revocation of each entry's current certificate (not the key history), its
    /// issuer found among ``intermediates`` and ``trustAnchors``; nil checks nothing.
    public var revocation: RevocationPolicy?

    /// A validator with these settings; by default no chain check, the current time and a 30-day expiry warning.
    public init(
        trustAnchors: [Certificate] = [], intermediates: [Certificate] = [], now: Date = Date(),
        expiryWarningInterval: TimeInterval = 30 * 24 * 3600, revocation: RevocationPolicy? = nil
    ) {
        self.revocation = revocation
        self.trustAnchors = trustAnchors
        self.intermediates = intermediates
        self.now = now
        self.expiryWarningInterval = expiryWarningInterval
    }

    /// Every finding for the credential's entries, plus a `credential-outlives-certificate` warning for
    /// each non-escrow entry whose certificate expires before the credential does, and a
    /// `credential-expired` error when the credential's own expiration date is not after ``now``:
    /// such a credential may be neither sent nor installed, since it could only be refused at
    /// every use. Never throws.
    public func validate(_ credential: Credential) -> Verdict {
        var verdict = validate(entries: credential.entries)
        if credential.expirationDate <= now {
            verdict.append(
                Finding(
                    "credential-expired", .error, tag: nil,
                    "the credential's expiration date (\(credential.expirationDate.formatted(.iso8601))) has passed"))
        }
        for entry in credential.entries where entry.tag != .escrow {
            if let notAfter = try? X509Certificate(entry.certificate).notAfter, credential.expirationDate > notAfter {
                verdict.append(
                    Finding(
                        "credential-outlives-certificate", .warning, tag: entry.tag,
                        "the credential's expiration date is after the certificate's notAfter"))
            }
        }
        return verdict
    }

    /// Every finding for `entries`, each current pair and each key-history pair checked on its own.
    public func validate(entries: [CredentialEntry]) -> Verdict {
        let anchors = trustAnchors.compactMap { try? X509Certificate($0) }
        let helpers = intermediates.compactMap { try? X509Certificate($0) }
        var verdict = Verdict()
        for entry in entries {
            verdict.findings += check(
                entry.certifiedKey, tag: entry.tag, historyIndex: nil, anchors: anchors, helpers: helpers)
            for (index, pair) in entry.keyHistory.enumerated() {
                verdict.findings += check(pair, tag: entry.tag, historyIndex: index, anchors: anchors, helpers: helpers)
            }
        }
        return verdict
    }

    // MARK: - One pair

    private func check(
        _ pair: CertifiedKey, tag: CredentialTag, historyIndex: Int?, anchors: [X509Certificate],
        helpers: [X509Certificate]
    ) -> [Finding] {
        var findings: [Finding] = []
        func add(_ code: String, _ severity: Finding.Severity, _ message: String) {
            findings.append(Finding(Finding.Code(code), severity, tag: tag, historyIndex: historyIndex, message))
        }
        let x509: X509Certificate
        do {
            x509 = try X509Certificate(pair.certificate)
        } catch {
            add("unreadable", .error, "the certificate cannot be read: \(error)")
            return findings
        }

        // The key belongs to the certificate.
        let keySPKI = PKey.from(pair.privateKey).flatMap {
            try? $0.subjectPublicKeyInfo()
        }
        if keySPKI == nil {
            add("unreadable", .error, "the private key cannot be read as PKCS#8")
        } else if keySPKI != (try? x509.subjectPublicKeyInfo()) {
            add("key-mismatch", .error, "the private key does not match the certificate's public key")
        }

        checkKeyUsage(x509, tag: tag, add: add)
        checkExtendedKeyUsage(x509, tag: tag, add: add)

        if x509.isCA == true {
            add("ca-certificate", .error, "basicConstraints says CA:TRUE; an end-entity certificate must not be a CA")
        }
        for ext in x509.extensions where ext.critical && !ext.supported {
            add("unknown-critical-extension", .error, "critical extension \(ext.name) is not understood")
        }

        let profile = TagProfile.of(tag)
        switch x509.publicKey?.kind {
        case .rsa(let bits) where bits < profile.minimumRSABits:
            add("weak-rsa-key", .error, "RSA key of \(bits) bits; at least \(profile.minimumRSABits) are required")
        case .ec(let curve, _) where !profile.curves.contains(curve ?? ""):
            add(
                "unsupported-curve", .error,
                "EC curve \(curve ?? "with explicit parameters") is not P-256, P-384 or P-521")
        case .other(let name):
            add("unsupported-key-algorithm", .error, "key algorithm \(name) is not RSA or EC")
        case nil:
            add("unreadable", .error, "the certificate's public key cannot be read")
        default:
            break
        }

        let signature = x509.signature
        if [CredentialValidator.sha1, CredentialValidator.md5].contains(signature.digestNID) {
            add("weak-signature", .error, "signed with \(signature.name); SHA-1 and MD5 signatures are not accepted")
        }

        checkValidity(x509, tag: tag, add: add)
        if historyIndex == nil, let revocation { checkRevocation(pair.certificate, x509, policy: revocation, add: add) }

        if !anchors.isEmpty,
            let reason = x509.verifyChain(anchors: anchors, intermediates: helpers, at: now, checkTime: tag != .escrow)
        {
            add("chain-untrusted", .error, "does not chain to a trust anchor: \(reason)")
        }
        return findings
    }

    private func checkKeyUsage(
        _ x509: X509Certificate, tag: CredentialTag, add: (String, Finding.Severity, String) -> Void
    ) {
        guard let usage = x509.keyUsage else {
            add("key-usage-missing", .error, "no keyUsage extension; the \(tag) profile requires one")
            return
        }
        let profile = TagProfile.of(tag)
        var isEC = false
        if case .ec = x509.publicKey?.kind { isEC = true }
        let required = profile.requiredKeyUsage(ec: isEC)
        let missing = required.subtracting(usage)
        if !missing.isEmpty {
            add(
                "key-usage-insufficient", .error,
                "keyUsage lacks \(missing.names.joined(separator: ", ")) required for \(tag)")
        }
        let caBits = usage.intersection(TagProfile.caKeyUsage)
        if !caBits.isEmpty {
            add(
                "key-usage-ca", .error,
                "keyUsage has \(caBits.names.joined(separator: ", ")), which only CAs may have")
        }
        let extra = usage.subtracting(required).subtracting(caBits)
        if !extra.isEmpty {
            add(
                "key-usage-extra", .warning,
                "keyUsage also has \(extra.names.joined(separator: ", ")), beyond the \(tag) profile")
        }
    }

    private func checkExtendedKeyUsage(
        _ x509: X509Certificate, tag: CredentialTag, add: (String, Finding.Severity, String) -> Void
    ) {
        guard let usages = x509.extendedKeyUsage else { return }
        if TagProfile.of(tag).allowedExtendedKeyUsage.isDisjoint(with: usages) {
            add(
                "eku-mismatch", .error,
                "extendedKeyUsage (\(usages.map(\.rawValue).joined(separator: ", "))) has none of the purposes the \(tag) profile allows"
            )
        }
    }

    private func checkRevocation(
        _ certificate: Certificate, _ x509: X509Certificate, policy: RevocationPolicy,
        add: (String, Finding.Severity, String) -> Void
    ) {
        // CRLs drop certificates once they expire; an expired one is refused (or allowed, for
        // escrow) on its dates alone.
        if let notAfter = x509.notAfter, notAfter < now {
            add("revocation-unknown", .info, "not checked: the certificate has expired")
            return
        }
        let status = policy.status(of: certificate, issuers: intermediates + trustAnchors, at: now)
        switch status {
        case .good: add("revocation-good", .info, "\(status)")
        case .revoked: add("revoked", .error, "\(status)")
        case .unknown(let why):
            add(
                "revocation-unknown", policy.allowsUnchecked ? .warning : .error,
                "revocation status unknown: \(why)" + (policy.allowsUnchecked ? " (allowed)" : ""))
        }
    }

    private func checkValidity(
        _ x509: X509Certificate, tag: CredentialTag, add: (String, Finding.Severity, String) -> Void
    ) {
        if let notBefore = x509.notBefore, notBefore > now {
            add("not-yet-valid", .error, "not valid before \(notBefore.formatted(.iso8601))")
        }
        guard let notAfter = x509.notAfter else { return }
        if notAfter < now {
            // Escrowed keys exist to decrypt old mail: an expired escrow certificate is expected.
            if tag == .escrow {
                add("expired", .info, "expired \(notAfter.formatted(.iso8601)) (allowed for escrow)")
            } else {
                add("expired", .error, "expired \(notAfter.formatted(.iso8601))")
            }
        } else if tag != .escrow && notAfter.timeIntervalSince(now) < expiryWarningInterval {
            add("expires-soon", .warning, "expires \(notAfter.formatted(.iso8601))")
        }
    }
}

extension Verdict {
    /// The error a failed verdict should end a command with when revocation decided it:
    /// `DCError/Code/certificateRevoked` when a certificate is revoked, else
    /// `DCError/Code/revocationUnchecked` when a required status is unknown; nil otherwise (the
    /// caller's own validation error applies).
    public var revocationFailure: DCError? {
        if let revoked = errors.first(where: { $0.code == "revoked" }) {
            return DCError(.certificateRevoked, revoked.description)
        }
        if let unknown = errors.first(where: { $0.code == "revocation-unknown" }) {
            return DCError(.revocationUnchecked, unknown.description)
        }
        return nil
    }
}
