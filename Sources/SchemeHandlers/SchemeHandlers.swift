import DerivedCredentials
import FoundationEssentials
import SystemSupport

#if canImport(Glibc)
    import Glibc
#endif

/// Registers, resolves and launches URL-scheme handlers the freedesktop way (`x-scheme-handler/…`
/// MIME types in `.desktop` files, defaults in `mimeapps.list`), headless and without xdg-utils:
/// Debian's `xdg-open` ignores scheme handlers without `DISPLAY` and misreads schemes with digits.
public struct SchemeHandlers: Sendable {
    /// Where handlers are installed, defaults written and lookups made.
    public var directories: XDGDirectories

    /// Handlers in `directories`; the process's own XDG directories by default.
    public init(directories: XDGDirectories = XDGDirectories()) {
        self.directories = directories
    }

    /// Checks a display name (a brand) for a desktop entry's `Name`, a Desktop Entry spec
    /// `localestring`: one line of UTF-8 text, so no control character (C0, DEL, C1), no line or
    /// paragraph separator, not empty, and no space at either end (readers trim it). A usage error
    /// naming `what` otherwise.
    public static func validateDisplayName(_ name: String, what: String = "the brand") throws {
        let refused = name.unicodeScalars.first { scalar in
            [.control, .lineSeparator, .paragraphSeparator].contains(scalar.properties.generalCategory)
        }
        if let refused {
            throw DCError(
                .usage,
                "\(what) has a character a desktop entry cannot hold (U+\(refused.value.zeroPadded(width: 4, radix: 16, uppercase: true)))",
                subject: name.escapingControlCharacters, hint: "give it as one line of printable text")
        }
        guard let first = name.unicodeScalars.first, let last = name.unicodeScalars.last,
            !first.properties.isWhitespace, !last.properties.isWhitespace
        else {
            throw DCError(
                .usage, "\(what) is empty or starts or ends with a space", subject: name.escapingControlCharacters,
                hint: "give it as one line of printable text")
        }
    }

    static func mimeType(_ scheme: URLScheme) -> String { "x-scheme-handler/\(scheme)" }
    /// The desktop file ID this toolkit installs for `scheme`: `dc-<scheme>.desktop`.
    public static func desktopID(_ scheme: URLScheme) -> String { "dc-\(scheme).desktop" }

    /// The launcher ``register(scheme:executable:name:)`` installs for `scheme`: a symbolic link to
    /// the handler under `XDG_DATA_HOME`, named by the scheme, which `Exec` runs.
    public func launcherPath(scheme: URLScheme) -> String { directories.dataHome + "/dc-handlers/" + scheme.text }

