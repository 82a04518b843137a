import Foundation
import TestSupport
import Testing

/// Every public declaration of the libraries, the tools and the plug-ins has a doc comment, so
/// that the API reference never shows a bare name. Checked over the sources themselves, so that a
/// new declaration cannot arrive undocumented.
///
/// A declaration counts as public when its line starts (after attributes) with `public` or `open`
/// and one of `func`, `var`, `let`, `struct`, `class`, `enum`, `protocol`, `init`, `typealias`,
/// `subscript`, `actor`, `case`, `associatedtype` or `macro`. The cases of a public enum and the
/// requirements of a public protocol count too: they are public without saying so. A member is a
/// line one indentation step (four spaces, which `swift format` enforces) inside the type's body.
/// Documented means a `///` line, or the end of a `/** … */` block, directly above the
/// declaration; attribute lines may stand in between, blank lines and plain comments may not.
@Suite("Every public declaration is documented", .ownThreads, .timeLimit(.minutes(3)))
struct DocumentationRulesTests {
    /// A public declaration without a doc comment: where it is, and its line.
    struct Undocumented: Equatable, CustomStringConvertible {
        var file: String
        var line: Int
        var text: String
        var description: String { "\(file):\(line): \(text)" }
    }

    /// The public declarations of one Swift file: how many there are, and those without a doc comment.
    static func scan(_ text: String, file: String) throws -> (declarations: Int, undocumented: [Undocumented]) {
        let modifiers =
            #"(?:(?:static|class|final|override|nonisolated(?:\(unsafe\))?|mutating|nonmutating|convenience|"#
            + #"required|indirect|lazy|weak|unowned|dynamic|prefix|postfix|infix|"#
            + #"(?:private|fileprivate|internal)\(set\))\s+)*"#
        let attributes = #"(?:@\w+(?:\([^)]*\))?\s+)*"#
        let keyword =
            #"(func|var|let|struct|class|enum|protocol|init|typealias|subscript|actor|case|associatedtype|macro)"#
            + #"\b"#
        let publicDeclaration = try Regex(#"^\s*"# + attributes + #"(?:public|open)\s+"# + modifiers + keyword)
        let enumCase = try Regex(#"^(?:indirect\s+)?case\s"#)
        let requirement = try Regex(
            "^" + attributes + modifiers + #"(?:func|var|init|subscript|associatedtype|typealias)\b"#)

        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map {
            $0.trimmingCharacters(in: .init(charactersIn: "\r"))
        }
        let trimmed = lines.map { $0.trimmingCharacters(in: .whitespaces) }

        /// A `///` line, or the end of a block that opened with `/**`, directly above line `index`,
        /// skipping attribute lines.
        func isDocumented(_ index: Int) -> Bool {
            var above = index - 1
            while above >= 0, trimmed[above].hasPrefix("@") { above -= 1 }
            guard above >= 0 else { return false }
            if trimmed[above].hasPrefix("///") { return true }
            guard trimmed[above].hasSuffix("*/") else { return false }
            var opening = above
            while opening >= 0, !trimmed[opening].contains("/*") { opening -= 1 }
            return opening >= 0 && trimmed[opening].hasPrefix("/**")
        }

        enum Kind { case enumeration, protocolType }
        var bodies: [(indent: Int, kind: Kind)] = []  // the public enums and protocols whose bodies we are in
        var declarations = 0
        var undocumented: [Undocumented] = []
        for (index, line) in lines.enumerated() {
            let indent = line.prefix { $0 == " " }.count
            let content = trimmed[index]
            // A body ends at its closing brace, at the type's own indentation (or at anything less indented).
            while let scope = bodies.last, !content.isEmpty,
                indent < scope.indent || (indent == scope.indent && content.hasPrefix("}"))
            {
                bodies.removeLast()
            }
            var isDeclaration = false
            if let match = line.firstMatch(of: publicDeclaration) {
                isDeclaration = true
                let name = match.output[1].substring.map(String.init)
                let oneLine = content.contains("{") && content.hasSuffix("}")
                if !oneLine, name == "enum" { bodies.append((indent, .enumeration)) }
                if !oneLine, name == "protocol" { bodies.append((indent, .protocolType)) }
            } else if let scope = bodies.last, indent == scope.indent + 4 {
                switch scope.kind {
                case .enumeration: isDeclaration = content.firstMatch(of: enumCase) != nil
                case .protocolType: isDeclaration = content.firstMatch(of: requirement) != nil
                }
            }
            guard isDeclaration else { continue }
            declarations += 1
            if !isDocumented(index) {
                undocumented.append(Undocumented(file: file, line: index + 1, text: String(content.prefix(100))))
            }
        }
        return (declarations, undocumented)
    }

    /// The Swift files under Sources/ and Plugins/, relative to the repository.
    static func sourceFiles() -> [String] {
        (Repository.files(under: "Sources") + Repository.files(under: "Plugins")).filter { $0.hasSuffix(".swift") }
    }

    @Test("Every public declaration in Sources and Plugins has a doc comment")
    func everyPublicDeclarationIsDocumented() throws {
        var declarations = 0
        var undocumented: [Undocumented] = []
        for file in Self.sourceFiles() {
            let text = try Repository.text(file)
            let found = try Self.scan(text, file: file)
            declarations += found.declarations
            undocumented += found.undocumented
        }
        // A scan that finds nothing would pass vacuously: the package has several hundred.
        #expect(
            declarations > 500,
            "only \(declarations) public declarations found; is the scan looking in the right place?")
        let list = undocumented.map(\.description).joined(separator: "\n")
        #expect(undocumented.isEmpty, "\(undocumented.count) public declarations have no doc comment:\n\(list)")
    }

    @Test("The scan finds undocumented declarations, enum cases and protocol requirements")
    func scanFindsWhatItShould() throws {
        let sample = """
            /// Documented.
            public struct A {
                public var bare: Int
                /// Documented, with an attribute in between.
                @inlinable
                public func documented() {}
                @discardableResult
                public static func attributedBare() -> Int { 0 }
                /** A block doc comment. */
                public init() {}
                /* A plain comment is not documentation. */
                public let plain = 1

                public private(set) var separatedByABlankLine = 0
                var internalNeedsNothing = 0
            }

            public enum E: String {
                /// Documented.
                case one
                case two, three

                public var computed: Int {
                    switch self {
                    case .one: 1
                    default: 2
                    }
                }
            }

            enum Internal {
                case ignored
            }

            /// Documented.
            public protocol P {
                /// Documented.
                func documented()
                var bare: Int { get }
            }
            """
        let found = try Self.scan(sample, file: "Sample.swift")
        #expect(found.declarations == 14)
        #expect(found.undocumented.map(\.line) == [3, 8, 12, 14, 18, 21, 23, 39])
    }
}
