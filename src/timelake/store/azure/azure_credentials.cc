#include "timelake/store/azure/azure_credentials.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <mutex>
#include <optional>
#include <sstream>
#include <vector>

#include <rapidjson/document.h>

#include "timelake/store/cloud/options.h"
#include "timelake/store/refreshing_value.h"
#include "timelake/util/encoding.h"
#include "timelake/util/text.h"

namespace timelake {

const char* const kAzureEmulatorAccount = "devstoreaccount1";
const char* const kAzureEmulatorKey =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

namespace {

constexpr int64_t kRefreshWindowMs = 5 * 60 * 1000;
constexpr int64_t kRetryIntervalMs = 30 * 1000;
constexpr const char* kStorageScope = "https://storage.azure.com/.default";
constexpr const char* kStorageResource = "https://storage.azure.com";
constexpr const char* kImdsEndpoint = "http://169.254.169.254/metadata/identity/oauth2/token";

using StaticAzureProvider = StaticProvider<AzureCredentialProvider, AzureCredential>;
using RefreshingAzureProvider =
    RefreshingProvider<AzureCredentialProvider, AzureCredential, kRefreshWindowMs, kRetryIntervalMs>;

std::string FormEncode(const std::vector<std::pair<std::string, std::string>>& fields) {
  std::string out;
  for (const auto& [name, value] : fields) {
    out += (out.empty() ? "" : "&") + UriEncode(name) + "=" + UriEncode(value);
  }
  return out;
}

// Reads an OAuth token reply ({"access_token", "expires_in" | "expires_on"}); the error names
// `what` and the service's error code, never the reply's text (it may echo a secret).
arrow::Result<AzureCredential> ParseTokenReply(const std::string& what, const HttpResponse& reply,
                                               int64_t now_ms) {
  rapidjson::Document doc;
  const std::string text = reply.BodyText();
  doc.Parse(text.c_str(), text.size());
  const bool json = !doc.HasParseError() && doc.IsObject();
  if (reply.status != 200) {
    std::string code;
    if (json && doc.HasMember("error") && doc["error"].IsString()) code = doc["error"].GetString();
    return arrow::Status::IOError(what, ": HTTP ", reply.status, code.empty() ? "" : " " + code,
                                  "; check the identity's settings and that it may read the "
                                  "storage account");
  }
  if (!json || !doc.HasMember("access_token") || !doc["access_token"].IsString()) {
    return arrow::Status::IOError(what, ": the reply holds no access_token");
  }
  AzureCredential credential;
  credential.kind = AzureCredential::Kind::kBearer;
  credential.bearer = doc["access_token"].GetString();
  auto number = [&](const char* name) -> int64_t {
    if (!doc.HasMember(name)) return -1;
    const auto& v = doc[name];
    if (v.IsInt64()) return v.GetInt64();
    if (v.IsString()) return std::strtoll(v.GetString(), nullptr, 10);
    return -1;
  };
  if (int64_t on = number("expires_on"); on > 0) {
    credential.expires_ms = on * 1000;
  } else if (int64_t in = number("expires_in"); in > 0) {
    credential.expires_ms = now_ms + in * 1000;
  } else {
    credential.expires_ms = now_ms + 60 * 60 * 1000;  // tokens live an hour at least
  }
  return credential;
}

struct Inputs {
  const AzureCredentialInputs& in;
  std::string Option(const std::string& key) const { return OptionValue(in.options, key); }
  std::optional<std::string> Env(const std::string& name) const { return EnvValue(in.env, name); }
  MillisClock Clock() const {
    if (in.now_ms) return in.now_ms;
    return [] {
      return std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::system_clock::now().time_since_epoch())
          .count();
    };
  }
  HttpFetch Fetch() const {
    if (in.fetch) return in.fetch;
    return [](const HttpRequest&) -> arrow::Result<HttpResponse> {
      return arrow::Status::IOError("no network access configured for credentials");
    };
  }
};

// "AccountName=a;AccountKey=k;BlobEndpoint=…" → its fields (names as written).
arrow::Result<std::map<std::string, std::string>> ParseConnectionString(const std::string& text) {
  std::map<std::string, std::string> out;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, ';')) {
    part = Trim(part);
    if (part.empty()) continue;
    const auto eq = part.find('=');
    if (eq == std::string::npos || eq == 0) {
      return arrow::Status::Invalid(
          "the Azure connection string has a part that is not Name=Value (it should look like "
          "DefaultEndpointsProtocol=https;AccountName=…;AccountKey=…)");
    }
    out[part.substr(0, eq)] = part.substr(eq + 1);
  }
  return out;
}

}  // namespace

