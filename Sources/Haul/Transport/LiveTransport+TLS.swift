import AsyncHTTPClient
import Foundation
import HaulCore
import NIOSSL
import Synchronization

/// The TLS configurations of requests, made once per process for each set of options.
extension LiveTransport {
    /// The TLS configuration of a request; nil for the client's own (the system's roots, verified), so that the
    /// common case shares one connection pool. As OpenSSL-based tools do, `SSL_CERT_FILE` (a PEM bundle) and
    /// `SSL_CERT_DIR` (a folder of PEM certificates) replace the system's roots; `--cacert` and `--capath` add to
    /// whichever roots are in force.
    static func tlsConfiguration(_ options: TLSOptions, environment: [String: String]) throws -> TLSConfiguration? {
        let file = environment["SSL_CERT_FILE"].flatMap { $0.isEmpty ? nil : $0 }
        let folder = environment["SSL_CERT_DIR"].flatMap { $0.isEmpty ? nil : $0 }
        guard !options.isDefault || file != nil || folder != nil else { return nil }
        // Made once per process for each set of options: `--cacert` would otherwise be read again for every request.
        let key = TLSKey(options: options, file: file, folder: folder)
        if let known = tlsConfigurations.withLock({ $0[key] }) { return known }
        let made = try makeTLSConfiguration(options, file: file, folder: folder)
        tlsConfigurations.withLock { $0[key] = made }
        return made
    }

    private struct TLSKey: Hashable {
        var options: TLSOptions
        var file: String?
        var folder: String?
    }

    private static let tlsConfigurations = Mutex<[TLSKey: TLSConfiguration]>([:])

    private static func makeTLSConfiguration(
        _ options: TLSOptions, file: String?, folder: String?
    ) throws -> TLSConfiguration {
        var configuration = TLSConfiguration.makeClientConfiguration()
        switch (file, folder) {
        case (let file?, let folder):
            configuration.trustRoots = .file(file)
            if let folder { configuration.additionalTrustRoots.append(.certificates(try certificates(in: folder))) }
        case (nil, let folder?):
            configuration.trustRoots = .file(folder)
        case (nil, nil):
            break
        }
        if let bundle = options.caCertificates {
            do {
                configuration.additionalTrustRoots.append(.certificates(try NIOSSLCertificate.fromPEMFile(bundle)))
            } catch {
                throw DownloadError(.invalidArgument, "cannot use --cacert \(bundle): not a readable PEM bundle")
            }
        }
        if let folder = options.caDirectory {
            configuration.additionalTrustRoots.append(.certificates(try certificates(in: folder)))
        }
        if options.insecure { configuration.certificateVerification = .none }
        if let certificate = options.clientCertificate {
            do {
                configuration.certificateChain = try NIOSSLCertificate.fromPEMFile(certificate).map { .certificate($0) }
                configuration.privateKey = .privateKey(
                    try NIOSSLPrivateKey(file: options.clientKey ?? certificate, format: .pem))
            } catch {
                throw DownloadError(
                    .invalidArgument,
                    "cannot use the client certificate \(certificate)\(options.clientKey.map { " with the key \($0)" } ?? ""): "
                        + "not a readable PEM certificate and key")
            }
        }
        return configuration
    }

    /// The PEM certificates of a folder (as `--capath` and `SSL_CERT_DIR` name them; files that are not certificates
    /// are skipped), read once per process.
    static func certificates(in folder: String) throws -> [NIOSSLCertificate] {
        if let known = folderCertificates.withLock({ $0[folder] }) { return known }
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: folder) else {
            throw DownloadError(.invalidArgument, "cannot read the certificate folder \(folder)")
        }
        var found: [NIOSSLCertificate] = []
        var seen = Set<NIOSSLCertificate>()
        for name in names.sorted() {
            for certificate in (try? NIOSSLCertificate.fromPEMFile(folder + "/" + name)) ?? []
            where seen.insert(certificate).inserted {
                found.append(certificate)
            }
        }
        folderCertificates.withLock { $0[folder] = found }
        return found
    }

    private static let folderCertificates = Mutex<[String: [NIOSSLCertificate]]>([:])
}

/// The command line's client of a daemon over HTTPS (`--server https://…`): verified as downloads are, against the
/// system's roots or those `SSL_CERT_FILE` and `SSL_CERT_DIR` name, with `caCertificates` added (a daemon's
/// self-signed certificate, or the CA of a private one).
extension LiveTransport {
    package static func clientConfiguration(trusting caCertificates: String?) throws(DownloadError)
        -> HTTPClient.Configuration
    {
        var configuration = HTTPClient.Configuration()
        // A refused connection or a failed handshake is told at once, as curl tells it; AsyncHTTPClient's default
        // tries again for the whole connect timeout (10 s) before saying anything.
        configuration.connectionPool.retryConnectionEstablishment = false
        let options = TLSOptions(caCertificates: caCertificates)
        if let caCertificates, (try? NIOSSLCertificate.fromPEMFile(caCertificates))?.isEmpty != false {
            throw DownloadError(.invalidArgument, "\(caCertificates) holds no PEM certificate that can be read")
        }
        do {
            if let tls = try tlsConfiguration(options, environment: ProcessInfo.processInfo.environment) {
                configuration.tlsConfiguration = tls
            }
        } catch let error as DownloadError {
            throw error
        } catch {
            throw DownloadError(.invalidArgument, "cannot use the certificates: \(error)")
        }
        return configuration
    }
}
