#include "timelake/store/azure/azure_store.h"

#include <openssl/rand.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>

#include "timelake/http/xml.h"
#include "timelake/store/cloud/cloud_store.h"
#include "timelake/store/cloud/identity_client.h"
#include "timelake/store/cloud/location.h"
#include "timelake/store/cloud/options.h"
#include "timelake/store/cloud/service_time.h"
#include "timelake/util/encoding.h"
#include "timelake/util/status.h"

namespace timelake {
namespace {

constexpr const char* kApiVersion = "2023-11-03";
constexpr int kDeleteParallelism = 8;
constexpr int64_t kMaxListResults = 5000;
constexpr int64_t kMaxBlockBytes = int64_t{4000} << 20;
constexpr int kMaxBlocks = 50'000;

// delta-rs's (object_store's) key names: the canonical one, then its aliases.
const std::vector<std::vector<std::string>>& KeyAliases() {
  static const std::vector<std::vector<std::string>> aliases = {
      {"azure_storage_account_name"},
      {"azure_storage_account_key", "azure_storage_access_key", "azure_storage_master_key",
       "access_key"},
      {"azure_client_id", "azure_storage_client_id"},
      {"azure_client_secret", "azure_storage_client_secret"},
      {"azure_tenant_id", "azure_storage_tenant_id", "azure_storage_authority_id",
       "azure_authority_id"},
      {"azure_authority_host", "azure_storage_authority_host"},
      {"azure_storage_sas_token", "azure_storage_sas_key"},
      {"azure_storage_token"},
      {"azure_storage_use_emulator"},
      {"azure_storage_endpoint", "azure_endpoint"},
      {"azure_msi_endpoint", "azure_identity_endpoint"},
      {"azure_object_id"},
      {"azure_msi_resource_id"},
      {"azure_federated_token_file"},
      {"azure_use_azure_cli"},
      {"azure_skip_signature"},
      {"azure_container_name"},
      {"azure_storage_connection_string"},
  };
  return aliases;
}

struct AzureError {
  std::string code;
  std::string message;
};

AzureError ParseError(const HttpResponse& reply) {
  AzureError error;
  error.code = reply.Header("x-ms-error-code");
  if (!reply.body || reply.body->size() == 0) return error;
  auto xml = ParseXml(reply.BodyText());
  if (!xml.ok() || xml->name != "Error") return error;
  if (error.code.empty()) error.code = xml->ChildText("Code");
  error.message = xml->ChildText("Message");
  // The message's first line; the rest is a request id and a time.
  error.message = error.message.substr(0, error.message.find('\n'));
  return error;
}

std::string RandomHex(size_t bytes) {
  std::string raw(bytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(raw.data()), static_cast<int>(bytes)) != 1) {
    for (auto& c : raw) c = static_cast<char>(std::rand());
  }
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : raw) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

class AzureStore : public CloudStore {
 public:
  AzureStore(AzureConfig config, std::shared_ptr<HttpClient> client)
      : CloudStore(CloudLocation{config.container, config.prefix, config.root_url},
                   std::move(client), config.retry),
        config_(std::move(config)) {
    const std::string& endpoint = config_.settings.endpoint;
    const auto scheme_end = endpoint.find("://");
    const std::string scheme = endpoint.substr(0, scheme_end);
    std::string rest = endpoint.substr(scheme_end + 3);
    const auto slash = rest.find('/');
    base_path_ = slash == std::string::npos ? "" : rest.substr(slash);
    base_url_ = scheme + "://" + WithoutDefaultPort(scheme, rest.substr(0, slash));
  }

  std::string Identity() const override {
    return RootUrl() + " in " + config_.settings.account + " at " + config_.settings.endpoint;
  }

