import DerivedCredentials
import Foundation

/// PEM text for DER bytes, 64 columns.
public func pem(_ label: String, _ der: [UInt8]) -> String {
    let base64 = Data(der).base64EncodedString()
    var lines: [String] = []
    var index = base64.startIndex
    while index < base64.endIndex {
        let end = base64.index(index, offsetBy: 64, limitedBy: base64.endIndex) ?? base64.endIndex
        lines.append(String(base64[index..<end]))
        index = end
    }
    return "-----BEGIN \(label)-----\n" + lines.joined(separator: "\n") + "\n-----END \(label)-----\n"
}

public func readBytes(_ path: String) throws -> [UInt8] { [UInt8](try Data(contentsOf: URL(fileURLWithPath: path))) }
public func readText(_ path: String) throws -> String { String(decoding: try readBytes(path), as: UTF8.self) }

/// The passphrase used for every encrypted fixture.
public let fixturePassphrase = "correct horse battery staple"

/// One input the toolkit must refuse, how to make it, and the error code it must give.
public struct HostileInput: Sendable, CustomStringConvertible {
    public var name: String
    /// Writes the input into the directory and returns its path.
    public var make: @Sendable (TemporaryDirectory) throws -> String
    /// The passphrase to offer (nil: no passphrase source).
    public var passphrase: String?
    /// A lower iteration cap for the case, when the point is the cap and not the CPU time.
    public var maximumIterations: Int?
    public var expected: DCError.Code

    public var description: String { name }

    /// Writes a passphrase file for the openssl CLI (`-passin file:`), so no secret is on argv.
    static func passFile(_ directory: TemporaryDirectory, _ text: String = fixturePassphrase) throws -> String {
        try directory.write("pass-\(UUID().uuidString).txt", text + "\n")
    }

    public static func der(of certificate: String) throws -> [UInt8] {
        try OpenSSLFixtures.openssl(["x509", "-in", certificate, "-outform", "DER"])
    }

    public static func pkcs8(of key: String) throws -> [UInt8] {
        try OpenSSLFixtures.openssl(["pkcs8", "-topk8", "-nocrypt", "-in", key, "-outform", "DER"])
    }

    static func pkcs12(_ directory: TemporaryDirectory, _ pair: IssuedPair, extra: [String] = []) throws -> [UInt8] {
        let pass = try passFile(directory)
        return try OpenSSLFixtures.openssl(
            ["pkcs12", "-export", "-inkey", pair.key, "-in", pair.certificate, "-passout", "file:\(pass)"] + extra)
    }

