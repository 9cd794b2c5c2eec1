#include "timelake/store/gcs/gcs_store.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include <arrow/buffer.h>
#include <arrow/io/interfaces.h>
#include <rapidjson/document.h>

#include "timelake/store/cloud_common.h"
#include "timelake/util/encoding.h"
#include "timelake/util/json.h"
#include "timelake/util/status.h"

namespace timelake {
namespace {

constexpr const char* kDefaultBaseUrl = "https://storage.googleapis.com";
/// Every chunk of a resumable upload but the last is a multiple of this (GCS's rule).
constexpr int64_t kChunkQuantum = 256 << 10;
constexpr int kMaxListResults = 1000;
/// What the final chunk's UploadPart returns: the object exists once it is accepted.
constexpr const char* kFinalized = "finalized";

struct GcsError {
  std::string message;
  std::string reason;  // errors[0].reason: "notFound", "conditionNotMet", …
};

// The JSON API's error ({"error": {"code", "message", "errors": [{"reason"}]}}); media downloads
// answer plain text ("No such object: b/o"), which becomes the message. GCS never echoes
// credentials in either.
GcsError ParseError(const HttpResponse& reply) {
  GcsError error;
  const std::string body = reply.BodyText();
  rapidjson::Document doc;
  doc.Parse(body.data(), body.size());
  if (!doc.HasParseError() && doc.IsObject()) {
    const auto e = doc.FindMember("error");
    if (e != doc.MemberEnd() && e->value.IsObject()) {
      const auto m = e->value.FindMember("message");
      if (m != e->value.MemberEnd() && m->value.IsString()) error.message = m->value.GetString();
      const auto list = e->value.FindMember("errors");
      if (list != e->value.MemberEnd() && list->value.IsArray() && !list->value.Empty() &&
          list->value[0].IsObject()) {
        const auto r = list->value[0].FindMember("reason");
        if (r != list->value[0].MemberEnd() && r->value.IsString()) {
          error.reason = r->value.GetString();
        }
      }
    }
    return error;
  }
  if (body.size() <= 200 && body.find('<') == std::string::npos) {
    error.message = body;
    std::string& m = error.message;
    while (!m.empty() && std::isspace(static_cast<unsigned char>(m.back()))) m.pop_back();
  }
  return error;
}

// A member that GCS sends as a string holding a number ("size", "generation"); numbers too.
std::string JsonText(const rapidjson::Value& object, const char* name) {
  if (!object.IsObject()) return "";
  const auto it = object.FindMember(name);
  if (it == object.MemberEnd()) return "";
  if (it->value.IsString()) return it->value.GetString();
  if (it->value.IsInt64()) return std::to_string(it->value.GetInt64());
  if (it->value.IsUint64()) return std::to_string(it->value.GetUint64());
  return "";
}

bool IsDigits(const std::string& text) {
  return !text.empty() && std::all_of(text.begin(), text.end(),
                                      [](unsigned char c) { return std::isdigit(c); });
}

// Bytes a resumable session holds, from a 308's "Range: bytes=0-N" (none: nothing yet).
int64_t PersistedBytes(const HttpResponse& reply) {
  const std::string range = reply.Header("range");
  const auto dash = range.rfind('-');
  if (dash == std::string::npos) return 0;
  return std::atoll(range.c_str() + dash + 1) + 1;
}

class GcsStore;

// An object sent as a resumable upload: chunks go up in order, the last one makes the object.
class GcsPartUploader : public PartUploader {
 public:
  GcsPartUploader(std::shared_ptr<GcsStore> store, std::string path)
      : store_(std::move(store)), path_(std::move(path)) {}
  arrow::Status PutWhole(std::shared_ptr<arrow::Buffer> data) override;
  arrow::Result<std::string> Begin() override;
  arrow::Result<std::string> UploadPart(const std::string& upload_id, int number, int64_t offset,
                                        std::shared_ptr<arrow::Buffer> data, bool last) override;
  arrow::Status Complete(const std::string& upload_id,
                         const std::vector<std::pair<int, std::string>>& parts,
                         int64_t size) override;
  arrow::Status Abort(const std::string& upload_id) override;
  int Parallelism() const override { return 1; }  // a session takes its bytes in order
  std::string Describe() const override;

