import Foundation
import TestSupport
import Testing

/// PIN safety through the real CLI and a real module path: SoftHSM2 wrapped by the test-only
/// fault-injecting module (SoftHSM never reports FINAL_TRY or LOCKED, and has no PIN pad). Every
/// case counts the C_Login calls the token saw.
@Suite(
    "PIN safety: flags read before C_Login, never a retry", .serialized, .ownThreads, .softHSM, .timeLimit(.minutes(3)))
struct PINSafetyTests {
    static let faultModule = Binaries.directory + "/libDCFaultPKCS11.so"
    static let uri = "pkcs11:token=PIN%20Card;type=private"

    struct Outcome {
        var result: ProcessResult
        var logins: [String]
    }

    private func objects(
        fault: String, pin: String?, extra: [String] = [], environment extraEnvironment: [String: String] = [:],
        stdin: [UInt8]? = nil
    ) throws -> Outcome {
        let hsm = SoftHSM.shared
        let dir = try TemporaryDirectory("pin")
        defer { dir.remove() }
        var environment = try Sandbox.shared().environment
        environment["SOFTHSM2_CONF"] = hsm.configuration
        environment["DC_FAULT"] = fault
        environment["DC_FAULT_LOGIN_LOG"] = dir.file("logins")
        environment["DC_FAULT_PINPAD_PIN"] = SoftHSM.userPIN
        for (key, value) in extraEnvironment { environment[key] = value }
        var arguments = ["objects", Self.uri, "--module", Self.faultModule, "--login"] + extra
        if let pin { arguments += ["--pin-file", try dir.write("pin", pin + "\n")] }
        let result = try run(Binaries.dcprovision, arguments, stdin: stdin, environment: environment, timeout: 60)
        let logins = ((try? readText(dir.file("logins"))) ?? "").split(separator: "\n").map(String.init)
        return Outcome(result: result, logins: logins)
    }

    @Test("The right PIN logs in once and shows the private keys")
    func rightPIN() throws {
        let outcome = try objects(fault: "", pin: SoftHSM.userPIN)
        #expect(outcome.result.status == 0, "\(outcome.result.stderrText)")
        #expect(outcome.logins == ["C_Login"])
        #expect(outcome.result.stdoutText.contains("private-key  id 01"))
        #expect(outcome.result.stdoutText.contains("(sensitive, not extractable)"))
    }

    @Test("A wrong PIN: exactly one C_Login, exit 77, the PIN in no output")
    func wrongPIN() throws {
        let outcome = try objects(fault: "", pin: "999999")
        #expect(outcome.result.status == 77)
        #expect(outcome.logins == ["C_Login"])
        #expect(outcome.result.stderrText.contains("refused the PIN (not retried)"))
        #expect(!(outcome.result.stdoutText + outcome.result.stderrText).contains("999999"))
    }

    @Test("FINAL_TRY: refused with no C_Login unless --allow-final-pin-try")
    func finalTry() throws {
        let refused = try objects(fault: "final-try", pin: SoftHSM.userPIN)
        #expect(refused.result.status == 77)
        #expect(refused.logins.isEmpty)
        #expect(refused.result.stderrText.contains("--allow-final-pin-try"))
        let allowed = try objects(fault: "final-try", pin: SoftHSM.userPIN, extra: ["--allow-final-pin-try"])
        #expect(allowed.result.status == 0, "\(allowed.result.stderrText)")
        #expect(allowed.logins == ["C_Login"])
    }

    @Test("LOCKED: refused with no C_Login, exit 77, and what to do")
    func locked() throws {
        let outcome = try objects(fault: "locked", pin: SoftHSM.userPIN)
        #expect(outcome.result.status == 77)
        #expect(outcome.logins.isEmpty)
        #expect(outcome.result.stderrText.contains("security officer PIN"))
    }

    @Test("COUNT_LOW: a warning, then one login")
    func countLow() throws {
        let outcome = try objects(fault: "count-low", pin: SoftHSM.userPIN)
        #expect(outcome.result.status == 0)
        #expect(outcome.result.stderrText.contains("warning: PIN Card: an incorrect PIN was entered recently"))
        #expect(outcome.logins == ["C_Login"])
    }

    @Test("A PIN pad (protected authentication path) logs in with no PIN")
    func pinPad() throws {
        let outcome = try objects(fault: "pinpad", pin: nil)
        #expect(outcome.result.status == 0, "\(outcome.result.stderrText)")
        #expect(outcome.logins == ["C_Login (no PIN)"])
    }

    @Test("No PIN source: refused at once, no C_Login, no prompt")
    func noPIN() throws {
        let outcome = try objects(fault: "", pin: nil, stdin: [])
        #expect(outcome.result.status == 77)
        #expect(outcome.logins.isEmpty)
        #expect(outcome.result.stderrText.contains("--pin-file"))
    }

