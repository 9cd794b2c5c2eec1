#include "timelake/store/s3/aws_remote_credentials.h"

#include <cctype>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <map>
#include <string_view>
#include <utility>
#include <vector>

#include <arrow/buffer.h>
#include <arrow/status.h>
#include <rapidjson/document.h>

#include "timelake/http/xml.h"
#include "timelake/store/cloud/identity_client.h"
#include "timelake/util/encoding.h"
#include "timelake/util/time.h"
#include "timelake/util/text.h"

namespace timelake {
namespace {

constexpr const char* kImdsTokenTtlSeconds = "21600";




std::string BodyOf(const HttpResponse& response) {
  return response.body ? response.body->ToString() : std::string();
}

arrow::Result<std::string> ReadTokenFile(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in.is_open()) {
    return arrow::Status::IOError("cannot read the ", what, " file ", path,
                                  ": check that it exists and is readable");
  }
  std::string token =
      Trim(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()));
  if (in.bad()) return arrow::Status::IOError("error while reading the ", what, " file ", path);
  if (token.empty()) return arrow::Status::IOError("the ", what, " file ", path, " is empty");
  return token;
}

arrow::Result<int64_t> ParseExpiration(const std::string& text, const std::string& from) {
  const auto micros = ParseIsoMicros(text);
  if (!micros) {
    return arrow::Status::IOError(from, " gave an Expiration that is not an ISO-8601 time: '",
                                  QuoteReply(text), "'");
  }
  return *micros / 1000;
}

// ---- XML (STS) --------------------------------------------------------------------------------

// The text of every leaf element of an XML document, keyed by its path of local names
// ("ErrorResponse/Error/Code"); the first of repeated paths wins.
void CollectLeaves(const XmlElement& element, const std::string& parent,
                   std::map<std::string, std::string>* leaves) {
  const std::string path = parent.empty() ? element.name : parent + "/" + element.name;
  if (element.children.empty()) {
    leaves->emplace(path, Trim(element.text));
    return;
  }
  for (const XmlElement& child : element.children) CollectLeaves(child, path, leaves);
}

arrow::Result<std::map<std::string, std::string>> XmlLeaves(const std::string& xml,
                                                            const std::string& from) {
  auto root = ParseXml(xml);
  if (!root.ok()) return arrow::Status::IOError(from, " replied with ", root.status().message());
  std::map<std::string, std::string> leaves;
  CollectLeaves(*root, "", &leaves);
  return leaves;
}

std::string Leaf(const std::map<std::string, std::string>& leaves, const std::string& path) {
  const auto it = leaves.find(path);
  return it == leaves.end() ? std::string() : it->second;
}

// ---- JSON (container, IMDS) -------------------------------------------------------------------

arrow::Result<AwsCredentials> ParseJsonCredentials(const std::string& body,
                                                   const std::string& from) {
  rapidjson::Document doc;
  doc.Parse(body.data(), body.size());
  // Never quote a 200 reply: it may hold the very secrets it failed to deliver.
  if (doc.HasParseError() || !doc.IsObject()) {
    return arrow::Status::IOError(from, " replied with something other than a JSON object");
  }
  auto field = [&](const char* name) -> std::string {
    const auto it = doc.FindMember(name);
    return it != doc.MemberEnd() && it->value.IsString() ? it->value.GetString() : "";
  };
  if (const std::string code = field("Code"); !code.empty() && code != "Success") {
    return arrow::Status::IOError(from, " did not hand out credentials (Code ", QuoteReply(code),
                                  ")");
  }
  AwsCredentials credentials;
  credentials.access_key_id = field("AccessKeyId");
  credentials.secret_access_key = field("SecretAccessKey");
  credentials.session_token = field("Token");
  if (credentials.access_key_id.empty() || credentials.secret_access_key.empty()) {
    return arrow::Status::IOError(from,
                                  " replied without AccessKeyId and SecretAccessKey strings");
  }
  if (const std::string expiration = field("Expiration"); !expiration.empty()) {
    ARROW_ASSIGN_OR_RAISE(credentials.expires_ms, ParseExpiration(expiration, from));
  }
  return credentials;
}

bool IsSuccess(const HttpResponse& response) {
  return response.status >= 200 && response.status < 300;
}

}  // namespace

