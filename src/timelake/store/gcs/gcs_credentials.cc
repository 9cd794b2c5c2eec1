#include "timelake/store/gcs/gcs_credentials.h"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <mutex>
#include <string_view>
#include <utility>
#include <vector>

#include <arrow/buffer.h>
#include <arrow/status.h>
#include <rapidjson/document.h>

#include "timelake/store/cloud/options.h"
#include "timelake/store/refreshing_value.h"
#include "timelake/store/cloud/identity_client.h"
#include "timelake/util/encoding.h"
#include "timelake/util/json.h"
#include "timelake/util/time.h"
#include "timelake/util/text.h"

namespace timelake {
namespace {

constexpr const char* kDefaultTokenUri = "https://oauth2.googleapis.com/token";
constexpr const char* kDefaultMetadataHost = "169.254.169.254";
constexpr const char* kJwtGrant = "urn:ietf:params:oauth:grant-type:jwt-bearer";
constexpr int64_t kJwtLifetimeSeconds = 3600;
constexpr const char* kHowToConfigure =
    "Give a service-account key with google_service_account (a path) or "
    "google_service_account_key (the JSON), a token with google_bearer_token, or set "
    "GOOGLE_APPLICATION_CREDENTIALS (or run gcloud auth application-default login); for an "
    "emulator such as fake-gcs-server set google_skip_signature=true";




// storage_options and the environment, as the chain reads them: absent and empty are alike.
class Settings {
 public:
  static constexpr const char* kCredentialOptionKeys[] = {
      "google_skip_signature", "google_bearer_token", "google_service_account_key",
      "service_account_key", "google_service_account", "google_service_account_path",
      "service_account", "service_account_path", "google_application_credentials"};

  explicit Settings(const GoogleCredentialInputs& inputs) : inputs_(inputs) {}

  std::string Option(const std::string& key) const { return OptionValue(inputs_.options, key); }
  std::string Env(const std::string& name) const {
    return EnvValue(inputs_.env, name).value_or("");
  }

  /// True if storage_options name a credential source themselves: then the environment's
  /// credential variables are not looked at (options given win over the environment; a key left
  /// in the environment must not outrank the one the caller chose).
  bool OptionsNameCredentials() const {
    for (const char* key : kCredentialOptionKeys) {
      if (!Option(key).empty()) return true;
    }
    return false;
  }

  /// The first non-empty value of `keys` (options) then `names` (environment, unless the options
  /// name a credential source), with what gave it.
  std::pair<std::string, std::string> First(std::initializer_list<const char*> keys,
                                            std::initializer_list<const char*> names) const {
    for (const char* key : keys) {
      if (std::string v = Option(key); !v.empty()) return {v, key};
    }
    if (OptionsNameCredentials()) return {"", ""};
    for (const char* name : names) {
      if (std::string v = Env(name); !v.empty()) return {v, name};
    }
    return {"", ""};
  }

  std::string ExpandHome(const std::string& path) const {
    if (path.rfind("~/", 0) != 0) return path;
    const std::string home = Env("HOME");
    return home.empty() ? path : home + path.substr(1);
  }

