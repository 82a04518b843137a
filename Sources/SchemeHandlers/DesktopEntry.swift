import DerivedCredentials
import FoundationEssentials

/// The parts of a `.desktop` file (Desktop Entry spec) that matter for URL-scheme handlers.
public struct DesktopEntry: Sendable, Equatable {
    /// The desktop file ID, such as `dc-org.example.provider.desktop`.
    public var id: String
    /// The file the entry was read from.
    public var path: String
    /// The `Exec` value as written, field codes and quoting included; see ``arguments(for:)``.
    public var exec: String
    /// The `MimeType` list, such as `x-scheme-handler/org.example.provider`.
    public var mimeTypes: [String]
    /// `Hidden=true`: the entry counts as deleted and is never chosen.
    public var hidden: Bool

    /// Parses the `[Desktop Entry]` group; nil if it is not a usable application entry.
    public init?(id: String, path: String, contents: String) {
        var group = ""
        var values: [String: String] = [:]
        for rawLine in contents.split(separator: "\n", omittingEmptySubsequences: false) {
            let line = rawLine.trimmingWhitespace()
            if line.isEmpty || line.hasPrefix("#") { continue }
            if line.hasPrefix("[") && line.hasSuffix("]") {
                group = String(line.dropFirst().dropLast())
                continue
            }
            guard group == "Desktop Entry", let equals = line.firstIndex(of: "=") else { continue }
            let key = line[..<equals].trimmingWhitespace()
            if values[key] == nil {
                values[key] = line[line.index(after: equals)...].trimmingWhitespace()
            }
        }
        guard values["Type"] == "Application", let exec = values["Exec"], !exec.isEmpty else { return nil }
        self.id = id
        self.path = path
        self.exec = exec
        self.mimeTypes = (values["MimeType"] ?? "").split(separator: ";").map(String.init)
        self.hidden = values["Hidden"] == "true"
    }

    /// The command line for opening `url`, as an argv array (Desktop Entry spec, "The Exec key"):
    /// double-quoted arguments with `\"`, a backslash before a backquote, `\$`, `\\` escapes; `%u`/`%U`/`%f`/`%F` become
    /// the URL as one argument; `%%` is `%`; other field codes are dropped. Never a shell. Read
    /// scalar by scalar, as a desktop reads bytes: a combining mark after a quote, a backslash or a
    /// space does not hide it.
    public func arguments(for url: String) throws -> [String] {
        var arguments: [String] = []
        var current = String.UnicodeScalarView()
        var inArgument = false
        var quoted = false
        var iterator = Array(exec.unicodeScalars).makeIterator()
        var usedURL = false
        while let character = iterator.next() {
            if quoted {
                switch character {
                case "\"": quoted = false
                case "\\":
                    guard let next = iterator.next(), "\"`$\\".unicodeScalars.contains(next) else {
                        throw DCError(
                            .invalid, "invalid escape in Exec", subject: path,
                            hint:
                                "fix or remove the desktop entry; the program that owns the scheme writes it again when it registers"
                        )
                    }
                    current.append(next)
                default: current.append(character)
                }
                continue
            }
            switch character {
            case " ", "\t":
                if inArgument {
                    arguments.append(String(current))
                    current = String.UnicodeScalarView()
                    inArgument = false
                }
            case "\"":
                quoted = true
                inArgument = true
            case "%":
                guard let code = iterator.next() else {
                    throw DCError(
                        .invalid, "a lone % in Exec", subject: path,
                        hint:
                            "fix or remove the desktop entry; the program that owns the scheme writes it again when it registers"
                    )
                }
                switch code {
                case "%":
                    current.append("%")
                    inArgument = true
                case "u", "U", "f", "F":
                    // A field code must be a whole argument.
                    guard !inArgument else {
                        throw DCError(
                            .invalid, "a field code inside an argument in Exec", subject: path,
                            hint:
                                "fix or remove the desktop entry; the program that owns the scheme writes it again when it registers"
                        )
                    }
                    arguments.append(url)
                    usedURL = true
                case "i", "c", "k", "d", "D", "n", "N", "v", "m": break
                default:
                    throw DCError(
                        .invalid, "unknown field code %\(code) in Exec", subject: path,
                        hint:
                            "fix or remove the desktop entry; the program that owns the scheme writes it again when it registers"
                    )
                }
            default:
                current.append(character)
                inArgument = true
            }
        }
        guard !quoted else {
            throw DCError(
                .invalid, "unterminated quote in Exec", subject: path,
                hint:
                    "fix or remove the desktop entry; the program that owns the scheme writes it again when it registers"
            )
        }
        if inArgument { arguments.append(String(current)) }
        guard let program = arguments.first, !program.isEmpty else {
            throw DCError(
                .invalid, "an empty Exec", subject: path,
                hint:
                    "fix or remove the desktop entry; the program that owns the scheme writes it again when it registers"
            )
        }
        guard usedURL else {
            throw DCError(
                .invalid, "the handler's Exec takes no URL (%u)", subject: path,
                hint:
                    "fix or remove the desktop entry; the program that owns the scheme writes it again when it registers"
            )
        }
        return arguments
    }

    /// The executable the entry runs (the first argument of Exec).
    public var executable: String? { try? arguments(for: "x:").first }
}
