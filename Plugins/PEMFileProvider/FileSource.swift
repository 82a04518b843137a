import DerivedCredentials

/// One input file of the PEM-file provider: a certificate file (PEM, DER or PKCS#12, possibly
/// holding the key too), an optional separate key file, and its tag — or no tag, to be classified.
public struct FileSource: Sendable, Hashable {
    public var tag: CredentialTag?
    public var certificate: String
    public var key: String?

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

    public var files: [String] { [certificate] + (key.map { [$0] } ?? []) }
    public var name: String { files.joined(separator: ",") }
}
