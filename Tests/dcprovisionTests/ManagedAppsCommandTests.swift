import Foundation
import TestSupport
import Testing

/// Several managed apps per user, each a container of its own, through the real tools and the
/// real scheme handlers.
@Suite("Several managed apps per user: one container each", .ownThreads, .timeLimit(.minutes(5)))
struct ManagedAppsCommandTests {
    /// Two apps of one user, `mail` and `chat`, each set up, registered, paired and authorized.
    static func twoApps(_ label: String) throws -> Tools {
        let tools = try Tools(label)
        try tools.sandbox.write("pass.txt", "correct horse\n")
        try tools.check("dcprovision", ["testca", "init", "ca"])
        try tools.check(
            "dcprovision",
            ["register", "--provider-scheme", "org.example.provider", "--brand", "Example", "--testca", "ca"])
        for app in ["mail", "chat"] {
            let scheme = "org.example.\(app)"
            try tools.check(
                "dcclient",
                [
                    "init", "--app", app, "--client-scheme", scheme, "--provider-scheme", "org.example.provider",
                    "--passphrase-file", "pass.txt",
                ])
            try tools.check("dcclient", ["register", "--app", app])
            try tools.check("dcprovision", ["pair", "--client-scheme", scheme, "--user-id", "alice@example.com"])
            try tools.check("dcprovision", ["authorize", "--client-scheme", scheme])
        }
        return tools
    }

    @Test(
        "Two apps: each its own container, scheme, pairing and authorization; apps lists both; no app named is refused naming both; retiring one leaves the other; the shared user id is the same for both"
    )
    func twoAppsApart() throws {
        let tools = try Self.twoApps("apps-two")
        defer { tools.sandbox.remove() }
        let data = tools.sandbox.file("home/.local/share/dcclient/apps")
        #expect(try FileManager.default.contentsOfDirectory(atPath: data).sorted() == ["chat", "mail"])
        let listed = try tools.check("dcclient", ["apps"]).stdoutText
        #expect(listed.contains("chat") && listed.contains("org.example.chat:"), "\(listed)")
        #expect(listed.contains("mail") && listed.contains("authorized, unlocked"), "\(listed)")
        let json = try tools.check("dcclient", ["apps", "--json"]).stdoutText
        #expect(json.contains("\"app\" : \"chat\"") && json.contains("\"app\" : \"mail\""), "\(json)")

        // Several apps and none named: a usage error that lists them, never a guess.
        let unnamed = try tools.run("dcclient", ["status"])
        #expect(unnamed.status == 64, "\(unnamed.stderrText)")
        #expect(unnamed.stderrText.contains("several managed apps are set up (chat, mail)"), "\(unnamed.stderrText)")
        // The environment variable names one.
        let viaVariable = try tools.sandbox.run(
            Binaries.directory + "/dcclient", ["status"], environment: ["DCCLIENT_APP": "chat"])
        #expect(viaVariable.status == 0 && viaVariable.stdoutText.contains("app:              chat"))

        // Each app's secure files are its own.
        try tools.sandbox.write("note.txt", "for mail only\n")
        try tools.check("dcclient", ["files", "put", "--app", "mail", "note", "note.txt"])
        #expect(try tools.check("dcclient", ["files", "ls", "--app", "chat"]).stdoutText.isEmpty)

        // The same user, the same shared user id, though no secret was copied between containers.
        let mailUser = try tools.check("dcclient", ["shared-user-id", "--app", "mail"]).stdoutText
        let chatUser = try tools.check("dcclient", ["shared-user-id", "--app", "chat"]).stdoutText
        #expect(mailUser.count > 40 && mailUser == chatUser, "\(mailUser) \(chatUser)")
        let status = try tools.check("dcclient", ["status", "--app", "chat", "--json"]).stdoutText
        #expect(status.contains("\"userId\" : \"alice@example.com\""), "\(status)")
        // The user id is the provider's to tell, not the store's: readable while the app is locked.
        try tools.check("dcclient", ["lock", "--app", "chat"])
        let locked = try tools.check("dcclient", ["status", "--app", "chat", "--json"]).stdoutText
        #expect(locked.contains("\"unlocked\" : false"), "\(locked)")
        #expect(locked.contains("\"userId\" : \"alice@example.com\""), "\(locked)")
        try tools.check("dcclient", ["unlock", "--app", "chat", "--passphrase-file", "pass.txt"])

        // Unauthorize one, retire the other: each hears only its own policy.
        try tools.check(
            "dcprovision", ["unauthorize", "--client-scheme", "org.example.chat", "--message", "Chat is paused"])
        let chat = try tools.check("dcclient", ["status", "--app", "chat"]).stdoutText
        #expect(chat.contains("authorization:    unauthorized") && chat.contains("Chat is paused"), "\(chat)")
        #expect(try tools.check("dcclient", ["files", "get", "--app", "mail", "note"]).stdoutText == "for mail only\n")
        try tools.check("dcprovision", ["retire", "--client-scheme", "org.example.mail"])
        #expect(try tools.run("dcclient", ["files", "get", "--app", "mail", "note"]).status == 77)
        #expect(!FileManager.default.fileExists(atPath: data + "/mail/store/wrapped-key.json"))
        #expect(FileManager.default.fileExists(atPath: data + "/chat/store/wrapped-key.json"))
        let provider = try tools.check("dcprovision", ["status"]).stdoutText
        #expect(provider.contains("client chat (org.example.chat:)  unauthorized"), "\(provider)")
        #expect(provider.contains("client mail (org.example.mail:)  retired"), "\(provider)")
        // Two apps cannot share a scheme: a URL finds its app by it.
        let sameScheme = try tools.run(
            "dcclient",
            [
                "init", "--app", "notes", "--client-scheme", "org.example.chat", "--provider-scheme",
                "org.example.provider", "--passphrase-file", "pass.txt",
            ])
        #expect(sameScheme.status == 73, "\(sameScheme.stderrText)")
        #expect(sameScheme.stderrText.contains("is the app chat's already"), "\(sameScheme.stderrText)")
        #expect(!FileManager.default.fileExists(atPath: data + "/notes"))
        // A URL goes to the app whose scheme it has, whatever --app says.
        let wrongApp = try tools.run("dcclient", ["handle-url", "--app", "chat", "org.example.mail:/policy?v=2"])
        #expect(wrongApp.status == 64, "\(wrongApp.stderrText)")
        #expect(wrongApp.stderrText.contains("the URL is for the app mail, not chat"), "\(wrongApp.stderrText)")
    }

