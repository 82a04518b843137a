import ArgumentParser
import CommandLineSupport
import DerivedCredentials
import Foundation
import ManagedClient

extension DCClient {
    /// `dcclient files …`: the managed app's secure files, encrypted under the store key and
    /// readable only while the client is unlocked.
    struct Files: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "files",
            abstract: "Secure files: encrypted under the store key, readable only while unlocked.",
            subcommands: [Put.self, Get.self, List.self, Move.self, Remove.self])

        struct Put: AsyncParsableCommand, OutputCommand {
            static let configuration = CommandConfiguration(
                commandName: "put",
                abstract: "Store FILE (or standard input) as the secure file NAME, replacing it atomically.")
            @Argument(help: "The secure file's name (1-255 bytes, no /, no leading .).") var name: String
            @Argument(help: "The file to read (default: standard input).") var file: String?
            @OptionGroup var app: AppOption
            @OptionGroup var output: OutputOptions

            func run() async throws {
                let files = try app.client().secureFiles
                let descriptor = file.map { open($0, O_RDONLY | O_CLOEXEC) } ?? 0
                guard descriptor >= 0 else {
                    throw DCError(.fileNotFound, "cannot open the file to store", subject: file)
                }
                defer { if file != nil { close(descriptor) } }
                // A regular file's size is the total; a pipe's is not known.
                var info = stat()
                let size = fstat(descriptor, &info) == 0 && (info.st_mode & S_IFMT) == S_IFREG ? Int(info.st_size) : nil
                let progress = ProgressLine("storing \(name)", total: size, unit: .bytes)
                defer { progress.finish() }
                try files.write(to: name, fromDescriptor: descriptor) { progress.set(done: $0) }
                progress.finish()
                Console.say("stored \(name)")
            }
        }

        struct Get: AsyncParsableCommand, OutputCommand {
            static let configuration = CommandConfiguration(
                commandName: "get",
                abstract: "Write the secure file NAME to standard output.",
                discussion: "On an error nothing more is written and the exit status says so; discard what came.")
            @Argument(help: "The secure file's name.") var name: String
            @OptionGroup var app: AppOption
            @OptionGroup var output: OutputOptions

            func run() async throws {
                let progress = ProgressLine("reading \(name)", unit: .bytes)
                defer { progress.finish() }
                try app.client().secureFiles.read(name) {
                    StandardStream.output.write(bytes: $0)
                    progress.advance(by: $0.count)
                }
                progress.finish()
            }
        }

        struct List: AsyncParsableCommand, OutputCommand {
            static let configuration = CommandConfiguration(
                commandName: "ls", abstract: "List the secure files' names.")
            @OptionGroup var app: AppOption
            @OptionGroup var output: OutputOptions

            func run() async throws {
                for name in try app.client().secureFiles.list() { Console.print(name) }
            }
        }

        struct Move: AsyncParsableCommand, OutputCommand {
            static let configuration = CommandConfiguration(
                commandName: "mv", abstract: "Rename the secure file OLD to NEW (refused if NEW exists).")
            @Argument(help: "The current name.") var old: String
            @Argument(help: "The new name.") var new: String
            @OptionGroup var app: AppOption
            @OptionGroup var output: OutputOptions

            func run() async throws {
                try app.client().secureFiles.rename(old, to: new)
                Console.say("renamed \(old) to \(new)")
            }
        }

        struct Remove: AsyncParsableCommand, OutputCommand {
            static let configuration = CommandConfiguration(
                commandName: "rm", abstract: "Remove the secure file NAME.")
            @Argument(help: "The secure file's name.") var name: String
            @OptionGroup var app: AppOption
            @OptionGroup var output: OutputOptions

            func run() async throws {
                try app.client().secureFiles.remove(name)
                Console.say("removed \(name)")
            }
        }
    }
}
