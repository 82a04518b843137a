/// The toolkit's version: what `dcprovision --version` and `dcclient --version` print.
public enum Toolkit {
    /// The release, as semantic versioning.
    public static let version = "0.1.0"

    /// The exit statuses of both tools (sysexits), for their `--help`; docs/CLI.md says more.
    public static let exitStatuses = """
        Exit status: 0 ok, 64 usage, 65 bad input data or failed validation, 66 input missing, \
        69 unavailable (a client missing, old, locked or not confirming; no provider registered; a \
        provider failing), 70 internal error, 73 cannot create output, 74 I/O error, 75 revocation \
        status could not be checked, 77 passphrase, PIN, permission or message refused (forged, \
        altered, replayed, late), 79 a certificate is revoked, 80 the installed credential is expired or \
        not valid yet. Every flag and status: \(documentation)/docs/CLI.md.
        """

    /// Where `scripts/install` puts the documentation (README.md and docs/, as in the source), with
    /// `PREFIX` for the install prefix: the man pages it installs name the real one.
    public static let documentation = "PREFIX/share/doc/dcclient"
}

/// Flag names that were renamed, kept working for one release as hidden aliases.
///
/// swift-argument-parser gives a flag several names only with all of them shown in `--help`, and
/// a second, hidden `@Option` would make a required option optional in the parser, the usage
/// line, the man page and the completions. So the old names are rewritten to the new ones before
/// parsing, silently, from one table per tool: help, errors, man pages and completions know only
/// the new names. docs/CLI.md lists the table.
public struct FormerNames: Sendable {
    /// For each command path (subcommand names separated by spaces, such as `testca issue`): each
    /// old long name (without `--`) and the name it became.
    public let renamed: [String: [String: String]]

    /// A table of renamed flags by command path.
    public init(_ renamed: [String: [String: String]]) {
        self.renamed = renamed
    }

    /// `arguments` (without the program name) with every old flag name of the command they call
    /// replaced by its new name, as `--old VALUE` or `--old=VALUE`. Nothing after `--` is touched.
    public func rewrite(_ arguments: [String]) -> [String] {
        let match = renamed.keys.map { ($0, $0.split(separator: " ").map(String.init)) }
            .filter { arguments.starts(with: $0.1) }
            .max { $0.1.count < $1.1.count }
        guard let (path, words) = match, let table = renamed[path] else { return arguments }
        var rewritten = Array(arguments.prefix(words.count))
        var rest = arguments.dropFirst(words.count)
        while let argument = rest.popFirst() {
            if argument == "--" {
                rewritten += [argument] + rest
                break
            }
            guard argument.hasPrefix("--") else {
                rewritten.append(argument)
                continue
            }
            let name = argument.dropFirst(2).prefix { $0 != "=" }
            guard let new = table[String(name)] else {
                rewritten.append(argument)
                continue
            }
            rewritten.append("--" + new + argument.dropFirst(2 + name.count))
        }
        return rewritten
    }
}