 private:
  std::shared_ptr<GcsStore> store_;
  std::string path_;
};

class GcsStore : public ObjectStore, public std::enable_shared_from_this<GcsStore> {
 public:
  GcsStore(GcsConfig config, std::shared_ptr<GoogleCredentialProvider> credentials,
           std::shared_ptr<HttpClient> client)
      : config_(std::move(config)), credentials_(std::move(credentials)),
        client_(std::move(client)) {
    while (!config_.base_url.empty() && config_.base_url.back() == '/') config_.base_url.pop_back();
    bucket_path_ = "/b/" + UriEncode(config_.bucket);
    root_url_ = "gs://" + config_.bucket + (config_.prefix.empty() ? "" : "/" + config_.prefix);
  }

  // ---- requests ------------------------------------------------------------------------------

  struct Call {
    std::string method = "GET";
    std::string path;    // after the base URL, encoded: "/storage/v1/b/…"; or
    std::string url;     // an absolute URL (a resumable session), which wins over `path`
    std::string object;  // the object the call names, "" for none (checked for dot segments)
    std::map<std::string, std::string> query;
    std::vector<std::pair<std::string, std::string>> headers;
    std::shared_ptr<arrow::Buffer> body;
    int64_t expected_bytes = 0;  // a ranged GET's length (see RequestTimeoutMs)
  };

  // Sends the call `make()` returns, made afresh for every attempt (a resumable chunk asks the
  // session what it holds before it is sent again).
  arrow::Result<HttpResponse> SendMade(const std::string& what,
                                       const std::function<arrow::Result<Call>()>& make,
                                       RetryOutcome* outcome = nullptr) {
    auto build = [&]() -> arrow::Result<HttpRequest> {
      ARROW_ASSIGN_OR_RAISE(const Call call, make());
      if (!call.object.empty() && HasDotSegment(call.object)) {
        return arrow::Status::Invalid(what,
                                      ": a path with '.' or '..' segments names no GCS object");
      }
      ARROW_ASSIGN_OR_RAISE(const GoogleToken token, credentials_->Get());
      HttpRequest request;
      request.method = call.method;
      request.url = call.url.empty() ? config_.base_url + call.path : call.url;
      std::string query;
      for (const auto& [name, value] : call.query) {
        query += (query.empty() ? "?" : "&") + UriEncode(name) + "=" + UriEncode(value);
      }
      request.url += query;
      request.headers = call.headers;
      if (!token.anonymous) {
        request.headers.emplace_back("Authorization", "Bearer " + token.access_token);
      }
      request.body = call.body;
      request.expected_response_bytes = call.expected_bytes;
      return request;
    };
    // An access token refused before its expiry (revoked, rotated, clock skew) is fetched anew once.
    const auto credentials = credentials_;
    return SendWithRetry(*client_, config_.retry, what, build,
                         RetryOnceWithFreshToken([credentials] { return credentials->Invalidate(); },
                                                 DefaultVerdict),
                         outcome);
  }

  arrow::Result<HttpResponse> Send(const Call& call, const std::string& what,
                                   RetryOutcome* outcome = nullptr) {
    return SendMade(what, [&call]() -> arrow::Result<Call> { return call; }, outcome);
  }

  std::string Key(const std::string& path) const {
    return config_.prefix.empty() ? path : config_.prefix + "/" + path;
  }
  std::string Url(const std::string& path) const { return root_url_ + "/" + path; }
  std::string ObjectPath(const std::string& key) const {
    return "/storage/v1" + bucket_path_ + "/o/" + UriEncode(key);
  }
  std::string ObjectsPath() const { return "/storage/v1" + bucket_path_ + "/o"; }
  std::string UploadPath() const { return "/upload/storage/v1" + bucket_path_ + "/o"; }

  // An error for a reply that was not what the call wanted; never carries a secret.
  arrow::Status ReplyError(const std::string& what, const HttpResponse& reply) const {
    const GcsError error = ParseError(reply);
    if (reply.status == 401 || reply.status == 403) {
      return arrow::Status::IOError(what, ": access denied (HTTP ", reply.status,
                                    error.message.empty() ? "" : ": " + error.message,
                                    "); check the credentials (from ", credentials_->Source(),
                                    ")");
    }
    return arrow::Status::IOError(what, ": HTTP ", reply.status,
                                  error.message.empty() ? "" : ": " + error.message);
  }

