/// A tiny DER tree for *crafting* hostile inputs in tests (re-encoding with other lengths, other
/// integers, indefinite lengths). Independent of the strict checker under test.
public indirect enum DERTree: Equatable, Sendable {
    case primitive(UInt8, [UInt8])
    case constructed(UInt8, [DERTree])

    public struct Malformed: Error { public init() {} }

    public init(parsing bytes: [UInt8]) throws {
        var offset = 0
        self = try Self.parse(bytes, &offset)
        guard offset == bytes.count else { throw Malformed() }
    }

    private static func parse(_ bytes: [UInt8], _ offset: inout Int) throws -> DERTree {
        guard offset + 2 <= bytes.count else { throw Malformed() }
        let identifier = bytes[offset]
        var length = Int(bytes[offset + 1])
        offset += 2
        if length & 0x80 != 0 {
            let count = length & 0x7F
            guard count > 0, offset + count <= bytes.count else { throw Malformed() }
            length = bytes[offset..<(offset + count)].reduce(0) { $0 << 8 | Int($1) }
            offset += count
        }
        guard offset + length <= bytes.count else { throw Malformed() }
        let content = Array(bytes[offset..<(offset + length)])
        offset += length
        if identifier & 0x20 != 0 {
            var inner = 0
            var children: [DERTree] = []
            while inner < content.count { children.append(try parse(content, &inner)) }
            return .constructed(identifier, children)
        }
        return .primitive(identifier, content)
    }

    public var encoded: [UInt8] {
        switch self {
        case .primitive(let identifier, let content): [identifier] + Self.length(content.count) + content
        case .constructed(let identifier, let children):
            { (content: [UInt8]) in [identifier] + Self.length(content.count) + content }(children.flatMap(\.encoded))
        }
    }

    /// BER: the outermost length as indefinite (0x80 … 00 00).
    public var indefiniteLengthEncoded: [UInt8] {
        guard case .constructed(let identifier, let children) = self else { return encoded }
        return [identifier, 0x80] + children.flatMap(\.encoded) + [0, 0]
    }

    public static func length(_ count: Int) -> [UInt8] {
        if count < 0x80 { return [UInt8(count)] }
        var bytes: [UInt8] = []
        var value = count
        while value > 0 {
            bytes.insert(UInt8(value & 0xFF), at: 0)
            value >>= 8
        }
        return [0x80 | UInt8(bytes.count)] + bytes
    }

    /// The node at `path` (child indices from the root).
    public subscript(path: [Int]) -> DERTree {
        get {
            guard let first = path.first else { return self }
            guard case .constructed(_, let children) = self else { fatalError("not constructed") }
            return children[first][Array(path.dropFirst())]
        }
        set {
            guard let first = path.first else {
                self = newValue
                return
            }
            guard case .constructed(let identifier, var children) = self else { fatalError("not constructed") }
            children[first][Array(path.dropFirst())] = newValue
            self = .constructed(identifier, children)
        }
    }

    /// An INTEGER holding `value`, minimally encoded.
    public static func integer(_ value: Int) -> DERTree {
        var bytes: [UInt8] = []
        var v = value
        repeat {
            bytes.insert(UInt8(v & 0xFF), at: 0)
            v >>= 8
        } while v > 0
        if bytes[0] & 0x80 != 0 { bytes.insert(0, at: 0) }
        return .primitive(0x02, bytes)
    }
}
