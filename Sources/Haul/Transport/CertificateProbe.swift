import Foundation
import HaulCore
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS

/// Looks at the certificate a server shows, after verification rejected it, to say why: the TLS library only
/// reports that verification failed. The probe opens one more connection with verification off, completes the
/// handshake, reads the certificate and closes; it sends no request. Five seconds at most; nil when it cannot tell.
enum CertificateProbe {
    static func problem(host: String, port: Int, configuration: TLSConfiguration?) async -> CertificateProblem? {
        var tls = configuration ?? TLSConfiguration.makeClientConfiguration()
        tls.certificateVerification = .none
        guard let context = try? NIOSSLContext(configuration: tls) else { return nil }
        let serverName = IPAddress(host) == nil ? host : nil
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        let handshake = loop.makePromise(of: Void.self)
        let timeout = loop.scheduleTask(in: .seconds(5)) { handshake.fail(ChannelError.connectTimeout(.seconds(5))) }
        defer { timeout.cancel() }
        do {
            let channel = try await ClientBootstrap(group: loop)
                .connectTimeout(.seconds(5))
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        let pipeline = channel.pipeline.syncOperations
                        try pipeline.addHandler(NIOSSLClientHandler(context: context, serverHostname: serverName))
                        try pipeline.addHandler(HandshakeWaiter(promise: handshake))
                    }
                }
                .connect(host: host, port: port).get()
            defer { channel.close(promise: nil) }
            try await handshake.futureResult.get()
            let facts = try await channel.eventLoop.submit {
                let handler = try channel.pipeline.syncOperations.handler(type: NIOSSLClientHandler.self)
                guard let certificate = handler.peerCertificate else { return nil as CertificateFacts? }
                return CertificateFacts(certificate)
            }.get()
            guard let facts else { return nil }
            return CertificateProblem.diagnose(
                host: host, dnsNames: facts.dnsNames, addresses: facts.addresses, notBefore: facts.notBefore,
                notAfter: facts.notAfter, now: Int64(Date().timeIntervalSince1970))
        } catch {
            handshake.fail(error)
            return nil
        }
    }

    /// What the diagnosis needs of a certificate.
    struct CertificateFacts: Sendable {
        var dnsNames: [String] = []
        var addresses: [[UInt8]] = []
        var notBefore: Int64
        var notAfter: Int64

        init(_ certificate: NIOSSLCertificate) {
            notBefore = Int64(certificate.notValidBefore)
            notAfter = Int64(certificate.notValidAfter)
            for name in certificate._subjectAlternativeNames() {
                if name.nameType == .dnsName {
                    dnsNames.append(String(decoding: Array(name.contents), as: UTF8.self))
                } else if name.nameType == .ipAddress {
                    addresses.append(Array(name.contents))
                }
            }
        }
    }

    /// Completes `promise` when the handshake completes or fails.
    final class HandshakeWaiter: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        let promise: EventLoopPromise<Void>

        init(promise: EventLoopPromise<Void>) { self.promise = promise }

        func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
            if let event = event as? TLSUserEvent, case .handshakeCompleted = event { promise.succeed() }
            context.fireUserInboundEventTriggered(event)
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            promise.fail(error)
            context.close(promise: nil)
        }

        func channelInactive(context: ChannelHandlerContext) {
            promise.fail(ChannelError.alreadyClosed)
            context.fireChannelInactive()
        }
    }
}