  arrow::Status MissingBucket(const std::string& what) const {
    return arrow::Status::IOError(what, ": the bucket '", config_.bucket,
                                  "' does not exist; create it first");
  }

  // True if a 404 is about the bucket rather than the object. GCS says so in its message ("The
  // specified bucket does not exist." against "No such object: …"); fake-gcs-server answers a
  // bare "Not Found" to both, so without such a message the bucket is asked about once.
  bool BucketMissing(const HttpResponse& reply) {
    if (reply.status != 404) return false;
    const GcsError error = ParseError(reply);
    if (error.message.find("bucket does not exist") != std::string::npos) return true;
    if (error.message.find("No such object") != std::string::npos) return false;
    if (bucket_seen_.load()) return false;
    Call call;
    call.path = "/storage/v1" + bucket_path_;
    call.query["fields"] = "name";
    auto bucket = Send(call, "GET gs://" + config_.bucket);
    if (bucket.ok() && bucket->status == 200) bucket_seen_.store(true);
    return bucket.ok() && bucket->status == 404;
  }

  // ---- ObjectStore ---------------------------------------------------------------------------

  arrow::Result<std::shared_ptr<arrow::Buffer>> Get(const std::string& path) override {
    Call call;
    call.object = Key(path);
    call.path = ObjectPath(call.object);
    call.query["alt"] = "media";
    const std::string what = "GET " + Url(path);
    ARROW_ASSIGN_OR_RAISE(auto reply, Send(call, what));
    if (reply.status == 404) return BucketMissing(reply) ? MissingBucket(what) : NotFound(path);
    if (reply.status != 200) return ReplyError(what, reply);
    return reply.body;
  }

  arrow::Result<std::shared_ptr<arrow::Buffer>> GetRange(const std::string& path, int64_t offset,
                                                         int64_t length) override {
    if (offset < 0 || length < 0) {
      return arrow::Status::Invalid("negative range ", offset, "+", length, " of ", Url(path));
    }
    if (length == 0) return std::make_shared<arrow::Buffer>(nullptr, 0);
    Call call;
    call.object = Key(path);
    call.path = ObjectPath(call.object);
    call.query["alt"] = "media";
    call.headers.emplace_back("Range", "bytes=" + std::to_string(offset) + "-" +
                                           std::to_string(offset + length - 1));
    call.expected_bytes = length;
    const std::string what = "GET " + Url(path);
    ARROW_ASSIGN_OR_RAISE(auto reply, Send(call, what));
    if (reply.status == 404) return BucketMissing(reply) ? MissingBucket(what) : NotFound(path);
    if (reply.status == 416) return std::make_shared<arrow::Buffer>(nullptr, 0);  // past the end
    if (reply.status == 200) {  // the server ignored the range: cut it here
      const int64_t size = reply.body->size();
      const int64_t from = std::min(offset, size);
      return arrow::SliceBuffer(reply.body, from, std::min(length, size - from));
    }
    if (reply.status != 206) return ReplyError(what, reply);
    return reply.body;
  }

  arrow::Result<ObjectMeta> Head(const std::string& path) override {
    Call call;
    call.object = Key(path);
    call.path = ObjectPath(call.object);
    call.query["fields"] = "name,size,updated,generation";
    const std::string what = "HEAD " + Url(path);
    ARROW_ASSIGN_OR_RAISE(auto reply, Send(call, what));
    if (reply.status == 404) return BucketMissing(reply) ? MissingBucket(what) : NotFound(path);
    if (reply.status != 200) return ReplyError(what, reply);
    rapidjson::Document doc;
    const std::string body = reply.BodyText();
    doc.Parse(body.data(), body.size());
    if (doc.HasParseError() || !doc.IsObject()) {
      return arrow::Status::IOError(what, ": the object's metadata is not a JSON object");
    }
    ARROW_ASSIGN_OR_RAISE(ObjectMeta meta, MetaOf(doc, what));
    meta.path = path;
    return meta;
  }