  arrow::Status CreateContainer() {
    CloudCall call;
    call.method = "PUT";
    call.query["restype"] = "container";
    call.what = "CreateContainer " + config_.container;
    ARROW_ASSIGN_OR_RAISE(auto reply, Send(call));
    if (reply.status == 201 || ParseError(reply).code == "ContainerAlreadyExists") {
      return arrow::Status::OK();
    }
    return ReplyError(call.what, reply);
  }

  // ---- blocks: Put Block for each part (in parallel), then Put Block List ----------------------

  // No request: block ids carry a random upload id, so blocks of two streams never mix.
  arrow::Result<std::string> BeginUpload(const std::string&, bool) override { return RandomHex(8); }

  arrow::Result<std::string> UploadPart(const std::string& path, const std::string& upload_id,
                                        int number, int64_t, std::shared_ptr<arrow::Buffer> data,
                                        bool) override {
    if (number > kMaxBlocks) {
      return arrow::Status::Invalid("PutBlock of ", Url(path), ": a blob holds at most ", kMaxBlocks,
                                    " blocks; write it with a larger part size");
    }
    CloudCall call;
    call.method = "PUT";
    call.object = Key(path);
    call.query["comp"] = "block";
    call.query["blockid"] = BlockId(upload_id, number);
    call.body = std::move(data);
    call.what = "PutBlock " + std::to_string(number) + " of " + Url(path);
    ARROW_ASSIGN_OR_RAISE(auto reply, Send(call));
    if (reply.status != 201) return ReplyError(call.what, reply);
    return call.query["blockid"];
  }

  arrow::Status CompleteUpload(const std::string& path, const std::string&,
                               const std::vector<std::pair<int, std::string>>& blocks) override {
    std::string body = "<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList>";
    for (const auto& [number, id] : blocks) body += "<Latest>" + XmlEscape(id) + "</Latest>";
    body += "</BlockList>";
    CloudCall call;
    call.method = "PUT";
    call.object = Key(path);
    call.query["comp"] = "blocklist";
    call.headers["Content-Type"] = "application/xml";
    call.headers["x-ms-blob-content-type"] = "application/octet-stream";
    call.body = arrow::Buffer::FromString(std::move(body));
    call.what = "PutBlockList " + Url(path);
    // A retry after a lost reply commits the same blocks again: "Latest" finds them committed.
    RetryOutcome outcome;
    auto reply = Send(call, &outcome);
    if (!reply.ok()) return WriteFailure(reply.status(), outcome);
    if (reply->status == 201) return arrow::Status::OK();
    return WriteFailure(ReplyError(call.what, *reply), outcome);
  }

  // Uncommitted blocks are invisible and expire on their own; there is no call to drop them.
  arrow::Status AbortUpload(const std::string&, const std::string&) override {
    return arrow::Status::OK();
  }

 protected:
  // ---- the Blob service's dialect --------------------------------------------------------------

  arrow::Status Sign(const CloudCall& call, const std::string& query,
                     HttpRequest* request) override {
    const std::string path = base_path_ + "/" + UriEncode(config_.container) +
                             (call.object.empty() ? "" : "/" + UriEncodePath(call.object));
    ARROW_ASSIGN_OR_RAISE(AzureCredential credential, config_.settings.credentials->Get());
    request->url = base_url_ + path + query;
    std::map<std::string, std::string> headers = call.headers;
    headers["x-ms-date"] = HttpDate(std::time(nullptr));
    headers["x-ms-version"] = kApiVersion;
    switch (credential.kind) {
      case AzureCredential::Kind::kSharedKey: {
        AzureSignedRequest signed_request;
        signed_request.method = call.method;
        signed_request.path = path;
        signed_request.query = call.query;
        signed_request.headers = headers;
        signed_request.content_length = call.body ? call.body->size() : 0;
        headers["Authorization"] = AzureSharedKeyAuthorization(
            signed_request, config_.settings.account, credential.account_key);
        break;
      }
      case AzureCredential::Kind::kBearer:
        headers["Authorization"] = "Bearer " + credential.bearer;
        break;
      case AzureCredential::Kind::kSas:
        request->url += (query.empty() ? "?" : "&") + credential.sas_query;
        break;
      case AzureCredential::Kind::kAnonymous:
        break;
    }
    for (const auto& [name, value] : headers) request->headers.emplace_back(name, value);
    return arrow::Status::OK();
  }

