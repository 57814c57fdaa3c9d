import Foundation
import HTTPTypes
import Haul
import HaulAPI
import HaulCore
import HaulWire
import NIOCore
import NIOFoundationCompat
import OpenAPIRuntime
import ServiceLifecycle

/// The body of the request being handled, as the body middleware read it: how a handler tells a field sent as
/// `null` (remove the limit) from a field left out (keep it), which the generated types cannot.
enum RawBody {
    @TaskLocal static var bytes: ByteBuffer?

    /// Throws a 400 naming the first field sent as `null` that is not in `nullable` (the generated types read a
    /// null as a missing value, which the document does not allow).
    static func rejectNulls(allowing nullable: Set<String> = []) throws(APIError) {
        // Most bodies hold no null at all: a scan of the bytes says so without parsing a list of thousands into
        // Foundation objects.
        guard let bytes, containsNull(bytes),
            let value = try? JSONSerialization.jsonObject(with: Data(buffer: bytes))
        else { return }
        func check(_ object: [String: Any], index: Int?) throws(APIError) {
            for (key, field) in object.sorted(by: { $0.key < $1.key }) {
                if field is NSNull, !nullable.contains(key) {
                    throw APIError.invalidField(key, "must not be null", index: index)
                }
                if let nested = field as? [String: Any] {
                    for (name, inner) in nested where inner is NSNull {
                        throw APIError.invalidField("\(key).\(name)", "must not be null", index: index)
                    }
                }
            }
        }
        if let object = value as? [String: Any] { try check(object, index: nil) }
        if let list = value as? [Any] {
            for (index, item) in list.enumerated() {
                if let object = item as? [String: Any] { try check(object, index: index) }
            }
        }
    }

    /// Whether `bytes` holds the literal `null` outside a string.
    static func containsNull(_ buffer: ByteBuffer) -> Bool {
        buffer.withUnsafeReadableBytes { containsNull($0) }
    }

    static func containsNull(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var inString = false
        var escaped = false
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            if inString {
                if escaped {
                    escaped = false
                } else if byte == UInt8(ascii: "\\") {
                    escaped = true
                } else if byte == UInt8(ascii: "\"") {
                    inString = false
                }
            } else if byte == UInt8(ascii: "\"") {
                inString = true
            } else if byte == UInt8(ascii: "n"), index + 3 < bytes.count, bytes[index + 1] == UInt8(ascii: "u"),
                bytes[index + 2] == UInt8(ascii: "l"), bytes[index + 3] == UInt8(ascii: "l")
            {
                return true
            }
            index += 1
        }
        return false
    }

    /// Whether the body is a JSON object with `field` set to null.
    static func setsNull(_ field: String) -> Bool {
        guard let bytes, containsNull(bytes),
            let object = try? JSONSerialization.jsonObject(with: Data(buffer: bytes)) as? [String: Any]
        else {
            return false
        }
        return object[field] is NSNull
    }
}