  // Size, time and generation of an object resource (a Head reply or a listing's item).
  static arrow::Result<ObjectMeta> MetaOf(const rapidjson::Value& item, const std::string& what) {
    ObjectMeta meta;
    meta.etag = JsonText(item, "generation");
    const std::string size = JsonText(item, "size");
    if (!IsDigits(meta.etag) || !IsDigits(size)) {
      return arrow::Status::IOError(what, ": an object resource without a size and generation");
    }
    meta.size = std::atoll(size.c_str());
    meta.modified_ms = ParseServiceTimeMs(JsonText(item, "updated"));
    return meta;
  }

  arrow::Status Put(const std::string& path, const std::shared_ptr<arrow::Buffer>& data) override {
    return Upload(path, data, "").status();
  }

  arrow::Result<bool> PutIfAbsent(const std::string& path,
                                  const std::shared_ptr<arrow::Buffer>& data) override {
    return Upload(path, data, "0");
  }

  arrow::Result<bool> PutIfMatch(const std::string& path,
                                 const std::shared_ptr<arrow::Buffer>& data,
                                 const std::string& etag) override {
    if (etag.empty()) {
      return arrow::Status::Invalid("PutIfMatch of ", Url(path), " without an etag");
    }
    if (!IsDigits(etag) || etag == "0") {
      return arrow::Status::Invalid("PutIfMatch of ", Url(path), ": '", etag,
                                    "' is not a GCS generation (the etag of a Head or listing)");
    }
    return Upload(path, data, etag);
  }

  // A media upload, conditional on the generation `if_generation` ("0": no object) unless "".
  arrow::Result<bool> Upload(const std::string& path, const std::shared_ptr<arrow::Buffer>& data,
                             const std::string& if_generation) {
    Call call;
    call.method = "POST";
    call.object = Key(path);
    call.path = UploadPath();
    call.query["uploadType"] = "media";
    call.query["name"] = call.object;
    call.query["fields"] = "generation";
    if (!if_generation.empty()) call.query["ifGenerationMatch"] = if_generation;
    call.headers.emplace_back("Content-Type", "application/octet-stream");
    call.body = data ? data : std::make_shared<arrow::Buffer>(nullptr, 0);
    const std::string what = "PUT " + Url(path);
    RetryOutcome outcome;
    auto reply = Send(call, what, &outcome);
    if (!reply.ok()) return WriteFailure(reply.status(), outcome);
    if (reply->status == 200) return true;
    if (reply->status == 404 && BucketMissing(*reply)) {
      return WriteFailure(MissingBucket(what), outcome);
    }
    // 412: the generation is not the one given. 404: a generation given for a missing object.
    if (!if_generation.empty() &&
        (reply->status == 412 || (reply->status == 404 && if_generation != "0"))) {
      return false;
    }
    return WriteFailure(ReplyError(what, *reply), outcome);
  }

  arrow::Result<std::shared_ptr<ObjectOutput>> OpenOutput(const std::string& path,
                                                          const OutputOptions& options) override {
    ARROW_RETURN_NOT_OK(options.Validate());
    // Chunks before the last must be whole multiples of 256 KiB: round the part size up.
    const int64_t part_size =
        (options.part_size + kChunkQuantum - 1) / kChunkQuantum * kChunkQuantum;
    return std::make_shared<MultipartOutput>(
        std::make_unique<GcsPartUploader>(shared_from_this(), path), part_size);
  }

  arrow::Result<std::shared_ptr<arrow::io::RandomAccessFile>> OpenInput(
      const std::string& path) override {
    return std::make_shared<RangedInput>(shared_from_this(), path);
  }

