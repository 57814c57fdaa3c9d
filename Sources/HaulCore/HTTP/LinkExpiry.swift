/// When a link has expired. Signed and temporary URLs (S3, Google Cloud Storage and Azure presigned links, CDN
/// tokens) stop working mid-download; retrying them only wastes minutes, and what the user needs is a new link for
/// the same file (`haul retry ID --url NEW`), which keeps the bytes held.
///
/// A link has expired when:
/// - it answers 401, 403 or 410 after bytes came from it (a 401 that fresh credentials or a new Digest nonce did not
///   cure: the transport answers challenges before the machine sees a 401);
/// - or its error body says so in the words of a presigned URL's host, whatever the bytes held: S3's `AccessDenied`
///   "Request has expired" and `ExpiredToken`, Google Cloud Storage's "The provided token has expired" and "Request
///   signature expired", Azure's "Signature not valid in the specified time frame" and "Signed expiry time".
public enum LinkExpiry {
    /// The statuses that mean an expired link once bytes came.
    public static let statuses: Set<Int> = [401, 403, 410]

    /// How many bytes of a 4xx answer's body are read to look for the phrases.
    public static let bodyPrefix = 4096

    /// Phrases of presigned URL hosts' error bodies that say the link expired.
    static let phrases = [
        "Request has expired", "<Code>ExpiredToken</Code>", "token has expired", "Request signature expired",
        "Signature not valid in the specified time frame", "Signed expiry time",
    ]

    /// Whether the transport should read the start of the body of an answer with `status`.
    public static func readsBody(status: Int) -> Bool { status == 400 || statuses.contains(status) }

    /// The error for `head`, an answer that ends the download: `linkExpired` when its body says so, else nil.
    public static func error(for head: ResponseHead) -> DownloadError? {
        guard let text = head.errorText, let phrase = phrases.first(where: { text.contains($0) }) else { return nil }
        return DownloadError(
            .linkExpired, "the link expired: give a new one (HTTP \(head.status): \"\(phrase)\")", status: head.status,
            isRetryable: false)
    }

    /// `error` as the download's failure once `held` bytes are held: a 401, 403 or 410 then means the link expired.
    public static func afterProgress(_ error: DownloadError, held: Int64) -> DownloadError {
        guard error.code == .httpStatus, let status = error.status, statuses.contains(status), held > 0 else {
            return error
        }
        return DownloadError(
            .linkExpired, "the link expired: give a new one (HTTP \(status) after \(held) bytes came from it)",
            status: status, isRetryable: false)
    }
}
