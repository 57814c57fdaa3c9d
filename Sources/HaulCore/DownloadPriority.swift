/// Where a download stands in the queue before its order of adding is considered.
public enum DownloadPriority: Int, Sendable, Codable, CaseIterable, Comparable {
    case low = -1
    case normal = 0
    case high = 1

    public static func < (lhs: DownloadPriority, rhs: DownloadPriority) -> Bool { lhs.rawValue < rhs.rawValue }
}