  arrow::Result<ObjectPage> ListPage(const ListPageRequest& request) override {
    Call call;
    call.path = ObjectsPath();
    const std::string prefix = Key(request.prefix);
    if (!prefix.empty()) call.query["prefix"] = prefix;
    // startOffset is inclusive: the object at start_after itself is dropped below.
    if (!request.start_after.empty()) call.query["startOffset"] = Key(request.start_after);
    if (!request.continuation.empty()) call.query["pageToken"] = request.continuation;
    call.query["maxResults"] =
        std::to_string(std::clamp<int64_t>(request.max_keys, 1, kMaxListResults));
    call.query["fields"] = "items(name,size,updated,generation),nextPageToken";
    const std::string what = "LIST " + Url(request.prefix);
    ARROW_ASSIGN_OR_RAISE(auto doc, ListCall(call, what));
    ObjectPage page;
    const std::string strip = config_.prefix.empty() ? "" : config_.prefix + "/";
    const auto items = doc.FindMember("items");
    if (items != doc.MemberEnd() && items->value.IsArray()) {
      for (const auto& item : items->value.GetArray()) {
        const std::string name = JsonText(item, "name");
        if (name.compare(0, strip.size(), strip) != 0) continue;
        ARROW_ASSIGN_OR_RAISE(ObjectMeta meta, MetaOf(item, what));
        meta.path = name.substr(strip.size());
        if (!InListing(meta.path, request.prefix, request.start_after)) continue;
        page.objects.push_back(std::move(meta));
      }
    }
    std::sort(page.objects.begin(), page.objects.end(),
              [](const ObjectMeta& a, const ObjectMeta& b) { return a.path < b.path; });
    page.continuation = JsonText(doc, "nextPageToken");
    return page;
  }

  arrow::Result<std::vector<std::string>> ListChildren(const std::string& prefix) override {
    std::vector<std::string> out;
    const std::string full = Key(prefix);
    std::string token;
    do {
      Call call;
      call.path = ObjectsPath();
      if (!full.empty()) call.query["prefix"] = full;
      call.query["delimiter"] = "/";
      call.query["fields"] = "prefixes,nextPageToken";
      if (!token.empty()) call.query["pageToken"] = token;
      ARROW_ASSIGN_OR_RAISE(auto doc, ListCall(call, "LIST " + Url(prefix)));
      const auto prefixes = doc.FindMember("prefixes");
      if (prefixes != doc.MemberEnd() && prefixes->value.IsArray()) {
        for (const auto& p : prefixes->value.GetArray()) {
          if (!p.IsString()) continue;
          std::string name = p.GetString();
          if (name.compare(0, full.size(), full) != 0 || name.size() <= full.size() + 1) continue;
          name = name.substr(full.size());
          if (!name.empty() && name.back() == '/') name.pop_back();
          if (name.find('/') == std::string::npos) out.push_back(name);
        }
      }
      token = JsonText(doc, "nextPageToken");
    } while (!token.empty());
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }

  arrow::Result<rapidjson::Document> ListCall(const Call& call, const std::string& what) {
    ARROW_ASSIGN_OR_RAISE(auto reply, Send(call, what));
    if (reply.status == 404) return MissingBucket(what);  // a listing names no object
    if (reply.status != 200) return ReplyError(what, reply);
    rapidjson::Document doc;
    const std::string body = reply.BodyText();
    doc.Parse(body.data(), body.size());
    if (doc.HasParseError() || !doc.IsObject()) {
      return arrow::Status::IOError(what, ": the listing is not a JSON object");
    }
    return doc;
  }

  arrow::Status Delete(const std::string& path) override {
    Call call;
    call.method = "DELETE";
    call.object = Key(path);
    call.path = ObjectPath(call.object);
    const std::string what = "DELETE " + Url(path);
    RetryOutcome outcome;
    auto reply = Send(call, what, &outcome);
    if (!reply.ok()) return WriteFailure(reply.status(), outcome);
    if (reply->status == 204 || reply->status == 200) return arrow::Status::OK();
    if (reply->status == 404) {
      return BucketMissing(*reply) ? MissingBucket(what) : arrow::Status::OK();
    }
    return WriteFailure(ReplyError(what, *reply), outcome);
  }

  arrow::Status DeleteMany(const std::vector<std::string>& paths) override {
    return RunParallel(paths.size(), config_.delete_parallelism,
                       [&](size_t i) { return Delete(paths[i]); });
  }

  arrow::Status DeletePrefix(const std::string& prefix) override {
    ARROW_ASSIGN_OR_RAISE(auto objects, List(prefix));
    std::vector<std::string> paths;
    paths.reserve(objects.size());
    for (auto& o : objects) paths.push_back(std::move(o.path));
    return DeleteMany(paths);
  }

