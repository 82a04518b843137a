import Foundation

/// A hermetic SoftHSM2 token directory for the test process, standing in for smart cards. The
/// tokens are prepared by the independent tools (`softhsm2-util`, `pkcs11-tool`), never by the
/// code under test. `SOFTHSM2_CONF` is set for the whole process before any module is loaded
/// (SoftHSM reads it at `C_Initialize`), and inherited by child processes.
public final class SoftHSM: Sendable {
    public static let shared: SoftHSM = {
        do { return try SoftHSM() } catch { fatalError("cannot prepare SoftHSM: \(error)") }
    }()

    public static let module = "/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so"
    public static let userPIN = "123456"
    public let directory: TemporaryDirectory
    public let configuration: String
    /// A PIV-like card: ids 01 (authentication), 02 (signing), 03 (key management), 05 (retired key
    /// management), certificates and sensitive, non-extractable private keys written by pkcs11-tool.
    public let pivCard = "PIV Card"
    public let pivPairs: [(id: String, label: String, pair: IssuedPair)]
    /// A token only the PIN-safety tests use: wrong PINs make SoftHSM rewrite a token's files, which
    /// other processes reading the same token at that moment may not see whole.
    public let pinCard = "PIN Card"
    /// A token whose keys may leave it: id 01 not sensitive (P-256), id 02 sensitive but
    /// extractable (P-384), id 03 not sensitive (RSA 2048), ids 05 and 06 retired key management
    /// (P-256, not sensitive; 06 the newer), with their certificates.
    public let exportCard = "Export Card"

    init() throws {
        directory = try TemporaryDirectory("softhsm")
        directory.removeAtExit()
        try FileManager.default.createDirectory(atPath: directory.file("tokens"), withIntermediateDirectories: true)
        configuration = try directory.write(
            "softhsm2.conf",
            "directories.tokendir = \(directory.file("tokens"))\nobjectstore.backend = file\nlog.level = ERROR\n")
        setenv("SOFTHSM2_CONF", configuration, 1)
        let f = OpenSSLFixtures.shared
        pivPairs = [
            ("01", "Certificate for PIV Authentication", f.authentication),
            ("02", "Certificate for Digital Signature", f.signing),
            ("03", "Certificate for Key Management", f.escrow),
            ("05", "Retired Certificate for Key Management 1", f.escrowHistory[0]),
        ]
        try runChecked(
            "softhsm2-util",
            ["--init-token", "--free", "--label", pivCard, "--so-pin", "12345678", "--pin", Self.userPIN])
        for (id, label, pair) in pivPairs {
            try writeCertificate(pair, token: pivCard, id: UInt8(id, radix: 16)!, label: label)
            try Self.pkcs11Tool([
                "--token-label", pivCard, "--login", "--pin", Self.userPIN, "--write-object", pair.key, "--type",
                "privkey", "--id", id, "--label", "Private key \(id)",
            ])
        }
        try runChecked(
            "softhsm2-util",
            ["--init-token", "--free", "--label", pinCard, "--so-pin", "12345678", "--pin", Self.userPIN])
        try Self.pkcs11Tool([
            "--token-label", pinCard, "--login", "--pin", Self.userPIN, "--write-object", f.authentication.key,
            "--type", "privkey", "--id", "01", "--label", "PIN card key",
        ])
        try runChecked(
            "softhsm2-util",
            ["--init-token", "--free", "--label", exportCard, "--so-pin", "12345678", "--pin", Self.userPIN])
        for (id, pair, sensitive) in [(UInt8(1), f.authentication, false), (UInt8(2), f.signing, true)] {
            try writeCertificate(pair, token: exportCard, id: id, label: "Certificate \(id)")
            try SoftHSMKeys.createECKey(
                token: exportCard, pin: Self.userPIN, id: id, keyFile: pair.key, sensitive: sensitive)
        }
        try writeCertificate(f.encryption, token: exportCard, id: 3, label: "Certificate 3")
        try SoftHSMKeys.createRSAKey(
            token: exportCard, pin: Self.userPIN, id: 3, keyFile: f.encryption.key, sensitive: false)
        // Retired key management (PIV 82, 83 → OpenSC 05, 06): the older pair in the lower slot, so
        // that only the validity can order the escrow history.
        for (id, pair) in [(UInt8(5), f.escrowHistory[1]), (UInt8(6), f.escrowHistory[0])] {
            try writeCertificate(pair, token: exportCard, id: id, label: "Retired \(id)")
            try SoftHSMKeys.createECKey(
                token: exportCard, pin: Self.userPIN, id: id, keyFile: pair.key, sensitive: false)
        }
    }

    /// Writes `pair`'s certificate (DER) to `token` with pkcs11-tool.
    private func writeCertificate(_ pair: IssuedPair, token: String, id: UInt8, label: String) throws {
        let der = try directory.write("\(token)-\(id).der", try HostileInput.der(of: pair.certificate))
        try Self.pkcs11Tool([
            "--token-label", token, "--login", "--pin", Self.userPIN, "--write-object", der, "--type", "cert",
            "--id", String(format: "%02x", id), "--label", label,
        ])
    }

    @discardableResult
    public static func pkcs11Tool(_ arguments: [String]) throws -> ProcessResult {
        try runChecked("pkcs11-tool", ["--module", module] + arguments)
    }
}
