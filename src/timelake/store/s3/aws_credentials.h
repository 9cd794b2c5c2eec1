// PLACEHOLDER until the credentials chain lands (branch s3-creds): static credentials only.
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
  std::string session_token;
  int64_t expires_ms = 0;
  bool anonymous = false;
};
using HttpFetch = std::function<arrow::Result<HttpResponse>(const HttpRequest&)>;
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

class AwsCredentialProvider {
 public:
  virtual ~AwsCredentialProvider() = default;
  virtual arrow::Result<AwsCredentials> Get() = 0;
  virtual std::string Source() const = 0;
};

struct AwsCredentialInputs {
  std::map<std::string, std::string> options;
  EnvLookup env;
  HttpFetch fetch;
};

arrow::Result<std::shared_ptr<AwsCredentialProvider>> MakeAwsCredentialChain(
    const AwsCredentialInputs& inputs);
std::string ResolveAwsRegion(const AwsCredentialInputs& inputs);

}  // namespace timelake
