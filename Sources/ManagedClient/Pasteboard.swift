import CredentialCoding
import DerivedCredentials
import FoundationEssentials
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

extension ManagedClient {
    /// The app's secure pasteboard: text copied inside the app stays sealed in its store.
    public var pasteboard: SecurePasteboard { SecurePasteboard(client: self) }
}

/// Copy and paste of text through the client's store (AppConnect's secure copy): the text is
/// sealed under the store key, so it can be pasted only while secure services are available,
/// and retiring the app erases it with everything else.
public struct SecurePasteboard: Sendable {
    let client: ManagedClient
    var path: String { client.store + "/pasteboard" }
    static let context = "pasteboard"
    /// The most text the pasteboard holds, in UTF-8 bytes.
    public static let maximumLength = 1 << 20

    /// Replaces the pasteboard's text; fails unless secure services are available.
    public func copy(_ text: String) throws {
        let key = try client.secureServicesKey()
        guard text.utf8.count <= Self.maximumLength else {
            throw DCError(.inputTooLarge, "the text is longer than \(Self.maximumLength) bytes", subject: "pasteboard")
        }
        var files = AtomicFileSet(directory: client.store)
        try files.add(
            "pasteboard", .bytes(try AtRest.seal(SecretBytes(Array(text.utf8)), key: key, context: Self.context)),
            mode: 0o600)
        try files.commit(replacingExisting: true)
    }

    /// The pasteboard's text, or nil when nothing was copied; fails unless secure services are available.
    public func paste() throws -> String? {
        let key = try client.secureServicesKey()
        guard let sealed = FileManager.default.contents(atPath: path) else { return nil }
        let text = try AtRest.open(Array(sealed), key: key, context: Self.context)
        return text.withUnsafeBytes { String(decoding: $0, as: UTF8.self) }
    }

    /// Empties the pasteboard; fails unless secure services are available.
    public func clear() throws {
        _ = try client.secureServicesKey()
        unlink(path)
    }
}
