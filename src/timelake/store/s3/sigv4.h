// AWS Signature Version 4 for S3 requests (the groundwork of the S3 store).
//
// Builds the canonical request, the string to sign and the Authorization header exactly as AWS
// documents them ("Authenticating Requests: Using the Authorization Header"), with SHA-256 and
// HMAC-SHA256 from OpenSSL. Callers pass headers already holding host, x-amz-date and
// x-amz-content-sha256 (the payload's hex SHA-256, or "UNSIGNED-PAYLOAD"), and a session token
// header when they use temporary credentials; every header passed is signed.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "timelake/util/encoding.h"

namespace timelake {

struct SigV4Credentials {
  std::string access_key_id;
  std::string secret_access_key;
};

struct SigV4Request {
  std::string method;           // "GET", "PUT", …
  std::string path;             // URI path, already percent-encoded as sent ("/bucket/key")
  std::map<std::string, std::string> query;  // decoded names and values
  std::map<std::string, std::string> headers;  // names in any case; values as sent
  std::string payload_hash;     // hex SHA-256 of the body, or "UNSIGNED-PAYLOAD"
};

/// The canonical request (exposed for tests and debugging).
std::string CanonicalRequest(const SigV4Request& request);

/// The Authorization header value for `request` at `amz_date` ("20130524T000000Z") in `region`
/// for `service` ("s3").
std::string SigV4Authorization(const SigV4Request& request, const SigV4Credentials& credentials,
                               const std::string& amz_date, const std::string& region,
                               const std::string& service);

}  // namespace timelake
