#include "timelake/store/s3/aws_credentials.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <utility>
#include <vector>

#include <arrow/status.h>

#include "timelake/store/refreshing_value.h"
#include "timelake/store/s3/aws_remote_credentials.h"
#include "timelake/store/s3/aws_shared_files.h"
#include "timelake/store/cloud/options.h"
#include "timelake/util/time.h"
#include "timelake/util/text.h"

namespace timelake {
namespace {

constexpr const char* kContainerEndpoint = "http://169.254.170.2";
constexpr const char* kInstanceMetadataEndpoint = "http://169.254.169.254";
constexpr const char* kDefaultSessionName = "timelake-session";
constexpr const char* kHowToConfigure =
    "Give aws_access_key_id and aws_secret_access_key in storage_options, set "
    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, name a profile of ~/.aws/credentials with "
    "aws_profile or AWS_PROFILE, or set aws_skip_signature=true for a public bucket";


std::string WithoutTrailingSlash(std::string url) {
  while (!url.empty() && url.back() == '/') url.pop_back();
  return url;
}

// storage_options and the environment, as the chain reads them: absent and empty are alike.
class Settings {
 public:
  explicit Settings(const AwsCredentialInputs& inputs) : inputs_(inputs) {}

  std::string Option(const std::string& key) const { return OptionValue(inputs_.options, key); }
  std::string Env(const std::string& name) const {
    return EnvValue(inputs_.env, name).value_or("");
  }

  /// The first non-empty of the option `key` and the variable `name`.
  std::string OptionOrEnv(const std::string& key, const std::string& name) const {
    std::string value = Option(key);
    return value.empty() ? Env(name) : value;
  }

  /// The profile the shared files are read for, and what chose it.
  std::pair<std::string, std::string> Profile() const {
    if (std::string name = Option("aws_profile"); !name.empty()) return {name, "aws_profile"};
    if (std::string name = Env("AWS_PROFILE"); !name.empty()) return {name, "AWS_PROFILE"};
    return {"default", ""};
  }

  /// `path` with a leading "~/" replaced by the home folder.
  std::string ExpandHome(const std::string& path) const {
    if (path.rfind("~/", 0) != 0) return path;
    const std::string home = Env("HOME");
    return home.empty() ? path : home + path.substr(1);
  }

  /// The shared file named by the variable `name`, else ~/.aws/<file>; "" without a home.
  std::string SharedFile(const std::string& name, const std::string& file) const {
    if (std::string path = Env(name); !path.empty()) return ExpandHome(path);
    const std::string home = Env("HOME");
    return home.empty() ? std::string() : home + "/.aws/" + file;
  }

  arrow::Result<AwsProfile> LoadProfile() const {
    return LoadAwsProfile(Profile().first,
                          SharedFile("AWS_SHARED_CREDENTIALS_FILE", "credentials"),
                          SharedFile("AWS_CONFIG_FILE", "config"));
  }

