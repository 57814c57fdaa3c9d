import Foundation

/// A field a request body sent as null: its name (`key`, or `key.name` one object down) and the item of a list it
/// is in.
package struct NullField: Sendable, Equatable {
    package var name: String
    package var index: Int?

    package init(name: String, index: Int?) {
        self.name = name
        self.index = index
    }
}

/// A request body decoded once by Foundation's decoder into `Value`, with the fields it sent as `null`: the generated
/// types read a null as a missing value, but a PATCH tells them apart (`limitRate: null` removes the limit, a missing
/// `limitRate` keeps it), and the document allows a null nowhere else. The same decoding walks the body's fields
/// for the nulls: the body is parsed once.
package struct WithNulls<Value: Decodable>: Decodable {
    package typealias Field = NullField

    package let value: Value
    /// The fields sent as null, in the body's order of items and by name within each.
    package let nulls: [Field]

    package init(from decoder: any Decoder) throws {
        value = try Value(from: decoder)
        if let object = try? decoder.container(keyedBy: AnyKey.self) {
            nulls = Self.nulls(in: object, index: nil)
        } else if var list = try? decoder.unkeyedContainer() {
            var found: [Field] = []
            var index = 0
            while !list.isAtEnd {
                if let object = try? list.nestedContainer(keyedBy: AnyKey.self) {
                    found += Self.nulls(in: object, index: index)
                } else {
                    _ = try list.decode(Skipped.self)
                }
                index += 1
            }
            nulls = found
        } else {
            nulls = []
        }
    }

    /// Whether the body sent `name` (at the top) as null.
    package func isNull(_ name: String) -> Bool { nulls.contains(Field(name: name, index: nil)) }

    private static func nulls(in object: KeyedDecodingContainer<AnyKey>, index: Int?) -> [Field] {
        var found: [Field] = []
        for key in object.allKeys.sorted(by: { $0.stringValue < $1.stringValue }) {
            if (try? object.decodeNil(forKey: key)) == true {
                found.append(Field(name: key.stringValue, index: index))
            } else if let nested = try? object.nestedContainer(keyedBy: AnyKey.self, forKey: key) {
                for inner in nested.allKeys.sorted(by: { $0.stringValue < $1.stringValue })
                where (try? nested.decodeNil(forKey: inner)) == true {
                    found.append(Field(name: "\(key.stringValue).\(inner.stringValue)", index: index))
                }
            }
        }
        return found
    }

    /// Any key of an object.
    package struct AnyKey: CodingKey {
        package var stringValue: String
        package var intValue: Int? { nil }
        package init(stringValue: String) { self.stringValue = stringValue }
        package init?(intValue: Int) { nil }
    }

    /// Any value, passed over.
    private struct Skipped: Decodable {
        init(from decoder: any Decoder) throws {}
    }
}

extension WithNulls: Sendable where Value: Sendable {}
