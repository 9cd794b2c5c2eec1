#include "timelake/store/s3/sigv4.h"
#include "timelake/util/text.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <vector>

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

namespace timelake {
namespace {

std::string SignedHeaders(const std::map<std::string, std::string>& lower) {
  std::string out;
  for (const auto& [name, value] : lower) out += (out.empty() ? "" : ";") + name;
  return out;
}

std::map<std::string, std::string> LowerHeaders(const std::map<std::string, std::string>& headers) {
  std::map<std::string, std::string> lower;
  for (const auto& [name, value] : headers) lower[Lower(name)] = FoldSpaces(value, " \t");
  return lower;
}

}  // namespace

std::string CanonicalRequest(const SigV4Request& request) {
  std::vector<std::pair<std::string, std::string>> query;
  for (const auto& [name, value] : request.query) {
    query.emplace_back(UriEncode(name), UriEncode(value));
  }
  std::sort(query.begin(), query.end());
  std::string query_string;
  for (const auto& [name, value] : query) {
    query_string += (query_string.empty() ? "" : "&") + name + "=" + value;
  }
  const auto headers = LowerHeaders(request.headers);
  std::string canonical_headers;
  for (const auto& [name, value] : headers) canonical_headers += name + ":" + value + "\n";
  return request.method + "\n" + (request.path.empty() ? "/" : request.path) + "\n" +
         query_string + "\n" + canonical_headers + "\n" + SignedHeaders(headers) + "\n" +
         request.payload_hash;
}

std::string SigV4Authorization(const SigV4Request& request, const SigV4Credentials& credentials,
                               const std::string& amz_date, const std::string& region,
                               const std::string& service) {
  const std::string day = amz_date.substr(0, 8);
  const std::string scope = day + "/" + region + "/" + service + "/aws4_request";
  const std::string to_sign = "AWS4-HMAC-SHA256\n" + amz_date + "\n" + scope + "\n" +
                              Sha256Hex(CanonicalRequest(request));
  const std::string key = HmacSha256(
      HmacSha256(HmacSha256(HmacSha256("AWS4" + credentials.secret_access_key, day), region), service),
      "aws4_request");
  const std::string signature = HmacSha256(key, to_sign);
  return "AWS4-HMAC-SHA256 Credential=" + credentials.access_key_id + "/" + scope +
         ",SignedHeaders=" + SignedHeaders(LowerHeaders(request.headers)) +
         ",Signature=" + Hex(signature);
}

}  // namespace timelake
