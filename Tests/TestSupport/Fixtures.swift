import Foundation

/// Key types the fixtures can make with `openssl genpkey`.
public enum KeySpec: String, Sendable, CaseIterable {
    case p256, p384, p521, rsa2048, rsa3072, rsa1024, secp256k1, ed25519

    var genpkeyArguments: [String] {
        switch self {
        case .p256: ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"]
        case .p384: ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384"]
        case .p521: ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-521"]
        case .secp256k1: ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:secp256k1"]
        case .rsa2048: ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"]
        case .rsa3072: ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:3072"]
        case .rsa1024: ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:1024"]
        case .ed25519: ["-algorithm", "ED25519"]
        }
    }

    public var isEC: Bool { [.p256, .p384, .p521, .secp256k1].contains(self) }
}

/// A certificate and key written by the openssl CLI: PEM files, the key in PKCS#8.
public struct IssuedPair: Sendable {
    public var certificate: String
    public var key: String
}

/// A test CA and certificates issued by it, all made by the `openssl` command line tool so that
/// the code under test is checked against an independent implementation. Nothing is committed:
/// every run makes its own keys.
public final class OpenSSLFixtures: Sendable {
    public static let shared: OpenSSLFixtures = {
        do { return try OpenSSLFixtures() } catch { fatalError("cannot create the openssl fixtures: \(error)") }
    }()

    public let directory: TemporaryDirectory
    public let ca: IssuedPair
    /// A second, unrelated CA, for chain failures.
    public let otherCA: IssuedPair
    /// A profile-conforming four-tag credential plus two retired escrow pairs.
    public let authentication: IssuedPair
    public let signing: IssuedPair
    public let encryption: IssuedPair
    public let escrow: IssuedPair
    public let escrowHistory: [IssuedPair]

    /// `openssl`, resolved once.
    public static let openssl: String = (try? which("openssl")) ?? "/usr/bin/openssl"

    init() throws {
        directory = try TemporaryDirectory("dcfixtures")
        directory.removeAtExit()
        ca = try Self.makeCA(name: "ca", subject: "/O=Derived Credentials Test/CN=Test Root CA", in: directory)
        otherCA = try Self.makeCA(name: "other-ca", subject: "/CN=Unrelated CA", in: directory)
        let (caPair, directory) = (ca, directory)
        let issue = { (name: String, key: KeySpec, ku: String, eku: String?) in
            try Self.issue(name: name, key: key, by: caPair, keyUsage: ku, extendedKeyUsage: eku, in: directory)
        }
        authentication = try issue(
            "authentication", .p256, "critical,digitalSignature", "clientAuth,1.3.6.1.4.1.311.20.2.2")
        signing = try issue("signing", .p384, "critical,digitalSignature,nonRepudiation", "emailProtection")
        encryption = try issue("encryption", .rsa2048, "critical,keyEncipherment", "emailProtection")
        // Retired pairs first, the older first, then the current escrow pair: later notBefore (or
        // the same second) and later notAfter each time, so ordering by validity is unambiguous.
        escrowHistory = try [(2, 200), (1, 300)].map { index, days in
            try Self.issue(
                name: "escrow-old\(index)", key: .p256, by: caPair, keyUsage: "critical,keyAgreement",
                extendedKeyUsage: "emailProtection",
                days: days, in: directory)
        }.reversed()
        escrow = try issue("escrow", .p256, "critical,keyAgreement", "emailProtection")
    }

    /// Makes a self-signed CA.
    public static func makeCA(name: String, subject: String, in directory: TemporaryDirectory) throws -> IssuedPair {
        let key = directory.file("\(name).key")
        let certificate = directory.file("\(name).pem")
        try runChecked(openssl, ["genpkey"] + KeySpec.p256.genpkeyArguments + ["-out", key])
        try runChecked(
            openssl,
            [
                "req", "-x509", "-new", "-key", key, "-subj", subject, "-days", "3650", "-sha256",
                "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
                "-out", certificate,
            ])
        return IssuedPair(certificate: certificate, key: key)
    }

    /// Makes a key and a certificate for it, issued by `issuer`, with the given extensions
    /// (openssl extension syntax). `extra` lines are added to the extension file verbatim.
    public static func issue(
        name: String, key keySpec: KeySpec, by issuer: IssuedPair, subject: String? = nil,
        keyUsage: String?, extendedKeyUsage: String?, basicConstraints: String? = "CA:FALSE", extra: [String] = [],
        days: Int = 365, digest: String = "sha256", in directory: TemporaryDirectory
    ) throws -> IssuedPair {
        let key = directory.file("\(name).key")
        let request = directory.file("\(name).csr")
        let certificate = directory.file("\(name).pem")
        let extensions = directory.file("\(name).ext")
        try runChecked(openssl, ["genpkey"] + keySpec.genpkeyArguments + ["-out", key])
        try runChecked(
            openssl,
            [
                "req", "-new", "-key", key, "-subj", subject ?? "/O=Derived Credentials Test/CN=Alice \(name)", "-out",
                request,
            ])
        var lines: [String] = []
        if let basicConstraints { lines.append("basicConstraints=\(basicConstraints)") }
        if let keyUsage { lines.append("keyUsage=\(keyUsage)") }
        if let extendedKeyUsage { lines.append("extendedKeyUsage=\(extendedKeyUsage)") }
        lines += extra
        try (lines.joined(separator: "\n") + "\n").write(toFile: extensions, atomically: false, encoding: .utf8)
        try runChecked(
            openssl,
            [
                "x509", "-req", "-in", request, "-CA", issuer.certificate, "-CAkey", issuer.key, "-set_serial",
                "0x" + (0..<16).map { _ in String(format: "%02x", UInt8.random(in: 0...127)) }.joined(),
                "-days", String(days), "-\(digest)", "-extfile", extensions, "-out", certificate,
            ])
        return IssuedPair(certificate: certificate, key: key)
    }

    /// A CRL of ``ca`` made by `openssl ca -gencrl` (the peer), revoking `revoked` (with
    /// `keyCompromise`), due again in `seconds` (default a week), written to `name` in `directory`.
    /// The CA database lives beside it, one per call.
    public func crl(
        revoking revoked: [IssuedPair], seconds: Int = 7 * 86400, name: String, in directory: TemporaryDirectory
    ) throws -> String {
        let database = directory.file("\(name).db")
        try FileManager.default.createDirectory(atPath: database, withIntermediateDirectories: true)
        try "".write(toFile: database + "/index.txt", atomically: false, encoding: .utf8)
        try "01\n".write(toFile: database + "/crlnumber", atomically: false, encoding: .utf8)
        let configuration = database + "/ca.cnf"
        try """
        [ca]
        default_ca = test
        [test]
        database = \(database)/index.txt
        crlnumber = \(database)/crlnumber
        default_md = sha256
        default_crl_days = 7

        """.write(toFile: configuration, atomically: false, encoding: .utf8)
        let signer = ["-config", configuration, "-keyfile", ca.key, "-cert", ca.certificate]
        for pair in revoked {
            try Self.openssl(["ca"] + signer + ["-revoke", pair.certificate, "-crl_reason", "keyCompromise"])
        }
        let path = directory.file(name)
        try Self.openssl(["ca"] + signer + ["-gencrl", "-crlsec", String(seconds), "-out", path])
        return path
    }

    /// Runs the openssl CLI and returns its standard output.
    @discardableResult
    public static func openssl(_ arguments: [String], stdin: [UInt8]? = nil) throws -> [UInt8] {
        try runChecked(openssl, arguments, stdin: stdin).stdout
    }
}