 private:
  const GoogleCredentialInputs& inputs_;
};

arrow::Result<std::string> ReadKeyFile(const std::string& path, const std::string& what) {
  // A key's JSON given where a path belongs must not be echoed into the message.
  if (path.find('{') != std::string::npos || path.find("PRIVATE KEY") != std::string::npos ||
      path.size() > 4096) {
    return arrow::Status::Invalid(
        "the ", what, " option holds what looks like a key itself, not a file path; pass a key's "
        "JSON as google_service_account_key instead");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in.is_open()) {
    return arrow::Status::IOError("cannot read the ", what, " file ", path,
                                  ": check that it exists and is readable");
  }
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return arrow::Status::IOError("error while reading the ", what, " file ", path);
  return text;
}

bool FileExists(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return in.is_open();
}

// ---- key files ---------------------------------------------------------------------------------

// The fields of a service-account key or an ADC file that the chain uses.
struct KeyFile {
  std::string type;  // "service_account", "authorized_user", …
  std::string client_email;
  std::string private_key;  // PEM
  std::string private_key_id;
  std::string token_uri;
  std::string client_id;
  std::string client_secret;
  std::string refresh_token;
};

// `from` names the key for messages ("google_service_account_key", "the file /x.json"). Never
// quotes the text: it holds a private key.
arrow::Result<KeyFile> ParseKeyFile(const std::string& text, const std::string& from) {
  rapidjson::Document doc;
  doc.Parse(text.data(), text.size());
  if (doc.HasParseError() || !doc.IsObject()) {
    return arrow::Status::Invalid("the Google credentials in ", from,
                                  " are not a JSON object; give the key file as Google "
                                  "Cloud downloaded it");
  }
  auto field = [&](const char* name) -> std::string {
    const auto it = doc.FindMember(name);
    return it != doc.MemberEnd() && it->value.IsString() ? it->value.GetString() : "";
  };
  KeyFile key;
  key.type = field("type");
  key.client_email = field("client_email");
  key.private_key = field("private_key");
  key.private_key_id = field("private_key_id");
  key.token_uri = field("token_uri");
  key.client_id = field("client_id");
  key.client_secret = field("client_secret");
  key.refresh_token = field("refresh_token");
  if (key.token_uri.empty()) key.token_uri = kDefaultTokenUri;
  return key;
}

struct PkeyDeleter {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyDeleter>;

arrow::Result<Pkey> ReadPrivateKey(const std::string& pem, const std::string& from) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return arrow::Status::OutOfMemory("reading a private key");
  Pkey key(PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr));
  BIO_free(bio);
  if (!key || EVP_PKEY_base_id(key.get()) != EVP_PKEY_RSA) {
    return arrow::Status::Invalid("the private_key of the service account in ", from,
                                  " is not a PEM RSA private key");
  }
  return key;
}

arrow::Result<std::string> SignRs256(EVP_PKEY* key, std::string_view data) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  if (ctx == nullptr) return arrow::Status::OutOfMemory("signing a JWT");
  size_t length = 0;
  std::string signature;
  bool ok = EVP_DigestSignInit(ctx, nullptr, EVP_sha256(), nullptr, key) == 1 &&
            EVP_DigestSign(ctx, nullptr, &length,
                           reinterpret_cast<const unsigned char*>(data.data()), data.size()) == 1;
  if (ok) {
    signature.resize(length);
    ok = EVP_DigestSign(ctx, reinterpret_cast<unsigned char*>(signature.data()), &length,
                        reinterpret_cast<const unsigned char*>(data.data()), data.size()) == 1;
    signature.resize(length);
  }
  EVP_MD_CTX_free(ctx);
  if (!ok) return arrow::Status::IOError("OpenSSL could not sign the service-account JWT");
  return signature;
}

// ---- token endpoints ---------------------------------------------------------------------------

// A token from an OAuth token reply ({"access_token": …, "expires_in": seconds}).
arrow::Result<GoogleToken> ParseTokenReply(const HttpResponse& response, const std::string& what,
                                           int64_t now_ms,
                                           std::initializer_list<std::string_view> secrets) {
  const std::string body = response.BodyText();
  if (response.status < 200 || response.status >= 300) {
    // OAuth errors: {"error": "invalid_grant", "error_description": "…"}.
    std::string detail;
    rapidjson::Document doc;
    doc.Parse(body.data(), body.size());
    if (!doc.HasParseError() && doc.IsObject()) {
      for (const char* name : {"error", "error_description"}) {
        const auto it = doc.FindMember(name);
        if (it != doc.MemberEnd() && it->value.IsString()) {
          detail += (detail.empty() ? "" : ": ") + std::string(it->value.GetString());
        }
      }
    }
    if (detail.empty()) detail = body;
    return arrow::Status::IOError(what, " answered HTTP ", response.status, " (",
                                  QuoteReply(Redact(detail, secrets)), ")");
  }
  rapidjson::Document doc;
  doc.Parse(body.data(), body.size());
  // Never quote a 200 reply: it may hold the very token it failed to deliver.
  if (doc.HasParseError() || !doc.IsObject()) {
    return arrow::Status::IOError(what, " replied with something other than a JSON object");
  }
  const auto token = doc.FindMember("access_token");
  if (token == doc.MemberEnd() || !token->value.IsString() || !*token->value.GetString()) {
    return arrow::Status::IOError(what, " replied without an access_token");
  }
  GoogleToken out;
  out.access_token = token->value.GetString();
  if (out.access_token.find_first_of("\r\n") != std::string::npos) {
    return arrow::Status::IOError(what, " handed out a token with a line break");
  }
  int64_t expires_in = 3600;  // Google's tokens live an hour; the field is always there
  const auto expires = doc.FindMember("expires_in");
  if (expires != doc.MemberEnd() && expires->value.IsInt64()) {
    expires_in = expires->value.GetInt64();
  }
  out.expires_ms = now_ms + std::max<int64_t>(expires_in, 1) * 1000;
  return out;
}