  bool InvalidateToken() override { return config_.settings.credentials->Invalidate(); }
  std::string ObjectNoun() const override { return "Azure blob"; }
  std::string RangeHeader() const override { return "x-ms-range"; }

  CloudCall PutCall(const std::string& object, const PutCondition& condition) const override {
    CloudCall call = CloudStore::PutCall(object, condition);  // Put Blob takes HTTP's conditions
    call.headers["x-ms-blob-type"] = "BlockBlob";
    return call;
  }

  arrow::Result<bool> PutReplied(const HttpResponse& reply, const PutCondition& condition,
                                 const std::string& what, const RetryOutcome& outcome) override {
    if (reply.status == 201 || reply.status == 200) return true;
    const std::string code = ParseError(reply).code;
    // If-None-Match: * on an existing blob is 409 BlobAlreadyExists (Azurite and, by most
    // accounts, Azure) or 412; a failed If-Match is 412 ConditionNotMet, a missing blob 404.
    if (condition.kind == PutCondition::Kind::kAbsent &&
        (reply.status == 412 || code == "BlobAlreadyExists")) {
      return false;
    }
    if (condition.kind == PutCondition::Kind::kMatch &&
        (reply.status == 412 || (reply.status == 404 && code != "ContainerNotFound"))) {
      return false;
    }
    return WriteFailure(ReplyError(what, reply), outcome);
  }

  bool ListsFromName() const override { return false; }

  CloudCall ListCall(const ListQuery& query) const override {
    // The service cannot start a listing after a name: the base filters by start_after.
    CloudCall call;
    call.query["restype"] = "container";
    call.query["comp"] = "list";
    if (!query.prefix.empty()) call.query["prefix"] = query.prefix;
    if (query.delimited) call.query["delimiter"] = "/";
    if (!query.continuation.empty()) call.query["marker"] = query.continuation;
    if (query.max_keys > 0) {
      call.query["maxresults"] =
          std::to_string(std::clamp<int64_t>(query.max_keys, 1, kMaxListResults));
    }
    return call;
  }

  arrow::Result<ListedPage> ParseListing(const HttpResponse& reply,
                                         const std::string& what) const override {
    ARROW_ASSIGN_OR_RAISE(const XmlElement xml, ParseXmlReply(reply.BodyText(), "EnumerationResults", what));
    ListedPage page;
    if (const XmlElement* blobs = xml.Child("Blobs")) {
      for (const XmlElement* b : blobs->Children("Blob")) {
        // Accounts with a hierarchical namespace (ADLS Gen2) list their directories as blobs.
        const XmlElement* p = b->Child("Properties");
        if (p && p->ChildText("ResourceType") == "directory") continue;
        ObjectMeta meta;
        meta.path = b->ChildText("Name");
        if (p) {
          meta.size = std::atoll(p->ChildText("Content-Length").c_str());
          meta.modified_ms = ParseServiceTimeMs(p->ChildText("Last-Modified"));
          // Listings give the tag bare, Get Blob Properties in quotes: keep the header's form.
          meta.etag = p->ChildText("Etag");
          if (!meta.etag.empty() && meta.etag.front() != '"') meta.etag = "\"" + meta.etag + "\"";
        }
        page.objects.push_back(std::move(meta));
      }
      for (const XmlElement* p : blobs->Children("BlobPrefix")) {
        page.prefixes.push_back(p->ChildText("Name"));
      }
    }
    page.continuation = xml.ChildText("NextMarker");
    page.truncated = !page.continuation.empty();
    return page;
  }

  Missing MissingOf(const HttpResponse& reply) override {
    return ParseError(reply).code == "ContainerNotFound" ? Missing::kBucket : Missing::kObject;
  }

