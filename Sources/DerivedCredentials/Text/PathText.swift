/// File paths as text: the rules of Foundation's `NSString` path methods
/// (`appendingPathComponent`, `deletingLastPathComponent`, `lastPathComponent`, `pathExtension`,
/// `deletingPathExtension`), without Foundation, so that the modules the PKCS#11 module links need
/// only FoundationEssentials. As there, a path is taken apart by characters: a `/` followed by a
/// combining mark is one character, not a separator.
public enum PathText {
    /// `component` after `base`, with one `/` between them (none added when `base` ends with one):
    /// `base` when `component` is empty, `component` when `base` is.
    public static func appending(_ component: String, to base: String) -> String {
        if component.isEmpty { return base }
        if base.isEmpty { return component }
        return base.hasSuffix("/") ? base + component : base + "/" + component
    }

    /// The directory that holds `path`: `path` without its last component and the `/` before it;
    /// `/` for a name at the root, `""` for a single relative name (Foundation trapped on some) and
    /// for `""`. Runs of `/` count as one, and a trailing `/` is ignored.
    public static func parent(of path: String) -> String {
        let tidy = tidied(path)
        if tidy == "/" || tidy.isEmpty { return tidy }
        guard let lastSlash = tidy.lastIndex(of: "/") else { return "" }
        if lastSlash == tidy.startIndex { return "/" }
        return String(tidy[..<lastSlash])
    }

    /// The last component of `path`: `/` for the root, `""` for `""`. Runs of `/` count as one,
    /// and a trailing `/` is ignored.
    public static func lastComponent(of path: String) -> String {
        let tidy = tidied(path)
        if tidy == "/" { return tidy }
        guard let lastSlash = tidy.lastIndex(of: "/") else { return tidy }
        return String(tidy[tidy.index(after: lastSlash)...])
    }

    /// The extension of `path`'s last component: what follows its last `.`, or `""` when it has
    /// none, starts with its only `.` (`.profile`) or is `..`.
    public static func pathExtension(of path: String) -> String {
        let tidy = tidied(path)
        guard let dot = extensionDot(in: tidy) else { return "" }
        return String(tidy[tidy.index(after: dot)...])
    }

    /// `path` without its last component's extension and the `.` before it (see
    /// ``pathExtension(of:)``); runs of `/` made one and a trailing `/` dropped.
    public static func deletingExtension(of path: String) -> String {
        let tidy = tidied(path)
        guard let dot = extensionDot(in: tidy) else { return tidy }
        return String(tidy[..<dot])
    }

    /// `path` with every run of `/` made one and then a trailing `/` dropped, as Foundation's
    /// path methods see it first (`/` stays `/`; `//` becomes `""`, as there).
    static func tidied(_ path: String) -> String {
        if path == "/" { return path }
        var tidy = ""
        tidy.reserveCapacity(path.utf8.count)
        for character in path where !(character == "/" && tidy.last == "/") { tidy.append(character) }
        if tidy.last == "/" { tidy.removeLast() }
        return tidy
    }

    /// The index of the `.` that starts the extension in `tidy`'s last component, if it has one.
    private static func extensionDot(in tidy: String) -> String.Index? {
        let start = tidy.lastIndex(of: "/").map { tidy.index(after: $0) } ?? tidy.startIndex
        let component = tidy[start...]
        guard let dot = component.lastIndex(of: "."), dot != start, component != ".." else { return nil }
        return dot
    }
}
