/// Limits of the API that its clients plan by: the daemon enforces them, and `haul` keeps under them.
public enum APILimits {
    /// The most bytes of one request's body (413 beyond): a list of downloads longer than this is sent in parts.
    public static let requestBody = 8 << 20
}
