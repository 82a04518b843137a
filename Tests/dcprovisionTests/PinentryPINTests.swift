import Foundation
import TestSupport
import Testing

@Suite(
    "A token's PIN asked the desktop's way when no PIN option names it", .serialized, .ownThreads, .softHSM,
    .timeLimit(.minutes(3)))
struct PinentryPINTests {
    @Test(
        "A token PIN with no PIN option is asked through pinentry-tty, the card's state in the description, and logs in once"
    )
    func pinThroughPinentry() throws {
        let tools = try Tools(
            "pinentry-pin",
            extra: [
                "SOFTHSM2_CONF": SoftHSM.shared.configuration, "DC_FAULT": "count-low",
                "DC_FAULT_PINPAD_PIN": SoftHSM.userPIN,
            ])
        defer { tools.sandbox.remove() }
        try configurePinentry("/usr/bin/pinentry-tty", in: tools.sandbox)
        let logins = tools.sandbox.file("logins")
        let command = [
            Binaries.dcprovision, "objects", "pkcs11:token=PIN%20Card;type=private", "--module",
            Binaries.directory + "/libDCFaultPKCS11.so", "--login",
        ]
        let session = try TerminalSession(
            shellLine(command) + " < /dev/null; echo \"exit=$?\"", in: tools.sandbox, label: "pin",
            environment: ["DC_FAULT_LOGIN_LOG": logins])
        #expect(session.waitFor("Enter the PIN of PIN Card."))
        #expect(session.waitFor("An incorrect PIN was entered recently; few tries are left."))
        #expect(session.waitFor("PIN:"))
        session.type(SoftHSM.userPIN + "\r")
        #expect(session.finish() == 0, "\(session.output)")
        #expect(!session.output.contains(SoftHSM.userPIN), "\(session.output)")
        #expect(session.output.contains("private-key  id 01"), "\(session.output)")
        #expect(((try? readText(logins)) ?? "").split(separator: "\n") == ["C_Login"])
    }
}