  arrow::Status CreateBucket(const std::string& project) {
    rapidjson::StringBuffer body;
    {
      JsonWriter w(body);
      w.StartObject();
      w.Key("name");
      w.String(config_.bucket.c_str());
      w.EndObject();
    }
    Call call;
    call.method = "POST";
    call.path = "/storage/v1/b";
    call.query["project"] = project;
    call.headers.emplace_back("Content-Type", "application/json");
    call.body = arrow::Buffer::FromString(body.GetString());
    const std::string what = "create bucket gs://" + config_.bucket;
    ARROW_ASSIGN_OR_RAISE(auto reply, Send(call, what));
    if (reply.status == 200 || reply.status == 409) return arrow::Status::OK();
    return ReplyError(what, reply);
  }

  std::string RootUrl() const override { return root_url_; }
  std::string Identity() const override { return root_url_ + " at " + config_.base_url; }
  std::string ExternalPath(const std::string& path) const override { return Url(path); }

  // ---- resumable uploads (used by GcsPartUploader) ---------------------------------------------

  // Starts a session; returns its URI (which authorizes the upload by itself: never in messages).
  arrow::Result<std::string> StartUpload(const std::string& path) {
    Call call;
    call.method = "POST";
    call.object = Key(path);
    call.path = UploadPath();
    call.query["uploadType"] = "resumable";
    call.query["name"] = call.object;
    call.headers = {{"Content-Type", "application/json; charset=UTF-8"},
                    {"X-Upload-Content-Type", "application/octet-stream"}};
    call.body = arrow::Buffer::FromString("{}");
    const std::string what = "start resumable upload of " + Url(path);
    ARROW_ASSIGN_OR_RAISE(auto reply, Send(call, what));
    if (reply.status == 404 && BucketMissing(reply)) return MissingBucket(what);
    if (reply.status != 200 && reply.status != 201) return ReplyError(what, reply);
    std::string session = reply.Header("location");
    if (session.find("://") == std::string::npos) {
      return arrow::Status::IOError(what, ": no session URI (Location header) in the reply");
    }
    return session;
  }

  // The call that asks a session what it holds; with the total known, it also finalizes an
  // upload all of whose bytes have arrived. (fake-gcs-server differs: any such query finalizes
  // its session with the bytes it has; see Persisted. Only a retried chunk sends one.)
  static Call StatusQuery(const std::string& session, const std::string& total) {
    Call call;
    call.method = "PUT";
    call.url = session;
    call.headers.emplace_back("Content-Range", "bytes */" + total);
    call.body = std::make_shared<arrow::Buffer>(nullptr, 0);
    return call;
  }

  // Bytes [from, end) of a chunk that spans [offset, end) of the object.
  static Call ChunkCall(const std::string& session, const std::shared_ptr<arrow::Buffer>& data,
                        int64_t offset, int64_t from, int64_t end, const std::string& total) {
    Call call;
    call.method = "PUT";
    call.url = session;
    call.headers.emplace_back("Content-Range", "bytes " + std::to_string(from) + "-" +
                                                   std::to_string(end - 1) + "/" + total);
    call.body = arrow::SliceBuffer(data, from - offset, end - from);
    return call;
  }

  // How many bytes the session holds (`end` once the upload is complete), asked after an attempt
  // that failed. Chunks before [offset, end) were acknowledged: a session holding fewer lost them.
  arrow::Result<int64_t> Persisted(const std::string& session, const std::string& total,
                                   int64_t offset, int64_t end, const std::string& what) {
    ARROW_ASSIGN_OR_RAISE(auto reply, Send(StatusQuery(session, total), what + " (status)"));
    if (reply.status == 200 || reply.status == 201) {
      if (total != "*") return end;  // the final chunk landed: the object is complete
      // GCS never finalizes a session whose size it was not told; fake-gcs-server does, on any
      // status query, with the bytes it has.
      return OutcomeUnknown(arrow::Status::IOError(
          what, ": the service finalized the upload early, at a status query; the object may "
                "hold a partial upload"));
    }
    if (reply.status != 308) return ReplyError(what + " (status)", reply);
    const int64_t persisted = PersistedBytes(reply);
    if (persisted < offset) {
      return arrow::Status::IOError(what, ": the upload session holds ", persisted,
                                    " bytes, fewer than the ", offset, " it acknowledged");
    }
    return std::min(persisted, end);
  }

