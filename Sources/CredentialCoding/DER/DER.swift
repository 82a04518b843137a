import DerivedCredentials

/// A strict DER checker: OpenSSL accepts BER (indefinite lengths, non-minimal lengths, constructed
/// strings) and trailing bytes; the toolkit does not. Pure Swift, no allocation per node.
package enum DER {
    /// Deep nesting is never legitimate in the structures we read and would exhaust the stack.
    static let maximumDepth = 48

    /// One tag-length-value.
    package struct Node {
        /// The identifier octet (class, constructed bit, tag number < 31).
        package var identifier: UInt8
        /// The whole TLV.
        package var range: Range<Int>
        /// The value.
        package var content: Range<Int>

        package var isConstructed: Bool { identifier & 0x20 != 0 }
    }

    /// Checks that `bytes` is exactly one strictly DER-encoded object, recursively, and returns it.
    /// `what` names the object in errors ("certificate", "PKCS#8 key").
    @discardableResult
    package static func validate(_ bytes: [UInt8], what: String) throws -> Node {
        try bytes.withUnsafeBufferPointer { buffer in
            let node = try readNode(buffer, at: 0, end: buffer.count, what: what)
            if node.range.upperBound != buffer.count {
                throw DCError(
                    .trailingData,
                    "\(buffer.count - node.range.upperBound) trailing bytes after the \(what)",
                    hint: "the file must hold the DER object and nothing else")
            }
            try validateContent(buffer, node, depth: 0, what: what)
            return node
        }
    }

    /// The direct children of a constructed node.
    package static func children(_ bytes: [UInt8], of node: Node) throws -> [Node] {
        try bytes.withUnsafeBufferPointer { buffer in
            var result: [Node] = []
            var offset = node.content.lowerBound
            while offset < node.content.upperBound {
                let child = try readNode(buffer, at: offset, end: node.content.upperBound, what: "object")
                result.append(child)
                offset = child.range.upperBound
            }
            return result
        }
    }

    /// The identifier octets of universal types that DER requires to be primitive.
    private static func mustBePrimitive(_ identifier: UInt8) -> Bool {
        let isUniversal = identifier & 0xC0 == 0
        let number = identifier & 0x1F
        // Universal constructed is allowed only for SEQUENCE (16), SET (17) and EXTERNAL/EMBEDDED PDV.
        return isUniversal && identifier & 0x20 != 0 && ![16, 17, 8, 11].contains(number)
    }

    private static func readNode(
        _ buffer: UnsafeBufferPointer<UInt8>, at start: Int, end: Int, what: String
    ) throws -> Node {
        func truncated() -> DCError {
            DCError(.malformedInput, "the \(what) is truncated or is not DER (at byte \(start))")
        }
        var offset = start
        guard offset < end else { throw truncated() }
        let identifier = buffer[offset]
        offset += 1
        if identifier & 0x1F == 0x1F {
            // High tag numbers do not occur in the structures we read.
            throw DCError(.notDER, "the \(what) uses a high tag number at byte \(start)")
        }
        guard offset < end else { throw truncated() }
        let first = buffer[offset]
        offset += 1
        var length = 0
        if first < 0x80 {
            length = Int(first)
        } else if first == 0x80 {
            throw DCError(
                .notDER, "the \(what) uses an indefinite length (BER, not DER) at byte \(start)",
                hint: "re-encode it as DER")
        } else {
            let count = Int(first & 0x7F)
            guard count <= 4 else {
                throw DCError(.malformedInput, "the \(what) has an oversized length at byte \(start)")
            }
            guard offset + count <= end else { throw truncated() }
            if buffer[offset] == 0 {
                throw DCError(
                    .notDER, "the \(what) has a non-minimal length at byte \(start)", hint: "re-encode it as DER")
            }
            for i in 0..<count { length = length << 8 | Int(buffer[offset + i]) }
            offset += count
            if length < 0x80 {
                throw DCError(
                    .notDER, "the \(what) has a non-minimal length at byte \(start)", hint: "re-encode it as DER")
            }
        }
        guard length <= end - offset else { throw truncated() }
        return Node(identifier: identifier, range: start..<(offset + length), content: offset..<(offset + length))
    }

    private static func validateContent(
        _ buffer: UnsafeBufferPointer<UInt8>, _ node: Node, depth: Int, what: String
    ) throws {
        guard depth < maximumDepth else {
            throw DCError(.malformedInput, "the \(what) is nested too deeply")
        }
        if mustBePrimitive(node.identifier) {
            throw DCError(
                .notDER, "the \(what) uses a constructed string (BER, not DER) at byte \(node.range.lowerBound)",
                hint: "re-encode it as DER")
        }
        if node.isConstructed {
            var offset = node.content.lowerBound
            while offset < node.content.upperBound {
                let child = try readNode(buffer, at: offset, end: node.content.upperBound, what: what)
                try validateContent(buffer, child, depth: depth + 1, what: what)
                offset = child.range.upperBound
            }
            return
        }
        let content = node.content
        switch node.identifier {
        case 0x01:  // BOOLEAN: one octet, 0x00 or 0xFF
            if content.count != 1 || (buffer[content.lowerBound] != 0 && buffer[content.lowerBound] != 0xFF) {
                throw DCError(.notDER, "the \(what) has a non-DER BOOLEAN at byte \(node.range.lowerBound)")
            }
        case 0x02, 0x0A:  // INTEGER, ENUMERATED: minimal two's complement
            guard !content.isEmpty else {
                throw DCError(.malformedInput, "the \(what) has an empty INTEGER at byte \(node.range.lowerBound)")
            }
            if content.count > 1 {
                let b0 = buffer[content.lowerBound]
                let b1 = buffer[content.lowerBound + 1]
                if (b0 == 0x00 && b1 & 0x80 == 0) || (b0 == 0xFF && b1 & 0x80 != 0) {
                    throw DCError(.notDER, "the \(what) has a non-minimal INTEGER at byte \(node.range.lowerBound)")
                }
            }
        default:
            break
        }
    }
}

