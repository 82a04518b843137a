import SystemSupport

extension XDGDirectories {
    /// mimeapps.list files, most important first (MIME Applications Associations spec).
    public var mimeappsLists: [String] {
        var files: [String] = []
        for directory in [configHome] + configDirs {
            files += currentDesktops.map { "\(directory)/\($0)-mimeapps.list" }
            files.append("\(directory)/mimeapps.list")
        }
        for directory in [dataHome] + dataDirs {
            files += currentDesktops.map { "\(directory)/applications/\($0)-mimeapps.list" }
            files.append("\(directory)/applications/mimeapps.list")
        }
        return files
    }

    /// Directories holding `.desktop` files, most important first.
    public var applicationDirectories: [String] { ([dataHome] + dataDirs).map { $0 + "/applications" } }
}
