#include "timelake/http/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <mutex>

#include "timelake/util/status.h"
#include "timelake/util/text.h"

namespace timelake {

int64_t RequestTimeoutMs(const HttpClientOptions& options, const HttpRequest& request) {
  const int64_t bytes = (request.body ? request.body->size() : 0) + std::max<int64_t>(0, request.expected_response_bytes);
  return options.request_timeout_ms + bytes * 1000 / kSlowestBytesPerSecond;
}

std::string WithoutDefaultPort(const std::string& scheme, const std::string& host) {
  const std::string port = scheme == "https" ? ":443" : scheme == "http" ? ":80" : "";
  if (!port.empty() && host.size() > port.size() &&
      host.compare(host.size() - port.size(), port.size(), port) == 0) {
    return host.substr(0, host.size() - port.size());
  }
  return host;
}
namespace {

// Detail attached to transport errors that happened before the request could go out.
class NotSentDetail : public arrow::StatusDetail {
 public:
  static constexpr const char* kType = "timelake::http::NotSent";
  const char* type_id() const override { return kType; }
  std::string ToString() const override { return "the request did not reach the server"; }
};



void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct Exchange {
  std::string body;
  HttpResponse* response = nullptr;
  int sends = 0;  // times curl was about to send the request (once per connection it tried)
};

// Called by curl right before it sends the request on a connection, again for each resend.
int OnSend(void* user, char*, char*, int, int) {
  ++static_cast<Exchange*>(user)->sends;
  return CURL_PREREQFUNC_OK;
}

size_t OnBody(char* data, size_t size, size_t count, void* user) {
  auto* exchange = static_cast<Exchange*>(user);
  exchange->body.append(data, size * count);
  return size * count;
}

size_t OnHeader(char* data, size_t size, size_t count, void* user) {
  auto* exchange = static_cast<Exchange*>(user);
  std::string line(data, size * count);
  if (line.rfind("HTTP/", 0) == 0) {
    exchange->response->headers.clear();  // a new reply (after 100 Continue or a redirect)
    return size * count;
  }
  const auto colon = line.find(':');
  if (colon != std::string::npos) {
    exchange->response->headers[Lower(Trim(line.substr(0, colon)))] = Trim(line.substr(colon + 1));
  }
  return size * count;
}

}  // namespace

// Idle curl handles. A handle keeps its connections open between requests, so reusing handles
// reuses connections; the share object lets all handles use each other's DNS answers and TLS
// sessions.
struct HttpClient::Pool {
  std::mutex mutex;
  std::vector<CURL*> idle;
  CURLSH* share = nullptr;
  std::mutex share_locks[CURL_LOCK_DATA_LAST];

