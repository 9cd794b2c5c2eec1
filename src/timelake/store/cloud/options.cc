#include "timelake/store/cloud/options.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "timelake/util/time.h"

namespace timelake {

std::optional<std::string> EnvValue(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

std::optional<std::string> EnvValue(const EnvLookup& env, const std::string& name) {
  return env ? env(name) : EnvValue(name);
}

std::string UpperKey(std::string key) {
  std::transform(key.begin(), key.end(), key.begin(),
                 [](unsigned char c) { return std::toupper(c); });
  return key;
}

StorageOptions WithEnvironment(const StorageOptions& options,
                               const std::vector<std::string>& keys) {
  StorageOptions out = options;
  for (const auto& key : keys) {
    if (out.count(key)) continue;
    if (auto v = EnvValue(UpperKey(key))) out[key] = *v;
  }
  return out;
}

std::string OptionValue(const StorageOptions& options, const std::string& key) {
  auto it = options.find(key);
  return it == options.end() ? std::string() : it->second;
}

namespace {

bool StartsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// Keys of one cloud's options, by the prefixes of their names.
bool IsCloudKey(const std::string& key) {
  return StartsWith(key, "aws_") || StartsWith(key, "azure_") || StartsWith(key, "google_") ||
         StartsWith(key, "service_account") || key == "access_key" ||
         key == "delta_dynamo_table_name";
}

}  // namespace

arrow::Status RefuseOtherClouds(const StorageOptions& options,
                                const std::vector<std::string>& own_prefixes,
                                const std::vector<std::string>& own_keys,
                                const std::string& lake_kind) {
  for (const auto& [key, value] : options) {
    if (!IsCloudKey(key)) continue;
    bool own = std::find(own_keys.begin(), own_keys.end(), key) != own_keys.end();
    for (const auto& p : own_prefixes) own = own || StartsWith(key, p);
    if (!own) {
      return arrow::Status::Invalid("storage option '", key, "' is for another cloud; ", lake_kind,
                                    " takes ", own_prefixes.front(), "* options");
    }
  }
  return arrow::Status::OK();
}

arrow::Result<bool> BoolOption(const StorageOptions& options, const std::string& key,
                               bool fallback) {
  const std::string v = OptionValue(options, key);
  if (v.empty()) return fallback;
  return ParseBoolOption(key, v);
}

arrow::Status ApplyClientOptions(const StorageOptions& options, HttpClientOptions* http,
                                 RetryOptions* retry) {
  auto get = [&](const std::string& key) { return OptionValue(options, key); };
  // A store's own flag (aws_allow_http, …) set before this call also allows it.
  ARROW_ASSIGN_OR_RAISE(bool allow_http, BoolOption(options, "allow_http", false));
  http->allow_http = http->allow_http || allow_http;
  ARROW_ASSIGN_OR_RAISE(http->allow_invalid_certificates,
                        BoolOption(options, "allow_invalid_certificates", false));
  if (!get("timeout").empty()) {
    ARROW_ASSIGN_OR_RAISE(http->request_timeout_ms, ParseDurationMs("timeout", get("timeout")));
  }
  if (!get("connect_timeout").empty()) {
    ARROW_ASSIGN_OR_RAISE(http->connect_timeout_ms,
                          ParseDurationMs("connect_timeout", get("connect_timeout")));
  }
  if (!get("pool_idle_timeout").empty()) {
    ARROW_ASSIGN_OR_RAISE(http->pool_idle_timeout_ms,
                          ParseDurationMs("pool_idle_timeout", get("pool_idle_timeout")));
  }
  if (!get("retry_timeout").empty()) {
    ARROW_ASSIGN_OR_RAISE(retry->max_total_ms, ParseDurationMs("retry_timeout", get("retry_timeout")));
  }
  if (!get("max_retries").empty()) {
    char* end = nullptr;
    const long n = std::strtol(get("max_retries").c_str(), &end, 10);
    if (*end || n < 0 || n > 100) {
      return arrow::Status::Invalid("storage option 'max_retries' must be a whole number from 0 "
                                    "to 100");
    }
    retry->max_retries = static_cast<int>(n);
  }
  http->proxy_url = get("proxy_url");
  if (!get("user_agent").empty()) http->user_agent = get("user_agent");
  http->stall_timeout_ms = std::min<int64_t>(http->stall_timeout_ms, http->request_timeout_ms);
  return arrow::Status::OK();
}

}  // namespace timelake