// ---- SharedKey ---------------------------------------------------------------------------------

std::string AzureStringToSign(const AzureSignedRequest& request, const std::string& account) {
  std::map<std::string, std::string> lower;
  for (const auto& [name, value] : request.headers) lower[Lower(name)] = value;
  auto header = [&](const char* name) -> std::string {
    auto it = lower.find(name);
    return it == lower.end() ? std::string() : it->second;
  };
  std::string out = request.method + "\n";
  out += header("content-encoding") + "\n";
  out += header("content-language") + "\n";
  out += (request.content_length > 0 ? std::to_string(request.content_length) : "") + "\n";
  out += header("content-md5") + "\n";
  out += header("content-type") + "\n";
  out += header("date") + "\n";
  out += header("if-modified-since") + "\n";
  out += header("if-match") + "\n";
  out += header("if-none-match") + "\n";
  out += header("if-unmodified-since") + "\n";
  out += header("range") + "\n";
  for (const auto& [name, value] : lower) {  // sorted by the lowercased name
    if (name.compare(0, 5, "x-ms-") == 0) out += name + ":" + FoldSpaces(value, " \t\n\r") + "\n";
  }
  out += "/" + account + request.path;
  std::map<std::string, std::vector<std::string>> query;
  for (const auto& [name, value] : request.query) query[Lower(name)].push_back(value);
  for (auto& [name, values] : query) {
    std::sort(values.begin(), values.end());
    out += "\n" + name + ":";
    for (size_t i = 0; i < values.size(); ++i) out += (i ? "," : "") + values[i];
  }
  return out;
}

std::string AzureSharedKeyAuthorization(const AzureSignedRequest& request,
                                        const std::string& account, const std::string& key) {
  return "SharedKey " + account + ":" +
         Base64Encode(HmacSha256(key, AzureStringToSign(request, account)));
}

// ---- the chain ---------------------------------------------------------------------------------

