import Foundation
import HTTPTypes
import Haul
import HaulAPI
import HaulCore
import HaulWire
import NIOCore
import OpenAPIRuntime

/// An error answer of the API: a status, a code and a message, and for a list of downloads the item and field.
/// Thrown by handlers and middleware; the error middleware writes it as `{"error": {...}}`.
public struct APIError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The HTTP status.
    public var status: HTTPResponse.Status
    /// What kind of error, for programs.
    public var code: String
    /// A sentence for people that names the problem.
    public var message: String
    /// For a list of downloads: the index of the invalid item.
    public var index: Int?
    /// The invalid field.
    public var field: String?
    /// For an invalid field: what is wrong with it, without the field's name (`must be between 1 and 16, not 40`).
    public var problem: String?

    /// Makes an error.
    public init(
        _ status: HTTPResponse.Status, _ code: String, _ message: String, index: Int? = nil, field: String? = nil
    ) {
        self.status = status
        self.code = code
        self.message = message
        self.index = index
        self.field = field
    }

    public var description: String { "\(status.code) \(code): \(message)" }

    /// Runs a check of `DownloadRules`; a value outside its rule is a 400 naming `field`.
    static func checking(
        _ field: String, index: Int? = nil, _ check: () throws(DownloadRules.RuleViolation) -> Void
    ) throws(APIError) {
        do { try check() } catch { throw invalidField(field, error.problem, index: index) }
    }

    /// An invalid value of a field.
    static func invalidField(_ field: String, _ message: String, index: Int? = nil) -> APIError {
        let place = index.map { "item \($0): " } ?? ""
        var error = APIError(.badRequest, "invalidField", "\(place)\(field): \(message)", index: index, field: field)
        error.problem = message
        return error
    }

    /// The answer for an engine error: 404 for an unknown download, 409 for a state that forbids the command or a
    /// file in the way, 400 for what the request got wrong, 500 for the daemon's own failures.
    init(_ error: DownloadError, index: Int? = nil, field: String? = nil) {
        let status: HTTPResponse.Status
        switch error.code {
        case .notFound: status = .notFound
        // A folder that does not exist or a folder where a file should go is the disk's state, not a malformed
        // request: the same request succeeds once the disk changes.
        case .illegalTransition, .destinationExists, .destinationNotWritable, .locked, .untrustedFile:
            status = .conflict
        case .invalidURL, .invalidArgument: status = .badRequest
        default: status = .internalServerError
        }
        let place = index.map { "item \($0): " } ?? ""
        self.init(status, error.code.description, place + error.message, index: index, field: field)
    }

    /// The JSON body.
    var body: Data {
        var object: [String: Any] = ["code": code, "message": message]
        if let index { object["index"] = index }
        if let field { object["field"] = field }
        return
            (try? JSONSerialization.data(
                withJSONObject: ["error": object], options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data()
    }
}

extension APIError: HTTPResponseConvertible {
    public var httpStatus: HTTPResponse.Status { status }
    public var httpHeaderFields: HTTPFields { [.contentType: "application/json"] }
    public var httpBody: HTTPBody? { HTTPBody(body) }
}

extension APIError {
    /// The answer for anything a request handler threw: an `APIError` as it is; what the generated code threw while
    /// reading the request (malformed JSON, a wrong type, an unknown field, a wrong content type) as a 400 or 415
    /// that names the field; anything else as a 500.
    static func from(_ error: any Error, body: ByteBuffer?) -> APIError {
        if let error = error as? APIError { return error }
        if let error = error as? DownloadError { return APIError(error) }
        // HaulWire's codec reading what its fast reader declined (`APIWire`).
        if let error = error as? DecodingError { return describe(error, body: body, query: nil) }
        if let error = error as? ServerError {
            if let inner = error.underlyingError as? APIError { return inner }
            if let inner = error.underlyingError as? DownloadError { return APIError(inner) }
            if let decoding = Self.decodingError(in: error.underlyingError) {
                // The runtime reads query parameters with a decoder of their own, whose errors do not name the
                // parameter: a request without a body names its query instead of "the body".
                let path = error.request.path ?? ""
                let query =
                    (body?.readableBytes ?? 0) == 0 ? path.firstIndex(of: "?").map { path[$0...].dropFirst() } : nil
                return describe(decoding, body: body, query: query.map(String.init))
            }
            switch error.httpStatus {
            case .unsupportedMediaType:
                return APIError(.unsupportedMediaType, "unsupportedMediaType", "send the body as application/json")
            case .badRequest, .notFound, .notAcceptable:
                let status: HTTPResponse.Status = error.httpStatus == .notAcceptable ? .badRequest : error.httpStatus
                return APIError(status, "badRequest", error.causeDescription + ": \(error.underlyingError)")
            default:
                return APIError(.internalServerError, "internal", "\(error.causeDescription): \(error.underlyingError)")
            }
        }
        return APIError(.internalServerError, "internal", String(describing: error))
    }

    /// The `DecodingError` inside the runtime's wrapping, if any.
    private static func decodingError(in error: any Error) -> DecodingError? {
        if let error = error as? DecodingError { return error }
        // RuntimeError.failedToParseRequest(DecodingError) is internal to the runtime: look inside by reflection.
        for child in Mirror(reflecting: error).children {
            if let inner = child.value as? DecodingError { return inner }
            if let inner = child.value as? any Error, let found = decodingError(in: inner) { return found }
        }
        return nil
    }

    /// A 400 naming the item and field a decoding error is about.
    private static func describe(_ error: DecodingError, body: ByteBuffer?, query: String?) -> APIError {
        var error = error
        // A body that may be an object or a list (adding downloads) fails as a whole; pick the attempt that matches
        // the body's shape: its first error for an object, its second for a list.
        if case .valueNotFound(_, let context) = error, let multi = context.underlyingError,
            let attempts = Mirror(reflecting: multi).children.first(where: { $0.label == "errors" })?.value
                as? [any Error],
            attempts.count == 2
        {
            let isList =
                body?.readableBytesView.first(where: { ![0x20, 0x09, 0x0A, 0x0D].contains($0) }) == UInt8(ascii: "[")
            if let chosen = attempts[isList ? 1 : 0] as? DecodingError { error = chosen }
        }
        let context: DecodingError.Context
        let problem: String
        switch error {
        case .typeMismatch(let type, let ctx):
            context = ctx
            problem = "must be \(Self.typeName(type))"
        case .valueNotFound(let type, let ctx):
            context = ctx
            problem = "must be \(Self.typeName(type)), not null"
        case .keyNotFound(let key, let ctx):
            context = DecodingError.Context(codingPath: ctx.codingPath + [key], debugDescription: ctx.debugDescription)
            problem = "is required"
        case .dataCorrupted(let ctx):
            context = ctx
            if ctx.debugDescription.hasPrefix("Additional properties are disabled") {
                problem = "is not a known field"
            } else if ctx.codingPath.isEmpty {
                return APIError(.badRequest, "malformedJSON", "the body is not valid JSON: \(ctx.debugDescription)")
            } else {
                problem = Self.outsideEnumeration(ctx.debugDescription) ?? "is not valid: \(ctx.debugDescription)"
            }
        @unknown default:
            return APIError(.badRequest, "malformedJSON", "the body cannot be read: \(error)")
        }
        let index = context.codingPath.first?.intValue
        let names = context.codingPath.filter { $0.intValue == nil }.map(\.stringValue)
        guard !names.isEmpty else {
            if let query {
                return APIError(.badRequest, "invalidQuery", "in the query '\(query)', a value \(problem)")
            }
            let place = index.map { "item \($0) " } ?? "the body "
            return APIError(.badRequest, "invalidBody", place + problem, index: index)
        }
        return .invalidField(names.joined(separator: "."), problem, index: index)
    }

    /// The values of the document's string enumerations, by the name of the type generated for each: a value
    /// outside one is told with the values the field takes, not in the decoder's words (which name that type).
    private static let enumerations: [String: [String]] = [
        "State": Components.Schemas.State.allCases.map(\.rawValue),
        "Priority": Components.Schemas.Priority.allCases.map(\.rawValue),
        "Origin": Components.Schemas.Origin.allCases.map(\.rawValue),
        "ToPayload": Components.Schemas.Move.ToPayload.allCases.map(\.rawValue),
    ]

    /// The problem of a value outside a string enumeration, from the decoder's "Cannot initialize TYPE from invalid
    /// String value VALUE"; nil for any other text.
    static func outsideEnumeration(_ description: String) -> String? {
        let prefix = "Cannot initialize ", middle = " from invalid String value "
        guard description.hasPrefix(prefix), let split = description.range(of: middle) else { return nil }
        let type = String(
            description[description.index(description.startIndex, offsetBy: prefix.count)..<split.lowerBound])
        let value = description[split.upperBound...]
        guard let values = enumerations[type] else { return "'\(value)' is not one of the values it takes" }
        return "'\(value)' is not one of \(values.joined(separator: ", "))"
    }

    private static func typeName(_ type: Any.Type) -> String {
        switch type {
        case is String.Type: "a string"
        case is Int.Type, is Int64.Type, is Int32.Type: "an integer"
        case is Double.Type, is Float.Type: "a number"
        case is Bool.Type: "true or false"
        default: "\(type)".contains("Array") ? "a list" : "an object"
        }
    }
}
