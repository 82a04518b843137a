import DerivedCredentials
import Foundation

/// The JSON messages of the exec-provider protocol, version 1 (docs/PROVIDER-PROTOCOL.md).
enum Wire {
    static let version = 1

    struct Descriptor: Codable {
        var id: String
        var displayName: String
        var version: String
        var options: [Option]?
    }

    struct Option: Codable {
        var name: String
        var summary: String
        var repeatable: Bool?
        var required: Bool?
    }

    struct Pair: Decodable {
        var certificate: String
        var privateKey: String
    }

    struct Entry: Decodable {
        var tag: String
        var certificate: String
        var privateKey: String
        var keyHistory: [Pair]?
    }

    struct Credential: Decodable {
        var name: String?
        var serialNumber: String?
        var expirationDate: String?
        var entries: [Entry]
    }

    struct Failure: Decodable {
        var code: String
        var message: String
    }

    /// The answer to `certify`: base64 DER certificates by tag, and the chain above them.
    struct Certification: Decodable {
        var certificates: [String: String]
        var chain: [String]?
    }

    struct Response: Decodable {
        var `protocol`: Int
        var descriptor: Descriptor?
        var credential: Credential?
        var certification: Certification?
        /// The answer to `challenge`: the bytes the card is to sign, base64.
        var challenge: String?
        /// The answer to `recover`: the archived pairs for the subject, newest first.
        var recovered: [Pair]?
        var error: Failure?
    }

    /// The `certify` request's extra fields (all base64 DER; the challenge raw bytes).
    struct CertifyFields: Encodable {
        struct Proof: Encodable {
            var certificate: String
            var challenge: String
            var signature: String
        }
        var subject: String
        var publicKeys: [String: String]
        var proof: Proof
    }

    /// The request, built as bytes so that the passphrase can be wiped afterwards. `subject`
    /// (base64 DER) is the `recover` request's; `certify` carries its own.
    static func request(
        operation: String, options: [String: [String]], passphrase: SecretBytes?, certify: CertifyFields? = nil,
        subject: String? = nil
    ) throws -> SecretBytes {
        struct Head: Encodable {
            var `protocol`: Int
            var operation: String
            var options: [String: [String]]
            var subject: String?
            var publicKeys: [String: String]?
            var proof: CertifyFields.Proof?
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let head = Head(
            protocol: version, operation: operation, options: options, subject: certify?.subject ?? subject,
            publicKeys: certify?.publicKeys,
            proof: certify?.proof)
        var bytes = Array(try encoder.encode(head))
        if let passphrase {
            bytes.removeLast()  // the closing brace
            bytes += Array(#","passphrase":""#.utf8)
            passphrase.base64Encoded().withUnsafeBytes { bytes += $0 }
            bytes += Array(#""}"#.utf8)
        }
        bytes.append(0x0A)
        return SecretBytes(consuming: &bytes)
    }
}
