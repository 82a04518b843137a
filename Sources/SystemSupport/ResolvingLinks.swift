import DerivedCredentials

#if canImport(Glibc)
    import Glibc
#endif

extension PathText {
    /// `path` with its symbolic links resolved as far as it exists: `realpath(3)` of the longest
    /// leading part that exists, the rest appended with `.` dropped and `..` taking away the
    /// component before it. What Foundation's `resolvingSymlinksInPath` and `standardizingPath`
    /// were used for, with every link followed to its end (Foundation followed a link once).
    public static func resolvingLinks(_ path: String) -> String {
        if let resolved = realpath(path, nil) {
            defer { free(resolved) }
            return String(cString: resolved)
        }
        let directory = parent(of: path)
        guard !directory.isEmpty, directory != path else { return path }
        let base = resolvingLinks(directory)
        switch lastComponent(of: path) {
        case ".": return base
        case "..": return parent(of: base)
        case let name: return appending(name, to: base)
        }
    }
}
