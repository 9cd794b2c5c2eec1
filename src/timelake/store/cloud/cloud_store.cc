#include "timelake/store/cloud/cloud_store.h"

#include <algorithm>

#include "timelake/store/cloud/location.h"
#include "timelake/store/cloud/multipart_output.h"
#include "timelake/store/cloud/ranged_input.h"
#include "timelake/store/cloud/service_time.h"
#include "timelake/util/encoding.h"
#include "timelake/util/parallel.h"
#include "timelake/util/status.h"

namespace timelake {

arrow::Status WriteFailure(arrow::Status status, const RetryOutcome& outcome) {
  return outcome.maybe_applied ? OutcomeUnknown(status) : status;
}

std::function<ReplyVerdict(const HttpResponse&)> RetryOnceWithFreshToken(
    std::function<bool()> invalidate, std::function<ReplyVerdict(const HttpResponse&)> judge) {
  auto refreshed = std::make_shared<bool>(false);
  return [refreshed, invalidate = std::move(invalidate),
          judge = std::move(judge)](const HttpResponse& reply) {
    if (reply.status == 401 && !*refreshed) {
      *refreshed = true;
      if (invalidate()) return ReplyVerdict::kTransient;
    }
    return judge(reply);
  };
}

namespace {

std::shared_ptr<arrow::Buffer> Empty() { return std::make_shared<arrow::Buffer>(nullptr, 0); }

std::string EncodedQuery(const std::map<std::string, std::string>& query) {
  std::string out;
  for (const auto& [name, value] : query) {
    out += (out.empty() ? "?" : "&") + UriEncode(name) + "=" + UriEncode(value);
  }
  return out;
}

// The base's uploader: the dialect's upload calls for one path.
class CloudPartUploader : public PartUploader {
 public:
  CloudPartUploader(std::shared_ptr<CloudStore> store, std::string path, int parallelism,
                    bool unique_name)
      : store_(std::move(store)), path_(std::move(path)), parallelism_(parallelism),
        unique_name_(unique_name) {}
  arrow::Status PutWhole(std::shared_ptr<arrow::Buffer> data) override {
    return store_->Put(path_, data);
  }
  arrow::Result<std::string> Begin() override { return store_->BeginUpload(path_, unique_name_); }
  arrow::Result<std::string> UploadPart(const std::string& upload_id, int number, int64_t offset,
                                        std::shared_ptr<arrow::Buffer> data, bool last) override {
    return store_->UploadPart(path_, upload_id, number, offset, std::move(data), last);
  }
  arrow::Status Complete(const std::string& upload_id,
                         const std::vector<std::pair<int, std::string>>& parts,
                         int64_t) override {
    return store_->CompleteUpload(path_, upload_id, parts);
  }
  arrow::Status Abort(const std::string& upload_id) override {
    return store_->AbortUpload(path_, upload_id);
  }
  int Parallelism() const override { return parallelism_; }
  std::string Describe() const override { return store_->ExternalPath(path_); }

