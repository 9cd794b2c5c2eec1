// Digests and encodings the cloud stores sign and address requests with: SHA-256, HMAC-SHA256
// (OpenSSL), base64, and RFC 3986 percent-encoding. Also the file cache's names (hashes).
#pragma once

#include <string>
#include <string_view>

#include <arrow/result.h>

namespace timelake {

/// Lower-case hex of `bytes`.
std::string Hex(std::string_view bytes);

/// Hex SHA-256 of `data`.
std::string Sha256Hex(std::string_view data);

/// Raw HMAC-SHA256 of `data` under `key`.
std::string HmacSha256(std::string_view key, std::string_view data);

/// Standard base64 (with padding) of `data`.
std::string Base64Encode(std::string_view data);
/// The URL-safe base64 of JWTs: '-' and '_' for '+' and '/', no padding.
std::string Base64UrlEncode(std::string_view data);
/// The bytes of standard base64 text (whitespace ignored); Invalid if it is not base64.
arrow::Result<std::string> Base64Decode(std::string_view text);

/// Percent-encodes every byte of `text` but RFC 3986's unreserved ones (A-Z a-z 0-9 - _ . ~):
/// one query name or value, or one path segment, as S3, Azure and GCS sign them.
std::string UriEncode(std::string_view text);
/// Percent-encodes every byte of `path` but the unreserved ones and '/' (a path).
std::string UriEncodePath(std::string_view path);

}  // namespace timelake
