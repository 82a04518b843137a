import DerivedCredentials

/// One input file of the PEM-file provider: a certificate file (PEM, DER or PKCS#12, possibly
/// holding the key too), an optional separate key file, and its tag — or no tag, to be classified.
public struct FileSource: Sendable, Hashable {
    /// The tag given for the file, or nil to classify it from its key usage.
    public var tag: CredentialTag?
    /// The path of the certificate file (PEM, DER or PKCS#12), which may hold the key too.
    public var certificate: String
    /// The path of a separate private-key file, if any.
    public var key: String?

    /// A source with these paths as given; they are resolved and read later.
    public init(tag: CredentialTag?, certificate: String, key: String? = nil) {
        self.tag = tag
        self.certificate = certificate
        self.key = key
    }

    /// `TAG=CERT[,KEY]` (the `pem` option) or, with `tagged: false`, `CERT[,KEY]` (`classify`).
    public init(argument: String, tagged: Bool = true) throws {
        var rest = argument[...]
        var tag: CredentialTag?
        if tagged {
            guard let equals = argument.firstIndex(of: "="), equals != argument.startIndex else {
                throw DCError(.usage, "expected TAG=CERT[,KEY]", subject: argument)
            }
            let name = argument[..<equals]
            guard let parsed = CredentialTag(wireName: name) else {
                throw DCError(
                    .usage, "unknown tag '\(name)'", subject: argument,
                    hint: "tags are \(CredentialTag.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            tag = parsed
            rest = argument[argument.index(after: equals)...]
        }
        let files = rest.split(separator: ",", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
        guard let certificate = files.first, !certificate.isEmpty, files.count == 1 || !files[1].isEmpty else {
            throw DCError(.usage, tagged ? "expected TAG=CERT[,KEY]" : "expected CERT[,KEY]", subject: argument)
        }
        self.init(tag: tag, certificate: certificate, key: files.count == 2 ? files[1] : nil)
    }

    /// The certificate path, then the key path if there is one.
    public var files: [String] { [certificate] + (key.map { [$0] } ?? []) }
    /// `CERT` or `CERT,KEY`, naming the source in messages.
    public var name: String { files.joined(separator: ",") }
}