arrow::Result<AwsCredentials> AssumeRoleWithWebIdentity(const WebIdentitySettings& settings,
                                                        const HttpFetch& fetch) {
  ARROW_ASSIGN_OR_RAISE(const std::string token,
                        ReadTokenFile(settings.token_file, "web identity token"));
  const std::string what = "STS AssumeRoleWithWebIdentity at " + RedactUrl(settings.sts_endpoint) +
                           " for role " + settings.role_arn;
  HttpRequest request;
  request.method = "POST";
  request.url = settings.sts_endpoint + "/";
  request.headers = {{"Content-Type", "application/x-www-form-urlencoded; charset=utf-8"},
                     {"Accept", "application/xml"}};
  const std::string form = "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn=" +
                           UriEncode(settings.role_arn) +
                           "&RoleSessionName=" + UriEncode(settings.session_name) +
                           "&WebIdentityToken=" + UriEncode(token);
  request.body = arrow::Buffer::FromString(form);
  ARROW_ASSIGN_OR_RAISE(const HttpResponse response,
                        Exchange(fetch, request, what, {token, UriEncode(token)}));
  const std::string body = BodyOf(response);

  if (!IsSuccess(response)) {
    auto leaves = XmlLeaves(body, what);
    std::string detail;
    if (leaves.ok()) {
      detail = Leaf(*leaves, "ErrorResponse/Error/Code");
      const std::string message = Leaf(*leaves, "ErrorResponse/Error/Message");
      if (!message.empty()) detail += (detail.empty() ? "" : ": ") + message;
    }
    if (detail.empty()) detail = body;
    return arrow::Status::IOError(what, " answered HTTP ", response.status, " (",
                                  QuoteReply(Redact(detail, {token, UriEncode(token)})),
                                  "): check the role's trust policy and the token file ",
                                  settings.token_file);
  }
  ARROW_ASSIGN_OR_RAISE(const auto leaves, XmlLeaves(body, what));
  const std::string prefix =
      "AssumeRoleWithWebIdentityResponse/AssumeRoleWithWebIdentityResult/Credentials/";
  AwsCredentials credentials;
  credentials.access_key_id = Leaf(leaves, prefix + "AccessKeyId");
  credentials.secret_access_key = Leaf(leaves, prefix + "SecretAccessKey");
  credentials.session_token = Leaf(leaves, prefix + "SessionToken");
  const std::string expiration = Leaf(leaves, prefix + "Expiration");
  if (credentials.access_key_id.empty() || credentials.secret_access_key.empty() ||
      credentials.session_token.empty() || expiration.empty()) {
    return arrow::Status::IOError(what, " replied without AccessKeyId, SecretAccessKey, "
                                  "SessionToken and Expiration in its Credentials");
  }
  ARROW_ASSIGN_OR_RAISE(credentials.expires_ms, ParseExpiration(expiration, what));
  return credentials;
}

arrow::Result<AwsCredentials> FetchContainerCredentials(const ContainerSettings& settings,
                                                        const HttpFetch& fetch) {
  const std::string what = "the container credentials endpoint " + RedactUrl(settings.url);
  std::string authorization = settings.authorization_token;
  if (!settings.authorization_token_file.empty()) {
    ARROW_ASSIGN_OR_RAISE(authorization,
                          ReadTokenFile(settings.authorization_token_file,
                                        "container authorization token"));
  }
  if (authorization.find_first_of("\r\n") != std::string::npos) {
    // A line break would end the header early and let the rest pose as other headers.
    return arrow::Status::Invalid("the container authorization token (",
                                  settings.authorization_token_file.empty()
                                      ? "AWS_CONTAINER_AUTHORIZATION_TOKEN"
                                      : settings.authorization_token_file,
                                  ") holds a line break");
  }
  HttpRequest request;
  request.method = "GET";
  request.url = settings.url;
  request.headers = {{"Accept", "application/json"}};
  if (!authorization.empty()) request.headers.emplace_back("Authorization", authorization);
  ARROW_ASSIGN_OR_RAISE(const HttpResponse response,
                        Exchange(fetch, request, what, {authorization}));
  if (!IsSuccess(response)) {
    return arrow::Status::IOError(what, " answered HTTP ", response.status, " (",
                                  QuoteReply(Redact(BodyOf(response), {authorization})), ")");
  }
  return ParseJsonCredentials(BodyOf(response), what);
}

arrow::Result<AwsCredentials> FetchInstanceCredentials(const std::string& endpoint,
                                                       const HttpFetch& fetch) {
  const std::string what = "instance metadata at " + RedactUrl(endpoint);

  HttpRequest token_request;
  token_request.method = "PUT";
  token_request.url = endpoint + "/latest/api/token";
  token_request.headers = {{"X-aws-ec2-metadata-token-ttl-seconds", kImdsTokenTtlSeconds}};
  ARROW_ASSIGN_OR_RAISE(const HttpResponse token_response,
                        Exchange(fetch, token_request, what + " (token request)", {}));
  if (!IsSuccess(token_response)) {
    return arrow::Status::IOError(what, " refused a session token (PUT /latest/api/token ",
                                  "answered HTTP ", token_response.status,
                                  "); IMDSv1 is not used");
  }
  const std::string token = Trim(BodyOf(token_response));
  if (token.empty()) return arrow::Status::IOError(what, " gave an empty session token");

  const std::string roles_url = endpoint + "/latest/meta-data/iam/security-credentials/";
  HttpRequest roles_request;
  roles_request.method = "GET";
  roles_request.url = roles_url;
  roles_request.headers = {{"X-aws-ec2-metadata-token", token}};
  ARROW_ASSIGN_OR_RAISE(const HttpResponse roles_response,
                        Exchange(fetch, roles_request, what + " (role name)", {token}));
  const std::string roles = BodyOf(roles_response);
  const std::string role = Trim(std::string_view(roles).substr(0, roles.find('\n')));
  if (roles_response.status == 404 || (IsSuccess(roles_response) && role.empty())) {
    return arrow::Status::IOError(what, " lists no IAM role: attach an instance profile to ",
                                  "this instance, or configure credentials another way");
  }
  if (!IsSuccess(roles_response)) {
    return arrow::Status::IOError(what, " answered HTTP ", roles_response.status,
                                  " when asked for the instance's role");
  }

  HttpRequest credentials_request = roles_request;
  credentials_request.url = roles_url + role;
  const std::string role_what = what + " for role " + role;
  ARROW_ASSIGN_OR_RAISE(const HttpResponse response,
                        Exchange(fetch, credentials_request, role_what, {token}));
  if (!IsSuccess(response)) {
    return arrow::Status::IOError(role_what, " answered HTTP ", response.status);
  }
  return ParseJsonCredentials(BodyOf(response), role_what);
}

}  // namespace timelake
