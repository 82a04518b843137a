import DerivedCredentials
import FoundationEssentials

/// A strict reading of a PEM file (RFC 7468, plus the RFC 1421 headers of legacy encrypted keys).
///
/// Text outside blocks is allowed (OpenSSL writes `Bag Attributes` preambles there, and people
/// write comments); inside a block everything must be exact: a matching END line, base64 in the
/// strict alphabet with padding only at the end, no NUL byte anywhere in the file. Lines may end in
/// LF or CRLF.
struct PEMDocument {
    struct Block {
        var label: String
        /// RFC 1421 headers such as `Proc-Type` and `DEK-Info`, in order.
        var headers: [(name: String, value: String)]
        var der: [UInt8]
        /// 1-based line of the BEGIN line, for error messages.
        var line: Int

        func header(_ name: String) -> String? {
            headers.first { $0.name.lowercased() == name.lowercased() }?.value
        }
    }

    var blocks: [Block]

    /// Whether the bytes look like PEM at all (a BEGIN line somewhere near the start).
    static func looksLikePEM(_ bytes: [UInt8]) -> Bool {
        let marker = Array("-----BEGIN ".utf8)
        let window = bytes.prefix(64 * 1024)
        guard window.count >= marker.count else { return false }
        var i = window.startIndex
        while i + marker.count <= window.endIndex {
            if window[i] == marker[0] && Array(window[i..<(i + marker.count)]) == marker { return true }
            i += 1
        }
        return false
    }

    init(parsing bytes: [UInt8]) throws {
        if let nul = bytes.firstIndex(of: 0) {
            throw DCError(.malformedInput, "NUL byte at offset \(nul) in a PEM file")
        }
        var blocks: [Block] = []
        var open: (label: String, line: Int, headers: [(String, String)], body: [UInt8], inHeaders: Bool)?
        var lineNumber = 0
        for rawLine in bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
            lineNumber += 1
            var line = rawLine[...]
            if line.last == UInt8(ascii: "\r") { line = line.dropLast() }
            // Trailing spaces and tabs are tolerated; anything else is significant.
            while let last = line.last, last == 0x20 || last == 0x09 { line = line.dropLast() }

            if var block = open {
                if let label = Self.delimiter(line, kind: "END") {
                    guard label == block.label else {
                        throw DCError(
                            .malformedInput,
                            "line \(lineNumber): END \(label.escapingControlCharacters) does not match BEGIN \(block.label) on line \(block.line)"
                        )
                    }
                    guard !block.body.isEmpty else {
                        throw DCError(.malformedInput, "line \(block.line): the \(block.label) block is empty")
                    }
                    guard let der = Self.decodeBase64(block.body) else {
                        throw DCError(
                            .malformedInput,
                            "the \(block.label) block starting on line \(block.line) is not valid base64")
                    }
                    blocks.append(
                        Block(
                            label: block.label, headers: block.headers.map { (name: $0.0, value: $0.1) }, der: der,
                            line: block.line))
                    open = nil
                    continue
                }
                if Self.delimiter(line, kind: "BEGIN") != nil {
                    throw DCError(
                        .malformedInput,
                        "line \(lineNumber): BEGIN inside the \(block.label) block of line \(block.line); its END line is missing"
                    )
                }
                if block.inHeaders {
                    if line.isEmpty {
                        if !block.headers.isEmpty {
                            block.inHeaders = false
                            open = block
                            continue
                        }
                        throw DCError(.malformedInput, "line \(lineNumber): blank line inside the \(block.label) block")
                    }
                    if let colon = line.firstIndex(of: UInt8(ascii: ":")), block.body.isEmpty {
                        let name = String(decoding: line[line.startIndex..<colon], as: UTF8.self)
                        let value = String(decoding: line[(colon + 1)...], as: UTF8.self)
                            .trimmingWhitespace()
                        block.headers.append((name, value))
                        open = block
                        continue
                    }
                    if !block.headers.isEmpty {
                        throw DCError(.malformedInput, "line \(lineNumber): the PEM headers must end with a blank line")
                    }
                    block.inHeaders = false
                }
                guard !line.isEmpty else {
                    throw DCError(.malformedInput, "line \(lineNumber): blank line inside the \(block.label) block")
                }
                for byte in line where !Self.isBase64(byte) {
                    throw DCError(
                        .malformedInput,
                        "line \(lineNumber): character 0x\(String(byte, radix: 16)) is not base64 in the \(block.label) block"
                    )
                }
                block.body.append(contentsOf: line)
                open = block
                continue
            }

            if let label = Self.delimiter(line, kind: "BEGIN") {
                open = (label, lineNumber, [], [], true)
            } else if let label = Self.delimiter(line, kind: "END") {
                throw DCError(
                    .malformedInput, "line \(lineNumber): END \(label.escapingControlCharacters) without a BEGIN")
            }
        }
        if let block = open {
            throw DCError(
                .malformedInput, "the \(block.label) block starting on line \(block.line) has no END line",
                hint: "the file may be truncated")
        }
        self.blocks = blocks
    }

    /// `-----BEGIN LABEL-----` → `LABEL`. Labels are printable ASCII without hyphens at the ends.
    private static func delimiter(_ line: ArraySlice<UInt8>, kind: String) -> String? {
        let prefix = Array("-----\(kind) ".utf8)
        let suffix = Array("-----".utf8)
        guard line.count > prefix.count + suffix.count,
            line.starts(with: prefix),
            Array(line.suffix(suffix.count)) == suffix
        else { return nil }
        let label = line.dropFirst(prefix.count).dropLast(suffix.count)
        guard label.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) else { return nil }
        return String(decoding: label, as: UTF8.self)
    }

    private static func isBase64(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "+"), UInt8(ascii: "/"), UInt8(ascii: "="):
            true
        default: false
        }
    }

    /// Strict base64: length a multiple of four, padding only at the very end.
    private static func decodeBase64(_ body: [UInt8]) -> [UInt8]? {
        guard body.count % 4 == 0 else { return nil }
        if let firstPad = body.firstIndex(of: UInt8(ascii: "=")) {
            guard body.count - firstPad <= 2, body[firstPad...].allSatisfy({ $0 == UInt8(ascii: "=") }) else {
                return nil
            }
        }
        guard let data = Data(base64Encoded: Data(body)) else { return nil }
        return [UInt8](data)
    }
}

extension PEMDocument {
    /// RFC 7468 text for DER bytes: 64-column base64 between BEGIN and END lines.
    static func encode(label: String, der: UnsafeRawBufferPointer) -> [UInt8] {
        let base64 = Array(Data(der).base64EncodedData(options: [.lineLength64Characters, .endLineWithLineFeed]))
        return Array("-----BEGIN \(label)-----\n".utf8) + base64 + Array("\n-----END \(label)-----\n".utf8)
    }
}

/// PEM output for certificates and keys.
public enum PEM {
    /// The certificate as one `CERTIFICATE` block, base64 in 64 columns, ending in a newline.
    public static func certificate(_ certificate: Certificate) -> [UInt8] {
        certificate.derBytes.withUnsafeBytes { PEMDocument.encode(label: "CERTIFICATE", der: $0) }
    }

    /// The key as an unencrypted `PRIVATE KEY` block, held as a secret.
    public static func privateKey(_ key: PrivateKey) -> SecretBytes {
        var text = key.withPKCS8DER { PEMDocument.encode(label: "PRIVATE KEY", der: $0) }
        return SecretBytes(consuming: &text)
    }
}
