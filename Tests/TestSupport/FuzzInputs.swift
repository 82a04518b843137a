import Foundation

/// One file that `FuzzTesting/fuzz.sh` feeds a libFuzzer harness, for replaying it as an ordinary
/// test: a seed, or a crasher kept as a regression file.
public struct FuzzInput: Sendable, CustomStringConvertible {
    /// The path relative to the package root, e.g. `FuzzTesting/Seeds/FuzzDeliveryURL/new`.
    public let path: String
    /// The file's bytes, exactly as the harness would get them.
    public let bytes: [UInt8]
    /// Whether the file came from `FuzzTesting/Crashers/`: it once crashed a harness.
    public let isCrasher: Bool

    /// The file name without its directory.
    public var name: String { (path as NSString).lastPathComponent }
    /// The harness the file belongs to: the name of its directory (`FuzzDeliveryURL`).
    public var harness: String { ((path as NSString).deletingLastPathComponent as NSString).lastPathComponent }

    /// The relative path, which names the test case.
    public var description: String { path }
}

/// The seeds and crashers of the harnesses in `FuzzTesting/`, found from this source file's path
/// (so they are read from the checkout the tests were built from, wherever it is).
public enum FuzzInputs {
    /// The seed directories `fuzz.sh` gives `harness`: `FuzzTesting/Seeds/<harness>`, except the
    /// credential reader, whose seeds are the sample credential's files (`Samples/credential`).
    /// Keep in step with the `seeds=` lines of `FuzzTesting/fuzz.sh`.
    public static func seedDirectories(_ harness: String) -> [String] {
        harness == "FuzzCredentialReader" ? ["Samples/credential"] : ["FuzzTesting/Seeds/\(harness)"]
    }

    /// Every seed of `harness` and every crasher kept under `FuzzTesting/Crashers/<harness>`,
    /// sorted by path. Hidden files (`.gitkeep`) are not inputs.
    public static func all(_ harness: String) -> [FuzzInput] {
        seedDirectories(harness).flatMap { files(in: $0, crashers: false) }
            + files(in: "FuzzTesting/Crashers/\(harness)", crashers: true)
    }

    static func files(in directory: String, crashers: Bool) -> [FuzzInput] {
        let absolute = Repository.root + "/" + directory
        let names = (try? FileManager.default.contentsOfDirectory(atPath: absolute)) ?? []
        return names.filter { !$0.hasPrefix(".") }.sorted().compactMap { name in
            guard let data = FileManager.default.contents(atPath: absolute + "/" + name) else { return nil }
            return FuzzInput(path: directory + "/" + name, bytes: Array(data), isCrasher: crashers)
        }
    }
}
