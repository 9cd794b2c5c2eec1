// The times cloud services write: HTTP dates in headers, RFC 3339 times in listings.
#pragma once

#include <cstdint>
#include <string>

namespace timelake {

/// Milliseconds since the epoch of an HTTP date ("Wed, 21 Oct 2015 07:28:00 GMT") or an RFC 3339
/// time ("2015-10-21T07:28:00.123Z"). A time that cannot be read counts as now: callers judge
/// age by it (a stray commit is taken back once old), and "new" is the safe mistake.
int64_t ParseServiceTimeMs(const std::string& text);

/// An RFC 1123 HTTP date for `unix_seconds` ("Wed, 21 Oct 2015 07:28:00 GMT").
std::string HttpDate(int64_t unix_seconds);

}  // namespace timelake
