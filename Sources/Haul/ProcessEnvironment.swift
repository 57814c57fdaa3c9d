import Foundation

/// The process's environment variables, read once when first asked. `ProcessInfo.environment` builds a new
/// dictionary of every variable on each call, and a download asks three times (its proxy, its `.netrc`'s `$HOME`,
/// the connection ramp). Like curl and aria2, which read their
/// proxy variables at start, Haul does not see a variable changed while it runs.
enum ProcessEnvironment {
    static let variables = ProcessInfo.processInfo.environment
    /// Whether a variable names a proxy (`http_proxy`, `ALL_PROXY`, `no_proxy`, …): when none does and the command
    /// line sets no proxy, every request connects directly without looking the variables up.
    static let namesProxy = variables.keys.contains { $0.lowercased().hasSuffix("_proxy") }
}