  arrow::Status MissingBucket(const std::string& what) const override {
    return arrow::Status::IOError(what, ": the container '", config_.container,
                                  "' does not exist in account '", config_.settings.account,
                                  "'; create it first");
  }

  // Replies do not echo secrets, and messages name the lake URL, never a request URL (which may
  // carry a SAS).
  arrow::Status ReplyError(const std::string& what, const HttpResponse& reply) const override {
    const AzureError error = ParseError(reply);
    if (error.code == "ContainerNotFound") return MissingBucket(what);
    if (reply.status == 403 || error.code == "AuthenticationFailed" ||
        error.code == "AuthorizationFailure" ||
        error.code == "AuthorizationPermissionMismatch" || error.code == "InvalidAuthenticationInfo") {
      return AccessDenied(what, reply.status, error.code.empty() ? "" : " " + error.code,
                          config_.settings.credentials->Source(),
                          " and the account '" + config_.settings.account + "'");
    }
    return HttpFailure(what, reply.status, error.code, error.message);
  }

  int UploadParallelism() const override { return config_.upload_parallelism; }
  // Put Block takes at most 4000 MiB.
  int64_t PartSize(int64_t requested) const override { return std::min(requested, kMaxBlockBytes); }
  int DeleteParallelism() const override { return kDeleteParallelism; }

 private:
  // Block ids of one blob must all have the same length: the upload id and a 6-digit number.
  static std::string BlockId(const std::string& upload_id, int number) {
    char digits[16];
    std::snprintf(digits, sizeof(digits), "%06d", number);
    return Base64Encode(upload_id + "-" + digits);
  }

  AzureConfig config_;
  std::string base_url_;   // scheme://host[:port]
  std::string base_path_;  // the endpoint's path ("/devstoreaccount1" path-style), "" otherwise
};

// ---- the URL -----------------------------------------------------------------------------------

struct AzureLocation {
  std::string container;
  std::string prefix;
  std::string account;  // from the URL, "" if it names none
  std::string root_url;
};

// az://container/path, azure://container/path, az://container@account.blob…/path,
// abfs[s]://container@account.dfs.core.windows.net/path.
arrow::Result<AzureLocation> ParseAzureUrl(const std::string& url) {
  const auto scheme_end = url.find("://");
  const std::string scheme = url.substr(0, scheme_end);
  AzureLocation location;
  std::string bucket;
  ARROW_RETURN_NOT_OK(SplitBucketAndPrefix(url, "az://container/path", &bucket, &location.prefix));
  const auto at = bucket.find('@');
  if (at != std::string::npos) {
    location.container = bucket.substr(0, at);
    const std::string host = bucket.substr(at + 1);
    location.account = host.substr(0, host.find('.'));
    if (location.container.empty() || location.account.empty()) {
      return arrow::Status::Invalid("lake location '", url, "' should read ", scheme,
                                    "://container@account.dfs.core.windows.net/path");
    }
  } else {
    if (scheme == "abfs" || scheme == "abfss") {
      return arrow::Status::Invalid("lake location '", url, "' names no account; write ", scheme,
                                    "://container@account.dfs.core.windows.net/path");
    }
    location.container = bucket;
  }
  location.root_url = scheme + "://" + bucket + (location.prefix.empty() ? "" : "/" + location.prefix);
  return location;
}

}  // namespace

const std::vector<std::string>& AzureStorageOptionKeys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> out;
    for (const auto& names : KeyAliases()) out.insert(out.end(), names.begin(), names.end());
    return out;
  }();
  return keys;
}

arrow::Result<std::shared_ptr<ObjectStore>> MakeAzureStore(const AzureConfig& config) {
  ARROW_ASSIGN_OR_RAISE(auto client, HttpClient::Make(config.http));
  return std::make_shared<AzureStore>(config, std::move(client));
}

