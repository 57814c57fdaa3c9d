/// The fault server as a host of signed, temporary URLs (S3's presigned links): a link serves its file until its
/// deadline, then answers 403 with S3's "Request has expired" document. The deadline is a byte count, so a test
/// needs no clock: the first answer breaks after `deadline` bytes, and every later request is past it.
extension FaultServer.Resource {
    /// S3's answer to a presigned URL past its expiry.
    public static let expiredDocument = """
        <?xml version="1.0" encoding="UTF-8"?>
        <Error><Code>AccessDenied</Code><Message>Request has expired</Message><Expires>2026-11-27T10:00:00Z</Expires>\
        <ServerTime>2026-11-27T11:00:00Z</ServerTime></Error>
        """

    /// A signed link to `body` whose first `requests` answers break after `deadline` bytes; later ones get 403.
    public static func signed(_ body: [UInt8], etag: String = "\"v1\"", deadline: Int, requests: Int = 1) -> Self {
        var resource = Self(body: body) { index, _ in
            index < requests ? .cut(afterBytes: deadline) : .statusXML(403, body: expiredDocument)
        }
        resource.etag = etag
        return resource
    }
}
