import Foundation

/// Paths of the package's executables, which SwiftPM builds next to the test bundle.
public enum Binaries {
    public static let directory: String = {
        let executable =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        var url = URL(fileURLWithPath: executable).deletingLastPathComponent()
        // The test binary may sit inside a bundle directory (…/X.xctest/…); walk up to the products.
        while url.path != "/"
            && !FileManager.default.isExecutableFile(atPath: url.appendingPathComponent("dcprovision").path)
        {
            url.deleteLastPathComponent()
        }
        return url.path
    }()

    public static var dcprovision: String { directory + "/dcprovision" }
}

extension Binaries {
    /// The verification service.
    public static var dcverify: String { directory + "/dcverify" }
    /// The verification service with a table verifier (Tests/VerificationServiceFixture).
    public static var verificationServiceFixture: String { directory + "/VerificationServiceFixture" }
}