  ~Pool() {
    for (CURL* h : idle) curl_easy_cleanup(h);
    if (share) curl_share_cleanup(share);
  }
};

namespace {
void LockShare(CURL*, curl_lock_data data, curl_lock_access, void* user) {
  static_cast<std::mutex*>(user)[data].lock();
}
void UnlockShare(CURL*, curl_lock_data data, void* user) {
  static_cast<std::mutex*>(user)[data].unlock();
}
}  // namespace

std::string HttpResponse::Header(const std::string& name) const {
  auto it = headers.find(name);
  return it == headers.end() ? std::string() : it->second;
}

arrow::Result<int64_t> ParseDurationMs(const std::string& key, const std::string& value) {
  const std::string v = Lower(Trim(value));
  size_t digits = 0;
  while (digits < v.size() && (std::isdigit(static_cast<unsigned char>(v[digits])) || v[digits] == '.')) {
    ++digits;
  }
  const std::string unit = Trim(v.substr(digits));
  double number = 0;
  try {
    if (digits == 0) throw std::invalid_argument("no number");
    number = std::stod(v.substr(0, digits));
  } catch (const std::exception&) {
    // Values are not quoted: option values count as secrets in messages (store_factory.h).
    return arrow::Status::Invalid("storage option '", key,
                                  "' is not a duration; write it like 30s, 500ms or 2m");
  }
  double scale;
  if (unit.empty() || unit == "s" || unit == "sec" || unit == "secs" || unit == "seconds") {
    scale = 1000;
  } else if (unit == "ms") {
    scale = 1;
  } else if (unit == "m" || unit == "min" || unit == "mins" || unit == "minutes") {
    scale = 60'000;
  } else if (unit == "h" || unit == "hours") {
    scale = 3'600'000;
  } else {
    return arrow::Status::Invalid("storage option '", key,
                                  "' has an unknown unit; use ms, s, m or h");
  }
  return static_cast<int64_t>(number * scale);
}

arrow::Result<bool> ParseBoolOption(const std::string& key, const std::string& value) {
  const std::string v = Lower(Trim(value));
  if (v == "true" || v == "1" || v == "yes" || v == "on") return true;
  if (v == "false" || v == "0" || v == "no" || v == "off") return false;
  return arrow::Status::Invalid("storage option '", key, "' must be true or false");
}

std::string RedactUrl(const std::string& url) { return url.substr(0, url.find('?')); }

bool MayHaveReachedServer(const arrow::Status& status) {
  if (status.ok()) return false;
  auto detail = status.detail();
  return !(detail && std::string(detail->type_id()) == NotSentDetail::kType);
}

HttpClient::HttpClient(const HttpClientOptions& options)
    : options_(options), pool_(std::make_unique<Pool>()) {}

HttpClient::~HttpClient() = default;

arrow::Result<std::shared_ptr<HttpClient>> HttpClient::Make(const HttpClientOptions& options) {
  GlobalInit();
  std::shared_ptr<HttpClient> client(new HttpClient(options));
  CURLSH* share = curl_share_init();
  if (!share) return arrow::Status::OutOfMemory("curl_share_init failed");
  client->pool_->share = share;
  curl_share_setopt(share, CURLSHOPT_LOCKFUNC, LockShare);
  curl_share_setopt(share, CURLSHOPT_UNLOCKFUNC, UnlockShare);
  curl_share_setopt(share, CURLSHOPT_USERDATA, client->pool_->share_locks);
  curl_share_setopt(share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
  curl_share_setopt(share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
  return client;
}

arrow::Result<HttpResponse> HttpClient::Send(const HttpRequest& request) {
  const bool http = request.url.rfind("http://", 0) == 0;
  if (!http && request.url.rfind("https://", 0) != 0) {
    return arrow::Status::Invalid("not an http(s) URL: ", RedactUrl(request.url));
  }
  if (http && !options_.allow_http) {
    return arrow::Status::Invalid("refusing plain http to ", RedactUrl(request.url),
                                  "; set the storage option allow_http (or aws_allow_http) to "
                                  "true to allow unencrypted connections");
  }

  CURL* h = nullptr;
  {
    std::lock_guard<std::mutex> lock(pool_->mutex);
    if (!pool_->idle.empty()) {
      h = pool_->idle.back();
      pool_->idle.pop_back();
    }
  }
  if (!h) {
    h = curl_easy_init();
    if (!h) return arrow::Status::OutOfMemory("curl_easy_init failed");
  } else {
    curl_easy_reset(h);  // keeps the handle's open connections
  }

  HttpResponse response;
  Exchange exchange;
  exchange.response = &response;
  curl_slist* headers = nullptr;
  for (const auto& [name, value] : request.headers) {
    headers = curl_slist_append(headers, (name + ": " + value).c_str());
  }
  // Suppress curl's own defaults: no 100-continue round trip, no form content type.
  headers = curl_slist_append(headers, "Expect:");
  headers = curl_slist_append(headers, "Accept:");
  bool has_content_type = false;
  for (const auto& [name, value] : request.headers) {
    if (Lower(name) == "content-type") has_content_type = true;
  }
  if (!has_content_type) headers = curl_slist_append(headers, "Content-Type:");

  curl_easy_setopt(h, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_SHARE, pool_->share);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options_.connect_timeout_ms));
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(RequestTimeoutMs(options_, request)));
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME,
                   std::max(1L, static_cast<long>(options_.stall_timeout_ms / 1000)));
  curl_easy_setopt(h, CURLOPT_MAXAGE_CONN,
                   std::max(1L, static_cast<long>(options_.pool_idle_timeout_ms / 1000)));
  curl_easy_setopt(h, CURLOPT_USERAGENT, options_.user_agent.c_str());
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, options_.allow_http ? "http,https" : "https");
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);  // the path as signed, never normalised
  if (!options_.proxy_url.empty()) curl_easy_setopt(h, CURLOPT_PROXY, options_.proxy_url.c_str());
  if (options_.allow_invalid_certificates) {
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &exchange);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &exchange);
  curl_easy_setopt(h, CURLOPT_PREREQFUNCTION, OnSend);
  curl_easy_setopt(h, CURLOPT_PREREQDATA, &exchange);

  const std::string& method = request.method;
  if (method == "HEAD") {
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else if (method != "GET" || request.body) {
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method.c_str());
  }
  if (request.body || method == "PUT" || method == "POST") {
    // POSTFIELDS sends the bytes as they are (no copy) and lets curl resend them on a reused
    // connection that turned out dead.
    static const char kEmpty[] = "";
    const char* data = request.body ? reinterpret_cast<const char*>(request.body->data()) : kEmpty;
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, data);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE,
                     static_cast<curl_off_t>(request.body ? request.body->size() : 0));
  }

  const CURLcode code = curl_easy_perform(h);
  long status = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
  curl_slist_free_all(headers);
  {
    std::lock_guard<std::mutex> lock(pool_->mutex);
    pool_->idle.push_back(h);
  }

  if (code != CURLE_OK) {
    const bool never_sent = code == CURLE_COULDNT_CONNECT || code == CURLE_COULDNT_RESOLVE_HOST ||
                            code == CURLE_COULDNT_RESOLVE_PROXY || code == CURLE_SSL_CONNECT_ERROR ||
                            code == CURLE_UNSUPPORTED_PROTOCOL || code == CURLE_URL_MALFORMAT;
    arrow::Status error = arrow::Status::IOError(request.method, " ", RedactUrl(request.url), ": ",
                                                 curl_easy_strerror(code));
    // A resend that could not connect says nothing of the send before it.
    if (never_sent && exchange.sends <= 1) return error.WithDetail(std::make_shared<NotSentDetail>());
    return error;
  }
  response.status = static_cast<int>(status);
  response.sends = std::max(1, exchange.sends);
  response.body = arrow::Buffer::FromString(std::move(exchange.body));
  return response;
}

}  // namespace timelake
