// HttpClient: the HTTP machinery every cloud store stands on (S3 now, Azure and GCS next).
//
// libcurl does HTTP, TLS, proxies and connection reuse; this file only pools its handles and
// classifies what went wrong. One client per store: it keeps a pool of curl handles whose
// connections, DNS answers and TLS sessions are reused across requests, so a store opens few
// connections however many threads use it. Thread-safe: any number of threads may Send at once
// (each takes a handle from the pool for the duration of its request).
//
// Send makes exactly one attempt. Retrying (backoff, re-signing, the bounded total time) is
// SendWithRetry's job (http/retry.h), because only the caller can rebuild a signed request.
//
// Transport failures come back as IOError statuses. The client says whether the request may have
// reached the server (see MayHaveReachedServer): a refused connection or an unknown host did not,
// a timeout or a reset after the request went out may have. Writes use this to mark outcomes they
// cannot know (util/status.h OutcomeUnknown).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <arrow/buffer.h>
#include <arrow/result.h>
#include <arrow/status.h>

namespace timelake {

struct HttpRequest {
  std::string method = "GET";  // GET, HEAD, PUT, POST, DELETE
  std::string url;             // absolute: scheme://host[:port]/path?query, already encoded
  /// Sent as given. The client adds none but Content-Length and suppresses curl's defaults
  /// (Expect, Accept, a form Content-Type).
  std::vector<std::pair<std::string, std::string>> headers;
  std::shared_ptr<arrow::Buffer> body;  // null: no body
  /// Bytes the reply body is expected to hold (a ranged GET's length), 0 when unknown: with the
  /// body's size, it lengthens the request timeout (RequestTimeoutMs).
  int64_t expected_response_bytes = 0;
};

/// `host[:port]` without the scheme's default port ("h:443" for https is "h"): curl leaves that
/// port out of the Host header it sends, so a request signed with it would not verify.
std::string WithoutDefaultPort(const std::string& scheme, const std::string& host);

struct HttpClientOptions;

/// The whole-request timeout for `request`: the options' request timeout, plus the time the bytes
/// it sends and expects take at kSlowestBytesPerSecond, so a large part or range on a slow link is
/// not cut off while it still moves (a body that stops moving is the stall timeout's business).
int64_t RequestTimeoutMs(const HttpClientOptions& options, const HttpRequest& request);
constexpr int64_t kSlowestBytesPerSecond = 256 << 10;

struct HttpResponse {
  int status = 0;
  /// Header names lowercased; a repeated header keeps its last value.
  std::map<std::string, std::string> headers;
  std::shared_ptr<arrow::Buffer> body;  // never null (empty when there was none)
  /// How often the request went out in this one Send: libcurl resends a request by itself when
  /// the reused connection it went out on turns out dead with no byte of reply. More than 1: an
  /// earlier send may have reached the server, so this reply may describe what that send did (a
  /// 412 to a conditional put that the first send made, a second upload that it started).
  int sends = 1;

  /// The header's value, "" when absent. `name` in lowercase.
  std::string Header(const std::string& name) const;
  std::string BodyText() const { return body ? body->ToString() : std::string(); }
};

struct HttpClientOptions {
  int64_t connect_timeout_ms = 5'000;
  /// The whole exchange, from connecting to the last byte of the reply.
  int64_t request_timeout_ms = 30'000;
  /// A transfer moving fewer than 1 byte per second for this long is abandoned (a stalled body).
  int64_t stall_timeout_ms = 10'000;
  /// Connections idle longer than this are not reused (below the usual server idle timeouts).
  int64_t pool_idle_timeout_ms = 15'000;
  bool allow_http = false;
  bool allow_invalid_certificates = false;
  std::string proxy_url;  // "" for none (curl still honours the usual proxy variables)
  std::string user_agent = "timelake";
};

/// Parses a duration option as delta-rs/object_store write them: "30s", "500ms", "2m", "1h",
/// or a plain number of seconds. Invalid naming `key` otherwise.
arrow::Result<int64_t> ParseDurationMs(const std::string& key, const std::string& value);

/// Parses a boolean option ("true"/"false", "1"/"0", "yes"/"no", any case). Invalid naming `key`.
arrow::Result<bool> ParseBoolOption(const std::string& key, const std::string& value);

class HttpClient {
 public:
  static arrow::Result<std::shared_ptr<HttpClient>> Make(const HttpClientOptions& options);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  /// One attempt. An HTTP reply of any status is OK here (the caller judges 4xx/5xx); only
  /// transport failures are errors. Invalid for an http:// URL unless allow_http.
  arrow::Result<HttpResponse> Send(const HttpRequest& request);

  const HttpClientOptions& options() const { return options_; }

 private:
  struct Pool;
  explicit HttpClient(const HttpClientOptions& options);
  HttpClientOptions options_;
  std::unique_ptr<Pool> pool_;
};

// The seams through which credential providers (AWS, Azure, Google) reach the world; tests
// inject fakes.
/// One HTTP exchange: any reply status is OK, only transport failures are errors (as
/// HttpClient::Send). Timeouts and retries are the fetch's job; metadata endpoints want short
/// ones. Called under a credential provider's lock, from whichever thread calls Get().
using HttpFetch = std::function<arrow::Result<HttpResponse>(const HttpRequest&)>;
/// An environment variable's value, nullopt when unset. An empty value counts as unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
/// Milliseconds since the Unix epoch.
using MillisClock = std::function<int64_t()>;

/// True if a transport error from Send may have happened after the request reached the server
/// (a timeout, a reset or a closed connection mid-exchange), false if it surely did not (the
/// connection was never made, and curl had not sent the request before on a connection that
/// died). Also true for statuses Send did not make.
bool MayHaveReachedServer(const arrow::Status& status);

/// A URL with its secrets hidden, for error messages: the query string is dropped.
std::string RedactUrl(const std::string& url);

}  // namespace timelake