arrow::Result<std::shared_ptr<ObjectStore>> OpenAzureStore(const std::string& url,
                                                           const StorageOptions& given) {
  ARROW_ASSIGN_OR_RAISE(AzureLocation location, ParseAzureUrl(url));
  ARROW_RETURN_NOT_OK(RefuseOtherClouds(given, {"azure_"}, {"access_key"}, "an Azure lake"));

  // Aliases become their canonical key (two spellings of one key must agree), then AZURE_*
  // environment variables fill in what the options leave out.
  StorageOptions options;
  for (const auto& [key, value] : given) {
    std::string canonical = key;
    for (const auto& names : KeyAliases()) {
      if (std::find(names.begin(), names.end(), key) != names.end()) canonical = names.front();
    }
    auto [it, inserted] = options.emplace(canonical, value);
    if (!inserted && it->second != value) {
      return arrow::Status::Invalid("storage options '", key, "' and '", canonical,
                                    "' name the same setting with different values; give one");
    }
  }
  // When the options name a credential source, none is taken from the environment: options given
  // win, and an AZURE_* variable the platform injected (workload identity in a pod, say) must not
  // outrank the credential the caller chose.
  static const std::vector<std::string> kSourceKeys = {
      "azure_skip_signature", "azure_storage_token", "azure_storage_account_key",
      "azure_federated_token_file", "azure_client_secret", "azure_storage_sas_token",
      "azure_storage_connection_string", "azure_storage_use_emulator"};
  bool names_source = false;
  for (const auto& key : kSourceKeys) names_source = names_source || options.count(key) > 0;
  std::vector<std::string> env_keys;
  for (const auto& names : KeyAliases()) {
    const std::string& key = names.front();
    const bool source_key = std::find(kSourceKeys.begin(), kSourceKeys.end(), key) != kSourceKeys.end();
    // A given source keeps its own identity settings: no client id or tenant from elsewhere.
    const bool identity_key = key == "azure_client_id" || key == "azure_tenant_id";
    if (names_source && (source_key || identity_key)) continue;
    env_keys.push_back(key);
  }
  options = WithEnvironment(options, env_keys);

  const std::string container_option = OptionValue(options, "azure_container_name");
  if (!container_option.empty() && container_option != location.container) {
    return arrow::Status::Invalid("storage option 'azure_container_name' ('", container_option,
                                  "') differs from the lake URL's container '", location.container, "'");
  }

  AzureConfig config;
  config.container = location.container;
  config.prefix = location.prefix;
  config.root_url = location.root_url;
  // The emulator is plain http on 127.0.0.1.
  ARROW_ASSIGN_OR_RAISE(config.http.allow_http, BoolOption(options, "azure_storage_use_emulator", false));
  ARROW_RETURN_NOT_OK(ApplyClientOptions(options, &config.http, &config.retry));

  AzureCredentialInputs inputs;
  inputs.options = options;
  inputs.url_account = location.account;
  // How the chain reaches Entra ID and the managed identity endpoint.
  IdentityClientOptions identity;
  identity.connect_timeout_ms = 2'000;
  identity.request_timeout_ms = 10'000;
  identity.retry_total_ms = 15'000;
  ARROW_ASSIGN_OR_RAISE(inputs.fetch, MakeIdentityFetch(config.http, identity));
  ARROW_ASSIGN_OR_RAISE(config.settings, ResolveAzureSettings(inputs));
  // A connection string's UseDevelopmentStorage=true is the emulator too: plain http on 127.0.0.1.
  config.http.allow_http = config.http.allow_http || config.settings.emulator;
  return MakeAzureStore(config);
}

arrow::Status CreateAzureContainer(const std::string& url, const StorageOptions& options) {
  ARROW_ASSIGN_OR_RAISE(auto store, OpenAzureStore(url, options));
  return std::static_pointer_cast<AzureStore>(store)->CreateContainer();
}

}  // namespace timelake
