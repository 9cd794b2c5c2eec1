// AWS credentials for the S3 store: where they come from, and keeping them fresh.
//
// MakeAwsCredentialChain looks for credentials where AWS's own tools look, in their order, and
// returns a provider for the first source that is configured:
//   1. storage_options: aws_skip_signature=true (anonymous), else aws_access_key_id +
//      aws_secret_access_key (+ aws_session_token or its alias aws_token);
//   2. the environment: AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN).
//      Skipped when storage_options name a profile (aws_profile): a profile chosen in code beats
//      keys left in the environment, as in botocore;
//   3. the shared files (aws_shared_files.h): the profile named by aws_profile, else
//      AWS_PROFILE, else "default", in AWS_SHARED_CREDENTIALS_FILE (~/.aws/credentials) and
//      AWS_CONFIG_FILE (~/.aws/config); keys in the credentials file win over the config file;
//   4. web identity: a token file (aws_web_identity_token_file, AWS_WEB_IDENTITY_TOKEN_FILE or
//      the profile's web_identity_token_file) and a role (aws_role_arn, AWS_ROLE_ARN or the
//      profile's role_arn), exchanged at STS (AssumeRoleWithWebIdentity);
//   5. the container endpoint (ECS, EKS Pod Identity): AWS_CONTAINER_CREDENTIALS_RELATIVE_URI
//      or AWS_CONTAINER_CREDENTIALS_FULL_URI;
//   6. the EC2 instance metadata service (IMDSv2), unless AWS_EC2_METADATA_DISABLED=true.
//
// The choice is made once, in MakeAwsCredentialChain, from configuration alone: sources 1-3 are
// read there (so a bad file or a half-given key pair fails early), sources 4-6 are chosen by
// whether they are configured and contacted only by the first Get(). A configured source that
// fails is an error; the chain does not fall through to the next one (a typo in a role ARN
// must not silently turn into the instance's role). IMDS is the last resort: if it cannot be
// reached, the error lists everything that was tried and how to configure credentials.
//
// Secrets (secret keys, session tokens, web identity tokens, IMDS and container authorization
// tokens) never appear in a status message or in Source().
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

struct AwsCredentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // "" when none
  int64_t expires_ms = 0;     // ms since epoch; 0 = never expires
  bool anonymous = false;     // aws_skip_signature: send requests unsigned
};


/// Timed credentials are refreshed when fewer than this many milliseconds remain.
constexpr int64_t kAwsCredentialRefreshWindowMs = 5 * 60 * 1000;
/// After a refresh fails while the old credentials are still valid, the provider keeps them and
/// tries again no sooner than this.
constexpr int64_t kAwsCredentialRetryIntervalMs = 30 * 1000;

/// Thread-safe: any number of threads may call Get() at once.
class AwsCredentialProvider {
 public:
  virtual ~AwsCredentialProvider() = default;
  /// Current credentials. Timed ones are refreshed (once, under a lock: other threads wait)
  /// when fewer than kAwsCredentialRefreshWindowMs remain. If a refresh fails, credentials that
  /// have not expired yet are returned and the refresh is retried after
  /// kAwsCredentialRetryIntervalMs; without valid credentials the failure is returned.
  virtual arrow::Result<AwsCredentials> Get() = 0;
  /// Makes the next Get() fetch timed credentials anew; false for static ones (nothing to do).
  virtual bool Invalidate() { return false; }
  /// Where they come from, for messages: "storage_options", "aws_skip_signature",
  /// "environment", "profile 'x' in <file>", "web identity", "container",
  /// "instance metadata". Never a secret.
  virtual std::string Source() const = 0;
};

struct AwsCredentialInputs {
  /// storage_options with delta-rs key names (aws_access_key_id, aws_secret_access_key,
  /// aws_session_token / aws_token, aws_profile, aws_web_identity_token_file, aws_role_arn,
  /// aws_role_session_name, aws_metadata_endpoint, aws_skip_signature, aws_region,
  /// aws_default_region, ...). Keys the chain does not use are ignored here.
  std::map<std::string, std::string> options;
  EnvLookup env;     // null = the process environment (getenv)
  HttpFetch fetch;   // how to reach STS, the container endpoint and IMDS; null = no network
  MillisClock now_ms;  // null = the system clock (tests inject a fake one)
};

/// The provider for the first configured source (see the top of this file). Invalid for a
/// half-given key pair (naming the missing key), a named profile that does not exist, a profile
/// that uses a mechanism timelake does not support (credential_process, SSO, role chaining),
/// half-given web identity settings, a bad aws_skip_signature value, or when no source is
/// configured and IMDS is disabled (the message lists what was tried). IOError for a shared
/// file that exists but cannot be read.
arrow::Result<std::shared_ptr<AwsCredentialProvider>> MakeAwsCredentialChain(
    const AwsCredentialInputs& inputs);

/// Region: aws_region, aws_default_region, AWS_REGION, AWS_DEFAULT_REGION, the profile's
/// region in the config file, else "us-east-1".
std::string ResolveAwsRegion(const AwsCredentialInputs& inputs);

}  // namespace timelake
