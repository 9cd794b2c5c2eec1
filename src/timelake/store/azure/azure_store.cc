#include "timelake/store/azure/azure_store.h"

#include <openssl/rand.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>

#include "timelake/http/xml.h"
#include "timelake/store/cloud_common.h"
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

class AzureStore;

// A large object as blocks (Put Block, in parallel) committed by Put Block List.
class AzurePartUploader : public PartUploader {
 public:
  AzurePartUploader(std::shared_ptr<AzureStore> store, std::string path, int parallelism)
      : store_(std::move(store)), path_(std::move(path)), parallelism_(parallelism) {}
  arrow::Status PutWhole(std::shared_ptr<arrow::Buffer> data) override;
  // No request: block ids carry a random upload id, so blocks of two streams never mix.
  arrow::Result<std::string> Begin() override { return RandomHex(8); }
  arrow::Result<std::string> UploadPart(const std::string& upload_id, int number, int64_t offset,
                                        std::shared_ptr<arrow::Buffer> data, bool last) override;
  arrow::Status Complete(const std::string& upload_id,
                         const std::vector<std::pair<int, std::string>>& parts,
                         int64_t size) override;
  // Uncommitted blocks are invisible and expire on their own; there is no call to drop them.
  arrow::Status Abort(const std::string&) override { return arrow::Status::OK(); }
  int Parallelism() const override { return parallelism_; }
  std::string Describe() const override;

 private:
  std::shared_ptr<AzureStore> store_;
  std::string path_;
  int parallelism_;
};

class AzureStore : public ObjectStore, public std::enable_shared_from_this<AzureStore> {
 public:
  AzureStore(AzureConfig config, std::shared_ptr<HttpClient> client)
      : config_(std::move(config)), client_(std::move(client)) {
    const std::string& endpoint = config_.settings.endpoint;
    const auto scheme_end = endpoint.find("://");
    const std::string scheme = endpoint.substr(0, scheme_end);
    std::string rest = endpoint.substr(scheme_end + 3);
    const auto slash = rest.find('/');
    base_path_ = slash == std::string::npos ? "" : rest.substr(slash);
    base_url_ = scheme + "://" + WithoutDefaultPort(scheme, rest.substr(0, slash));
  }

  // ---- requests ------------------------------------------------------------------------------

  struct Call {
    std::string method = "GET";
    std::string blob;  // full blob name in the container; "" for container-level calls
    std::map<std::string, std::string> query;
    std::map<std::string, std::string> headers;
    std::shared_ptr<arrow::Buffer> body;
    std::string what;  // for messages: "GET az://container/blob"
    int64_t expected_bytes = 0;
  };