  // Sends bytes [offset, offset + data.size) of the object to the session; `last` finalizes it.
  arrow::Result<std::string> UploadChunk(const std::string& path, const std::string& session,
                                         int64_t offset, const std::shared_ptr<arrow::Buffer>& data,
                                         bool last) {
    const int64_t end = offset + data->size();
    const std::string total = last ? std::to_string(end) : "*";
    const std::string what = std::string(last ? "final chunk" : "chunk") + " at byte " +
                             std::to_string(offset) + " of " + Url(path);
    int64_t from = offset;  // the first byte the session is not known to hold
    bool maybe_applied = false;  // some attempt, in any round, may have reached the service
    for (;;) {
      bool retrying = false;
      auto make = [&]() -> arrow::Result<Call> {
        // After a failed attempt, send only what the session lacks (it may hold all of it, or
        // have finalized the object when the reply to the final chunk was lost).
        if (retrying) {
          ARROW_ASSIGN_OR_RAISE(from, Persisted(session, total, offset, end, what));
        }
        retrying = true;
        return from >= end ? StatusQuery(session, total)
                           : ChunkCall(session, data, offset, from, end, total);
      };
      RetryOutcome round;
      auto reply = SendMade(what, make, &round);
      maybe_applied = maybe_applied || round.maybe_applied;
      RetryOutcome outcome = round;
      outcome.maybe_applied = maybe_applied;
      // Only the final chunk makes the object: an earlier one's failure leaves nothing (unless
      // the service finalized the session early, which Persisted marks OutcomeUnknown itself).
      if (!reply.ok()) return last ? WriteFailure(reply.status(), outcome) : reply.status();
      if (last && (reply->status == 200 || reply->status == 201)) return kFinalized;
      if (reply->status == 308) {
        const int64_t persisted = PersistedBytes(*reply);
        if (!last && persisted >= end) return std::to_string(end);
        if (persisted > from && persisted < end) {
          from = persisted;  // the session kept fewer bytes than were sent: send the rest
          continue;
        }
        const arrow::Status error = arrow::Status::IOError(
            what, ": the upload session holds ", persisted, " bytes after a chunk ending at ", end);
        return last ? WriteFailure(error, outcome) : error;
      }
      const arrow::Status error = ReplyError(what, *reply);
      return last ? WriteFailure(error, outcome) : error;
    }
  }

  arrow::Status CancelUpload(const std::string& path, const std::string& session) {
    Call call;
    call.method = "DELETE";
    call.url = session;
    const std::string what = "cancel resumable upload of " + Url(path);
    ARROW_ASSIGN_OR_RAISE(auto reply, Send(call, what));
    // 499: cancelled. 404 / 410: the session is gone already.
    if (reply.status == 499 || reply.status == 204 || reply.status == 200 ||
        reply.status == 404 || reply.status == 410) {
      return arrow::Status::OK();
    }
    return ReplyError(what, reply);
  }