    /// Characters an `Exec` program may have unquoted: none that the Desktop Entry spec reserves
    /// (space, quotes, `\\`, `$`, `%`, …), and none that xdg-open's word splitting and `which` trip on.
    static func isPlain(_ path: String) -> Bool {
        path.unicodeScalars.allSatisfy {
            ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0)
                || "/._+-".unicodeScalars.contains($0)
        }
    }

    /// `text` with a backslash before each of `reserved`'s characters, scalar by scalar: a mark
    /// that combines with a quote or a backslash hides it from Swift's character comparison, not
    /// from a desktop's parser, which reads bytes.
    static func backslashEscaped(_ text: String, _ reserved: String) -> String {
        var escaped = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            if reserved.unicodeScalars.contains(scalar) { escaped.append("\\") }
            escaped.append(scalar)
        }
        return String(escaped)
    }

    // MARK: - Registration

    /// The files ``register(scheme:executable:name:)`` writes for `scheme`: the launcher, the
    /// desktop entry and the user's mimeapps.list. A command keeps them (`Rollback`) to put them
    /// back as they were if a later step fails.
    public func registrationFiles(scheme: URLScheme) -> [String] {
        [
            launcherPath(scheme: scheme), directories.dataHome + "/applications/" + Self.desktopID(scheme),
            directories.configHome + "/mimeapps.list",
        ]
    }

    /// Installs a desktop entry for `scheme` in the user's applications folder and makes it the
    /// explicit default in the user's mimeapps.list (both written atomically). Every value is
    /// checked before anything is written (the scheme was, where it was read): `name` (one line of text; a
    /// backslash is escaped), `executable` (an absolute path without control characters).
    ///
    /// `Exec` runs a launcher (``launcherPath(scheme:)``), a symbolic link to `executable`, unquoted:
    /// Debian's `xdg-open` (xdg-utils 1.1.3) takes the first word of `Exec` as the program and
    /// cannot run a quoted one, and `executable` may have a space. `gio open` reads either. Only when
    /// `XDG_DATA_HOME` itself has a character the spec reserves is the launcher quoted (which
    /// xdg-open 1.1.3 then cannot start); a `%` there is refused.
    public func register(scheme: URLScheme, executable: String, name: String) throws {
        try Self.validateDisplayName(name, what: "the handler's name")
        guard executable.hasPrefix("/"),
            !executable.unicodeScalars.contains(where: { $0.properties.generalCategory == .control })
        else {
            throw DCError(
                .usage, "the handler must be an absolute path without control characters",
                subject: executable.escapingControlCharacters)
        }
        let launcher = launcherPath(scheme: scheme)
        let program: String
        if Self.isPlain(launcher) {
            program = launcher
        } else {
            guard !launcher.unicodeScalars.contains("%"),
                !launcher.unicodeScalars.contains(where: { $0.properties.generalCategory == .control })
            else {
                throw DCError(
                    .usage, "XDG_DATA_HOME has a % or a control character, which a desktop entry's Exec cannot hold",
                    subject: directories.dataHome.escapingControlCharacters)
            }
            program = "\"" + Self.backslashEscaped(launcher, "\\\"`$") + "\""
        }
        let entry = """
            [Desktop Entry]
            Type=Application
            Name=\(Self.backslashEscaped(name, "\\"))
            Exec=\(program) handle-url %u
            MimeType=\(Self.mimeType(scheme));
            NoDisplay=true
            Terminal=false

            """
        let launchers = PathText.parent(of: launcher)
        try AtomicFileSet.ensureDirectory(launchers)
        let staged = launchers + "/.\(scheme).\(getpid()).new"
        unlink(staged)
        guard symlink(executable, staged) == 0, rename(staged, launcher) == 0 else {
            let error = errno
            unlink(staged)
            throw DCError(
                .cannotCreateOutput, "cannot install the handler's launcher: \(String(cString: strerror(error)))",
                subject: launcher)
        }
        let applications = directories.dataHome + "/applications"
        try AtomicFileSet.ensureDirectory(applications)
        var files = AtomicFileSet(directory: applications)
        try files.add(Self.desktopID(scheme), .bytes(Array(entry.utf8)), mode: 0o644)
        try files.commit(replacingExisting: true)
        try updateDefaults { $0[Self.mimeType(scheme)] = Self.desktopID(scheme) }
    }

    /// Removes what ``register(scheme:executable:name:)`` installed: the desktop entry, the
    /// launcher, then the default in mimeapps.list. Fails at the first that cannot be removed (what
    /// is absent already is no failure); a caller that must put back what went keeps
    /// ``registrationFiles(scheme:)`` (`Rollback`).
    public func unregister(scheme: URLScheme) throws {
        try AtomicFileSet.removeFile(
            directories.dataHome + "/applications/" + Self.desktopID(scheme), what: "the desktop entry")
        try AtomicFileSet.removeFile(launcherPath(scheme: scheme), what: "the launcher")
        try updateDefaults { defaults in
            if defaults[Self.mimeType(scheme)] == Self.desktopID(scheme) { defaults[Self.mimeType(scheme)] = nil }
        }
    }

    /// Rewrites the `[Default Applications]` group of the user's mimeapps.list, keeping the rest.
    func updateDefaults(_ change: (inout [String: String]) -> Void) throws {
        let path = directories.configHome + "/mimeapps.list"
        let existing = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
        var groups: [(name: String, lines: [String])] = [("", [])]
        for line in existing.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) {
            let trimmed = line.trimmingWhitespace()
            if trimmed.hasPrefix("[") && trimmed.hasSuffix("]") {
                groups.append((String(trimmed.dropFirst().dropLast()), []))
            } else {
                groups[groups.count - 1].lines.append(line)
            }
        }
        if !groups.contains(where: { $0.name == "Default Applications" }) {
            groups.append(("Default Applications", []))
        }
        let index = groups.firstIndex { $0.name == "Default Applications" }!
        var defaults: [String: String] = [:]
        var order: [String] = []
        for line in groups[index].lines {
            guard let equals = line.firstIndex(of: "=") else { continue }
            let key = line[..<equals].trimmingWhitespace()
            defaults[key] = line[line.index(after: equals)...].trimmingWhitespace()
            order.append(key)
        }
        change(&defaults)
        for key in defaults.keys.sorted() where !order.contains(key) { order.append(key) }
        groups[index].lines = order.compactMap { key in defaults[key].map { "\(key)=\($0)" } }
        var text = ""
        for group in groups {
            if !group.name.isEmpty { text += "[\(group.name)]\n" }
            let lines = group.lines.reversed().drop { $0.trimmingWhitespace().isEmpty }.reversed()
            for line in lines { text += line + "\n" }
            if !group.name.isEmpty { text += "\n" }
        }
        try AtomicFileSet.ensureDirectory(directories.configHome)
        var files = AtomicFileSet(directory: directories.configHome)
        try files.add("mimeapps.list", .bytes(Array(text.utf8)), mode: 0o644)
        try files.commit(replacingExisting: true)
    }

    // MARK: - Resolution

    /// How a handler was chosen.
    public enum Choice: String, Sendable {
        /// An explicit default in a mimeapps.list.
        case explicitDefault
        /// No default: an installed application that claims the type (the spec's fallback, which
        /// another application can win just by its name sorting first — a hijack).
        case fallback
    }

    /// The handler found for a scheme and how it was chosen.
    public struct Resolved: Sendable, Equatable {
        /// The handler's desktop entry.
        public var entry: DesktopEntry
        /// Whether it was an explicit default or only a fallback (which callers may refuse as a possible hijack).
        public var choice: Choice
    }

    /// The handler for `scheme`, in the MIME-apps spec's order, or nil.
    public func resolve(scheme: URLScheme) throws -> Resolved? {
        let type = Self.mimeType(scheme)
        var removed = Set<String>()
        var added: [String] = []
        for list in directories.mimeappsLists {
            guard let groups = Self.parseList(list) else { continue }
            for id in groups["Removed Associations"]?[type] ?? [] { removed.insert(id) }
            for id in groups["Default Applications"]?[type] ?? [] where !removed.contains(id) {
                if let entry = findEntry(id), !entry.hidden, entry.mimeTypes.contains(type) {
                    return Resolved(entry: entry, choice: .explicitDefault)
                }
            }
            added += (groups["Added Associations"]?[type] ?? []).filter { !removed.contains($0) }
        }
        for id in added {
            if let entry = findEntry(id), !entry.hidden { return Resolved(entry: entry, choice: .fallback) }
        }
        for directory in directories.applicationDirectories {
            let names = ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).filter {
                $0.hasSuffix(".desktop")
            }.sorted()
            for name in names where !removed.contains(name) {
                if let entry = findEntry(name), !entry.hidden, entry.mimeTypes.contains(type) {
                    return Resolved(entry: entry, choice: .fallback)
                }
            }
        }
        return nil
    }

    /// The first `.desktop` file with this id in the application directories.
    func findEntry(_ id: String) -> DesktopEntry? {
        for directory in directories.applicationDirectories {
            let path = directory + "/" + id
            guard let contents = try? String(contentsOfFile: path, encoding: .utf8) else { continue }
            return DesktopEntry(id: id, path: path, contents: contents)
        }
        return nil
    }

    static func parseList(_ path: String) -> [String: [String: [String]]]? {
        guard let contents = try? String(contentsOfFile: path, encoding: .utf8) else { return nil }
        var groups: [String: [String: [String]]] = [:]
        var group = ""
        for rawLine in contents.split(separator: "\n") {
            let line = rawLine.trimmingWhitespace()
            if line.isEmpty || line.hasPrefix("#") { continue }
            if line.hasPrefix("[") && line.hasSuffix("]") {
                group = String(line.dropFirst().dropLast())
                continue
            }
            guard let equals = line.firstIndex(of: "=") else { continue }
            let key = line[..<equals].trimmingWhitespace()
            let ids = line[line.index(after: equals)...].split(separator: ";").map {
                $0.trimmingWhitespace()
            }.filter { !$0.isEmpty }
            groups[group, default: [:]][key, default: []] += ids
        }
        return groups
    }

    // MARK: - Launching

    /// Opens `url` with the handler registered for `scheme`, which must run `expectedExecutable`
    /// (the one that registered): a different handler claiming the scheme — another default, or a
    /// fallback that sorts first — is refused, and nothing is sent to it. The handler is started
    /// with an argv array and waited for, in the environment the desktop would give it
    /// (`ChildEnvironment.desktop`: the short list, and the display and session bus it may need
    /// to talk to its user).
    public func open(
        _ url: String, scheme: URLScheme, expectedExecutable: String,
        limits: ChildProcess.Limits = .init(timeout: .seconds(60)),
        environment: [String: String]? = nil
    ) async throws -> ChildProcess.Outcome {
        let arguments = try checkedArguments(url, scheme: scheme, expectedExecutable: expectedExecutable)
        return try await ChildProcess.run(
            arguments[0], arguments: Array(arguments.dropFirst()),
            environment: environment ?? ChildEnvironment.desktop(), limits: limits)
    }

    /// Checks that `scheme` resolves to `expectedExecutable` as the explicit default, without
    /// launching anything: a sender runs it before it seals, so that a hijacked scheme gets
    /// nothing. Throws what ``open(_:scheme:expectedExecutable:limits:environment:)`` would.
    public func verifyHandler(scheme: URLScheme, expectedExecutable: String) throws {
        _ = try checkedArguments(scheme.text + ":/", scheme: scheme, expectedExecutable: expectedExecutable)
    }

    private func checkedArguments(_ url: String, scheme: URLScheme, expectedExecutable: String) throws -> [String] {
        guard let resolved = try resolve(scheme: scheme) else {
            throw DCError(.missingClient, "no handler is registered for \(scheme):", hint: "register it first")
        }
        let arguments = try resolved.entry.arguments(for: url)
        // Our own entry runs exactly `PROGRAM handle-url URL`, PROGRAM being our launcher (which
        // must still point at the expected executable) or the executable itself. Compared byte for
        // byte: Swift calls canonically equivalent strings equal (U+212A and K, NFC and NFD), the
        // kernel runs the bytes.
        func same(_ one: String, _ other: String) -> Bool { one.utf8.elementsEqual(other.utf8) }
        let launcher = launcherPath(scheme: scheme)
        let runs =
            same(arguments[0], launcher)
            ? (try? FileManager.default.destinationOfSymbolicLink(atPath: launcher)) ?? launcher : arguments[0]
        let ours = arguments.count == 3 && same(arguments[1], "handle-url") && same(arguments[2], url)
        guard resolved.choice == .explicitDefault, same(runs, expectedExecutable), ours else {
            throw DCError(
                .invalid,
                "another handler claims \(scheme): (\(resolved.entry.id.escapingControlCharacters) runs \(runs.escapingControlCharacters)); refusing to send to it",
                subject: resolved.entry.path, hint: "remove it, or register the client again")
        }
        return arguments
    }

    /// ``open(_:scheme:expectedExecutable:limits:environment:)`` for command-line tools: our own
    /// buffered output first, then the handler's output passed on (its standard output only when
    /// `passingStandardOutput`, as a quiet command wants; its errors always), and an error if it
    /// failed.
    public func openForwardingOutput(
        _ url: String, scheme: URLScheme, expectedExecutable: String, passingStandardOutput: Bool = true
    ) async throws {
        fflush(nil)
        let outcome = try await open(url, scheme: scheme, expectedExecutable: expectedExecutable)
        // A closed or broken stream loses the handler's output, never the outcome.
        if passingStandardOutput { outcome.stdout.withUnsafeBytes { _ = Descriptors.writeAll($0, to: 1) } }
        outcome.stderr.withUnsafeBytes { _ = Descriptors.writeAll($0, to: 2) }
        guard outcome.termination == .exited(0) else {
            throw DCError(
                .notReady, "the handler for \(scheme): did not complete (\(outcome.termination))",
                hint: "its own message is above")
        }
    }
}