arrow::Result<AzureSettings> ResolveAzureSettings(const AzureCredentialInputs& given) {
  const Inputs in{given};
  AzureSettings settings;

  std::map<std::string, std::string> conn;
  std::string conn_text = in.Option("azure_storage_connection_string");
  if (conn_text.empty()) conn_text = in.Env("AZURE_STORAGE_CONNECTION_STRING").value_or("");
  if (!conn_text.empty()) {
    ARROW_ASSIGN_OR_RAISE(conn, ParseConnectionString(conn_text));
  }
  auto conn_field = [&](const char* name) {
    auto it = conn.find(name);
    return it == conn.end() ? std::string() : it->second;
  };

  ARROW_ASSIGN_OR_RAISE(bool emulator, BoolOption(given.options, "azure_storage_use_emulator", false));
  emulator = emulator || Lower(conn_field("UseDevelopmentStorage")) == "true";
  ARROW_ASSIGN_OR_RAISE(bool skip_signature, BoolOption(given.options, "azure_skip_signature", false));
  if (Lower(in.Option("azure_use_azure_cli")) == "true") {
    return arrow::Status::Invalid(
        "storage option 'azure_use_azure_cli' is not supported: timelake does not run the az "
        "program; pass a token from `az account get-access-token --resource "
        "https://storage.azure.com` as azure_storage_token, or use another credential");
  }

  // The account: the option, the URL's, the connection string's, the emulator's.
  settings.account = in.Option("azure_storage_account_name");
  if (settings.account.empty()) settings.account = given.url_account;
  if (settings.account.empty()) settings.account = conn_field("AccountName");
  if (settings.account.empty() && emulator) settings.account = kAzureEmulatorAccount;
  if (settings.account.empty()) {
    return arrow::Status::Invalid(
        "an Azure lake needs its storage account: set storage option "
        "'azure_storage_account_name' (or AZURE_STORAGE_ACCOUNT_NAME), or write the URL as "
        "abfss://container@account.dfs.core.windows.net/path");
  }
  if (!std::all_of(settings.account.begin(), settings.account.end(),
                   [](unsigned char c) { return std::isalnum(c) || c == '-'; })) {
    // Not quoted: a key passed by mistake as the name must not reach the message.
    return arrow::Status::Invalid("the Azure storage account name may hold only letters, digits "
                                  "and '-' (is a key in azure_storage_account_name?)");
  }

  // The endpoint.
  std::string endpoint = in.Option("azure_storage_endpoint");
  if (endpoint.empty() && emulator) {
    std::string base = in.Env("AZURITE_BLOB_STORAGE_URL").value_or("http://127.0.0.1:10000");
    while (!base.empty() && base.back() == '/') base.pop_back();
    endpoint = base + "/" + settings.account;
  }
  if (endpoint.empty()) endpoint = conn_field("BlobEndpoint");
  if (endpoint.empty()) {
    const std::string protocol =
        conn_field("DefaultEndpointsProtocol").empty() ? "https" : conn_field("DefaultEndpointsProtocol");
    const std::string suffix =
        conn_field("EndpointSuffix").empty() ? "core.windows.net" : conn_field("EndpointSuffix");
    endpoint = protocol + "://" + settings.account + ".blob." + suffix;
  }
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  if (endpoint.find("://") == std::string::npos) {
    return arrow::Status::Invalid("storage option 'azure_storage_endpoint' must be a URL such as "
                                  "https://myaccount.blob.core.windows.net or "
                                  "http://127.0.0.1:10000/devstoreaccount1");
  }
  settings.endpoint = endpoint;
  settings.emulator = emulator;

  const MillisClock clock = in.Clock();
  const HttpFetch fetch = in.Fetch();
  const std::string client_id = in.Option("azure_client_id");
  const std::string client_secret = in.Option("azure_client_secret");
  const std::string tenant = in.Option("azure_tenant_id");
  const std::string token_file = in.Option("azure_federated_token_file");
  std::string authority = in.Option("azure_authority_host");
  if (authority.empty()) authority = "https://login.microsoftonline.com";
  while (!authority.empty() && authority.back() == '/') authority.pop_back();
  std::string key = in.Option("azure_storage_account_key");
  if (key.empty()) key = conn_field("AccountKey");
  if (key.empty() && emulator && settings.account == kAzureEmulatorAccount) key = kAzureEmulatorKey;
  std::string sas = in.Option("azure_storage_sas_token");
  if (sas.empty()) sas = conn_field("SharedAccessSignature");

  if (skip_signature) {
    settings.credentials = std::make_shared<StaticAzureProvider>(AzureCredential{}, "azure_skip_signature");
    return settings;
  }
  if (std::string token = in.Option("azure_storage_token"); !token.empty()) {
    AzureCredential c;
    c.kind = AzureCredential::Kind::kBearer;
    c.bearer = token;
    settings.credentials = std::make_shared<StaticAzureProvider>(c, "azure_storage_token");
    return settings;
  }
  if (!key.empty()) {
    auto decoded = Base64Decode(key);
    if (!decoded.ok() || decoded->empty()) {
      return arrow::Status::Invalid("the Azure storage account key is not base64 text; copy it "
                                    "from the storage account's access keys");
    }
    AzureCredential c;
    c.kind = AzureCredential::Kind::kSharedKey;
    c.account_key = *decoded;
    settings.credentials = std::make_shared<StaticAzureProvider>(c, "account key of '" + settings.account + "'");
    return settings;
  }
  auto token_request = [fetch, clock, authority, tenant](
                           const std::string& what,
                           std::vector<std::pair<std::string, std::string>> form)
      -> arrow::Result<AzureCredential> {
    HttpRequest request;
    request.method = "POST";
    request.url = authority + "/" + UriEncode(tenant) + "/oauth2/v2.0/token";
    request.headers = {{"Content-Type", "application/x-www-form-urlencoded"},
                       {"Accept", "application/json"}};
    request.body = arrow::Buffer::FromString(FormEncode(form));
    auto reply = fetch(request);
    if (!reply.ok()) {
      return arrow::Status::IOError(what, ": ", reply.status().message());
    }
    return ParseTokenReply(what, *reply, clock());
  };
  if (!token_file.empty()) {
    if (client_id.empty() || tenant.empty()) {
      return arrow::Status::Invalid("workload identity needs azure_client_id and azure_tenant_id "
                                    "with azure_federated_token_file");
    }
    auto fetch_token = [token_request, token_file, client_id]() -> arrow::Result<AzureCredential> {
      std::ifstream file(token_file);
      std::stringstream text;
      text << file.rdbuf();
      if (!file) {
        return arrow::Status::IOError("cannot read the federated token file ", token_file);
      }
      return token_request("workload identity token exchange",
                           {{"client_id", client_id},
                            {"scope", kStorageScope},
                            {"client_assertion", Trim(text.str())},
                            {"client_assertion_type",
                             "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"},
                            {"grant_type", "client_credentials"}});
    };
    settings.credentials = std::make_shared<RefreshingAzureProvider>("workload identity", fetch_token, clock);
    return settings;
  }
  if (!client_secret.empty()) {
    if (client_id.empty() || client_secret.empty() || tenant.empty()) {
      return arrow::Status::Invalid("a service principal needs azure_client_id, "
                                    "azure_client_secret and azure_tenant_id together");
    }
    auto fetch_token = [token_request, client_id, client_secret]() {
      return token_request("client secret token request",
                           {{"client_id", client_id},
                            {"client_secret", client_secret},
                            {"scope", kStorageScope},
                            {"grant_type", "client_credentials"}});
    };
    settings.credentials =
        std::make_shared<RefreshingAzureProvider>("service principal " + client_id, fetch_token, clock);
    return settings;
  }
  if (!sas.empty()) {
    AzureCredential c;
    c.kind = AzureCredential::Kind::kSas;
    c.sas_query = sas.front() == '?' ? sas.substr(1) : sas;
    settings.credentials = std::make_shared<StaticAzureProvider>(c, "SAS token");
    return settings;
  }

  // Managed identity: App Service's IDENTITY_ENDPOINT, a configured MSI endpoint, or IMDS.
  std::string msi = in.Option("azure_msi_endpoint");
  std::string identity_header;
  if (msi.empty()) {
    if (auto e = in.Env("IDENTITY_ENDPOINT")) {
      msi = *e;
      identity_header = in.Env("IDENTITY_HEADER").value_or("");
    }
  }
  const bool imds = msi.empty();
  if (imds) msi = kImdsEndpoint;
  std::string query = "?api-version=2019-08-01&resource=" + UriEncode(kStorageResource);
  if (!client_id.empty()) query += "&client_id=" + UriEncode(client_id);
  if (auto v = in.Option("azure_object_id"); !v.empty()) query += "&object_id=" + UriEncode(v);
  if (auto v = in.Option("azure_msi_resource_id"); !v.empty()) query += "&msi_res_id=" + UriEncode(v);
  auto fetch_token = [fetch, clock, msi, query, identity_header, imds]() -> arrow::Result<AzureCredential> {
    HttpRequest request;
    request.url = msi + query;
    request.headers = {{"Metadata", "true"}};
    if (!identity_header.empty()) request.headers.emplace_back("X-IDENTITY-HEADER", identity_header);
    auto reply = fetch(request);
    if (!reply.ok()) {
      return arrow::Status::IOError(
          "no Azure credentials: none were configured (azure_storage_account_key, "
          "azure_storage_sas_token, azure_storage_token, azure_client_id with azure_client_secret "
          "or azure_federated_token_file, a connection string) and ",
          imds ? "the instance metadata service" : "the managed identity endpoint",
          " could not be reached (", reply.status().message(), ")");
    }
    return ParseTokenReply("managed identity token request", *reply, clock());
  };
  settings.credentials = std::make_shared<RefreshingAzureProvider>("managed identity", fetch_token, clock);
  return settings;
}

}  // namespace timelake
