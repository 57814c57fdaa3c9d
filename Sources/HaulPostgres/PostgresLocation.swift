import Foundation
import HaulCore
import NIOSSL
import PostgresNIO

/// Where a shared store lives: `postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?sslmode=MODE]` (also `postgresql://`), as
/// libpq and every PostgreSQL tool write it. User and password may be percent-encoded.
///
/// Without a password in the URL, `$PGPASSWORD` gives it, as with libpq. `sslmode` means what it means to libpq: `disable`; `allow` and `prefer` (the default) use TLS when the server
/// offers it, without checking its certificate; `require` insists on TLS without checking the certificate;
/// `verify-ca` checks the certificate against the system's authorities; `verify-full` checks the host name too.
/// Other parameters are refused by name rather than ignored, so a setting the user relies on is never dropped.
///
/// The password is never part of what this prints: `description` is the URL without it, for logs, errors and the
/// API.
public struct PostgresLocation: Sendable, Equatable, CustomStringConvertible {
    public enum TLSMode: String, Sendable, CaseIterable {
        case disable, allow, prefer, require
        case verifyCA = "verify-ca"
        case verifyFull = "verify-full"
    }

    public var username: String
    public var password: String?
    public var host: String
    public var port: Int
    public var database: String
    public var tls: TLSMode

    static let form = "postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?sslmode=MODE]"

    /// Parses a store URL; the error names what is wrong, never the password.
    public init(_ text: String) throws(DownloadError) {
        // The text itself is never quoted back: it may hold the password.
        func refuse(_ problem: String) -> DownloadError {
            DownloadError(.invalidArgument, "the store URL \(problem) (expected \(Self.form))")
        }
        guard let components = URLComponents(string: text), let scheme = components.scheme?.lowercased() else {
            throw refuse("is not a URL")
        }
        guard scheme == "postgres" || scheme == "postgresql" else {
            throw refuse("has the scheme \(scheme); only postgres:// is a store")
        }
        guard let user = components.user, !user.isEmpty else { throw refuse("names no user") }
        guard let host = components.host, !host.isEmpty else { throw refuse("names no host") }
        let database = String(components.path.drop { $0 == "/" })
        guard !database.isEmpty, !database.contains("/") else { throw refuse("names no database (…/DB)") }
        var tls = TLSMode.prefer
        for item in components.queryItems ?? [] {
            guard item.name == "sslmode" else {
                throw refuse("has the parameter \(item.name), which Haul does not know")
            }
            guard let value = item.value, let mode = TLSMode(rawValue: value) else {
                let modes = TLSMode.allCases.map(\.rawValue).joined(separator: ", ")
                throw refuse("has sslmode=\(item.value ?? ""); it must be one of \(modes)")
            }
            tls = mode
        }
        username = components.percentEncodedUser.flatMap { $0.removingPercentEncoding } ?? user
        // As libpq: a URL without a password takes $PGPASSWORD's (so it need not be on a command line).
        password =
            components.percentEncodedPassword.flatMap { $0.removingPercentEncoding }
            ?? ProcessInfo.processInfo.environment["PGPASSWORD"].flatMap { $0.isEmpty ? nil : $0 }
        self.host = host
        port = components.port ?? 5432
        self.database = database.removingPercentEncoding ?? database
        self.tls = tls
    }

    /// The URL without the password.
    public var description: String {
        let user = username.addingPercentEncoding(withAllowedCharacters: .urlUserAllowed) ?? username
        let shownHost = host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
        let mode = tls == .prefer ? "" : "?sslmode=\(tls.rawValue)"
        return "postgres://\(user)@\(shownHost):\(port)/\(database)\(mode)"
    }

    /// Where it is, for messages: host, port and database.
    public var place: String { "\(host):\(port) (database \(database))" }

    /// How postgres-nio connects to it, TLS as `sslmode` asks.
    func connectionConfiguration() throws -> PostgresConnection.Configuration {
        PostgresConnection.Configuration(
            host: host, port: port, username: username, password: password, database: database, tls: try connectionTLS()
        )
    }

    func connectionTLS() throws -> PostgresConnection.Configuration.TLS {
        var configuration = TLSConfiguration.makeClientConfiguration()
        switch tls {
        case .disable: return .disable
        case .allow, .prefer:
            configuration.certificateVerification = .none
            return .prefer(try NIOSSLContext(configuration: configuration))
        case .require: configuration.certificateVerification = .none
        case .verifyCA: configuration.certificateVerification = .noHostnameVerification
        case .verifyFull: break
        }
        return .require(try NIOSSLContext(configuration: configuration))
    }
}
