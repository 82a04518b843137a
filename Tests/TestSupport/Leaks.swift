import Foundation

/// The forms a secret can take when a program writes it somewhere as text: raw, standard and URL
/// base64 (with and without padding), hexadecimal in either case, and percent-encoded (every byte,
/// or only what a URL query would escape). A leak check that looks only for the raw bytes misses a
/// secret passed on as `--pass=aHVudGVyMg==`; one that searches all of these does not.
public enum SecretEncodings {
    /// Each encoding of `secret`, by name.
    public static func all(of secret: [UInt8]) -> [(name: String, text: String)] {
        let base64 = Data(secret).base64EncodedString()
        let unpadded = String(base64.prefix { $0 != "=" })
        let url = unpadded.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        let hex = secret.map { String($0, radix: 16) }.map { $0.count == 1 ? "0" + $0 : $0 }.joined()
        let raw = String(decoding: secret, as: UTF8.self)
        var query = CharacterSet.urlQueryAllowed
        query.remove(charactersIn: "&=+?/")
        return [
            ("raw", raw), ("base64", base64), ("base64 without padding", unpadded), ("base64url", url),
            ("hex", hex), ("HEX", hex.uppercased()),
            ("percent-encoded", secret.map { "%" + String(format: "%02X", $0) }.joined()),
            ("percent-encoded (lower case)", secret.map { "%" + String(format: "%02x", $0) }.joined()),
            ("URL-query-encoded", raw.addingPercentEncoding(withAllowedCharacters: query) ?? raw),
        ]
    }

    /// The names of the encodings of `secret` found in `haystack` (none when it is clean).
    public static func found(_ secret: [UInt8], in haystack: [UInt8]) -> [String] {
        let text = String(decoding: haystack, as: UTF8.self)
        return all(of: secret).filter { text.contains($0.text) }.map(\.name)
    }

    /// ``found(_:in:)`` for text.
    public static func found(_ secret: [UInt8], in text: String) -> [String] { found(secret, in: Array(text.utf8)) }
}
