import ArgumentParser
import Foundation
import TOMLKit

/// The config file: `--config FILE`, else `$XDG_CONFIG_HOME/haul/config.toml` (`~/.config/haul/config.toml`) when it
/// exists. It is TOML, and each of its keys is the long name of a `haul serve` flag, with the value that flag takes:
///
///     listen = "127.0.0.1:7165"
///     jobs = 4
///     limit-rate = "2M"
///     schedule = ["mon-fri 09:00-18:00 rate=512K", "sat,sun pause"]
///     allow-dir = ["/srv/media", "/srv/iso"]
///     on-complete = "notify-send 'Haul' \"$HAUL_PATH\""
///     webhook = "https://example.com/hooks/haul"
///     webhook-secret-file = "/etc/haul/webhook.secret"
///
/// A flag given on the command line wins over its key (a repeatable flag replaces the key's whole list). `haul get`
/// takes the hooks and webhooks from it and leaves the daemon's keys to the daemon. A key Haul does not know, or a
/// value of the wrong kind or out of range, is refused with the file's name and the key's line.
struct ConfigFile {
    /// Where it was read from.
    let path: String
    /// Its keys, in the order of their lines, with their values as a flag would take them (one or several).
    let entries: [Entry]

    struct Entry {
        var key: String
        var values: [String]
        var line: Int
    }

    /// The keys a config file may have: the flags of `haul serve`, with whether each takes several values.
    static let keys: [String: Bool] = [
        "listen": false, "download-dir": false, "allow-dir": true, "allow-host": true, "state-dir": false,
        "store": false, "worker": false, "lease": false, "fleet-jobs": false, "jobs": false, "limit-rate": false,
        "max-connections-per-host": false, "connections": false, "token-file": false, "tls-cert": false,
        "tls-key": false, "log-level": false, "on-complete": true, "on-error": true, "webhook": true,
        "webhook-secret-file": false, "hook-timeout": false, "schedule": true, "refresh-command": false,
        "max-per-host": false, "sort": true,
    ]

    /// The default place: `$XDG_CONFIG_HOME/haul/config.toml`, else `~/.config/haul/config.toml`.
    static var defaultPath: String {
        let environment = ProcessInfo.processInfo.environment
        let base =
            environment["XDG_CONFIG_HOME"].flatMap { $0.isEmpty ? nil : $0 }
            ?? (NSHomeDirectory() as NSString).appendingPathComponent(".config")
        return (base as NSString).appendingPathComponent("haul/config.toml")
    }

    /// The file `explicit` names (which must exist), else the default one if there is one.
    static func load(_ explicit: String?) throws -> ConfigFile? {
        let path = explicit ?? defaultPath
        guard let data = FileManager.default.contents(atPath: path) else {
            if explicit == nil && !FileManager.default.fileExists(atPath: path) { return nil }
            throw ValidationError("the config file \(path) cannot be read")
        }
        return try ConfigFile(path: path, text: String(decoding: data, as: UTF8.self))
    }

    init(path: String, text: String) throws {
        self.path = path
        let table: TOMLTable
        do { table = try TOMLTable(string: text) } catch let error as TOMLParseError {
            throw ValidationError("\(path):\(error.source.begin.line): \(error.description)")
        }
        let lines = Self.keyLines(text)
        var entries: [Entry] = []
        for (key, value) in table {
            let line = lines[key] ?? 0
            func refuse(_ problem: String) -> ValidationError { ValidationError("\(path):\(line): \(key): \(problem)") }
            guard let several = Self.keys[key] else {
                throw refuse(
                    "not a setting of Haul (the keys are haul serve's long flags: \(Self.keys.keys.sorted().joined(separator: ", ")))"
                )
            }
            var values: [String]
            if let array = value.array {
                guard several else { throw refuse("takes one value, not a list") }
                values = []
                for item in array {
                    guard let text = Self.text(of: item.tomlValue) else {
                        throw refuse("a list of strings or numbers is expected")
                    }
                    values.append(text)
                }
            } else if let text = Self.text(of: value.tomlValue) {
                values = [text]
            } else {
                throw refuse("a \(several ? "string, number or list" : "string or number") is expected")
            }
            entries.append(Entry(key: key, values: values, line: line))
        }
        self.entries = entries.sorted { $0.line < $1.line }
    }

    private static func text(of value: TOMLValue) -> String? {
        switch value.type {
        case .string: value.string
        case .int: value.int.map(String.init)
        case .bool: value.bool.map(String.init)
        // As written, for the flag to take or refuse by its own rule: `hook-timeout = 1.5` is a time, `jobs = 2.5`
        // is "not a whole number".
        case .double: value.double.map { String($0) }
        default: nil
        }
    }

    /// The line of each key of the top table (and of each table's header, which is no key Haul knows): TOMLKit
    /// gives positions for syntax errors only.
    static func keyLines(_ text: String) -> [String: Int] {
        var lines: [String: Int] = [:]
        var inTable = false
        for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.drop(while: { $0 == " " || $0 == "\t" })
            if line.hasPrefix("[") {
                let name = line.drop(while: { $0 == "[" }).prefix(while: { $0 != "]" && $0 != "." })
                let key = name.trimmingCharacters(in: .whitespaces).trimmingCharacters(
                    in: CharacterSet(charactersIn: "\"'"))
                if lines[key] == nil { lines[key] = index + 1 }
                inTable = true
                continue
            }
            guard !inTable, let equals = line.firstIndex(of: "=") else { continue }
            let key = line[..<equals].trimmingCharacters(in: .whitespaces)
            let bare = key.split(separator: ".").first.map(String.init) ?? key
            let name = bare.trimmingCharacters(in: CharacterSet(charactersIn: "\"'"))
            if !name.isEmpty, lines[name] == nil, !name.hasPrefix("#") { lines[name] = index + 1 }
        }
        return lines
    }

    /// The entry of `key`, if the file has it.
    func entry(_ key: String) -> Entry? { entries.first { $0.key == key } }

    /// A refusal of `entry`'s value, with the file and line.
    func refusal(_ entry: Entry, _ problem: String) -> ValidationError {
        ValidationError("\(path):\(entry.line): \(entry.key): \(problem)")
    }
}
