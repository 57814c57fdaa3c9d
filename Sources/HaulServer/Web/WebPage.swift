import CompressNIO
import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// The web page's files (`Web/`, embedded in the binary): each with its content type, a strong `ETag` (a hash of
/// its bytes) and a gzip copy made once, served with a strict Content-Security-Policy.
struct WebAsset: Sendable {
    let contentType: String
    let plain: ByteBuffer
    let gzipped: ByteBuffer?
    let etag: String

    init(_ bytes: [UInt8], contentType: String) {
        self.contentType = contentType
        plain = ByteBuffer(bytes: bytes)
        etag = "\"" + SHA256.hash(data: bytes).prefix(12).map { String(format: "%02x", $0) }.joined() + "\""
        var source = plain
        let compressed = try? source.compress(with: .gzip())
        gzipped = compressed.flatMap { $0.readableBytes < bytes.count ? $0 : nil }
    }

    /// The page and its files, by path.
    static let all: [String: WebAsset] = [
        "/": WebAsset(PackageResources.index_html, contentType: "text/html; charset=utf-8"),
        "/app.js": WebAsset(PackageResources.app_js, contentType: "text/javascript; charset=utf-8"),
        "/app.css": WebAsset(PackageResources.app_css, contentType: "text/css; charset=utf-8"),
        "/icon.svg": WebAsset(PackageResources.icon_svg, contentType: "image/svg+xml"),
    ]

    /// Scripts and styles from this origin only (no inline script, no other origin), no frames, forms to itself.
    static let contentSecurityPolicy =
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        + "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

    /// The answer to `request`: 304 when the browser holds this version, gzip when it takes it.
    func response(to request: Request) -> Response {
        var headers: HTTPFields = [
            .contentType: contentType, .eTag: etag, .cacheControl: "no-cache", .vary: "Accept-Encoding",
            .contentSecurityPolicy: Self.contentSecurityPolicy, .xContentTypeOptions: "nosniff",
            // same-origin, not no-referrer: with no-referrer the browser sends `Origin: null` on the form's POST.
            HTTPField.Name("Referrer-Policy")!: "same-origin",
        ]
        if let held = request.headers[.ifNoneMatch],
            held.split(separator: ",").contains(where: {
                $0.trimmingCharacters(in: .whitespaces) == etag
            })
        {
            return Response(status: .notModified, headers: headers)
        }
        let acceptsGzip = request.headers[values: .acceptEncoding].contains { value in
            value.split(separator: ",").contains { token in
                let parts = token.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
                return parts.first == "gzip" && !parts.dropFirst().contains("q=0")
            }
        }
        if acceptsGzip, let gzipped {
            headers[.contentEncoding] = "gzip"
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: gzipped))
        }
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: plain))
    }
}

/// `/`: the page, and signing in to it. The URL `haul serve` prints (`/?token=…`) and the page's token form
/// (`POST /`) set the session cookie and send the browser to `/`; a wrong token goes back to the form with a
/// message. The page itself holds no data: it reads everything from the API, which needs the cookie.
enum SignIn {
    static func answer(_ request: Request, credentials: Credentials, secure: Bool) -> Response {
        if let token = request.uri.queryParameters.get("token") {
            return signIn(token: token, credentials: credentials, secure: secure)
        }
        return WebAsset.all["/"]!.response(to: request)
    }

    /// `POST /` with the form's `token` field.
    static func answerForm(_ request: Request, credentials: Credentials, secure: Bool) async throws -> Response {
        let body = try await request.body.collect(upTo: 16 * 1024)
        let form = String(buffer: body)
        var token = ""
        for pair in form.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1).map(String.init)
            if parts.first == "token", parts.count == 2 {
                token = parts[1].replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? ""
            }
        }
        return signIn(token: token, credentials: credentials, secure: secure)
    }

    private static func signIn(token: String, credentials: Credentials, secure: Bool) -> Response {
        guard credentials.isToken(token) else {
            return Response(status: .seeOther, headers: [.location: "/?signin=failed", .cacheControl: "no-store"])
        }
        var response = Response(status: .seeOther, headers: [.location: "/", .cacheControl: "no-store"])
        response.setCookie(
            Cookie(
                name: Credentials.cookieName, value: credentials.session, path: "/", secure: secure, httpOnly: true,
                sameSite: .strict))
        return response
    }
}
