// PLACEHOLDER until the credentials chain lands (branch s3-creds).
#include "timelake/store/s3/aws_credentials.h"

#include <cstdlib>

namespace timelake {
namespace {
class Static : public AwsCredentialProvider {
 public:
  explicit Static(AwsCredentials c, std::string source) : c_(std::move(c)), source_(std::move(source)) {}
  arrow::Result<AwsCredentials> Get() override { return c_; }
  std::string Source() const override { return source_; }
 private:
  AwsCredentials c_;
  std::string source_;
};
std::optional<std::string> Env(const AwsCredentialInputs& in, const std::string& k) {
  if (in.env) return in.env(k);
  const char* v = std::getenv(k.c_str());
  if (!v) return std::nullopt;
  return std::string(v);
}
std::string Opt(const AwsCredentialInputs& in, const std::string& k) {
  auto it = in.options.find(k);
  return it == in.options.end() ? std::string() : it->second;
}
}  // namespace

arrow::Result<std::shared_ptr<AwsCredentialProvider>> MakeAwsCredentialChain(
    const AwsCredentialInputs& in) {
  AwsCredentials c;
  if (Opt(in, "aws_skip_signature") == "true") {
    c.anonymous = true;
    return std::make_shared<Static>(c, "anonymous");
  }
  c.access_key_id = Opt(in, "aws_access_key_id");
  c.secret_access_key = Opt(in, "aws_secret_access_key");
  c.session_token = Opt(in, "aws_session_token");
  if (!c.access_key_id.empty()) return std::make_shared<Static>(c, "storage_options");
  c.access_key_id = Env(in, "AWS_ACCESS_KEY_ID").value_or("");
  c.secret_access_key = Env(in, "AWS_SECRET_ACCESS_KEY").value_or("");
  c.session_token = Env(in, "AWS_SESSION_TOKEN").value_or("");
  if (!c.access_key_id.empty()) return std::make_shared<Static>(c, "environment");
  return arrow::Status::Invalid("no AWS credentials found");
}

std::string ResolveAwsRegion(const AwsCredentialInputs& in) {
  for (const char* k : {"aws_region", "aws_default_region"}) {
    if (!Opt(in, k).empty()) return Opt(in, k);
  }
  for (const char* k : {"AWS_REGION", "AWS_DEFAULT_REGION"}) {
    if (auto v = Env(in, k)) return *v;
  }
  return "us-east-1";
}

}  // namespace timelake