 private:
  const AwsCredentialInputs& inputs_;
};

// Credentials from an access key pair (and maybe a token) found under the names `id_name`,
// `secret_name` in `where`; nullopt when neither half is there.
arrow::Result<std::optional<AwsCredentials>> KeyPair(const std::string& id,
                                                     const std::string& secret,
                                                     const std::string& token,
                                                     const std::string& id_name,
                                                     const std::string& secret_name,
                                                     const std::string& where) {
  if (id.empty() && secret.empty()) return std::nullopt;
  if (id.empty() || secret.empty()) {
    return arrow::Status::Invalid(where, " gives ", id.empty() ? secret_name : id_name,
                                  " but not ", id.empty() ? id_name : secret_name,
                                  ": give both, or neither to let timelake look elsewhere");
  }
  AwsCredentials credentials;
  credentials.access_key_id = id;
  credentials.secret_access_key = secret;
  credentials.session_token = token;
  return credentials;
}

arrow::Result<std::optional<AwsCredentials>> FromOptions(const Settings& s) {
  const std::string id = s.Option("aws_access_key_id");
  const std::string secret = s.Option("aws_secret_access_key");
  std::string token = s.Option("aws_session_token");
  if (token.empty()) token = s.Option("aws_token");
  if (id.empty() && secret.empty() && !token.empty()) {
    return arrow::Status::Invalid(
        "storage_options give a session token (aws_session_token / aws_token) but not "
        "aws_access_key_id and aws_secret_access_key: a token only works with its key pair");
  }
  return KeyPair(id, secret, token, "aws_access_key_id", "aws_secret_access_key",
                 "storage_options");
}

arrow::Result<std::optional<AwsCredentials>> FromEnvironment(const Settings& s) {
  return KeyPair(s.Env("AWS_ACCESS_KEY_ID"), s.Env("AWS_SECRET_ACCESS_KEY"),
                 s.Env("AWS_SESSION_TOKEN"), "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                 "the environment");
}

// Keys from one of the profile's two sections; `path` names the file for messages.
arrow::Result<std::optional<AwsCredentials>> FromProfileSection(
    const AwsProfile& profile, const std::map<std::string, std::string>& keys,
    const std::string& path) {
  auto get = [&](const char* key) {
    const auto it = keys.find(key);
    return it == keys.end() ? std::string() : it->second;
  };
  return KeyPair(get("aws_access_key_id"), get("aws_secret_access_key"), get("aws_session_token"),
                 "aws_access_key_id", "aws_secret_access_key",
                 "profile '" + profile.name + "' in " + path);
}

// Invalid if the profile, having no keys, gets its credentials in a way timelake does not do.
arrow::Status CheckProfileMechanism(const AwsProfile& profile) {
  auto has = [&](const char* key) {
    return profile.credentials_file.count(key) > 0 || profile.config_file.count(key) > 0;
  };
  std::string mechanism;
  if (has("credential_process")) {
    mechanism = "credential_process";
  } else if (has("sso_session") || has("sso_start_url")) {
    mechanism = "IAM Identity Center (SSO)";
  } else if (has("role_arn") && (has("source_profile") || has("credential_source"))) {
    mechanism = "role_arn with source_profile / credential_source";
  }
  if (mechanism.empty()) return arrow::Status::OK();
  return arrow::Status::Invalid(
      "profile '", profile.name, "' gets its credentials through ", mechanism,
      ", which timelake does not support: export them first (aws configure "
      "export-credentials --profile ", profile.name,
      " --format env) or give an access key pair another way");
}

using StaticCredentialProvider = StaticProvider<AwsCredentialProvider, AwsCredentials>;
using RefreshingCredentialProvider =
    RefreshingProvider<AwsCredentialProvider, AwsCredentials, kAwsCredentialRefreshWindowMs,
                       kAwsCredentialRetryIntervalMs>;

std::string StsEndpoint(const Settings& s, const std::string& region) {
  if (std::string url = s.Env("AWS_ENDPOINT_URL_STS"); !url.empty()) {
    return WithoutTrailingSlash(url);
  }
  const bool china = region.rfind("cn-", 0) == 0;
  return "https://sts." + region + ".amazonaws.com" + (china ? ".cn" : "");
}

// The host of `url`, lowercased ("[::1]" keeps its brackets), "" if it has none.
std::string HostOf(const std::string& url) {
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos) return "";
  std::string authority = url.substr(scheme_end + 3);
  authority = authority.substr(0, authority.find_first_of("/?#"));
  if (const size_t at = authority.rfind('@'); at != std::string::npos) {
    authority = authority.substr(at + 1);
  }
  if (!authority.empty() && authority.front() == '[') {
    return Lower(authority.substr(0, authority.find(']') + 1));
  }
  return Lower(authority.substr(0, authority.find(':')));
}

// The AWS SDKs accept a full container URI over https anywhere, but over plain http only to the
// loopback interface or the ECS / EKS Pod Identity agents: the token must not leave the host.
arrow::Status CheckContainerFullUri(const std::string& url) {
  const std::string scheme = Lower(url.substr(0, url.find("://")));
  const std::string host = HostOf(url);
  if (host.empty() || (scheme != "http" && scheme != "https")) {
    return arrow::Status::Invalid("AWS_CONTAINER_CREDENTIALS_FULL_URI is not an http(s) URL");
  }
  const bool local = host == "localhost" || host.rfind("127.", 0) == 0 || host == "[::1]" ||
                     host == "169.254.170.2" || host == "169.254.170.23" ||
                     host == "[fd00:ec2::23]";
  if (scheme == "http" && !local) {
    return arrow::Status::Invalid(
        "AWS_CONTAINER_CREDENTIALS_FULL_URI uses plain http to host '", host,
        "': only https, or http to the loopback interface, 169.254.170.2 or 169.254.170.23, "
        "is allowed");
  }
  return arrow::Status::OK();
}

}  // namespace

arrow::Result<std::shared_ptr<AwsCredentialProvider>> MakeAwsCredentialChain(
    const AwsCredentialInputs& inputs) {
  const Settings s(inputs);
  const MillisClock now_ms = inputs.now_ms ? inputs.now_ms : MillisClock(&NowMillis);
  auto fixed = [](AwsCredentials credentials, std::string source) {
    return std::make_shared<StaticCredentialProvider>(std::move(credentials), std::move(source));
  };
  std::vector<std::string> tried;  // what each source lacked, for the final message

  // 1. storage_options.
  if (const std::string skip = s.Option("aws_skip_signature"); !skip.empty()) {
    ARROW_ASSIGN_OR_RAISE(const bool anonymous, ParseBoolOption("aws_skip_signature", skip));
    if (anonymous) {
      AwsCredentials credentials;
      credentials.anonymous = true;
      return fixed(credentials, "aws_skip_signature");
    }
  }
  ARROW_ASSIGN_OR_RAISE(auto from_options, FromOptions(s));
  if (from_options) return fixed(*from_options, "storage_options");
  tried.push_back("storage_options (no aws_access_key_id)");

  // 2. The environment, unless the code chose a profile.
  const auto [profile_name, profile_chooser] = s.Profile();
  if (profile_chooser != "aws_profile") {
    ARROW_ASSIGN_OR_RAISE(auto from_env, FromEnvironment(s));
    if (from_env) return fixed(*from_env, "environment");
    tried.push_back("environment (no AWS_ACCESS_KEY_ID)");
  } else {
    tried.push_back("environment (not read: aws_profile chooses the profile)");
  }

  // 3. The shared files.
  ARROW_ASSIGN_OR_RAISE(const AwsProfile profile, s.LoadProfile());
  const std::string files = (profile.credentials_path.empty() ? "(no home folder)"
                                                              : profile.credentials_path) +
                            " or " +
                            (profile.config_path.empty() ? "(no home folder)"
                                                         : profile.config_path);
  if (!profile.found() && !profile_chooser.empty()) {
    return arrow::Status::Invalid("profile '", profile_name, "' (from ", profile_chooser,
                                  ") is not in ", files,
                                  ": check the name, or AWS_SHARED_CREDENTIALS_FILE and "
                                  "AWS_CONFIG_FILE");
  }
  if (profile.in_credentials_file) {
    ARROW_ASSIGN_OR_RAISE(auto keys, FromProfileSection(profile, profile.credentials_file,
                                                        profile.credentials_path));
    if (keys) {
      return fixed(*keys, "profile '" + profile.name + "' in " + profile.credentials_path);
    }
  }
  if (profile.in_config_file) {
    ARROW_ASSIGN_OR_RAISE(auto keys,
                          FromProfileSection(profile, profile.config_file, profile.config_path));
    if (keys) return fixed(*keys, "profile '" + profile.name + "' in " + profile.config_path);
  }
  ARROW_RETURN_NOT_OK(CheckProfileMechanism(profile));
  tried.push_back(profile.found() ? "profile '" + profile.name + "' (no access key)"
                                  : "profile '" + profile.name + "' (not in " + files + ")");

  // 4. Web identity.
  WebIdentitySettings web;
  web.token_file = s.ExpandHome(
      s.OptionOrEnv("aws_web_identity_token_file", "AWS_WEB_IDENTITY_TOKEN_FILE"));
  if (web.token_file.empty()) {
    web.token_file = s.ExpandHome(profile.Setting("web_identity_token_file"));
  }
  web.role_arn = s.OptionOrEnv("aws_role_arn", "AWS_ROLE_ARN");
  if (web.role_arn.empty()) web.role_arn = profile.Setting("role_arn");
  if (!web.token_file.empty() || !web.role_arn.empty()) {
    if (web.token_file.empty() || web.role_arn.empty()) {
      return arrow::Status::Invalid(
          "web identity needs both a token file (aws_web_identity_token_file or "
          "AWS_WEB_IDENTITY_TOKEN_FILE) and a role (aws_role_arn or AWS_ROLE_ARN); only the ",
          web.token_file.empty() ? "role" : "token file", " is given");
    }
    web.session_name = s.OptionOrEnv("aws_role_session_name", "AWS_ROLE_SESSION_NAME");
    if (web.session_name.empty()) web.session_name = profile.Setting("role_session_name");
    if (web.session_name.empty()) web.session_name = kDefaultSessionName;
    web.sts_endpoint = StsEndpoint(s, ResolveAwsRegion(inputs));
    return std::make_shared<RefreshingCredentialProvider>(
        "web identity",
        [web, fetch = inputs.fetch] { return AssumeRoleWithWebIdentity(web, fetch); }, now_ms);
  }
  tried.push_back("web identity (no AWS_WEB_IDENTITY_TOKEN_FILE)");

  // 5. The container endpoint.
  ContainerSettings container;
  const std::string relative = s.Env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
  if (!relative.empty()) {
    container.url =
        std::string(kContainerEndpoint) + (relative.front() == '/' ? "" : "/") + relative;
  } else if (std::string full = s.Env("AWS_CONTAINER_CREDENTIALS_FULL_URI"); !full.empty()) {
    ARROW_RETURN_NOT_OK(CheckContainerFullUri(full));
    container.url = full;
  }
  if (!container.url.empty()) {
    container.authorization_token = s.Env("AWS_CONTAINER_AUTHORIZATION_TOKEN");
    container.authorization_token_file = s.Env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
    return std::make_shared<RefreshingCredentialProvider>(
        "container",
        [container, fetch = inputs.fetch] { return FetchContainerCredentials(container, fetch); },
        now_ms);
  }
  tried.push_back("container (no AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or _FULL_URI)");

  // 6. Instance metadata, the last resort.
  if (Lower(s.Env("AWS_EC2_METADATA_DISABLED")) == "true") {
    tried.push_back("instance metadata (AWS_EC2_METADATA_DISABLED=true)");
    return arrow::Status::Invalid("no AWS credentials found; tried ", Join(tried, "; "), ". ",
                                  kHowToConfigure);
  }
  const std::string endpoint = WithoutTrailingSlash(s.OptionOrEnv(
      "aws_metadata_endpoint", "AWS_EC2_METADATA_SERVICE_ENDPOINT"));
  const std::string imds = endpoint.empty() ? kInstanceMetadataEndpoint : endpoint;
  if (imds.rfind("http://", 0) != 0 && imds.rfind("https://", 0) != 0) {
    return arrow::Status::Invalid("the instance metadata endpoint (aws_metadata_endpoint or "
                                  "AWS_EC2_METADATA_SERVICE_ENDPOINT) must be an http(s) URL, "
                                  "such as http://169.254.169.254");
  }
  const std::string before = Join(tried, "; ");
  return std::make_shared<RefreshingCredentialProvider>(
      "instance metadata",
      [imds, before, fetch = inputs.fetch]() -> arrow::Result<AwsCredentials> {
        auto credentials = FetchInstanceCredentials(imds, fetch);
        if (credentials.ok()) return credentials;
        return arrow::Status::IOError("no AWS credentials: ", credentials.status().message(),
                                      ". Before instance metadata, tried ", before, ". ",
                                      kHowToConfigure);
      },
      now_ms);
}

std::string ResolveAwsRegion(const AwsCredentialInputs& inputs) {
  const Settings s(inputs);
  for (const char* key : {"aws_region", "aws_default_region"}) {
    if (std::string region = s.Option(key); !region.empty()) return region;
  }
  for (const char* name : {"AWS_REGION", "AWS_DEFAULT_REGION"}) {
    if (std::string region = s.Env(name); !region.empty()) return region;
  }
  if (auto profile = s.LoadProfile(); profile.ok()) {
    if (std::string region = profile->Setting("region"); !region.empty()) return region;
  }
  return "us-east-1";
}

}  // namespace timelake
