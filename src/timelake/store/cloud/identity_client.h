// How a cloud's credential chain talks to token endpoints and instance metadata: the HTTP client
// it is given (apart from the store's own) and one exchange through it.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include <arrow/result.h>

#include "timelake/http/http_client.h"

namespace timelake {

/// How a cloud's credential chain reaches the world (token endpoints, instance metadata): a
/// client of its own with short timeouts (metadata endpoints answer at once or not at all) and
/// few retries.
struct IdentityClientOptions {
  int64_t connect_timeout_ms = 1'000;
  int64_t request_timeout_ms = 5'000;
  int64_t retry_total_ms = 10'000;
  /// Also use the store's proxy and certificate settings.
  bool store_proxy = true;
};

/// The fetch a credential chain uses, over a client made for `options` with the store client's
/// user agent (and proxy, per `options.store_proxy`).
arrow::Result<HttpFetch> MakeIdentityFetch(const HttpClientOptions& store,
                                           const IdentityClientOptions& options);

/// One exchange through `fetch`; a transport failure becomes an IOError naming `what`, with the
/// `secrets` the request carried cut out of it. IOError too when there is no fetch.
arrow::Result<HttpResponse> Exchange(const HttpFetch& fetch, const HttpRequest& request,
                                     const std::string& what,
                                     std::initializer_list<std::string_view> secrets);

}  // namespace timelake
