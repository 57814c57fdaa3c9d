import ArgumentParser
import Foundation
import Haul
import HaulCore

/// The state directory option shared by every command.
struct StateOptions: ParsableArguments {
    @Option(help: "Where Haul keeps its state (default: $HAUL_STATE_DIR, else $XDG_STATE_HOME/haul).")
    var stateDir: String?

    func openStore() throws -> DownloadStore {
        do {
            return try DownloadStore(directory: stateDir ?? DownloadManager.defaultStateDirectory())
        } catch {
            FileHandle.standardError.write(Data("haul: error: \(error.message)\n".utf8))
            throw ExitCode(1)
        }
    }

    /// The records whose ids start with each of `prefixes`; a prefix matching none or several is an error.
    func records(_ prefixes: [String], in store: DownloadStore) throws -> [DownloadRecord] {
        let all = try store.allRecords()
        return try prefixes.map { prefix in
            let matches = all.filter { $0.id.hasPrefix(prefix.lowercased()) }
            guard matches.count == 1 else {
                throw ValidationError(
                    matches.isEmpty
                        ? "no download with id \(prefix)" : "id \(prefix) matches \(matches.count) downloads")
            }
            return matches[0]
        }
    }
}

extension HaulCommand {
    /// `haul ls`: the downloads in the store.
    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "ls",
            abstract: "List the downloads in the store: id, state, progress, size, open connections, destination.")

        @OptionGroup var state: StateOptions

        @Flag(help: "Print a JSON array for scripts.")
        var json = false

        func run() throws {
            let records = try state.openStore().allRecords()
            if json {
                let objects: [[String: Any]] = records.map { record in
                    [
                        "id": record.id, "url": record.url, "state": record.state.rawValue,
                        "destination": record.destination ?? NSNull(), "bytes": record.durableOffset,
                        "total": record.totalLength ?? NSNull(), "error": record.lastError ?? NSNull(),
                        "connections": record.state == .running ? record.activeConnections : 0,
                    ]
                }
                let data = try JSONSerialization.data(withJSONObject: objects, options: [.sortedKeys])
                FileHandle.standardOutput.write(data + Data("\n".utf8))
                return
            }
            for record in records {
                let progress = record.totalLength.map { $0 > 0 ? "\(record.durableOffset * 100 / $0)%" : "100%" } ?? "-"
                let size = record.totalLength.map(Format.bytes) ?? "?"
                let place = record.destination ?? record.directory.map { $0 + "/" } ?? "?"
                let connections = record.state == .running ? "\(record.activeConnections)" : "-"
                print(
                    [
                        String(record.id.prefix(8)), Format.fit(record.state.rawValue, 17), Format.fit(progress, 5),
                        Format.fit(size, 10), Format.fit(connections, 3), place,
                    ].joined(separator: " "))
            }
        }
    }

    /// `haul rm ID…`: forget downloads.
    struct Remove: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "rm",
            abstract: "Forget downloads that are not running (ids or unique id prefixes, as `haul ls` shows).",
            discussion:
                "The part file of an unfinished download is deleted; --delete-file also deletes a completed file."
        )

        @OptionGroup var state: StateOptions

        @Argument(help: "Ids or unique id prefixes.")
        var ids: [String]

        @Flag(help: "Also delete the completed files.")
        var deleteFile = false

        func validate() throws {
            if ids.isEmpty { throw ValidationError("give at least one id (see haul ls)") }
        }

        func run() throws {
            let store = try state.openStore()
            for record in try state.records(ids, in: store) {
                guard record.state != .running else {
                    FileHandle.standardError.write(
                        Data("haul: error: \(record.id.prefix(8)) is running; stop that haul first\n".utf8))
                    throw ExitCode(1)
                }
                try forget(record, in: store, deletingFile: deleteFile)
            }
        }
    }

    /// `haul clean`: forget completed and cancelled downloads.
    struct Clean: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Forget completed and cancelled downloads (their files stay).")

        @OptionGroup var state: StateOptions

        func run() throws {
            let store = try state.openStore()
            let finished = try store.allRecords().filter { $0.state == .completed || $0.state == .cancelled }
            for record in finished { try forget(record, in: store, deletingFile: false) }
            print("haul: forgot \(finished.count) download\(finished.count == 1 ? "" : "s")")
        }
    }
}

/// Deletes a record, its part file, and with `deletingFile` its completed file.
func forget(_ record: DownloadRecord, in store: DownloadStore, deletingFile: Bool) throws {
    if let part = record.partPath { try? FileManager.default.removeItem(atPath: part) }
    if deletingFile, record.state == .completed, let path = record.destination {
        try? FileManager.default.removeItem(atPath: path)
    }
    try store.delete(id: record.id)
}
