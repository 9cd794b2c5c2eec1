// SendWithRetry: one logical request made of as many attempts as transient failures need.
//
// Each attempt is built afresh by the caller (so it is signed with the current time and the
// current credentials), sent, and judged. Retried: transport failures, 408, 429, every 5xx, and
// whatever the caller's judge calls transient (S3's "200 with an error body", a 409
// ConditionalRequestConflict). Waits between attempts follow decorrelated jitter (AWS's
// "Exponential Backoff and Jitter"): sleep = min(cap, random(base, 3 * previous sleep)), bounded
// by a number of retries and a total time.
#pragma once

#include <cstdint>
#include <functional>

#include <arrow/result.h>

#include "timelake/http/http_client.h"

namespace timelake {

struct RetryOptions {
  int max_retries = 10;
  int64_t base_delay_ms = 100;
  int64_t max_delay_ms = 15'000;
  /// No attempt starts after this much time has passed since the first one.
  int64_t max_total_ms = 180'000;
};

/// What the judge says of a reply.
enum class ReplyVerdict {
  kDone,       // final: return it (the caller interprets the status)
  kTransient,  // retry it
};

/// The default judgement: 408, 429 and 5xx are transient, everything else final.
ReplyVerdict DefaultVerdict(const HttpResponse& response);

/// The service's error code in a reply ("SlowDown", "ServerBusy", …), from the x-ms-error-code
/// header or an XML <Code> element; "" when there is none or it is not a plain identifier.
std::string ServiceErrorCode(const HttpResponse& response);

struct RetryOutcome {
  /// True if some attempt may have reached the server without its reply reaching us (a
  /// transport failure after sending, a 5xx, or a request curl resent on a new connection): a
  /// write whose final result is an error may still have landed, and a conditional write's
  /// refusal may be its own earlier send's doing.
  bool maybe_applied = false;
  int attempts = 0;
};

/// Sends `build()`'s request until the judge calls a reply final, or retries run out. Returns
/// the final reply (any status), or the last transport error / transient reply as an IOError
/// that names `what` and how many attempts were made. `outcome` (optional) reports how it went.
arrow::Result<HttpResponse> SendWithRetry(
    HttpClient& client, const RetryOptions& options, const std::string& what,
    const std::function<arrow::Result<HttpRequest>()>& build,
    const std::function<ReplyVerdict(const HttpResponse&)>& judge = DefaultVerdict,
    RetryOutcome* outcome = nullptr);

}  // namespace timelake
