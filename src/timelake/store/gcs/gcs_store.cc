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

#include "timelake/store/cloud/cloud_store.h"
#include "timelake/store/cloud/identity_client.h"
#include "timelake/store/cloud/location.h"
#include "timelake/store/cloud/options.h"
#include "timelake/store/cloud/service_time.h"
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

class GcsStore : public CloudStore {
 public:
  GcsStore(GcsConfig config, std::shared_ptr<GoogleCredentialProvider> credentials,
           std::shared_ptr<HttpClient> client)
      : CloudStore(CloudLocation{config.bucket, config.prefix,
                                 "gs://" + config.bucket +
                                     (config.prefix.empty() ? "" : "/" + config.prefix)},
                   std::move(client), config.retry),
        config_(std::move(config)), credentials_(std::move(credentials)) {
    while (!config_.base_url.empty() && config_.base_url.back() == '/') config_.base_url.pop_back();
    bucket_path_ = "/b/" + UriEncode(config_.bucket);
  }

  std::string Identity() const override { return RootUrl() + " at " + config_.base_url; }

  arrow::Status CreateBucket(const std::string& project) {
    rapidjson::StringBuffer body;
    {
      JsonWriter w(body);
      w.StartObject();
      w.Key("name");
      w.String(config_.bucket.c_str());
      w.EndObject();
    }
    CloudCall call;
    call.method = "POST";
    call.path = "/storage/v1/b";
    call.query["project"] = project;
    call.headers["Content-Type"] = "application/json";
    call.body = arrow::Buffer::FromString(body.GetString());
    call.what = "create bucket gs://" + config_.bucket;
    ARROW_ASSIGN_OR_RAISE(auto reply, Send(call));
    if (reply.status == 200 || reply.status == 409) return arrow::Status::OK();
    return ReplyError(call.what, reply);
  }

  // ---- resumable uploads: chunks go up in order, the last one makes the object -----------------

