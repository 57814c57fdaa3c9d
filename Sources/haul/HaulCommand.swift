import ArgumentParser
import Foundation
import Haul
import HaulCore

/// The `haul` command: a resumable download manager.
///
/// Every command names itself (`commandName`): without it, swift-argument-parser derives the name with
/// `String(describing:)` of the type, for every subcommand it compares, and each of those asks the runtime for
/// several protocol conformances, a scan of the whole static binary's conformance records the first time, at every
/// command's start.
struct HaulCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "haul",
        abstract: "A resumable download manager that never loses a byte it already has.",
        discussion: """
            Downloads go to NAME.part beside the destination; the destination name appears only when the file is \
            complete and verified. Running the same command again resumes from what is on disk.
            `haul serve` keeps a queue running as a service; while it runs, every other command talks to it.
            """,
        version: HaulVersion.current,
        subcommands: [
            Get.self, Add.self, Watch.self, Pause.self, Resume.self, Cancel.self, Retry.self, List.self, Remove.self,
            Clean.self, Workers.self, Serve.self,
        ]
    )
}

@main
enum Main {
    static func main() async {
        do {
            var command = try HaulCommand.parseAsRoot()
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            // Bad usage exits 2, as the interface promises (ArgumentParser's own default is 64).
            if HaulCommand.exitCode(for: error) == .validationFailure {
                FileHandle.standardError.write(Data((HaulCommand.fullMessage(for: error) + "\n").utf8))
                exit(2)
            }
            HaulCommand.exit(withError: error)
        }
    }
}
