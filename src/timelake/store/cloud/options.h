// The storage_options every cloud store reads alike: the environment that fills in keys the
// options leave out (delta-rs's rule), boolean values, keys of another cloud refused, and the
// HTTP client's and the retries' settings (timeouts, retries, proxy, user agent).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <arrow/result.h>
#include <arrow/status.h>

#include "timelake/http/http_client.h"
#include "timelake/http/retry.h"
#include "timelake/store/store_factory.h"

namespace timelake {

/// An environment variable's value, nullopt when unset or empty.
std::optional<std::string> EnvValue(const std::string& name);

/// The variable's value from `env` when it is given (tests), else EnvValue(name).
std::optional<std::string> EnvValue(const EnvLookup& env, const std::string& name);

/// `key` in upper case (the environment variable delta-rs reads for a storage option).
std::string UpperKey(std::string key);

/// `options` with, for each of `keys` the options leave out, the value of the environment variable
/// named as the key in upper case (delta-rs's rule: options given win over the environment).
StorageOptions WithEnvironment(const StorageOptions& options,
                               const std::vector<std::string>& keys);

/// The option's value, "" when absent.
std::string OptionValue(const StorageOptions& options, const std::string& key);

/// Invalid, naming the key, if `options` holds a key of another cloud than `own_prefixes`
/// (e.g. {"aws_"}); `scheme` names the lake kind in the message ("an az:// lake").
arrow::Status RefuseOtherClouds(const StorageOptions& options,
                                const std::vector<std::string>& own_prefixes,
                                const std::vector<std::string>& own_keys,
                                const std::string& lake_kind);

/// Applies the options every cloud store takes (timeout, connect_timeout, pool_idle_timeout,
/// retry_timeout, max_retries, proxy_url, user_agent, allow_http, allow_invalid_certificates)
/// to `http` and `retry`. Invalid naming the key for a bad value.
arrow::Status ApplyClientOptions(const StorageOptions& options, HttpClientOptions* http,
                                 RetryOptions* retry);

/// A boolean option, `fallback` when absent; Invalid naming the key when unreadable.
arrow::Result<bool> BoolOption(const StorageOptions& options, const std::string& key, bool fallback);

}  // namespace timelake
