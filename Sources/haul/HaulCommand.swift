import ArgumentParser
import Foundation
import Haul
import HaulCore
import Logging

/// The `haul` command: a resumable download manager.
///
/// Every command names itself (`commandName`): without it, swift-argument-parser derives the name with
/// `String(describing:)` of the type, for every subcommand it compares, and each of those asks the runtime for
/// several protocol conformances, a scan of the whole static binary's conformance records the first time, at every
/// command's start.
struct HaulCommand: AsyncParsableCommand {
    /// The name `Main` gives each subcommand it parses on its own (`parsedAlone`).
    static let name = "haul"
    static let configuration = CommandConfiguration(
        commandName: name,
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

/// A command that bootstraps logging itself, at a level its flags choose.
protocol SetsLogLevel {}

extension HaulCommand.Get: SetsLogLevel {}
extension HaulCommand.Serve: SetsLogLevel {}

@main
enum Main {
    static func main() async {
        // A reader of standard output or error that goes away (`| head`) must not end a download: its writes fail
        // and are dropped (`Console`) instead of the signal killing the process.
        signal(SIGPIPE, SIG_IGN)
        let arguments = Array(CommandLine.arguments.dropFirst())
        // A subcommand is parsed as a command of its own: through the root, swift-argument-parser first tries the
        // arguments as a request for a completion script (two more commands parsed) and reads the subcommand's
        // arguments twice, and each of those steps asks the runtime for conformances it has not seen yet, each a scan
        // of the whole binary's conformance records. Each subcommand names `haul` as its super-command
        // (`parsedAlone`), so its usage, help and errors read as they do through the root; completion scripts come
        // from `haul --generate-completion-script`. A subcommand given nothing goes through the root all the same:
        // parsed alone, one that needs an argument would answer with its whole help instead of the usage error.
        if arguments.count > 1, let name = arguments.first,
            let command = HaulCommand.configuration.subcommands.first(where: { $0._commandName == name })
        {
            await run(command, Array(arguments.dropFirst()))
        } else {
            await run(HaulCommand.self, arguments)
        }
    }

    /// Parses `arguments` with `command` as the root and runs what they name; a usage error exits 2, as the
    /// interface promises (ArgumentParser's own default is 64).
    static func run(_ root: any ParsableCommand.Type, _ arguments: [String]) async {
        do {
            var command = try root.parseAsRoot(arguments)
            // `haul get` (-v) and `haul serve` (--log-level) set their own level; every other command prints the
            // engine's warnings and errors only, in haul's words (`haul: warning: …`), not its notices in swift-log's format.
            if !(command is any SetsLogLevel) {
                LoggingSystem.bootstrap { label in
                    StandardErrorLogHandler(label: label, level: .warning, style: .command)
                }
            }
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            if root.exitCode(for: error) == .validationFailure {
                var message = root.fullMessage(for: error)
                if let parent = root.configuration._superCommandName {
                    // ArgumentParser's pointer to the help leaves the super-command out.
                    let name = root._commandName
                    message = message.replacingOccurrences(
                        of: "See '\(name) --help'", with: "See '\(parent) \(name) --help'")
                }
                Console.error(Data((message + "\n").utf8))
                exit(2)
            }
            root.exit(withError: error)
        }
    }
}

extension CommandConfiguration {
    /// A subcommand's configuration as `Main` parses it on its own, with `haul` as the root: `haul` as its
    /// super-command, so that its usage and help name it `haul NAME`, and the root's version (`haul NAME --version`
    /// answers, and the help lists it, as through the root).
    func parsedAlone() -> CommandConfiguration {
        var configuration = self
        configuration._superCommandName = HaulCommand.name
        configuration.version = HaulVersion.current
        return configuration
    }
}
