import Foundation

/// The OpenAPI document the daemon's types and routes are generated from, as the daemon serves it.
public enum APIDocument {
    /// The document's bytes (`openapi.yaml`, embedded at build time).
    public static var yaml: [UInt8] { PackageResources.openapi_yaml }
}