extension DER {
    /// A DER length field.
    package static func encodeLength(_ length: Int) -> [UInt8] {
        if length < 0x80 { return [UInt8(length)] }
        var bytes: [UInt8] = []
        var value = length
        while value > 0 {
            bytes.insert(UInt8(value & 0xFF), at: 0)
            value >>= 8
        }
        return [0x80 | UInt8(bytes.count)] + bytes
    }

    /// A TLV with the given identifier around `content`.
    package static func wrap(_ identifier: UInt8, _ content: [UInt8]) -> [UInt8] {
        [identifier] + encodeLength(content.count) + content
    }
}

extension DER {
    /// The top-level structures the toolkit reads, told apart by their first fields.
    enum Shape: Equatable {
        case certificate, pkcs12, pkcs8, encryptedPKCS8, rsa, sec1
    }

    /// Which structure `top` (a validated node of `bytes`) is, or nil.
    static func shape(_ bytes: [UInt8], _ top: Node) throws -> Shape? {
        guard top.identifier == 0x30 else { return nil }
        let children = try DER.children(bytes, of: top)
        let ids = children.map(\.identifier)
        let version = children.first.map { Array(bytes[$0.content]) }
        if ids == [0x30, 0x30, 0x03] { return .certificate }
        if ids == [0x30, 0x04] { return .encryptedPKCS8 }
        guard ids.first == 0x02, let version else { return nil }
        if version == [3], ids.count >= 2, ids[1] == 0x30 { return .pkcs12 }
        if ids.count >= 3, ids[1] == 0x30, ids[2] == 0x04, version == [0] || version == [1] { return .pkcs8 }
        if version == [0], ids.count == 9, ids.allSatisfy({ $0 == 0x02 }) { return .rsa }
        if version == [1], ids.count >= 2, ids[1] == 0x04 { return .sec1 }
        return nil
    }
}
