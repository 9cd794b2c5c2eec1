// A cloud lake's location: the bucket (or container) and the folder in it that a lake URL
// names, and the object names no request may carry.
#pragma once

#include <string>

#include <arrow/status.h>

namespace timelake {

/// True if `path` has a "." or ".." segment: URL normalisation somewhere between the client and
/// the service would resolve it (and sign or address something else), so it names no object.
bool HasDotSegment(const std::string& path);

/// Splits a lake URL "scheme://bucket/some/prefix" into the bucket and the prefix (no leading or
/// trailing '/'); Invalid, quoting `url` and the `example` of a good one, for an empty bucket or
/// an empty path segment.
arrow::Status SplitBucketAndPrefix(const std::string& url, const std::string& example,
                                   std::string* bucket, std::string* prefix);

}  // namespace timelake
