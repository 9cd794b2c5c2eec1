// Google credentials for the GCS store: where an OAuth 2.0 bearer token comes from, and keeping
// it fresh.
//
// MakeGoogleCredentialChain picks one source from configuration alone, in this order (the order
// of delta-rs/object_store and of Google's own client libraries):
//   1. google_skip_signature=true: no Authorization header at all (emulators, public buckets);
//   2. google_bearer_token: a fixed token, used as it is until the service refuses it;
//   3. a service-account key: the JSON itself (google_service_account_key, service_account_key,
//      GOOGLE_SERVICE_ACCOUNT_KEY) or a path to it (google_service_account,
//      google_service_account_path, service_account, service_account_path,
//      GOOGLE_SERVICE_ACCOUNT, GOOGLE_SERVICE_ACCOUNT_PATH). Each token is bought with an RS256
//      JWT signed by the key (OAuth 2.0 JWT bearer grant, RFC 7523) at the key's token_uri;
//   4. Application Default Credentials: the file named by google_application_credentials or
//      GOOGLE_APPLICATION_CREDENTIALS, else gcloud's
//      ~/.config/gcloud/application_default_credentials.json ($CLOUDSDK_CONFIG instead of
//      ~/.config/gcloud when set). A "service_account" file is source 3; an "authorized_user"
//      file (gcloud auth application-default login) trades its refresh token for access tokens;
//   5. the GCE metadata server (http://169.254.169.254, or GCE_METADATA_HOST), the last resort.
//
// Files and keys are read and checked when the chain is made, so a bad key fails early;
// token endpoints and the metadata server are contacted only by the first Get(). A configured
// source that fails is an error: the chain never falls through to the next one. When the
// metadata server cannot be reached either, the error lists everything that was tried and how to
// configure a source (or google_skip_signature for an emulator).
//
// Secrets (private keys, refresh tokens, client secrets, access tokens) never appear in a status
// message or in Source(); neither does any part of a key file's text.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <arrow/result.h>

#include "timelake/http/http_client.h"

namespace timelake {

// HttpFetch, EnvLookup and MillisClock (http/http_client.h) are how the chain reaches the world.

struct GoogleToken {
  std::string access_token;  // "" when anonymous
  int64_t expires_ms = 0;    // ms since the epoch; 0 = never expires (a fixed token)
  bool anonymous = false;    // google_skip_signature: send no Authorization header
};

/// Timed tokens are refreshed when fewer than this many milliseconds remain.
constexpr int64_t kGoogleTokenRefreshWindowMs = 5 * 60 * 1000;
/// After a refresh fails while the old token is still valid, the provider keeps it and tries
/// again no sooner than this.
constexpr int64_t kGoogleTokenRetryIntervalMs = 30 * 1000;

/// The OAuth scope every token is asked for: read and write objects, create buckets (tests).
constexpr const char* kGoogleStorageScope =
    "https://www.googleapis.com/auth/devstorage.full_control";

/// Thread-safe: any number of threads may call Get() at once.
class GoogleCredentialProvider {
 public:
  virtual ~GoogleCredentialProvider() = default;
  /// The current token. A timed one is refreshed (once, under a lock: other threads wait) when
  /// fewer than kGoogleTokenRefreshWindowMs remain; if the refresh fails, a token that has not
  /// expired is returned and the refresh retried after kGoogleTokenRetryIntervalMs. Without a
  /// valid token the failure is returned.
  virtual arrow::Result<GoogleToken> Get() = 0;
  /// Drops a token the service refused, so that the next Get() fetches another; false (and
  /// nothing happens) for a token that cannot be refreshed.
  virtual bool Invalidate() { return false; }
  /// Where the token comes from, for messages: "google_skip_signature", "google_bearer_token",
  /// "service account x@y.iam.gserviceaccount.com (from <where>)", "authorized user (from
  /// <file>)", "metadata server <host>". Never a secret.
  virtual std::string Source() const = 0;
};

struct GoogleCredentialInputs {
  /// storage_options with delta-rs key names (see the top of this file); others are ignored.
  std::map<std::string, std::string> options;
  EnvLookup env;       // null = the process environment (getenv)
  HttpFetch fetch;     // how to reach token endpoints and the metadata server; null = no network
  MillisClock now_ms;  // null = the system clock (tests inject a fake one)
};

/// The provider for the first configured source (see the top of this file). Invalid for a bad
/// google_skip_signature value, a key that is not JSON, misses a field (naming it) or holds no
/// readable RSA private key, or an ADC file of an unsupported type; IOError for a named file that
/// cannot be read.
arrow::Result<std::shared_ptr<GoogleCredentialProvider>> MakeGoogleCredentialChain(
    const GoogleCredentialInputs& inputs);

}  // namespace timelake
