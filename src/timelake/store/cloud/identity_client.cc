#include "timelake/store/cloud/identity_client.h"

#include "timelake/http/retry.h"
#include "timelake/util/text.h"

namespace timelake {

arrow::Result<HttpFetch> MakeIdentityFetch(const HttpClientOptions& store,
                                           const IdentityClientOptions& options) {
  HttpClientOptions identity;
  identity.connect_timeout_ms = options.connect_timeout_ms;
  identity.request_timeout_ms = options.request_timeout_ms;
  identity.stall_timeout_ms = options.request_timeout_ms;
  identity.allow_http = true;  // metadata endpoints are plain http on link-local hosts
  identity.user_agent = store.user_agent;
  if (options.store_proxy) {
    identity.proxy_url = store.proxy_url;
    identity.allow_invalid_certificates = store.allow_invalid_certificates;
  }
  ARROW_ASSIGN_OR_RAISE(auto client, HttpClient::Make(identity));
  const int64_t retry_total_ms = options.retry_total_ms;
  return HttpFetch([client, retry_total_ms](const HttpRequest& request) {
    RetryOptions retry;
    retry.max_retries = 2;
    retry.max_total_ms = retry_total_ms;
    return SendWithRetry(*client, retry, request.method + " " + RedactUrl(request.url),
                         [&request]() -> arrow::Result<HttpRequest> { return request; });
  });
}

arrow::Result<HttpResponse> Exchange(const HttpFetch& fetch, const HttpRequest& request,
                                     const std::string& what,
                                     std::initializer_list<std::string_view> secrets) {
  if (!fetch) {
    return arrow::Status::IOError(what, " cannot be reached: this store was given no HTTP client");
  }
  auto response = fetch(request);
  if (!response.ok()) {
    return arrow::Status::IOError(what, " failed: ", Redact(response.status().message(), secrets));
  }
  return response;
}

}  // namespace timelake