    /// Every hostile input of the conversion engine (issue 2), each with its expected code.
    public static let all: [HostileInput] = {
        let f = OpenSSLFixtures.shared
        func bytes(
            _ name: String, _ expected: DCError.Code, passphrase: String? = nil, maximumIterations: Int? = nil,
            _ make: @escaping @Sendable (TemporaryDirectory) throws -> [UInt8]
        ) -> HostileInput {
            HostileInput(
                name: name,
                make: { dir in try dir.write(name.replacingOccurrences(of: " ", with: "-"), try make(dir)) },
                passphrase: passphrase, maximumIterations: maximumIterations, expected: expected)
        }
        func text(
            _ name: String, _ expected: DCError.Code, _ make: @escaping @Sendable (TemporaryDirectory) throws -> String
        )
            -> HostileInput
        {
            bytes(name, expected) { Array(try make($0).utf8) }
        }
        let certificatePEM: @Sendable () throws -> String = { try readText(f.authentication.certificate) }
        let keyPEM: @Sendable () throws -> String = { try readText(f.authentication.key) }

        return [
            // Trailing bytes and BER.
            bytes("trailing byte after DER certificate", .trailingData) { _ in
                try der(of: f.authentication.certificate) + [0]
            },
            bytes("trailing bytes after PKCS#8 DER", .trailingData) { _ in try pkcs8(of: f.authentication.key) + [0, 0]
            },
            bytes("trailing byte after PKCS#12", .trailingData, passphrase: fixturePassphrase) { dir in
                try pkcs12(dir, f.authentication) + [0]
            },
            text("trailing bytes inside a PEM certificate", .trailingData) { _ in
                pem("CERTIFICATE", try der(of: f.authentication.certificate) + [5, 0])
            },
            bytes("indefinite length certificate", .notDER) { _ in
                try DERTree(parsing: try der(of: f.authentication.certificate)).indefiniteLengthEncoded
            },
            bytes("indefinite length PKCS#8 in PEM", .notDER) { _ in
                Array(
                    pem(
                        "PRIVATE KEY", try DERTree(parsing: try pkcs8(of: f.authentication.key)).indefiniteLengthEncoded
                    ).utf8)
            },
            bytes("non-minimal length certificate", .notDER) { _ in
                // 30 82 LL LL … re-encoded as 30 83 00 LL LL …
                let der = try der(of: f.authentication.certificate)
                return [0x30, 0x83, 0x00] + der[2...]
            },
            bytes("non-minimal short length in PKCS#8", .notDER) { _ in
                // The version INTEGER 02 01 00 with its length in long form: 02 81 01 00.
                var tree = try DERTree(parsing: try pkcs8(of: f.authentication.key))
                guard case .constructed(let id, var children) = tree else { throw DERTree.Malformed() }
                children.removeFirst()
                tree = .constructed(id, children)
                let rest = tree.encoded
                let inner =
                    [0x02, 0x81, 0x01, 0x00] + Array(rest[(rest[1] & 0x80 != 0 ? 2 + Int(rest[1] & 0x7F) : 2)...])
                return [0x30] + DERTree.length(inner.count) + inner
            },
            bytes("non-minimal INTEGER in certificate serial", .notDER) { _ in
                var tree = try DERTree(parsing: try der(of: f.authentication.certificate))
                guard case .primitive(_, let serial) = tree[[0, 1]] else { throw DERTree.Malformed() }
                tree[[0, 1]] = .primitive(0x02, [0x00] + serial)  // serial < 0x80 at the front: 00 is redundant
                return tree.encoded
            },

            // Keys.
            text("two keys in one PEM", .multipleKeys) { _ in try keyPEM() + readText(f.signing.key) },
            // Both are decrypted before the second key is refused: the passphrase is asked once for the file.
            bytes("two encrypted keys in one PEM", .multipleKeys, passphrase: fixturePassphrase) { dir in
                let pass = try passFile(dir)
                return try [f.authentication.key, f.signing.key].flatMap {
                    try OpenSSLFixtures.openssl(["pkcs8", "-topk8", "-in", $0, "-passout", "file:\(pass)"])
                }
            },
            text("key and certificate that do not match in one PEM", .keyCertificateMismatch) { _ in
                try keyPEM() + readText(f.signing.certificate)
            },
            text("EC key with explicit parameters (SEC1)", .unsupportedAlgorithm) { dir in
                String(
                    decoding: try OpenSSLFixtures.openssl(["ec", "-in", f.authentication.key, "-param_enc", "explicit"]
                    ),
                    as: UTF8.self)
            },
            text("EC key with explicit parameters (PKCS#8)", .unsupportedAlgorithm) { dir in
                let sec1 = try dir.write(
                    "explicit-\(UUID().uuidString).pem",
                    try OpenSSLFixtures.openssl(["ec", "-in", f.authentication.key, "-param_enc", "explicit"]))
                return String(
                    decoding: try OpenSSLFixtures.openssl(["pkcs8", "-topk8", "-nocrypt", "-in", sec1]), as: UTF8.self)
            },
            text("Ed25519 key", .unsupportedAlgorithm) { _ in
                String(decoding: try OpenSSLFixtures.openssl(["genpkey", "-algorithm", "ED25519"]), as: UTF8.self)
            },
            text("X448 key", .unsupportedAlgorithm) { _ in
                String(decoding: try OpenSSLFixtures.openssl(["genpkey", "-algorithm", "X448"]), as: UTF8.self)
            },

            // PKCS#12.
            bytes(
                "PKCS#12 whose key does not match its certificate", .keyCertificateMismatch,
                passphrase: fixturePassphrase
            ) { _ in
                try HostilePKCS12.make(
                    keyFiles: [f.authentication.key], certificateFiles: [f.signing.certificate],
                    password: fixturePassphrase)
            },
            bytes("PKCS#12 with two keys", .multipleKeys, passphrase: fixturePassphrase) { _ in
                try HostilePKCS12.make(
                    keyFiles: [f.authentication.key, f.signing.key], certificateFiles: [f.authentication.certificate],
                    password: fixturePassphrase)
            },
            bytes("PKCS#12 without a MAC", .missingMAC, passphrase: fixturePassphrase) { dir in
                try pkcs12(dir, f.authentication, extra: ["-nomac"])
            },
            bytes("PKCS#12 MAC iteration count 2^31-1", .iterationLimitExceeded, passphrase: fixturePassphrase) { dir in
                var tree = try DERTree(parsing: try pkcs12(dir, f.authentication))
                tree[[2, 2]] = DERTree.integer(Int(Int32.max))  // PFX.macData.iterations
                return tree.encoded
            },
            bytes(
                "PKCS#12 key derivation above the cap", .iterationLimitExceeded, passphrase: fixturePassphrase,
                maximumIterations: 4000
            ) { dir in
                try pkcs12(dir, f.authentication, extra: ["-iter", "5000", "-nomaciter"])
            },
            bytes("PKCS#12 with a wrong passphrase", .wrongPassphrase, passphrase: "wrong") { dir in
                try pkcs12(dir, f.authentication)
            },
            bytes("PKCS#12 with no passphrase source", .passphraseRequired) { dir in try pkcs12(dir, f.authentication)
            },

            // Encrypted keys.
            bytes("encrypted PKCS#8 PBKDF2 count 2^31-1", .iterationLimitExceeded, passphrase: fixturePassphrase) {
                dir in
                let pass = try passFile(dir)
                let der = try OpenSSLFixtures.openssl(
                    ["pkcs8", "-topk8", "-in", f.authentication.key, "-passout", "file:\(pass)", "-outform", "DER"])
                var tree = try DERTree(parsing: der)
                tree[[0, 1, 0, 1, 1]] = DERTree.integer(Int(Int32.max))  // algorithm.params.kdf.params.iterations
                return tree.encoded
            },
            text("encrypted PKCS#8 with no passphrase source", .passphraseRequired) { dir in
                let pass = try passFile(dir)
                return String(
                    decoding: try OpenSSLFixtures.openssl([
                        "pkcs8", "-topk8", "-in", f.authentication.key, "-passout", "file:\(pass)",
                    ]),
                    as: UTF8.self)
            },
            HostileInput(
                name: "encrypted PKCS#8 with a wrong passphrase",
                make: { dir in
                    let pass = try passFile(dir)
                    return try dir.write(
                        "enc-wrong.pem",
                        try OpenSSLFixtures.openssl([
                            "pkcs8", "-topk8", "-in", f.authentication.key, "-passout", "file:\(pass)",
                        ]))
                }, passphrase: "wrong", expected: .wrongPassphrase),
            text("legacy encrypted PEM with no passphrase source", .passphraseRequired) { dir in
                let pass = try passFile(dir)
                return String(
                    decoding: try OpenSSLFixtures.openssl([
                        "ec", "-in", f.authentication.key, "-aes256", "-passout", "file:\(pass)",
                    ]),
                    as: UTF8.self)
            },
            HostileInput(
                name: "legacy encrypted PEM with a wrong passphrase",
                make: { dir in
                    let pass = try passFile(dir)
                    return try dir.write(
                        "legacy-wrong.pem",
                        try OpenSSLFixtures.openssl(
                            ["rsa", "-in", f.encryption.key, "-aes256", "-traditional", "-passout", "file:\(pass)"]))
                }, passphrase: "wrong", expected: .wrongPassphrase),

            // PEM framing.
            text("PUBLIC KEY label", .unsupportedFormat) { _ in
                String(
                    decoding: try OpenSSLFixtures.openssl(["pkey", "-in", f.authentication.key, "-pubout"]),
                    as: UTF8.self)
            },
            text("CERTIFICATE REQUEST label", .unsupportedFormat) { _ in
                try readText(f.authentication.certificate.replacingOccurrences(of: ".pem", with: ".csr"))
            },
            text("made-up label", .unsupportedFormat) { _ in
                try certificatePEM().replacingOccurrences(of: "CERTIFICATE", with: "CERTIFICATE PLEASE")
            },
            text("key under a CERTIFICATE label", .malformedInput) { _ in
                pem("CERTIFICATE", try pkcs8(of: f.authentication.key))
            },
            text("broken base64 character", .malformedInput) { _ in
                var lines = try certificatePEM().split(separator: "\n", omittingEmptySubsequences: false).map(
                    String.init)
                lines[3] = "*" + lines[3].dropFirst()
                return lines.joined(separator: "\n")
            },
            text("base64 with a missing character", .malformedInput) { _ in
                var lines = try certificatePEM().split(separator: "\n", omittingEmptySubsequences: false).map(
                    String.init)
                lines[3] = String(lines[3].dropFirst())
                return lines.joined(separator: "\n")
            },
            text("padding in the middle of base64", .malformedInput) { _ in
                var lines = try certificatePEM().split(separator: "\n", omittingEmptySubsequences: false).map(
                    String.init)
                lines[2] = String(lines[2].dropLast(2)) + "=="
                return lines.joined(separator: "\n")
            },
            bytes("NUL byte in a PEM file", .malformedInput) { _ in
                Array("comment\u{0}\n".utf8) + Array(try certificatePEM().utf8)
            },
            text("missing END line", .malformedInput) { _ in
                var lines = try certificatePEM().split(separator: "\n").map(String.init)
                lines.removeLast()
                return lines.joined(separator: "\n") + "\n"
            },
            text("END label that does not match", .malformedInput) { _ in
                try certificatePEM().replacingOccurrences(of: "END CERTIFICATE", with: "END PRIVATE KEY")
            },
            text("BEGIN inside a block", .malformedInput) { _ in
                let cert = try certificatePEM()
                return cert.replacingOccurrences(of: "-----END CERTIFICATE-----\n", with: "") + cert
            },
            text("empty PEM block", .malformedInput) { _ in "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"
            },

            // Not a credential at all.
            bytes("empty file", .unsupportedFormat) { _ in [] },
            bytes("random bytes", .malformedInput) { _ in [0x30, 0x82, 0x10, 0x00, 1, 2, 3] },
            text("plain text", .unsupportedFormat) { _ in "hello, this is not a certificate\n" },
        ]
    }()
}

