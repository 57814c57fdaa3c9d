/// Classifies a response head against the request that was sent and what was known, before any byte of the body
/// touches the disk (the response rows of DESIGN.md's resume table).
public struct ResponseValidator: Sendable {
    /// What to do with the response.
    public enum Decision: Equatable, Sendable {
        /// Write the body at `offset`; its first `overlap` bytes must equal what the part file holds there.
        /// `expectedLength` is the body length the head announced, when it did.
        case write(at: Int64, overlap: Int64, expectedLength: Int64?, facts: RemoteFacts)
        /// Truncate the part file to 0 and write this same body from 0 (a 200: range ignored or file changed).
        case rewrite(expectedLength: Int64?, facts: RemoteFacts)
        /// The part file already holds the whole file (416 with the matching length).
        case complete(facts: RemoteFacts)
        /// Discard this body; discard the part file; ask again from 0 without `Range`.
        case restart(reason: String)
        /// Stop this attempt with the error (which says whether a retry may help).
        case fail(DownloadError)
    }

    /// Makes a validator.
    public init() {}

    /// Decides for `head`, the answer to `request`, given what was `known` and the part file's length.
    public func decide(request: RangeRequest, head: ResponseHead, known: RemoteFacts?, partLength: Int64) -> Decision {
        let validators = head.validators
        switch head.status {
        case 200, 206:
            if let coding = head.contentEncoding {
                return .fail(
                    DownloadError(
                        .contentEncoding,
                        "server sent the body with Content-Encoding \(coding) although identity was asked for; "
                            + "refusing to save encoded bytes"
                    )
                )
            }
            let announced: Int64?
            switch head.contentLength {
            case .absent: announced = nil
            case .length(let length): announced = length
            case .invalid(let why): return .fail(DownloadError(.invalidResponse, "invalid response: \(why)"))
            }
            if head.status == 200 {
                let rangeIgnored =
                    request.rangeStart != nil
                    && !(known.map { validators.isChanged(comparedTo: $0.validators) } ?? false)
                let facts = RemoteFacts(
                    totalLength: announced,
                    validators: validators,
                    isResumable: head.acceptsByteRanges && !head.refusesRanges && !rangeIgnored
                )
                return .rewrite(expectedLength: announced, facts: facts)
            }
            return decidePartial(request: request, head: head, announced: announced, known: known)
        case 416:
            guard let start = request.rangeStart else {
                return .fail(DownloadError(.invalidResponse, "server answered 416 to a request without Range"))
            }
            if case .unsatisfied(let total) = head.contentRange, request.overlap == 0, total == partLength,
                start == partLength, !(known.map { validators.isChanged(comparedTo: $0.validators) } ?? false)
            {
                let facts = RemoteFacts(
                    totalLength: total,
                    validators: validators.isEmpty ? (known?.validators ?? validators) : validators,
                    isResumable: true
                )
                return .complete(facts: facts)
            }
            return .restart(reason: "416 without a Content-Range matching the \(partLength) bytes held")
        case 300...399:
            return .fail(DownloadError(.tooManyRedirects, "server answered \(head.status) without a usable Location"))
        default:
            return .fail(LinkExpiry.error(for: head) ?? .httpStatus(head.status, retryAfter: head.retryAfter))
        }
    }

    private func decidePartial(request: RangeRequest, head: ResponseHead, announced: Int64?, known: RemoteFacts?)
        -> Decision
    {
        guard let start = request.rangeStart else {
            return .fail(DownloadError(.invalidResponse, "server answered 206 to a request that asked for no range"))
        }
        if head.isMultipart {
            return .restart(reason: "multipart/byteranges answer to a single range")
        }
        guard let range = head.contentRange, case .satisfied(let first, let last, let total) = range else {
            let raw = head.value("Content-Range") ?? "none"
            return .restart(reason: "206 with an unusable Content-Range (\(raw))")
        }
        guard first == start else {
            return .restart(reason: "206 starts at byte \(first), not at the requested \(start)")
        }
        if let announced, announced != last - first + 1 {
            return .restart(reason: "206 Content-Length \(announced) disagrees with Content-Range \(first)-\(last)")
        }
        if let knownTotal = known?.totalLength, let total, knownTotal != total {
            return .restart(reason: "the remote length changed from \(knownTotal) to \(total)")
        }
        let validators = head.validators
        if let known, validators.isChanged(comparedTo: known.validators) {
            return .restart(reason: "the remote file changed (validators differ)")
        }
        let facts = RemoteFacts(
            totalLength: total ?? known?.totalLength,
            validators: validators.isEmpty ? (known?.validators ?? validators) : validators,
            isResumable: true
        )
        return .write(at: request.offset, overlap: request.overlap, expectedLength: last - first + 1, facts: facts)
    }
}
