import Foundation
import SystemSupport
import TestSupport
import Testing

@Suite("dcclient files: secure files through the command line", .ownThreads, .timeLimit(.minutes(5)))
struct SecureFilesCommandTests {
    @Test("put, get, ls, mv, rm; locked is exit 69 with what to do; a missing file is exit 66")
    func commands() throws {
        let tools = try Tools("secure-files")
        defer { tools.sandbox.remove() }
        try tools.setUpManagedClient()
        let data = (0..<200_000).map { _ in UInt8.random(in: 0...255) }
        try Data(data).write(to: URL(fileURLWithPath: tools.sandbox.file("data.bin")))
        try tools.check("dcclient", ["files", "put", "report.bin", "data.bin"])
        #expect(try tools.check("dcclient", ["files", "get", "report.bin"]).stdout == data)
        #expect(try tools.check("dcclient", ["files", "ls"]).stdoutText == "report.bin\n")
        try tools.check("dcclient", ["files", "mv", "report.bin", "renamed.bin"])
        #expect(try tools.check("dcclient", ["files", "ls"]).stdoutText == "renamed.bin\n")
        #expect(try tools.run("dcclient", ["files", "get", "report.bin"]).status == 66)
        // The name is nowhere on disk in the clear.
        let files = tools.sandbox.dataHome + "/dcclient/apps/dcclient/store/files"
        #expect(try FileManager.default.contentsOfDirectory(atPath: files).allSatisfy { !$0.contains("renamed") })

        try tools.check("dcclient", ["lock"])
        for arguments in [["files", "get", "renamed.bin"], ["files", "put", "x", "data.bin"], ["files", "ls"]] {
            let locked = try tools.run("dcclient", arguments)
            #expect(locked.status == 69, "\(arguments)")
            #expect(locked.stderrText == "dcclient: the client is locked; run dcclient unlock\n")
            #expect(locked.stdout.isEmpty)
        }
        try tools.check("dcclient", ["unlock", "--passphrase-file", "pass.txt"])
        try tools.check("dcclient", ["files", "rm", "renamed.bin"])
        #expect(try tools.check("dcclient", ["files", "ls"]).stdoutText.isEmpty)
    }

    @Test(
        "kill -9 of dcclient files put at random points during 100 rewrites: the file opens to its old or new content"
    )
    func killDuringWrites() throws {
        let tools = try Tools("secure-files-kill")
        defer { tools.sandbox.remove() }
        try tools.setUpManagedClient()
        let dcclient = Binaries.directory + "/dcclient"
        func content(_ round: Int) -> [UInt8] {
            // 300 KiB: five chunks, so a kill can land between them. Each round's bytes differ.
            (0..<307_200).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ round &* 7) }
        }
        var previous = content(-1)
        try Data(previous).write(to: URL(fileURLWithPath: tools.sandbox.file("in.bin")))
        try tools.check("dcclient", ["files", "put", "doc", "in.bin"])
        var killedMidway = 0
        for round in 0..<100 {
            let next = content(round)
            try Data(next).write(to: URL(fileURLWithPath: tools.sandbox.file("in.bin")))
            let process = try SpawnedProcess(
                dcclient, ["files", "put", "doc", tools.sandbox.file("in.bin")], environment: tools.sandbox.environment)
            usleep(useconds_t.random(in: 0...60_000))
            process.kill()
            if let status = process.wait(), SpawnedProcess.wasSignaled(status) { killedMidway += 1 }
            let read = try tools.run("dcclient", ["files", "get", "doc"])
            #expect(read.status == 0, "round \(round): \(read.stderrText)")
            #expect(read.stdout == previous || read.stdout == next, "round \(round): a torn file")
            previous = read.stdout == next ? next : previous
        }
        #expect(killedMidway > 10, "the kills should land while the write runs (\(killedMidway) did)")
        // The next write removes what a killed one left behind.
        try tools.check("dcclient", ["files", "put", "doc", "in.bin"])
        let files = tools.sandbox.dataHome + "/dcclient/apps/dcclient/store/files"
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: files).allSatisfy {
                !$0.contains(AtomicFileSet.stagingMarker)
            })
    }
}