  // Starts a session; returns its URI (which authorizes the upload by itself: never in messages).
  arrow::Result<std::string> BeginUpload(const std::string& path, bool) override {
    CloudCall call;
    call.method = "POST";
    call.object = Key(path);
    call.path = UploadPath();
    call.query["uploadType"] = "resumable";
    call.query["name"] = call.object;
    call.headers = {{"Content-Type", "application/json; charset=UTF-8"},
                    {"X-Upload-Content-Type", "application/octet-stream"}};
    call.body = arrow::Buffer::FromString("{}");
    call.what = "start resumable upload of " + Url(path);
    const std::string& what = call.what;
    ARROW_ASSIGN_OR_RAISE(auto reply, Send(call));
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
  static CloudCall StatusQuery(const std::string& session, const std::string& total) {
    CloudCall call;
    call.method = "PUT";
    call.url = session;
    call.headers["Content-Range"] = "bytes */" + total;
    call.body = std::make_shared<arrow::Buffer>(nullptr, 0);
    return call;
  }

  // Bytes [from, end) of a chunk that spans [offset, end) of the object.
  static CloudCall ChunkCall(const std::string& session, const std::shared_ptr<arrow::Buffer>& data,
                        int64_t offset, int64_t from, int64_t end, const std::string& total) {
    CloudCall call;
    call.method = "PUT";
    call.url = session;
    call.headers["Content-Range"] =
        "bytes " + std::to_string(from) + "-" + std::to_string(end - 1) + "/" + total;
    call.body = arrow::SliceBuffer(data, from - offset, end - from);
    return call;
  }

  // How many bytes the session holds (`end` once the upload is complete), asked after an attempt
  // that failed. Chunks before [offset, end) were acknowledged: a session holding fewer lost them.
  arrow::Result<int64_t> Persisted(const std::string& session, const std::string& total,
                                   int64_t offset, int64_t end, const std::string& what) {
    CloudCall query = StatusQuery(session, total);
    query.what = what + " (status)";
    ARROW_ASSIGN_OR_RAISE(auto reply, Send(query));
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
  arrow::Result<std::string> UploadPart(const std::string& path, const std::string& session,
                                        int, int64_t offset, std::shared_ptr<arrow::Buffer> data,
                                        bool last) override {
    const int64_t end = offset + data->size();
    const std::string total = last ? std::to_string(end) : "*";
    const std::string what = std::string(last ? "final chunk" : "chunk") + " at byte " +
                             std::to_string(offset) + " of " + Url(path);
    int64_t from = offset;  // the first byte the session is not known to hold
    bool maybe_applied = false;  // some attempt, in any round, may have reached the service
    for (;;) {
      bool retrying = false;
      auto make = [&]() -> arrow::Result<CloudCall> {
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

  // The final chunk made the object; nothing is left to do but check that it did.
  arrow::Status CompleteUpload(const std::string& path, const std::string&,
                               const std::vector<std::pair<int, std::string>>& parts) override {
    if (parts.empty() || parts.back().second != kFinalized) {
      return arrow::Status::IOError("resumable upload of ", Url(path),
                                    ": the final chunk did not finalize the object");
    }
    return arrow::Status::OK();
  }

  arrow::Status AbortUpload(const std::string& path, const std::string& session) override {
    CloudCall call;
    call.method = "DELETE";
    call.url = session;
    call.what = "cancel resumable upload of " + Url(path);
    const std::string& what = call.what;
    ARROW_ASSIGN_OR_RAISE(auto reply, Send(call));
    // 499: cancelled. 404 / 410: the session is gone already.
    if (reply.status == 499 || reply.status == 204 || reply.status == 200 ||
        reply.status == 404 || reply.status == 410) {
      return arrow::Status::OK();
    }
    return ReplyError(what, reply);
  }

 protected:
  // ---- the JSON API's dialect ------------------------------------------------------------------

  arrow::Status Sign(const CloudCall& call, const std::string& query,
                     HttpRequest* request) override {
    ARROW_ASSIGN_OR_RAISE(const GoogleToken token, credentials_->Get());
    request->url = (call.url.empty() ? config_.base_url + call.path : call.url) + query;
    request->headers.assign(call.headers.begin(), call.headers.end());
    if (!token.anonymous) {
      request->headers.emplace_back("Authorization", "Bearer " + token.access_token);
    }
    return arrow::Status::OK();
  }

  bool InvalidateToken() override { return credentials_->Invalidate(); }
  std::string ObjectNoun() const override { return "GCS object"; }

  CloudCall ObjectCall(Access access, const std::string& object) const override {
    CloudCall call;
    call.object = object;
    call.path = ObjectPath(object);
    switch (access) {
      case Access::kRead:
        call.query["alt"] = "media";
        break;
      case Access::kHead:  // the object's JSON resource
        call.query["fields"] = "name,size,updated,generation";
        break;
      case Access::kDelete:
        call.method = "DELETE";
        break;
    }
    return call;
  }

  arrow::Result<ObjectMeta> MetaOfHead(const HttpResponse& reply, const std::string& what) override {
    rapidjson::Document doc;
    const std::string body = reply.BodyText();
    doc.Parse(body.data(), body.size());
    if (doc.HasParseError() || !doc.IsObject()) {
      return arrow::Status::IOError(what, ": the object's metadata is not a JSON object");
    }
    return MetaOf(doc, what);
  }

  arrow::Status CheckEtag(const std::string& path, const std::string& etag) const override {
    if (!IsDigits(etag) || etag == "0") {
      return arrow::Status::Invalid("PutIfMatch of ", Url(path), ": '", etag,
                                    "' is not a GCS generation (the etag of a Head or listing)");
    }
    return arrow::Status::OK();
  }

  // A media upload, conditional on the generation (0: no object).
  CloudCall PutCall(const std::string& object, const PutCondition& condition) const override {
    CloudCall call;
    call.method = "POST";
    call.object = object;
    call.path = UploadPath();
    call.query["uploadType"] = "media";
    call.query["name"] = object;
    call.query["fields"] = "generation";
    if (condition.kind == PutCondition::Kind::kAbsent) call.query["ifGenerationMatch"] = "0";
    if (condition.kind == PutCondition::Kind::kMatch) call.query["ifGenerationMatch"] = condition.etag;
    call.headers["Content-Type"] = "application/octet-stream";
    return call;
  }

  arrow::Result<bool> PutReplied(const HttpResponse& reply, const PutCondition& condition,
                                 const std::string& what, const RetryOutcome& outcome) override {
    if (reply.status == 200) return true;
    if (reply.status == 404 && BucketMissing(reply)) {
      return WriteFailure(MissingBucket(what), outcome);
    }
    // 412: the generation is not the one given. 404: a generation given for a missing object.
    if (condition.kind != PutCondition::Kind::kNone &&
        (reply.status == 412 ||
         (reply.status == 404 && condition.kind == PutCondition::Kind::kMatch))) {
      return false;
    }
    return WriteFailure(ReplyError(what, reply), outcome);
  }

  CloudCall ListCall(const ListQuery& query) const override {
    CloudCall call;
    call.path = ObjectsPath();
    if (!query.prefix.empty()) call.query["prefix"] = query.prefix;
    // startOffset is inclusive: the base drops the object at start_after itself.
    if (!query.start_after.empty()) call.query["startOffset"] = query.start_after;
    if (!query.continuation.empty()) call.query["pageToken"] = query.continuation;
    if (query.max_keys > 0) {
      call.query["maxResults"] =
          std::to_string(std::clamp<int64_t>(query.max_keys, 1, kMaxListResults));
    }
    if (query.delimited) {
      call.query["delimiter"] = "/";
      call.query["fields"] = "prefixes,nextPageToken";
    } else {
      call.query["fields"] = "items(name,size,updated,generation),nextPageToken";
    }
    return call;
  }

  arrow::Result<ListedPage> ParseListing(const HttpResponse& reply,
                                         const std::string& what) const override {
    rapidjson::Document doc;
    const std::string body = reply.BodyText();
    doc.Parse(body.data(), body.size());
    if (doc.HasParseError() || !doc.IsObject()) {
      return arrow::Status::IOError(what, ": the listing is not a JSON object");
    }
    ListedPage page;
    const std::string strip = location().prefix.empty() ? "" : location().prefix + "/";
    const auto items = doc.FindMember("items");
    if (items != doc.MemberEnd() && items->value.IsArray()) {
      for (const auto& item : items->value.GetArray()) {
        const std::string name = JsonText(item, "name");
        if (name.compare(0, strip.size(), strip) != 0) continue;  // not the lake's: not checked
        ARROW_ASSIGN_OR_RAISE(ObjectMeta meta, MetaOf(item, what));
        meta.path = name;
        page.objects.push_back(std::move(meta));
      }
    }
    const auto prefixes = doc.FindMember("prefixes");
    if (prefixes != doc.MemberEnd() && prefixes->value.IsArray()) {
      for (const auto& p : prefixes->value.GetArray()) {
        if (p.IsString()) page.prefixes.push_back(p.GetString());
      }
    }
    page.continuation = JsonText(doc, "nextPageToken");
    page.truncated = !page.continuation.empty();
    return page;
  }

  // A listing names no object: its 404 is about the bucket.
  arrow::Status ListingFailure(const std::string& what, const HttpResponse& reply) override {
    return reply.status == 404 ? MissingBucket(what) : ReplyError(what, reply);
  }

  Missing MissingOf(const HttpResponse& reply) override {
    return BucketMissing(reply) ? Missing::kBucket : Missing::kObject;
  }

  arrow::Status MissingBucket(const std::string& what) const override {
    return arrow::Status::IOError(what, ": the bucket '", config_.bucket,
                                  "' does not exist; create it first");
  }

  arrow::Status ReplyError(const std::string& what, const HttpResponse& reply) const override {
    const GcsError error = ParseError(reply);
    if (reply.status == 401 || reply.status == 403) {
      return AccessDenied(what, reply.status, error.message.empty() ? "" : ": " + error.message,
                          credentials_->Source(), "");
    }
    return HttpFailure(what, reply.status, "", error.message);
  }

  int UploadParallelism() const override { return 1; }  // a session takes its bytes in order
  // Chunks before the last must be whole multiples of 256 KiB: round the part size up.
  int64_t PartSize(int64_t requested) const override {
    return (requested + kChunkQuantum - 1) / kChunkQuantum * kChunkQuantum;
  }
  int DeleteParallelism() const override { return config_.delete_parallelism; }

 private:
  std::string ObjectPath(const std::string& key) const {
    return "/storage/v1" + bucket_path_ + "/o/" + UriEncode(key);
  }
  std::string ObjectsPath() const { return "/storage/v1" + bucket_path_ + "/o"; }
  std::string UploadPath() const { return "/upload/storage/v1" + bucket_path_ + "/o"; }

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

  // True if a 404 is about the bucket rather than the object. GCS says so in its message ("The
  // specified bucket does not exist." against "No such object: …"); fake-gcs-server answers a
  // bare "Not Found" to both, so without such a message the bucket is asked about once.
  bool BucketMissing(const HttpResponse& reply) {
    if (reply.status != 404) return false;
    const GcsError error = ParseError(reply);
    if (error.message.find("bucket does not exist") != std::string::npos) return true;
    if (error.message.find("No such object") != std::string::npos) return false;
    if (bucket_seen_.load()) return false;
    CloudCall call;
    call.path = "/storage/v1" + bucket_path_;
    call.query["fields"] = "name";
    call.what = "GET gs://" + config_.bucket;
    auto bucket = Send(call);
    if (bucket.ok() && bucket->status == 200) bucket_seen_.store(true);
    return bucket.ok() && bucket->status == 404;
  }

  GcsConfig config_;
  std::shared_ptr<GoogleCredentialProvider> credentials_;
  std::string bucket_path_;  // "/b/<bucket>", encoded
  std::atomic<bool> bucket_seen_{false};  // a bucket lookup found it (see BucketMissing)
};

}  // namespace

arrow::Result<std::shared_ptr<ObjectStore>> MakeGcsStore(
    const GcsConfig& config, std::shared_ptr<GoogleCredentialProvider> credentials) {
  ARROW_ASSIGN_OR_RAISE(auto client, HttpClient::Make(config.http));
  return std::make_shared<GcsStore>(config, std::move(credentials), std::move(client));
}

arrow::Result<std::shared_ptr<ObjectStore>> OpenGcsStore(const std::string& url,
                                                         const StorageOptions& given) {
  GcsConfig config;
  ARROW_RETURN_NOT_OK(
      SplitBucketAndPrefix(url, "gs://bucket/path", &config.bucket, &config.prefix));
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

  // How the chain reaches token endpoints and the metadata server.
  GoogleCredentialInputs inputs;
  inputs.options = options;
  ARROW_ASSIGN_OR_RAISE(inputs.fetch, MakeIdentityFetch(config.http, IdentityClientOptions{}));
  ARROW_ASSIGN_OR_RAISE(auto credentials, MakeGoogleCredentialChain(inputs));
  return MakeGcsStore(config, std::move(credentials));
}

arrow::Status CreateGcsBucket(const std::string& url, const StorageOptions& options) {
  ARROW_ASSIGN_OR_RAISE(auto store, OpenGcsStore(url, options));
  return std::static_pointer_cast<GcsStore>(store)->CreateBucket(
      EnvValue("GOOGLE_CLOUD_PROJECT").value_or("test"));
}

}  // namespace timelake