std::string FormValue(const std::string& value) { return UriEncode(value); }

HttpRequest FormPost(const std::string& url, const std::string& form) {
  HttpRequest request;
  request.method = "POST";
  request.url = url;
  request.headers = {{"Content-Type", "application/x-www-form-urlencoded"},
                     {"Accept", "application/json"}};
  request.body = arrow::Buffer::FromString(form);
  return request;
}

// The signed JWT a service account presents (RFC 7523): header.claims.signature.
arrow::Result<std::string> ServiceAccountAssertion(const KeyFile& key, EVP_PKEY* pkey,
                                                   int64_t now_seconds) {
  rapidjson::StringBuffer header_text;
  {
    JsonWriter w(header_text);
    w.StartObject();
    w.Key("alg");
    w.String("RS256");
    w.Key("typ");
    w.String("JWT");
    if (!key.private_key_id.empty()) {
      w.Key("kid");
      w.String(key.private_key_id.c_str());
    }
    w.EndObject();
  }
  rapidjson::StringBuffer claims_text;
  {
    JsonWriter w(claims_text);
    w.StartObject();
    w.Key("iss");
    w.String(key.client_email.c_str());
    w.Key("scope");
    w.String(kGoogleStorageScope);
    w.Key("aud");
    w.String(key.token_uri.c_str());
    w.Key("iat");
    w.Int64(now_seconds);
    w.Key("exp");
    w.Int64(now_seconds + kJwtLifetimeSeconds);
    w.EndObject();
  }
  const std::string signing_input = Base64UrlEncode(header_text.GetString()) + "." +
                                    Base64UrlEncode(claims_text.GetString());
  ARROW_ASSIGN_OR_RAISE(const std::string signature, SignRs256(pkey, signing_input));
  return signing_input + "." + Base64UrlEncode(signature);
}

// ---- providers ---------------------------------------------------------------------------------

using FixedTokenProvider = StaticProvider<GoogleCredentialProvider, GoogleToken>;
using RefreshingTokenProvider = RefreshingProvider<GoogleCredentialProvider, GoogleToken,
                                                   kGoogleTokenRefreshWindowMs,
                                                   kGoogleTokenRetryIntervalMs>;

// A provider for a service-account key (checked now: fields and private key).
arrow::Result<std::shared_ptr<GoogleCredentialProvider>> ServiceAccountProvider(
    const KeyFile& key, const std::string& from, const GoogleCredentialInputs& inputs,
    const MillisClock& now_ms) {
  for (const auto& [value, name] : {std::pair{&key.client_email, "client_email"},
                                    std::pair{&key.private_key, "private_key"}}) {
    if (value->empty()) {
      return arrow::Status::Invalid("the service-account key in ", from, " has no '", name,
                                    "'; give the key file as Google Cloud downloaded it");
    }
  }
  ARROW_ASSIGN_OR_RAISE(Pkey pkey, ReadPrivateKey(key.private_key, from));
  std::shared_ptr<EVP_PKEY> shared(pkey.release(), PkeyDeleter{});
  const std::string what = "the token endpoint " + RedactUrl(key.token_uri) +
                           " for service account " + key.client_email;
  auto fetch = [key, shared, what, http = inputs.fetch](int64_t now) -> arrow::Result<GoogleToken> {
    ARROW_ASSIGN_OR_RAISE(const std::string assertion,
                          ServiceAccountAssertion(key, shared.get(), now / 1000));
    const HttpRequest request =
        FormPost(key.token_uri, "grant_type=" + FormValue(kJwtGrant) +
                                    "&assertion=" + FormValue(assertion));
    ARROW_ASSIGN_OR_RAISE(const HttpResponse response,
                          Exchange(http, request, what, {assertion}));
    return ParseTokenReply(response, what, now, {assertion});
  };
  return std::make_shared<RefreshingTokenProvider>(
      "service account " + key.client_email + " (from " + from + ")", fetch, now_ms);
}