    @Test(
        "A client from before containers moves into its container whole: still set up, unlocked, its files and registration following; a move cut short is finished by the next command"
    )
    func migration() throws {
        let tools = try Tools("apps-migration")
        defer { tools.sandbox.remove() }
        try tools.setUpManagedClient()
        try tools.sandbox.write("note.txt", "kept across the move\n")
        try tools.check("dcclient", ["files", "put", "note", "note.txt"])
        // Put it back where the versions before containers kept it: $XDG_DATA_HOME/dcclient itself.
        let share = tools.sandbox.file("home/.local/share")
        let fileManager = FileManager.default
        try fileManager.moveItem(atPath: share + "/dcclient/apps/dcclient", toPath: share + "/old")
        try fileManager.removeItem(atPath: share + "/dcclient")
        try fileManager.moveItem(atPath: share + "/old", toPath: share + "/dcclient")
        #expect(fileManager.fileExists(atPath: share + "/dcclient/store/client.json"))

        // The first command moves it; the unlocked key follows it (its name follows the path).
        let listed = try tools.check("dcclient", ["apps"]).stdoutText
        #expect(listed.contains("dcclient") && listed.contains("unlocked"), "\(listed)")
        #expect(!fileManager.fileExists(atPath: share + "/dcclient/store"))
        #expect(try tools.check("dcclient", ["files", "get", "note"]).stdoutText == "kept across the move\n")
        let registration = try String(
            contentsOfFile: share + "/derived-credentials/clients/org.example.dcclient.json", encoding: .utf8)
        #expect(registration.contains("dcclient/apps/dcclient/spool"), "\(registration)")

        // Several commands at once on a client not yet moved: one moves it, the others wait and
        // find it moved; none fails.
        try fileManager.moveItem(atPath: share + "/dcclient/apps/dcclient", toPath: share + "/old")
        try fileManager.removeItem(atPath: share + "/dcclient")
        try fileManager.moveItem(atPath: share + "/old", toPath: share + "/dcclient")
        let racers = try (0..<4).map { _ in
            try SpawnedProcess(
                Binaries.directory + "/dcclient", ["status"], environment: tools.sandbox.environment,
                output: tools.sandbox.file("race.log"))
        }
        for racer in racers { #expect(racer.wait(timeout: .seconds(60)) == 0) }
        #expect(fileManager.fileExists(atPath: share + "/dcclient/apps/dcclient/store/client.json"))

        // Cut short after its first step (the directory set aside): the next command finishes it.
        try tools.check("dcclient", ["lock"])
        try fileManager.moveItem(atPath: share + "/dcclient/apps/dcclient", toPath: share + "/old")
        try fileManager.removeItem(atPath: share + "/dcclient")
        try fileManager.moveItem(atPath: share + "/old", toPath: share + "/dcclient.moving")
        let status = try tools.check("dcclient", ["status"]).stdoutText
        #expect(status.contains("app:              dcclient"), "\(status)")
        #expect(!fileManager.fileExists(atPath: share + "/dcclient.moving"))
        try tools.check("dcclient", ["unlock", "--passphrase-file", "pass.txt"])
        #expect(try tools.check("dcclient", ["files", "get", "note"]).stdoutText == "kept across the move\n")
    }

    /// Moves the client of the container `dcclient` back where the versions before containers kept
    /// it: `$XDG_DATA_HOME/dcclient` itself (its registration is left as it is).
    static func backToSingleLayout(_ tools: Tools) throws {
        let share = tools.sandbox.dataHome
        let fileManager = FileManager.default
        try fileManager.moveItem(atPath: share + "/dcclient/apps/dcclient", toPath: share + "/old")
        try fileManager.removeItem(atPath: share + "/dcclient")
        try fileManager.moveItem(atPath: share + "/old", toPath: share + "/dcclient")
    }

    @Test(
        "An upgraded user who names the app (DCCLIENT_APP=dcclient, --app dcclient) finds the older version's client moved into its container, not a client never set up"
    )
    func migrationWhenNamed() throws {
        let tools = try Tools("apps-migration-named")
        defer { tools.sandbox.remove() }
        try tools.setUpManagedClient()
        try tools.sandbox.write("note.txt", "kept across the move\n")
        try tools.check("dcclient", ["files", "put", "note", "note.txt"])
        let share = tools.sandbox.dataHome
        try Self.backToSingleLayout(tools)
        let viaVariable = try tools.sandbox.run(
            Binaries.directory + "/dcclient", ["files", "get", "note"], environment: ["DCCLIENT_APP": "dcclient"])
        #expect(viaVariable.status == 0, "\(viaVariable.stderrText)")
        #expect(viaVariable.stdoutText == "kept across the move\n")
        #expect(!FileManager.default.fileExists(atPath: share + "/dcclient/store"))
        try Self.backToSingleLayout(tools)
        let viaOption = try tools.run("dcclient", ["status", "--app", "dcclient"])
        #expect(viaOption.status == 0, "\(viaOption.stderrText)")
        #expect(viaOption.stdoutText.contains("authorization:    authorized"), "\(viaOption.stdoutText)")
    }

    @Test(
        "Attack: the move fails or is killed midway (strace injects EIO into its final rename, or SIGKILL at the registration's rename or the final one): the client is whole in one place, old or new, and the next command naming the app finishes the move",
        .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/strace"))
    )
    func migrationInterrupted() throws {
        let tools = try Tools("apps-migration-cut")
        defer { tools.sandbox.remove() }
        try tools.setUpManagedClient()
        try tools.sandbox.write("note.txt", "kept across the move\n")
        try tools.check("dcclient", ["files", "put", "note", "note.txt"])
        let share = tools.sandbox.dataHome
        let registration = share + "/derived-credentials/clients/org.example.dcclient.json"
        let places = [share + "/dcclient", share + "/dcclient.moving", share + "/dcclient/apps/dcclient"]
        // strace's fault injection makes the kernel's own call fail or the process die at it: EIO
        // stands in for a failing disk, SIGKILL for a crash or power cut at exactly that step. The
        // move's two renames are the process's only rename(2) calls (the atomic file writer uses
        // renameat); the registration is the first file it writes (renameat).
        let faults: [(String, [String])] = [
            ("the final rename fails", ["-e", "inject=rename:error=EIO:when=2"]),
            ("killed at the final rename", ["-e", "inject=rename:signal=KILL:when=2"]),
            ("killed at the registration's rename", ["-e", "inject=renameat:signal=KILL:when=1"]),
        ]
        for (what, fault) in faults {
            try Self.backToSingleLayout(tools)
            let cut = try tools.sandbox.run(
                "/usr/bin/strace",
                ["-f", "-qq", "-o", tools.sandbox.file("strace.log"), "-e", "trace=rename,renameat,renameat2"] + fault
                    + ["--", Binaries.directory + "/dcclient", "status"],
                environment: ["DCCLIENT_APP": "dcclient"])
            let trace = (try? readText(tools.sandbox.file("strace.log"))) ?? ""
            #expect(cut.status != 0, "\(what): \(cut.stdoutText) \(cut.stderrText) \(trace)")
            // The fault was injected where it was meant to be.
            #expect(trace.contains("(INJECTED)") || trace.contains("killed by SIGKILL"), "\(what): \(trace)")
            // Whole in one place: one configuration, and the secure file beside it.
            let whole = places.filter { FileManager.default.fileExists(atPath: $0 + "/store/client.json") }
            #expect(whole.count == 1, "\(what): \(whole) \(trace)")
            if let place = whole.first {
                #expect(
                    try FileManager.default.contentsOfDirectory(atPath: place + "/store/files").count == 1,
                    "\(what)")
            }
            // The next command, naming the app, finishes the move: the registration names the container.
            let next = try tools.sandbox.run(
                Binaries.directory + "/dcclient", ["files", "get", "note"], environment: ["DCCLIENT_APP": "dcclient"])
            #expect(next.status == 0 && next.stdoutText == "kept across the move\n", "\(what): \(next.stderrText)")
            #expect(!FileManager.default.fileExists(atPath: share + "/dcclient.moving"), "\(what)")
            #expect(!FileManager.default.fileExists(atPath: share + "/dcclient/store"), "\(what)")
            #expect(
                try readText(registration).contains("dcclient/apps/dcclient/spool"), "\(what): \(trace)")
        }
    }

    @Test(
        "Both layouts at once (an older version set up again beside the containers, or a container taken by the client being moved): one line naming both and what to do, exit 78, nothing moved"
    )
    func migrationConflict() throws {
        let tools = try Tools("apps-migration-both")
        defer { tools.sandbox.remove() }
        try tools.setUpManagedClient()
        let share = tools.sandbox.dataHome
        let fileManager = FileManager.default
        // An older version's client beside the containers: a copy of the store at the old place.
        try fileManager.copyItem(atPath: share + "/dcclient/apps/dcclient/store", toPath: share + "/dcclient/store")
        for arguments in [["status"], ["status", "--app", "dcclient"], ["apps"]] {
            let refused = try tools.run("dcclient", arguments)
            #expect(refused.status == 78, "\(arguments): \(refused.stderrText)")
            #expect(refused.stderrText.split(separator: "\n").count == 1, "\(refused.stderrText)")
            #expect(
                refused.stderrText.contains("both an older version's client and app containers are here"),
                "\(refused.stderrText)")
        }
        let named = try tools.sandbox.run(
            Binaries.directory + "/dcclient", ["status"], environment: ["DCCLIENT_APP": "dcclient"])
        #expect(named.status == 78, "\(named.stderrText)")
        #expect(fileManager.fileExists(atPath: share + "/dcclient/store/client.json"))
        #expect(fileManager.fileExists(atPath: share + "/dcclient/apps/dcclient/store/client.json"))
        // A move cut short whose container is set up meanwhile: the aside client is not poured into it.
        try fileManager.moveItem(atPath: share + "/dcclient/store", toPath: share + "/aside-store")
        try fileManager.createDirectory(atPath: share + "/dcclient.moving", withIntermediateDirectories: false)
        try fileManager.moveItem(atPath: share + "/aside-store", toPath: share + "/dcclient.moving/store")
        let taken = try tools.run("dcclient", ["status", "--app", "dcclient"])
        #expect(taken.status == 78, "\(taken.stderrText)")
        #expect(taken.stderrText.split(separator: "\n").count == 1, "\(taken.stderrText)")
        #expect(taken.stderrText.contains("holds another client already"), "\(taken.stderrText)")
        #expect(fileManager.fileExists(atPath: share + "/dcclient.moving/store/client.json"))
        // Settled by the user (the copy removed), every command works again.
        try fileManager.removeItem(atPath: share + "/dcclient.moving")
        try tools.check("dcclient", ["status"])
    }

    @Test(
        "A policy reaches a locked app at once: a second unauthorize shows its new message without an unlock; the acknowledgement follows the unlock"
    )
    func policyWhileLocked() throws {
        let tools = try Tools("apps-policy-locked")
        defer { tools.sandbox.remove() }
        try tools.setUpManagedClient()
        let scheme = ["--client-scheme", "org.example.dcclient"]
        try tools.check("dcprovision", ["unauthorize"] + scheme + ["--message", "Device out of compliance"])
        // Unauthorized locks the store; the next policy comes while it is locked.
        #expect(try tools.check("dcclient", ["status"]).stdoutText.contains("(locked)"))
        try tools.check("dcprovision", ["unauthorize"] + scheme + ["--message", "Update the operating system"])
        let locked = try tools.check("dcclient", ["status"]).stdoutText
        #expect(locked.contains("message:          Update the operating system"), "\(locked)")
        #expect(locked.contains("(policy 4)"), "\(locked)")
        let waiting = try tools.check("dcprovision", ["status", "--json"]).stdoutText
        #expect(!waiting.contains("\"policy\" : 4,\n        \"state\" : \"applied\""), "\(waiting)")
        // Unlocked: the app announces availability, the provider opens it again, it is acknowledged.
        try tools.check("dcclient", ["unlock", "--passphrase-file", "pass.txt"])
        let provider = try tools.check("dcprovision", ["status", "--json"]).stdoutText
        #expect(provider.contains("\"policy\" : 4"), "\(provider)")
        #expect(provider.contains("\"state\" : \"applied\""), "\(provider)")
    }

    @Test("The app answers a policy with error and says why: dcclient acknowledge --error TEXT; the provider shows it")
    func acknowledgeWithError() throws {
        let tools = try Tools("apps-ack-error")
        defer { tools.sandbox.remove() }
        try tools.setUpManagedClient()
        // Acknowledgements are ordered by their second: the next one must be signed later.
        sleep(1)
        let answered = try tools.check("dcclient", ["acknowledge", "--error", "Cannot enforce the screen lock"])
        #expect(answered.stdoutText.contains("acknowledged: error"), "\(answered.stdoutText)")
        let provider = try tools.check("dcprovision", ["status", "--json"]).stdoutText
        #expect(provider.contains("\"message\" : \"Cannot enforce the screen lock\""), "\(provider)")
        #expect(provider.contains("\"state\" : \"error\""), "\(provider)")
        // Applied again, later: the provider keeps the newest answer.
        sleep(1)
        try tools.check("dcclient", ["acknowledge"])
        let after = try tools.check("dcprovision", ["status", "--json"]).stdoutText
        #expect(!after.contains("Cannot enforce the screen lock"), "\(after)")
    }
}
