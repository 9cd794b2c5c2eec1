#include "timelake/store/sigv4.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <vector>

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

namespace timelake {
namespace {

std::string Hex(const unsigned char* bytes, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out(n * 2, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = digits[bytes[i] >> 4];
    out[2 * i + 1] = digits[bytes[i] & 15];
  }
  return out;
}

std::string Hmac(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &len);
  return std::string(reinterpret_cast<const char*>(out), len);
}

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// Header values are signed trimmed, with runs of spaces inside folded to one.
std::string TrimValue(const std::string& value) {
  std::string out;
  bool space = false;
  for (char c : value) {
    if (c == ' ' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

std::string SignedHeaders(const std::map<std::string, std::string>& lower) {
  std::string out;
  for (const auto& [name, value] : lower) out += (out.empty() ? "" : ";") + name;
  return out;
}

std::map<std::string, std::string> LowerHeaders(const std::map<std::string, std::string>& headers) {
  std::map<std::string, std::string> lower;
  for (const auto& [name, value] : headers) lower[Lower(name)] = TrimValue(value);
  return lower;
}

}  // namespace

std::string Sha256Hex(std::string_view data) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest);
  return Hex(digest, sizeof(digest));
}

std::string AwsUriEncode(std::string_view text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

std::string CanonicalRequest(const SigV4Request& request) {
  std::vector<std::pair<std::string, std::string>> query;
  for (const auto& [name, value] : request.query) {
    query.emplace_back(AwsUriEncode(name), AwsUriEncode(value));
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
  const std::string key = Hmac(
      Hmac(Hmac(Hmac("AWS4" + credentials.secret_access_key, day), region), service),
      "aws4_request");
  const std::string signature = Hmac(key, to_sign);
  return "AWS4-HMAC-SHA256 Credential=" + credentials.access_key_id + "/" + scope +
         ",SignedHeaders=" + SignedHeaders(LowerHeaders(request.headers)) +
         ",Signature=" + Hex(reinterpret_cast<const unsigned char*>(signature.data()),
                             signature.size());
}

}  // namespace timelake