// A provider for gcloud's "authorized_user" ADC file (a refresh token and its OAuth client).
arrow::Result<std::shared_ptr<GoogleCredentialProvider>> AuthorizedUserProvider(
    const KeyFile& key, const std::string& from, const GoogleCredentialInputs& inputs,
    const MillisClock& now_ms) {
  for (const auto& [value, name] : {std::pair{&key.client_id, "client_id"},
                                    std::pair{&key.client_secret, "client_secret"},
                                    std::pair{&key.refresh_token, "refresh_token"}}) {
    if (value->empty()) {
      return arrow::Status::Invalid("the authorized_user credentials in ", from, " have no '",
                                    name, "'; run gcloud auth application-default login again");
    }
  }
  const std::string what = "the token endpoint " + RedactUrl(key.token_uri) +
                           " (refreshing the authorized_user token of " + from + ")";
  auto fetch = [key, what, http = inputs.fetch](int64_t now) -> arrow::Result<GoogleToken> {
    const std::string secret = FormValue(key.client_secret);
    const std::string refresh = FormValue(key.refresh_token);
    const HttpRequest request =
        FormPost(key.token_uri, "grant_type=refresh_token&client_id=" + FormValue(key.client_id) +
                                    "&client_secret=" + secret + "&refresh_token=" + refresh);
    ARROW_ASSIGN_OR_RAISE(
        const HttpResponse response,
        Exchange(http, request, what, {key.client_secret, key.refresh_token, secret, refresh}));
    return ParseTokenReply(response, what, now,
                           {key.client_secret, key.refresh_token, secret, refresh});
  };
  return std::make_shared<RefreshingTokenProvider>("authorized user (from " + from + ")", fetch,
                                                   now_ms);
}

// A provider for an ADC or service-account key file's text, by its "type".
arrow::Result<std::shared_ptr<GoogleCredentialProvider>> KeyFileProvider(
    const std::string& text, const std::string& from, const GoogleCredentialInputs& inputs,
    const MillisClock& now_ms) {
  ARROW_ASSIGN_OR_RAISE(const KeyFile key, ParseKeyFile(text, from));
  if (key.type == "service_account" || (key.type.empty() && !key.private_key.empty())) {
    return ServiceAccountProvider(key, from, inputs, now_ms);
  }
  if (key.type == "authorized_user") return AuthorizedUserProvider(key, from, inputs, now_ms);
  return arrow::Status::Invalid(
      "the Google credentials in ", from, " are of type '", QuoteReply(key.type),
      "', which timelake does not support; use a service-account key or gcloud auth "
      "application-default login (type authorized_user)");
}

}  // namespace