  arrow::Result<HttpResponse> Send(const Call& call, RetryOutcome* outcome = nullptr) {
    if (HasDotSegment(call.blob)) {
      return arrow::Status::Invalid(call.what,
                                    ": a path with '.' or '..' segments names no Azure blob");
    }
    const std::string path = base_path_ + "/" + UriEncode(config_.container) +
                             (call.blob.empty() ? "" : "/" + UriEncodePath(call.blob));
    std::string query;
    for (const auto& [name, value] : call.query) {
      query += (query.empty() ? "?" : "&") + UriEncode(name) + "=" + UriEncode(value);
    }
    auto build = [&]() -> arrow::Result<HttpRequest> {
      ARROW_ASSIGN_OR_RAISE(AzureCredential credential, config_.settings.credentials->Get());
      HttpRequest request;
      request.method = call.method;
      request.url = base_url_ + path + query;
      request.body = call.body;
      request.expected_response_bytes = call.expected_bytes;
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
          request.url += (query.empty() ? "?" : "&") + credential.sas_query;
          break;
        case AzureCredential::Kind::kAnonymous:
          break;
      }
      for (const auto& [name, value] : headers) request.headers.emplace_back(name, value);
      return request;
    };
    // An access token refused before its expiry (revoked, rotated, clock skew) is fetched anew once.
    const auto credentials = config_.settings.credentials;
    return SendWithRetry(*client_, config_.retry, call.what, build,
                         RetryOnceWithFreshToken([credentials] { return credentials->Invalidate(); },
                                                 DefaultVerdict),
                         outcome);
  }

  std::string Blob(const std::string& path) const {
    return config_.prefix.empty() ? path : config_.prefix + "/" + path;
  }
  std::string Url(const std::string& path) const { return config_.root_url + "/" + path; }

  // An error for a reply that was not what the call wanted. Replies do not echo secrets, and
  // messages name the lake URL, never a request URL (which may carry a SAS).
  arrow::Status ReplyError(const std::string& what, const HttpResponse& reply) const {
    const AzureError error = ParseError(reply);
    if (error.code == "ContainerNotFound") {
      return arrow::Status::IOError(what, ": the container '", config_.container,
                                    "' does not exist in account '", config_.settings.account,
                                    "'; create it first");
    }
    if (reply.status == 403 || error.code == "AuthenticationFailed" ||
        error.code == "AuthorizationFailure" ||
        error.code == "AuthorizationPermissionMismatch" || error.code == "InvalidAuthenticationInfo") {
      return arrow::Status::IOError(what, ": access denied (HTTP ", reply.status,
                                    error.code.empty() ? "" : " " + error.code,
                                    "); check the credentials (from ",
                                    config_.settings.credentials->Source(), ") and the account '",
                                    config_.settings.account, "'");
    }
    return arrow::Status::IOError(what, ": HTTP ", reply.status,
                                  error.code.empty() ? "" : " " + error.code,
                                  error.message.empty() ? "" : ": " + error.message);
  }

  bool IsMissingBlob(const HttpResponse& reply) const {
    return reply.status == 404 && ParseError(reply).code != "ContainerNotFound";
  }

  // ---- ObjectStore ---------------------------------------------------------------------------

  arrow::Result<std::shared_ptr<arrow::Buffer>> Get(const std::string& path) override {
    Call call;
    call.blob = Blob(path);
    call.what = "GET " + Url(path);
    ARROW_ASSIGN_OR_RAISE(auto reply, Send(call));
    if (IsMissingBlob(reply)) return NotFound(path);
    if (reply.status != 200) return ReplyError(call.what, reply);
    return reply.body;
  }

  arrow::Result<std::shared_ptr<arrow::Buffer>> GetRange(const std::string& path, int64_t offset,
                                                         int64_t length) override {
    if (offset < 0 || length < 0) {
      return arrow::Status::Invalid("negative range ", offset, "+", length, " of ", Url(path));
    }
    if (length == 0) return std::make_shared<arrow::Buffer>(nullptr, 0);
    Call call;
    call.blob = Blob(path);
    call.headers["x-ms-range"] =
        "bytes=" + std::to_string(offset) + "-" + std::to_string(offset + length - 1);
    call.expected_bytes = length;
    call.what = "GET " + Url(path);
    ARROW_ASSIGN_OR_RAISE(auto reply, Send(call));
    if (IsMissingBlob(reply)) return NotFound(path);
    if (reply.status == 416) return std::make_shared<arrow::Buffer>(nullptr, 0);  // past the end
    if (reply.status == 200) {  // the range was ignored (an empty blob): cut it here
      const int64_t size = reply.body->size();
      const int64_t from = std::min(offset, size);
      return arrow::SliceBuffer(reply.body, from, std::min(length, size - from));
    }
    if (reply.status != 206) return ReplyError(call.what, reply);
    return reply.body;
  }

  arrow::Result<ObjectMeta> Head(const std::string& path) override {
    Call call;
    call.method = "HEAD";
    call.blob = Blob(path);
    call.what = "HEAD " + Url(path);
    ARROW_ASSIGN_OR_RAISE(auto reply, Send(call));
    if (IsMissingBlob(reply)) return NotFound(path);
    if (reply.status != 200) return ReplyError(call.what, reply);
    ObjectMeta meta;
    meta.path = path;
    meta.size = std::atoll(reply.Header("content-length").c_str());
    meta.modified_ms = ParseServiceTimeMs(reply.Header("last-modified"));
    meta.etag = reply.Header("etag");
    return meta;
  }

  arrow::Status Put(const std::string& path, const std::shared_ptr<arrow::Buffer>& data) override {
    return PutWith(path, data, {}).status();
  }

  arrow::Result<bool> PutIfAbsent(const std::string& path,
                                  const std::shared_ptr<arrow::Buffer>& data) override {
    return PutWith(path, data, {{"If-None-Match", "*"}});
  }

  arrow::Result<bool> PutIfMatch(const std::string& path, const std::shared_ptr<arrow::Buffer>& data,
                                 const std::string& etag) override {
    if (etag.empty()) return arrow::Status::Invalid("PutIfMatch of ", Url(path), " without an etag");
    return PutWith(path, data, {{"If-Match", etag}});
  }

  // Put Blob with the given condition headers: true if written, false if a condition failed.
  arrow::Result<bool> PutWith(const std::string& path, const std::shared_ptr<arrow::Buffer>& data,
                              std::map<std::string, std::string> conditions) {
    Call call;
    call.method = "PUT";
    call.blob = Blob(path);
    call.headers = std::move(conditions);
    call.headers["x-ms-blob-type"] = "BlockBlob";
    call.headers["Content-Type"] = "application/octet-stream";
    call.body = data ? data : std::make_shared<arrow::Buffer>(nullptr, 0);
    call.what = "PUT " + Url(path);
    return Conditional(call);
  }

  // Sends a write that may carry If-None-Match / If-Match: true if written (201), false if a
  // condition failed.
  arrow::Result<bool> Conditional(const Call& call) {
    RetryOutcome outcome;
    auto reply = Send(call, &outcome);
    if (!reply.ok()) return WriteFailure(reply.status(), outcome);
    if (reply->status == 201 || reply->status == 200) return true;
    const bool if_none_match = call.headers.count("If-None-Match") > 0;
    const bool if_match = call.headers.count("If-Match") > 0;
    const std::string code = ParseError(*reply).code;
    // If-None-Match: * on an existing blob is 409 BlobAlreadyExists (Azurite and, by most
    // accounts, Azure) or 412; a failed If-Match is 412 ConditionNotMet, a missing blob 404.
    if (if_none_match && (reply->status == 412 || code == "BlobAlreadyExists")) return false;
    if (if_match && (reply->status == 412 || IsMissingBlob(*reply))) return false;
    return WriteFailure(ReplyError(call.what, *reply), outcome);
  }

  arrow::Result<std::shared_ptr<ObjectOutput>> OpenOutput(const std::string& path,
                                                          const OutputOptions& options) override {
    ARROW_RETURN_NOT_OK(options.Validate());
    // Put Block takes at most 4000 MiB.
    return std::make_shared<MultipartOutput>(
        std::make_unique<AzurePartUploader>(shared_from_this(), path,
                                            std::max(1, config_.upload_parallelism)),
        std::min(options.part_size, kMaxBlockBytes));
  }

  arrow::Result<std::shared_ptr<arrow::io::RandomAccessFile>> OpenInput(
      const std::string& path) override {
    return std::make_shared<RangedInput>(shared_from_this(), path);
  }

  arrow::Result<ObjectPage> ListPage(const ListPageRequest& request) override {
    Call call;
    call.query["restype"] = "container";
    call.query["comp"] = "list";
    const std::string full = Blob(request.prefix);
    if (!full.empty()) call.query["prefix"] = full;
    if (!request.continuation.empty()) call.query["marker"] = request.continuation;
    call.query["maxresults"] = std::to_string(std::clamp<int64_t>(request.max_keys, 1, kMaxListResults));
    call.what = "LIST " + Url(request.prefix);
    ARROW_ASSIGN_OR_RAISE(auto xml, ListCall(call));
    ObjectPage page;
    const std::string strip = config_.prefix.empty() ? "" : config_.prefix + "/";
    if (const XmlElement* blobs = xml.Child("Blobs")) {
      for (const XmlElement* b : blobs->Children("Blob")) {
        std::string name = b->ChildText("Name");
        if (name.compare(0, strip.size(), strip) != 0) continue;
        // Accounts with a hierarchical namespace (ADLS Gen2) list their directories as blobs.
        if (const XmlElement* p = b->Child("Properties");
            p && p->ChildText("ResourceType") == "directory") {
          continue;
        }
        ObjectMeta meta;
        meta.path = name.substr(strip.size());
        if (!InListing(meta.path, request.prefix, request.start_after)) continue;
        if (const XmlElement* p = b->Child("Properties")) {
          meta.size = std::atoll(p->ChildText("Content-Length").c_str());
          meta.modified_ms = ParseServiceTimeMs(p->ChildText("Last-Modified"));
          // Listings give the tag bare, Get Blob Properties in quotes: keep the header's form.
          meta.etag = p->ChildText("Etag");
          if (!meta.etag.empty() && meta.etag.front() != '"') meta.etag = "\"" + meta.etag + "\"";
        }
        page.objects.push_back(std::move(meta));
      }
    }
    std::sort(page.objects.begin(), page.objects.end(),
              [](const ObjectMeta& a, const ObjectMeta& b) { return a.path < b.path; });
    page.continuation = xml.ChildText("NextMarker");
    return page;
  }

  arrow::Result<std::vector<std::string>> ListChildren(const std::string& prefix) override {
    std::vector<std::string> out;
    const std::string full = Blob(prefix);
    std::string marker;
    do {
      Call call;
      call.query["restype"] = "container";
      call.query["comp"] = "list";
      if (!full.empty()) call.query["prefix"] = full;
      call.query["delimiter"] = "/";
      if (!marker.empty()) call.query["marker"] = marker;
      call.what = "LIST " + Url(prefix);
      ARROW_ASSIGN_OR_RAISE(auto xml, ListCall(call));
      if (const XmlElement* blobs = xml.Child("Blobs")) {
        for (const XmlElement* p : blobs->Children("BlobPrefix")) {
          std::string name = p->ChildText("Name");
          if (name.compare(0, full.size(), full) != 0 || name.size() <= full.size() + 1) continue;
          name = name.substr(full.size());
          if (!name.empty() && name.back() == '/') name.pop_back();
          if (name.find('/') == std::string::npos) out.push_back(name);
        }
      }
      marker = xml.ChildText("NextMarker");
    } while (!marker.empty());
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }

  arrow::Result<XmlElement> ListCall(const Call& call) {
    ARROW_ASSIGN_OR_RAISE(auto reply, Send(call));
    if (reply.status != 200) return ReplyError(call.what, reply);
    auto xml = ParseXml(reply.BodyText());
    if (!xml.ok()) return arrow::Status::IOError(call.what, ": ", xml.status().message());
    if (xml->name != "EnumerationResults") {
      return arrow::Status::IOError(call.what, ": unexpected reply <", xml->name, ">");
    }
    return xml;
  }

  arrow::Status Delete(const std::string& path) override {
    Call call;
    call.method = "DELETE";
    call.blob = Blob(path);
    call.what = "DELETE " + Url(path);
    RetryOutcome outcome;
    auto reply = Send(call, &outcome);
    if (!reply.ok()) return WriteFailure(reply.status(), outcome);
    if (reply->status == 202 || reply->status == 200 || IsMissingBlob(*reply)) {
      return arrow::Status::OK();
    }
    return ReplyError(call.what, *reply);
  }

  arrow::Status DeleteMany(const std::vector<std::string>& paths) override {
    return RunParallel(paths.size(), kDeleteParallelism,
                       [&](size_t i) { return Delete(paths[i]); });
  }

  arrow::Status DeletePrefix(const std::string& prefix) override {
    ARROW_ASSIGN_OR_RAISE(auto objects, List(prefix));
    std::vector<std::string> paths;
    paths.reserve(objects.size());
    for (auto& o : objects) paths.push_back(std::move(o.path));
    return DeleteMany(paths);
  }

  arrow::Status CreateContainer() {
    Call call;
    call.method = "PUT";
    call.query["restype"] = "container";
    call.what = "CreateContainer " + config_.container;
    ARROW_ASSIGN_OR_RAISE(auto reply, Send(call));
    if (reply.status == 201 || ParseError(reply).code == "ContainerAlreadyExists") {
      return arrow::Status::OK();
    }
    return ReplyError(call.what, reply);
  }

  std::string RootUrl() const override { return config_.root_url; }
  std::string Identity() const override {
    return config_.root_url + " in " + config_.settings.account + " at " + config_.settings.endpoint;
  }
  std::string ExternalPath(const std::string& path) const override { return Url(path); }

  // ---- blocks (used by AzurePartUploader) ----------------------------------------------------

  // Block ids of one blob must all have the same length: the upload id and a 6-digit number.
  static std::string BlockId(const std::string& upload_id, int number) {
    char digits[16];
    std::snprintf(digits, sizeof(digits), "%06d", number);
    return Base64Encode(upload_id + "-" + digits);
  }

  arrow::Result<std::string> PutBlock(const std::string& path, const std::string& upload_id,
                                      int number, std::shared_ptr<arrow::Buffer> data) {
    if (number > kMaxBlocks) {
      return arrow::Status::Invalid("PutBlock of ", Url(path), ": a blob holds at most ", kMaxBlocks,
                                    " blocks; write it with a larger part size");
    }
    Call call;
    call.method = "PUT";
    call.blob = Blob(path);
    call.query["comp"] = "block";
    call.query["blockid"] = BlockId(upload_id, number);
    call.body = std::move(data);
    call.what = "PutBlock " + std::to_string(number) + " of " + Url(path);
    ARROW_ASSIGN_OR_RAISE(auto reply, Send(call));
    if (reply.status != 201) return ReplyError(call.what, reply);
    return call.query["blockid"];
  }

  arrow::Status PutBlockList(const std::string& path,
                             const std::vector<std::pair<int, std::string>>& blocks) {
    std::string body = "<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList>";
    for (const auto& [number, id] : blocks) body += "<Latest>" + XmlEscape(id) + "</Latest>";
    body += "</BlockList>";
    Call call;
    call.method = "PUT";
    call.blob = Blob(path);
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

 private:
  AzureConfig config_;
  std::shared_ptr<HttpClient> client_;
  std::string base_url_;   // scheme://host[:port]
  std::string base_path_;  // the endpoint's path ("/devstoreaccount1" path-style), "" otherwise
};

