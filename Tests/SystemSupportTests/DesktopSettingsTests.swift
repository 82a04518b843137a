import DerivedCredentials
import Foundation
import SystemSupport
import TestSupport
import Testing

@Suite("Desktop settings", .ownThreads, .timeLimit(.minutes(1)))
struct DesktopSettingsTests {
    @Test(
        "desktop.conf: its keys are read; an unknown key names its line; one group or others can write is refused, since it names the program given passphrases"
    )
    func settings() throws {
        let sandbox = try Sandbox("desktop-settings")
        defer { sandbox.remove() }
        let locations = XDGDirectories(environment: sandbox.environment)
        #expect(try DesktopSettings.load(from: locations) == DesktopSettings())
        let path = DesktopSettings.path(in: locations)
        try FileManager.default.createDirectory(
            atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try "# mine\npinentry-program /usr/bin/pinentry-tty\nnotifications off\n".write(
            toFile: path, atomically: true, encoding: .utf8)
        chmod(path, 0o644)
        #expect(
            try DesktopSettings.load(from: locations)
                == DesktopSettings(pinentryProgram: "/usr/bin/pinentry-tty", notifications: false))
        // Another member of the group could have named their own program as the pinentry.
        chmod(path, 0o664)
        let writable = try #require(throws: DCError.self) { try DesktopSettings.load(from: locations) }
        #expect(writable.code == .permissionDenied)
        chmod(path, 0o600)
        try "colour blue\n".write(toFile: path, atomically: true, encoding: .utf8)
        chmod(path, 0o600)
        let unknown = try #require(throws: DCError.self) { try DesktopSettings.load(from: locations) }
        #expect(unknown.subject == path + ":1")
    }
}