arrow::Result<std::shared_ptr<GoogleCredentialProvider>> MakeGoogleCredentialChain(
    const GoogleCredentialInputs& inputs) {
  const Settings s(inputs);
  const MillisClock now_ms = inputs.now_ms ? inputs.now_ms : MillisClock(&NowMillis);
  std::vector<std::string> tried;

  // 1. No signature at all.
  if (const std::string skip = s.Option("google_skip_signature"); !skip.empty()) {
    ARROW_ASSIGN_OR_RAISE(const bool anonymous, ParseBoolOption("google_skip_signature", skip));
    if (anonymous) {
      GoogleToken token;
      token.anonymous = true;
      return std::make_shared<FixedTokenProvider>(token, "google_skip_signature");
    }
  }

  // 2. A fixed token.
  if (const std::string bearer = s.Option("google_bearer_token"); !bearer.empty()) {
    if (bearer.find_first_of("\r\n") != std::string::npos) {
      return arrow::Status::Invalid("storage option 'google_bearer_token' holds a line break");
    }
    GoogleToken token;
    token.access_token = bearer;
    return std::make_shared<FixedTokenProvider>(token, "google_bearer_token");
  }

  // 3. A service-account key, inline or in a file.
  const auto [key_text, key_from] = s.First({"google_service_account_key", "service_account_key"},
                                            {"GOOGLE_SERVICE_ACCOUNT_KEY"});
  if (!key_text.empty()) return KeyFileProvider(key_text, key_from, inputs, now_ms);
  const auto [key_path, path_from] =
      s.First({"google_service_account", "google_service_account_path", "service_account",
               "service_account_path"},
              {"GOOGLE_SERVICE_ACCOUNT", "GOOGLE_SERVICE_ACCOUNT_PATH"});
  if (!key_path.empty()) {
    const std::string path = s.ExpandHome(key_path);
    ARROW_ASSIGN_OR_RAISE(const std::string text,
                          ReadKeyFile(path, "service-account key (" + path_from + ")"));
    return KeyFileProvider(text, "the file " + path + " (" + path_from + ")", inputs, now_ms);
  }
  tried.push_back("storage_options (no google_service_account, google_service_account_key or "
                  "google_bearer_token)");

  // 4. Application Default Credentials.
  const auto [adc_path, adc_from] =
      s.First({"google_application_credentials"}, {"GOOGLE_APPLICATION_CREDENTIALS"});
  if (!adc_path.empty()) {
    const std::string path = s.ExpandHome(adc_path);
    ARROW_ASSIGN_OR_RAISE(const std::string text,
                          ReadKeyFile(path, "application credentials (" + adc_from + ")"));
    return KeyFileProvider(text, "the file " + path + " (" + adc_from + ")", inputs, now_ms);
  }
  tried.push_back("GOOGLE_APPLICATION_CREDENTIALS (not set)");
  std::string gcloud_dir = s.Env("CLOUDSDK_CONFIG");
  if (gcloud_dir.empty() && !s.Env("HOME").empty()) gcloud_dir = s.Env("HOME") + "/.config/gcloud";
  if (!gcloud_dir.empty()) {
    const std::string path = gcloud_dir + "/application_default_credentials.json";
    if (FileExists(path)) {
      ARROW_ASSIGN_OR_RAISE(const std::string text, ReadKeyFile(path, "gcloud credentials"));
      return KeyFileProvider(text, "the file " + path, inputs, now_ms);
    }
    tried.push_back("gcloud's " + path + " (missing)");
  } else {
    tried.push_back("gcloud's application_default_credentials.json (no home folder)");
  }

  // 5. The metadata server, the last resort.
  std::string host = s.Env("GCE_METADATA_HOST");
  if (host.empty()) host = kDefaultMetadataHost;
  const std::string url = (host.find("://") == std::string::npos ? "http://" + host : host) +
                          "/computeMetadata/v1/instance/service-accounts/default/token";
  const std::string what = "the metadata server " + RedactUrl(url);
  const std::string before = Join(tried, "; ");
  auto fetch = [url, what, before, http = inputs.fetch](int64_t now) -> arrow::Result<GoogleToken> {
    HttpRequest request;
    request.method = "GET";
    request.url = url;
    request.headers = {{"Metadata-Flavor", "Google"}};
    auto token = [&]() -> arrow::Result<GoogleToken> {
      ARROW_ASSIGN_OR_RAISE(const HttpResponse response, Exchange(http, request, what, {}));
      return ParseTokenReply(response, what, now, {});
    }();
    if (token.ok()) return token;
    return arrow::Status::IOError("no Google credentials: ", token.status().message(),
                                  ". Before the metadata server, tried ", before, ". ",
                                  kHowToConfigure);
  };
  return std::make_shared<RefreshingTokenProvider>("metadata server " + host, fetch, now_ms);
}

}  // namespace timelake