 private:
  std::shared_ptr<CloudStore> store_;
  std::string path_;
  int parallelism_;
  bool unique_name_;
};

}  // namespace

// ---- requests ----------------------------------------------------------------------------------

std::function<ReplyVerdict(const HttpResponse&)> CloudStore::NewJudge() {
  // An access token refused before its expiry (revoked, rotated, clock skew) is fetched anew once.
  return RetryOnceWithFreshToken([this] { return InvalidateToken(); }, DefaultVerdict);
}

arrow::Result<HttpResponse> CloudStore::Send(const CloudCall& call, RetryOutcome* outcome,
                                             std::function<ReplyVerdict(const HttpResponse&)> judge) {
  return SendMade(call.what, [&call]() -> arrow::Result<CloudCall> { return call; }, outcome,
                  std::move(judge));
}

arrow::Result<HttpResponse> CloudStore::SendMade(
    const std::string& what, const std::function<arrow::Result<CloudCall>()>& make,
    RetryOutcome* outcome, std::function<ReplyVerdict(const HttpResponse&)> judge) {
  auto build = [&]() -> arrow::Result<HttpRequest> {
    ARROW_ASSIGN_OR_RAISE(const CloudCall call, make());
    if (HasDotSegment(call.object)) {
      return arrow::Status::Invalid(what, ": a path with '.' or '..' segments names no ",
                                    ObjectNoun());
    }
    HttpRequest request;
    request.method = call.method;
    request.body = call.body;
    request.expected_response_bytes = call.expected_bytes;
    ARROW_RETURN_NOT_OK(Sign(call, EncodedQuery(call.query), &request));
    return request;
  };
  return SendWithRetry(*client_, retry_, what, build, judge ? judge : NewJudge(), outcome);
}

arrow::Status CloudStore::AccessDenied(const std::string& what, int status,
                                       const std::string& detail, const std::string& source,
                                       const std::string& hint) {
  return arrow::Status::IOError(what, ": access denied (HTTP ", status, detail,
                                "); check the credentials (from ", source, ")", hint);
}

arrow::Status CloudStore::HttpFailure(const std::string& what, int status, const std::string& code,
                                      const std::string& message) {
  return arrow::Status::IOError(what, ": HTTP ", status, code.empty() ? "" : " " + code,
                                message.empty() ? "" : ": " + message);
}

arrow::Result<ObjectMeta> CloudStore::MetaOfHead(const HttpResponse& reply, const std::string&) {
  ObjectMeta meta;
  meta.size = std::atoll(reply.Header("content-length").c_str());
  meta.modified_ms = ParseServiceTimeMs(reply.Header("last-modified"));
  meta.etag = reply.Header("etag");
  return meta;
}

CloudCall CloudStore::PutCall(const std::string& object, const PutCondition& condition) const {
  CloudCall call;
  call.method = "PUT";
  call.object = object;
  if (condition.kind == PutCondition::Kind::kAbsent) call.headers["If-None-Match"] = "*";
  if (condition.kind == PutCondition::Kind::kMatch) call.headers["If-Match"] = condition.etag;
  call.headers["Content-Type"] = "application/octet-stream";
  return call;
}

CloudCall CloudStore::ObjectCall(Access access, const std::string& object) const {
  CloudCall call;
  call.method = access == Access::kHead ? "HEAD" : access == Access::kDelete ? "DELETE" : "GET";
  call.object = object;
  return call;
}

// ---- reads -------------------------------------------------------------------------------------

arrow::Result<HttpResponse> CloudStore::SendRead(const CloudCall& call, const std::string& path) {
  ARROW_ASSIGN_OR_RAISE(auto reply, Send(call));
  if (reply.status == 404) {
    return MissingOf(reply) == Missing::kObject ? NotFound(path) : MissingBucket(call.what);
  }
  return reply;
}

arrow::Result<std::shared_ptr<arrow::Buffer>> CloudStore::Get(const std::string& path) {
  CloudCall call = ObjectCall(Access::kRead, Key(path));
  call.what = "GET " + Url(path);
  ARROW_ASSIGN_OR_RAISE(auto reply, SendRead(call, path));
  if (reply.status != 200) return ReplyError(call.what, reply);
  return reply.body;
}

arrow::Result<DatedObject> CloudStore::GetDated(const std::string& path) {
  CloudCall call = ObjectCall(Access::kRead, Key(path));
  call.what = "GET " + Url(path);
  ARROW_ASSIGN_OR_RAISE(auto reply, SendRead(call, path));
  if (reply.status != 200) return ReplyError(call.what, reply);
  DatedObject out;
  out.data = reply.body;
  // ParseServiceTimeMs reads an unreadable time as now: only a reply with both headers is dated.
  const std::string modified = reply.Header("last-modified");
  const std::string served = reply.Header("date");
  if (!modified.empty() && !served.empty()) {
    out.modified_ms = ParseServiceTimeMs(modified);
    out.served_ms = ParseServiceTimeMs(served);
  }
  return out;
}

arrow::Result<std::shared_ptr<arrow::Buffer>> CloudStore::GetRange(const std::string& path,
                                                                   int64_t offset, int64_t length) {
  if (offset < 0 || length < 0) {
    return arrow::Status::Invalid("negative range ", offset, "+", length, " of ", Url(path));
  }
  if (length == 0) return Empty();
  CloudCall call = ObjectCall(Access::kRead, Key(path));
  call.headers[RangeHeader()] =
      "bytes=" + std::to_string(offset) + "-" + std::to_string(offset + length - 1);
  call.expected_bytes = length;
  call.what = "GET " + Url(path);
  ARROW_ASSIGN_OR_RAISE(auto reply, SendRead(call, path));
  if (reply.status == 416) return Empty();  // past the end
  if (reply.status == 200) {  // the server ignored the range (an empty object): cut it here
    const int64_t size = reply.body->size();
    const int64_t from = std::min(offset, size);
    return arrow::SliceBuffer(reply.body, from, std::min(length, size - from));
  }
  if (reply.status != 206) return ReplyError(call.what, reply);
  return reply.body;
}

arrow::Result<ObjectMeta> CloudStore::Head(const std::string& path) {
  CloudCall call = ObjectCall(Access::kHead, Key(path));
  call.what = "HEAD " + Url(path);
  ARROW_ASSIGN_OR_RAISE(auto reply, SendRead(call, path));
  if (reply.status != 200) return ReplyError(call.what, reply);
  ARROW_ASSIGN_OR_RAISE(ObjectMeta meta, MetaOfHead(reply, call.what));
  meta.path = path;
  return meta;
}

arrow::Result<std::shared_ptr<arrow::io::RandomAccessFile>> CloudStore::OpenInput(
    const std::string& path) {
  return std::make_shared<RangedInput>(shared_from_this(), path);
}

// ---- writes ------------------------------------------------------------------------------------

arrow::Status CloudStore::Put(const std::string& path, const std::shared_ptr<arrow::Buffer>& data) {
  return PutWith(path, data, PutCondition{}).status();
}

arrow::Result<bool> CloudStore::PutIfAbsent(const std::string& path,
                                            const std::shared_ptr<arrow::Buffer>& data) {
  return PutWith(path, data, PutCondition{PutCondition::Kind::kAbsent, ""});
}

arrow::Result<bool> CloudStore::PutIfMatch(const std::string& path,
                                           const std::shared_ptr<arrow::Buffer>& data,
                                           const std::string& etag) {
  if (etag.empty()) return arrow::Status::Invalid("PutIfMatch of ", Url(path), " without an etag");
  ARROW_RETURN_NOT_OK(CheckEtag(path, etag));
  return PutWith(path, data, PutCondition{PutCondition::Kind::kMatch, etag});
}

arrow::Result<bool> CloudStore::PutWith(const std::string& path,
                                        const std::shared_ptr<arrow::Buffer>& data,
                                        const PutCondition& condition) {
  CloudCall call = PutCall(Key(path), condition);
  call.body = data ? data : Empty();
  call.what = "PUT " + Url(path);
  RetryOutcome outcome;
  auto reply = Send(call, &outcome);
  if (!reply.ok()) return WriteFailure(reply.status(), outcome);
  return PutReplied(*reply, condition, call.what, outcome);
}

arrow::Result<std::shared_ptr<ObjectOutput>> CloudStore::OpenOutput(const std::string& path,
                                                                    const OutputOptions& options) {
  ARROW_RETURN_NOT_OK(options.Validate());
  return std::make_shared<MultipartOutput>(
      std::make_unique<CloudPartUploader>(shared_from_this(), path,
                                          std::max(1, UploadParallelism()), options.in_place),
      PartSize(options.part_size));
}

// ---- listings ----------------------------------------------------------------------------------

arrow::Result<ListedPage> CloudStore::FetchListing(const ListQuery& query,
                                                     const std::string& what) {
  CloudCall call = ListCall(query);
  call.what = what;
  ARROW_ASSIGN_OR_RAISE(auto reply, Send(call));
  if (reply.status != 200) return ListingFailure(what, reply);
  return ParseListing(reply, what);
}

arrow::Result<ObjectPage> CloudStore::ListPage(const ListPageRequest& request) {
  ListQuery query;
  query.prefix = Key(request.prefix);
  if (!request.start_after.empty()) query.start_after = Key(request.start_after);
  query.continuation = request.continuation;
  query.max_keys = request.max_keys;
  const std::string what = "LIST " + Url(request.prefix);
  ARROW_ASSIGN_OR_RAISE(ListedPage listed, FetchListing(query, what));
  ObjectPage page;
  const std::string strip = location_.prefix.empty() ? "" : location_.prefix + "/";
  for (ObjectMeta& meta : listed.objects) {
    if (meta.path.compare(0, strip.size(), strip) != 0) continue;
    meta.path = meta.path.substr(strip.size());
    if (!InListing(meta.path, request.prefix, request.start_after)) continue;
    page.objects.push_back(std::move(meta));
  }
  std::sort(page.objects.begin(), page.objects.end(),
            [](const ObjectMeta& a, const ObjectMeta& b) { return a.path < b.path; });
  if (listed.truncated && listed.continuation.empty()) {
    return arrow::Status::IOError(what, ": a truncated listing without a continuation token");
  }
  page.continuation = listed.continuation;
  return page;
}

arrow::Result<std::vector<std::string>> CloudStore::ListChildren(const std::string& prefix) {
  std::vector<std::string> out;
  ListQuery query;
  query.prefix = Key(prefix);
  query.delimited = true;
  const std::string& full = query.prefix;
  do {
    ARROW_ASSIGN_OR_RAISE(ListedPage listed, FetchListing(query, "LIST " + Url(prefix)));
    for (std::string& name : listed.prefixes) {
      if (name.compare(0, full.size(), full) != 0 || name.size() <= full.size() + 1) continue;
      name = name.substr(full.size());
      if (!name.empty() && name.back() == '/') name.pop_back();
      if (name.find('/') == std::string::npos) out.push_back(std::move(name));
    }
    query.continuation = listed.continuation;
  } while (!query.continuation.empty());
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// ---- deletes -----------------------------------------------------------------------------------

arrow::Status CloudStore::Delete(const std::string& path) {
  CloudCall call = ObjectCall(Access::kDelete, Key(path));
  call.what = "DELETE " + Url(path);
  RetryOutcome outcome;
  auto reply = Send(call, &outcome);
  if (!reply.ok()) return WriteFailure(reply.status(), outcome);
  if (reply->status == 200 || reply->status == 202 || reply->status == 204) {
    return arrow::Status::OK();
  }
  if (reply->status == 404) {
    return MissingOf(*reply) == Missing::kObject ? arrow::Status::OK() : MissingBucket(call.what);
  }
  return WriteFailure(ReplyError(call.what, *reply), outcome);
}

arrow::Status CloudStore::DeleteMany(const std::vector<std::string>& paths) {
  return RunParallel(paths.size(), DeleteParallelism(), [&](size_t i) { return Delete(paths[i]); });
}

arrow::Status CloudStore::DeletePrefix(const std::string& prefix) {
  ARROW_ASSIGN_OR_RAISE(auto objects, List(prefix));
  std::vector<std::string> paths;
  paths.reserve(objects.size());
  for (auto& o : objects) paths.push_back(std::move(o.path));
  return DeleteMany(paths);
}

}  // namespace timelake