 private:
  GcsConfig config_;
  std::shared_ptr<GoogleCredentialProvider> credentials_;
  std::shared_ptr<HttpClient> client_;
  std::string bucket_path_;  // "/b/<bucket>", encoded
  std::string root_url_;
  std::atomic<bool> bucket_seen_{false};  // a bucket lookup found it (see BucketMissing)
};

// ---- GcsPartUploader ---------------------------------------------------------------------------

arrow::Status GcsPartUploader::PutWhole(std::shared_ptr<arrow::Buffer> data) {
  return store_->Put(path_, data);
}
arrow::Result<std::string> GcsPartUploader::Begin() { return store_->StartUpload(path_); }
arrow::Result<std::string> GcsPartUploader::UploadPart(const std::string& upload_id, int,
                                                       int64_t offset,
                                                       std::shared_ptr<arrow::Buffer> data,
                                                       bool last) {
  return store_->UploadChunk(path_, upload_id, offset, data, last);
}
arrow::Status GcsPartUploader::Complete(const std::string&,
                                        const std::vector<std::pair<int, std::string>>& parts,
                                        int64_t) {
  // The final chunk made the object; nothing is left to do but check that it did.
  if (parts.empty() || parts.back().second != kFinalized) {
    return arrow::Status::IOError("resumable upload of ", Describe(),
                                  ": the final chunk did not finalize the object");
  }
  return arrow::Status::OK();
}
arrow::Status GcsPartUploader::Abort(const std::string& upload_id) {
  return store_->CancelUpload(path_, upload_id);
}
std::string GcsPartUploader::Describe() const { return store_->ExternalPath(path_); }

}  // namespace

arrow::Result<std::shared_ptr<ObjectStore>> MakeGcsStore(
    const GcsConfig& config, std::shared_ptr<GoogleCredentialProvider> credentials) {
  ARROW_ASSIGN_OR_RAISE(auto client, HttpClient::Make(config.http));
  return std::make_shared<GcsStore>(config, std::move(credentials), std::move(client));
}

arrow::Result<std::shared_ptr<ObjectStore>> OpenGcsStore(const std::string& url,
                                                         const StorageOptions& given) {
  const auto scheme_end = url.find("://");
  GcsConfig config;
  ARROW_RETURN_NOT_OK(SplitBucketAndPrefix(url, url.substr(scheme_end + 3), "gs://bucket/path",
                                           &config.bucket, &config.prefix));
  // Options the user gave win; GOOGLE_* environment variables fill in the rest (as in delta-rs).
  // The credential chain reads the credential variables itself.
  // GOOGLE_SKIP_SIGNATURE only when the options name no credentials: a leftover variable must
  // not turn a keyed lake anonymous.
  bool names_credentials = false;
  for (const char* key : {"google_bearer_token", "google_service_account_key", "service_account_key",
                          "google_service_account", "google_service_account_path", "service_account",
                          "service_account_path", "google_application_credentials"}) {
    names_credentials = names_credentials || !OptionValue(given, key).empty();
  }
  StorageOptions options = WithEnvironment(given, {"google_base_url"});
  if (!names_credentials) options = WithEnvironment(options, {"google_skip_signature"});
  ARROW_RETURN_NOT_OK(RefuseOtherClouds(options, {"google_", "service_account"}, {}, "a gs:// lake"));
  const std::string base_url = OptionValue(options, "google_base_url");
  if (!base_url.empty()) {
    if (base_url.find("://") == std::string::npos) {
      return arrow::Status::Invalid("storage option 'google_base_url' must be a URL such as "
                                    "http://127.0.0.1:4443");
    }
    config.base_url = base_url;
  } else {
    config.base_url = kDefaultBaseUrl;
  }
  ARROW_RETURN_NOT_OK(ApplyClientOptions(options, &config.http, &config.retry));

  // How the chain reaches token endpoints and the metadata server: a client of its own with
  // short timeouts (the metadata server answers at once or not at all) and few retries.
  HttpClientOptions metadata;
  metadata.connect_timeout_ms = 1'000;
  metadata.request_timeout_ms = 5'000;
  metadata.stall_timeout_ms = 5'000;
  metadata.allow_http = true;  // the metadata server is plain http on a link-local host
  metadata.user_agent = config.http.user_agent;
  metadata.proxy_url = config.http.proxy_url;
  metadata.allow_invalid_certificates = config.http.allow_invalid_certificates;
  ARROW_ASSIGN_OR_RAISE(auto metadata_client, HttpClient::Make(metadata));
  GoogleCredentialInputs inputs;
  inputs.options = options;
  inputs.fetch = [metadata_client](const HttpRequest& request) {
    RetryOptions retry;
    retry.max_retries = 2;
    retry.max_total_ms = 10'000;
    return SendWithRetry(*metadata_client, retry, request.method + " " + RedactUrl(request.url),
                         [&request]() -> arrow::Result<HttpRequest> { return request; });
  };
  ARROW_ASSIGN_OR_RAISE(auto credentials, MakeGoogleCredentialChain(inputs));
  return MakeGcsStore(config, std::move(credentials));
}

arrow::Status CreateGcsBucket(const std::string& url, const StorageOptions& options) {
  ARROW_ASSIGN_OR_RAISE(auto store, OpenGcsStore(url, options));
  return std::static_pointer_cast<GcsStore>(store)->CreateBucket(
      EnvValue("GOOGLE_CLOUD_PROJECT").value_or("test"));
}

}  // namespace timelake