// ---- AzurePartUploader -------------------------------------------------------------------------

arrow::Status AzurePartUploader::PutWhole(std::shared_ptr<arrow::Buffer> data) {
  return store_->Put(path_, data);
}
arrow::Result<std::string> AzurePartUploader::UploadPart(const std::string& upload_id, int number,
                                                         int64_t, std::shared_ptr<arrow::Buffer> data,
                                                         bool) {
  return store_->PutBlock(path_, upload_id, number, std::move(data));
}
arrow::Status AzurePartUploader::Complete(const std::string&,
                                          const std::vector<std::pair<int, std::string>>& parts,
                                          int64_t) {
  return store_->PutBlockList(path_, parts);
}
std::string AzurePartUploader::Describe() const { return store_->ExternalPath(path_); }

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
  const std::string rest = url.substr(scheme_end + 3);
  AzureLocation location;
  std::string bucket;
  ARROW_RETURN_NOT_OK(SplitBucketAndPrefix(url, rest, "az://container/path", &bucket,
                                           &location.prefix));
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
  // How the chain reaches Entra ID and the managed identity endpoint: a client of its own with
  // short timeouts and few retries (IMDS answers at once or not at all).
  HttpClientOptions identity;
  identity.connect_timeout_ms = 2'000;
  identity.request_timeout_ms = 10'000;
  identity.stall_timeout_ms = 10'000;
  identity.allow_http = true;  // IMDS is plain http on a link-local host
  identity.user_agent = config.http.user_agent;
  identity.proxy_url = config.http.proxy_url;
  identity.allow_invalid_certificates = config.http.allow_invalid_certificates;
  ARROW_ASSIGN_OR_RAISE(auto identity_client, HttpClient::Make(identity));
  inputs.fetch = [identity_client](const HttpRequest& request) {
    RetryOptions retry;
    retry.max_retries = 2;
    retry.max_total_ms = 15'000;
    return SendWithRetry(*identity_client, retry, request.method + " " + RedactUrl(request.url),
                         [&request]() -> arrow::Result<HttpRequest> { return request; });
  };
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
