// RefreshingValue: a value that expires (temporary credentials, an access token), fetched on
// first use and again when it nears its expiry. And the two credential providers every cloud
// has, written once over its provider interface: StaticProvider (a value handed out as it is)
// and RefreshingProvider (a RefreshingValue).
//
// Thread-safe: Get() holds a lock while it fetches, so one thread refreshes and the others wait
// for its result. A failed refresh keeps a value that has not expired yet and tries again no
// sooner than `retry_interval_ms` later; without a valid value the failure is returned.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include <arrow/result.h>

#include "timelake/http/http_client.h"  // MillisClock

namespace timelake {

/// T has `int64_t expires_ms`: milliseconds since the epoch, 0 for never.
template <typename T>
class RefreshingValue {
 public:
  /// Fetches a new value; `now_ms` is the clock's reading for this call.
  using Fetch = std::function<arrow::Result<T>(int64_t now_ms)>;

  RefreshingValue(Fetch fetch, MillisClock now_ms, int64_t refresh_window_ms,
                  int64_t retry_interval_ms)
      : fetch_(std::move(fetch)), now_ms_(std::move(now_ms)),
        refresh_window_ms_(refresh_window_ms), retry_interval_ms_(retry_interval_ms) {}

  /// Makes the next Get() fetch anew (the service refused the value before its expiry: revoked,
  /// rotated, or the clocks disagree).
  void Invalidate() {
    std::lock_guard<std::mutex> lock(mutex_);
    refresh_at_ms_ = 0;
  }

  arrow::Result<T> Get() {
    std::lock_guard<std::mutex> lock(mutex_);
    const int64_t now = now_ms_();
    if (cached_ && now < refresh_at_ms_) return *cached_;
    auto fetched = fetch_(now);
    if (fetched.ok()) {
      cached_ = *fetched;
      refresh_at_ms_ = RefreshAt(cached_->expires_ms, now);
      return *cached_;
    }
    if (cached_ && (cached_->expires_ms == 0 || now < cached_->expires_ms)) {
      // Still valid: keep using it, and do not hold every caller up with a retry each time.
      refresh_at_ms_ = std::min(now + retry_interval_ms_, cached_->expires_ms == 0
                                                              ? std::numeric_limits<int64_t>::max()
                                                              : cached_->expires_ms);
      return *cached_;
    }
    return fetched.status();
  }

 private:
  // When a value fetched at `now` expiring at `expires_ms` is next refreshed: inside the refresh
  // window, but not again right away if it arrived already inside it.
  int64_t RefreshAt(int64_t expires_ms, int64_t now) const {
    if (expires_ms == 0) return std::numeric_limits<int64_t>::max();
    const int64_t at = expires_ms - refresh_window_ms_;
    const int64_t earliest = std::min(now + retry_interval_ms_, expires_ms);
    return std::max(at, earliest);
  }

  const Fetch fetch_;
  const MillisClock now_ms_;
  const int64_t refresh_window_ms_;
  const int64_t retry_interval_ms_;
  std::mutex mutex_;
  std::optional<T> cached_;    // GUARDED_BY(mutex_)
  int64_t refresh_at_ms_ = 0;  // GUARDED_BY(mutex_)
};

/// A provider (`Provider`: AwsCredentialProvider, AzureCredentialProvider,
/// GoogleCredentialProvider) of a value that never changes: given keys, a fixed token.
template <typename Provider, typename T>
class StaticProvider final : public Provider {
 public:
  StaticProvider(T value, std::string source) : value_(std::move(value)), source_(std::move(source)) {}
  arrow::Result<T> Get() override { return value_; }
  std::string Source() const override { return source_; }

 private:
  const T value_;
  const std::string source_;
};

/// A provider of timed values: fetched on first use, then again `RefreshWindowMs` before they
/// expire; a failed refresh keeps a value still valid and is retried after `RetryIntervalMs`.
/// Invalidate() makes the next Get() fetch anew.
template <typename Provider, typename T, int64_t RefreshWindowMs, int64_t RetryIntervalMs>
class RefreshingProvider final : public Provider {
 public:
  using Fetch = typename RefreshingValue<T>::Fetch;

  RefreshingProvider(std::string source, Fetch fetch, MillisClock now_ms)
      : source_(std::move(source)),
        value_(std::move(fetch), std::move(now_ms), RefreshWindowMs, RetryIntervalMs) {}
  /// For a fetch that does not need the clock's reading.
  RefreshingProvider(std::string source, std::function<arrow::Result<T>()> fetch, MillisClock now_ms)
      : RefreshingProvider(std::move(source),
                           Fetch([fetch = std::move(fetch)](int64_t) { return fetch(); }),
                           std::move(now_ms)) {}

  arrow::Result<T> Get() override { return value_.Get(); }
  bool Invalidate() override {
    value_.Invalidate();
    return true;
  }
  std::string Source() const override { return source_; }

 private:
  const std::string source_;
  RefreshingValue<T> value_;
};

}  // namespace timelake