extension HostileInput {
    /// Keys whose PEM label does not match their structure (OpenSSL's decoders take either).
    public static let labelMismatches: [HostileInput] = {
        let f = OpenSSLFixtures.shared
        return [
            HostileInput(
                name: "PKCS#1 key under a PRIVATE KEY label",
                make: { dir in
                    try dir.write(
                        "pkcs1-as-pkcs8.pem",
                        pem(
                            "PRIVATE KEY",
                            try OpenSSLFixtures.openssl([
                                "rsa", "-in", f.encryption.key, "-traditional", "-outform", "DER",
                            ])))
                }, passphrase: nil, expected: .malformedInput),
            HostileInput(
                name: "PKCS#8 key under an RSA PRIVATE KEY label",
                make: { dir in
                    try dir.write("pkcs8-as-rsa.pem", pem("RSA PRIVATE KEY", try pkcs8(of: f.encryption.key)))
                },
                passphrase: nil, expected: .malformedInput),
            HostileInput(
                name: "SEC1 key under a PRIVATE KEY label",
                make: { dir in
                    try dir.write(
                        "sec1-as-pkcs8.pem",
                        pem(
                            "PRIVATE KEY",
                            try OpenSSLFixtures.openssl(["ec", "-in", f.authentication.key, "-outform", "DER"])))
                }, passphrase: nil, expected: .malformedInput),
        ]
    }()
}
