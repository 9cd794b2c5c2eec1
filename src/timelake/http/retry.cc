#include "timelake/http/retry.h"

#include <cctype>

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

#include "timelake/util/status.h"
#include "timelake/util/time.h"

namespace timelake {

ReplyVerdict DefaultVerdict(const HttpResponse& response) {
  const int s = response.status;
  return (s == 408 || s == 429 || s >= 500) ? ReplyVerdict::kTransient : ReplyVerdict::kDone;
}

std::string ServiceErrorCode(const HttpResponse& response) {
  std::string code = response.Header("x-ms-error-code");  // Azure puts it in a header
  if (code.empty()) {
    // S3, GCS's XML API and Azure bodies: <Error><Code>SlowDown</Code>…
    const std::string body = response.BodyText().substr(0, 4096);
    const auto open = body.find("<Code>");
    const auto close = open == std::string::npos ? open : body.find("</Code>", open);
    if (close != std::string::npos) code = body.substr(open + 6, close - open - 6);
  }
  // Only a plain identifier is shown: nothing the server echoed from the request.
  if (code.empty() || code.size() > 64) return "";
  for (char c : code) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') return "";
  }
  return code;
}

arrow::Result<HttpResponse> SendWithRetry(
    HttpClient& client, const RetryOptions& options, const std::string& what,
    const std::function<arrow::Result<HttpRequest>()>& build,
    const std::function<ReplyVerdict(const HttpResponse&)>& judge, RetryOutcome* outcome) {
  thread_local std::mt19937_64 random(std::random_device{}());
  RetryOutcome local;
  RetryOutcome& out = outcome ? *outcome : local;
  out = RetryOutcome{};
  const int64_t start = NowMillis();
  int64_t delay = options.base_delay_ms;
  arrow::Status last_error;
  int last_status = 0;
  std::string last_code;
  for (int attempt = 0;; ++attempt) {
    ARROW_ASSIGN_OR_RAISE(HttpRequest request, build());
    ++out.attempts;
    auto reply = client.Send(request);
    if (reply.ok()) {
      // curl resent it on a new connection: the send before may have been applied.
      if (reply->sends > 1) out.maybe_applied = true;
      if (judge(*reply) == ReplyVerdict::kDone) return reply;
      last_status = reply->status;
      last_code = ServiceErrorCode(*reply);
      if (reply->status >= 500) out.maybe_applied = true;
      last_error = arrow::Status::IOError(what, ": HTTP ", reply->status);
    } else {
      if (reply.status().IsInvalid()) return reply.status();  // a request that can never work
      if (MayHaveReachedServer(reply.status())) out.maybe_applied = true;
      last_error = reply.status();
      last_status = 0;
    }
    const int64_t elapsed = NowMillis() - start;
    std::uniform_int_distribution<int64_t> pick(options.base_delay_ms,
                                                std::max(options.base_delay_ms, delay * 3));
    delay = std::min(options.max_delay_ms, pick(random));
    if (attempt >= options.max_retries || elapsed + delay > options.max_total_ms) {
      return StoreUnavailable(arrow::Status::IOError(
          what, " failed after ", out.attempts, " attempt", out.attempts == 1 ? "" : "s", " in ",
          elapsed, " ms: ",
          last_status ? "HTTP " + std::to_string(last_status) + (last_code.empty() ? "" : " " + last_code)
                      : last_error.message(),
          " (the storage options max_retries and retry_timeout set how long to keep trying)"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay));
  }
}

}  // namespace timelake