    @Test("--pin-env and --pin-fd work; the PIN is never echoed")
    func otherSources() throws {
        let viaEnv = try objects(
            fault: "", pin: nil, extra: ["--pin-env", "CARD_PIN"], environment: ["CARD_PIN": SoftHSM.userPIN])
        #expect(viaEnv.result.status == 0, "\(viaEnv.result.stderrText)")
        let viaFd = try objects(
            fault: "", pin: nil, extra: ["--pin-fd", "0"], stdin: Array((SoftHSM.userPIN + "\n").utf8))
        #expect(viaFd.result.status == 0, "\(viaFd.result.stderrText)")
        #expect(viaFd.logins == ["C_Login"])
    }

    @Test("A card removed mid-read is a clean error naming CKR_DEVICE_REMOVED, exit 75 (try again)")
    func removed() throws {
        let outcome = try objects(fault: "removed", pin: SoftHSM.userPIN)
        #expect(outcome.result.status == 75)
        #expect(outcome.result.stderrText.contains("CKR_DEVICE_REMOVED"))
        // One error line (a COUNT_LOW warning may precede it: the wrong-PIN test really sets it on SoftHSM).
        #expect(outcome.result.stderrText.split(separator: "\n").filter { !$0.contains("warning:") }.count == 1)
    }
}

/// Card faults other than PIN state, through the fault-injecting module: the error says what
/// happened and nothing is written.
@Suite("Card faults: a clean error and no partial output", .ownThreads, .softHSM, .timeLimit(.minutes(3)))
struct CardFaultTests {
    @Test(
        "A session closed under us mid-read (card reset) is exit 75 naming CKR_SESSION_HANDLE_INVALID; the output directory stays empty",
        arguments: ["session-closed", "removed"])
    func sessionClosed(_ fault: String) throws {
        let dir = try TemporaryDirectory("fault")
        defer { dir.remove() }
        var environment = try Sandbox.shared().environment
        environment["SOFTHSM2_CONF"] = SoftHSM.shared.configuration
        environment["DC_FAULT"] = fault
        environment["DC_FAULT_LOGIN_LOG"] = dir.file("logins")
        let out = dir.file("out")
        let result = try run(
            Binaries.dcprovision,
            [
                "convert", "--pkcs11", "pkcs11:token=Export%20Card", "--layout", "piv", "--pkcs11-module",
                PINSafetyTests.faultModule,
                "--pin-file", try dir.write("pin", SoftHSM.userPIN + "\n"), "--out-dir", out,
            ],
            environment: environment, timeout: 60)
        #expect(result.status == 75, "\(result.stderrText)")
        let expected = fault == "removed" ? "CKR_DEVICE_REMOVED" : "CKR_SESSION_HANDLE_INVALID"
        #expect(result.stderrText.contains(expected), "\(result.stderrText)")
        #expect(
            result.stderrText.contains(fault == "removed" ? "the card was removed" : "ended the session"),
            "\(result.stderrText)")
        #expect(result.stderrText.split(separator: "\n").count == 1, "\(result.stderrText)")
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: out)) ?? []).isEmpty)
        #expect((try readText(dir.file("logins"))).split(separator: "\n").count == 1)
    }

    @Test(
        "Objects changed between the search and the read (CKR_OBJECT_HANDLE_INVALID): searched again in the same session, one login; a token that never holds still is exit 69"
    )
    func objectsChanged() throws {
        let dir = try TemporaryDirectory("fault")
        defer { dir.remove() }
        func objects(_ fault: String) throws -> (result: ProcessResult, logins: Int) {
            var environment = try Sandbox.shared().environment
            environment["SOFTHSM2_CONF"] = SoftHSM.shared.configuration
            environment["DC_FAULT"] = fault
            environment["DC_FAULT_LOGIN_LOG"] = dir.file("logins-\(fault)")
            let result = try run(
                Binaries.dcprovision,
                [
                    "objects", "pkcs11:token=Export%20Card;type=cert", "--module", PINSafetyTests.faultModule,
                    "--login", "--pin-file", try dir.write("pin", SoftHSM.userPIN + "\n"),
                ],
                environment: environment, timeout: 60)
            let logins = ((try? readText(dir.file("logins-\(fault)"))) ?? "").split(separator: "\n").count
            return (result, logins)
        }
        let changedOnce = try objects("changed-once")
        #expect(changedOnce.result.status == 0, "\(changedOnce.result.stderrText)")
        #expect(changedOnce.logins == 1)
        // Every certificate of the card, once each.
        let listed = changedOnce.result.stdoutText.split(separator: "\n").filter { $0.contains("certificate") }
        #expect(listed.count == 5, "\(changedOnce.result.stdoutText)")
        let changing = try objects("changing")
        #expect(changing.result.status == 69, "\(changing.result.stderrText)")
        #expect(changing.result.stderrText.contains("CKR_OBJECT_HANDLE_INVALID"), "\(changing.result.stderrText)")
        #expect(changing.result.stderrText.split(separator: "\n").count == 1, "\(changing.result.stderrText)")
        #expect(changing.logins == 1)
    }
}
