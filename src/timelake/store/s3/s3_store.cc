#include "timelake/store/s3/s3_store.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <future>
#include <mutex>
#include <thread>

#include <curl/curl.h>

#include <arrow/buffer_builder.h>
#include <arrow/io/interfaces.h>

#include "timelake/http/xml.h"
#include "timelake/store/cloud_common.h"
#include "timelake/store/s3/sigv4.h"
#include "timelake/util/status.h"
#include "timelake/util/time.h"

namespace timelake {
namespace {

constexpr int64_t kDeleteBatch = 1000;

std::string AmzDate(std::time_t now) {
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

std::string ContentMd5(std::string_view body) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(body.data(), body.size(), digest, &len, EVP_md5(), nullptr);
  return Base64Encode(std::string_view(reinterpret_cast<const char*>(digest), len));
}

struct S3Error {
  std::string code;
  std::string message;
};

S3Error ParseError(const HttpResponse& reply) {
  S3Error error;
  if (!reply.body || reply.body->size() == 0) return error;
  auto xml = ParseXml(std::string_view(reinterpret_cast<const char*>(reply.body->data()),
                                       static_cast<size_t>(reply.body->size())));
  if (!xml.ok() || xml->name != "Error") return error;
  error.code = xml->ChildText("Code");
  error.message = xml->ChildText("Message");
  return error;
}

ReplyVerdict S3Verdict(const HttpResponse& reply) {
  if (DefaultVerdict(reply) == ReplyVerdict::kTransient) return ReplyVerdict::kTransient;
  if (reply.status == 409 || reply.status == 400) {
    const std::string code = ParseError(reply).code;
    if (code == "ConditionalRequestConflict" || code == "RequestTimeout" ||
        code == "OperationAborted" || code == "SlowDown") {
      return ReplyVerdict::kTransient;
    }
  }
  return ReplyVerdict::kDone;
}

// CompleteMultipartUpload answers 200 at once and may then stream whitespace and, in the end,
// an <Error> instead of its result: only a CompleteMultipartUploadResult root is success.
ReplyVerdict CompleteVerdict(const HttpResponse& reply) {
  if (S3Verdict(reply) == ReplyVerdict::kTransient) return ReplyVerdict::kTransient;
  if (reply.status != 200) return ReplyVerdict::kDone;
  auto xml = ParseXml(reply.BodyText());
  if (xml.ok() && xml->name == "CompleteMultipartUploadResult") return ReplyVerdict::kDone;
  return ReplyVerdict::kTransient;
}

class S3Store;

// An object sent as a multipart upload whose parts go up in parallel.
class S3PartUploader : public PartUploader {
 public:
  /// `unique_name`: nobody else writes `path` (OutputOptions::in_place).
  S3PartUploader(std::shared_ptr<S3Store> store, std::string path, int parallelism, bool unique_name)
      : store_(std::move(store)), path_(std::move(path)), parallelism_(parallelism),
        unique_name_(unique_name) {}
  arrow::Status PutWhole(std::shared_ptr<arrow::Buffer> data) override;
  arrow::Result<std::string> Begin() override;
  arrow::Result<std::string> UploadPart(const std::string& upload_id, int number, int64_t offset,
                                        std::shared_ptr<arrow::Buffer> data, bool last) override;
  arrow::Status Complete(const std::string& upload_id,
                         const std::vector<std::pair<int, std::string>>& parts,
                         int64_t size) override;
  arrow::Status Abort(const std::string& upload_id) override;
  int Parallelism() const override { return parallelism_; }
  std::string Describe() const override;

 private:
  std::shared_ptr<S3Store> store_;
  std::string path_;
  int parallelism_;
  bool unique_name_;
};

class S3Store : public ObjectStore, public std::enable_shared_from_this<S3Store> {
 public:
  S3Store(S3Config config, std::shared_ptr<AwsCredentialProvider> credentials,
          std::shared_ptr<HttpClient> client)
      : config_(std::move(config)), credentials_(std::move(credentials)),
        client_(std::move(client)) {
    std::string endpoint = config_.endpoint;
    if (endpoint.empty()) endpoint = "https://s3." + config_.region + ".amazonaws.com";
    while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
    const auto scheme_end = endpoint.find("://");
    scheme_ = endpoint.substr(0, scheme_end);
    host_ = WithoutDefaultPort(scheme_, endpoint.substr(scheme_end + 3));
    if (config_.virtual_hosted) {
      host_ = config_.bucket + "." + host_;
      bucket_path_ = "";
    } else {
      bucket_path_ = "/" + UriEncode(config_.bucket);
    }
    root_url_ = "s3://" + config_.bucket + (config_.prefix.empty() ? "" : "/" + config_.prefix);
  }

  // ---- requests ------------------------------------------------------------------------------

  struct Call {
    std::string method = "GET";
    std::string key;  // full key in the bucket; "" for bucket-level calls
    std::map<std::string, std::string> query;
    std::map<std::string, std::string> headers;
    std::shared_ptr<arrow::Buffer> body;
    std::string what;  // for messages: "GET s3://bucket/key"
    int64_t expected_bytes = 0;  // a ranged GET's length (see RequestTimeoutMs)
  };

  arrow::Result<HttpResponse> Send(const Call& call, RetryOutcome* outcome = nullptr,
                                   const std::function<ReplyVerdict(const HttpResponse&)>& judge =
                                       S3Verdict) {
    std::string payload_hash = "UNSIGNED-PAYLOAD";
    if (!config_.unsigned_payload) {
      payload_hash = call.body ? Sha256Hex(std::string_view(
                                     reinterpret_cast<const char*>(call.body->data()),
                                     static_cast<size_t>(call.body->size())))
                               : Sha256Hex("");
    }
    if (HasDotSegment(call.key)) {
      return arrow::Status::Invalid(call.what, ": a path with '.' or '..' segments names no S3 object");
    }
    const std::string path =
        bucket_path_ + (call.key.empty() ? (bucket_path_.empty() ? "/" : "") : "/" + UriEncodePath(call.key));
    std::string query;
    for (const auto& [name, value] : call.query) {
      query += (query.empty() ? "?" : "&") + UriEncode(name) + "=" + UriEncode(value);
    }
    auto build = [&]() -> arrow::Result<HttpRequest> {
      ARROW_ASSIGN_OR_RAISE(AwsCredentials credentials, credentials_->Get());
      SigV4Request sig;
      sig.method = call.method;
      sig.path = path;
      sig.query = call.query;
      sig.headers = call.headers;
      sig.payload_hash = payload_hash;
      HttpRequest request;
      request.method = call.method;
      request.url = scheme_ + "://" + host_ + path + query;
      request.body = call.body;
      request.expected_response_bytes = call.expected_bytes;
      if (!credentials.anonymous) {
        const std::string amz_date = AmzDate(std::time(nullptr));
        sig.headers["host"] = host_;
        sig.headers["x-amz-date"] = amz_date;
        sig.headers["x-amz-content-sha256"] = payload_hash;
        if (!credentials.session_token.empty()) {
          sig.headers["x-amz-security-token"] = credentials.session_token;
        }
        const std::string authorization = SigV4Authorization(
            sig, SigV4Credentials{credentials.access_key_id, credentials.secret_access_key},
            amz_date, config_.region, "s3");
        sig.headers.erase("host");  // curl sends it from the URL
        sig.headers["Authorization"] = authorization;
      }
      for (const auto& [name, value] : sig.headers) request.headers.emplace_back(name, value);
      return request;
    };
    return SendWithRetry(*client_, config_.retry, call.what, build, judge, outcome);
  }

  std::string Key(const std::string& path) const {
    return config_.prefix.empty() ? path : config_.prefix + "/" + path;
  }

  std::string Url(const std::string& path) const { return root_url_ + "/" + path; }

  // An error for a reply that was not what the call wanted; never carries a secret (replies
  // from S3 do not echo credentials; the URL has no query).
  arrow::Status ReplyError(const std::string& what, const HttpResponse& reply) const {
    const S3Error error = ParseError(reply);
    if (error.code == "NoSuchBucket") {
      return arrow::Status::IOError(what, ": the bucket '", config_.bucket,
                                    "' does not exist; create it first");
    }
    if (reply.status == 403 || error.code == "AccessDenied" ||
        error.code == "SignatureDoesNotMatch" || error.code == "InvalidAccessKeyId") {
      return arrow::Status::IOError(what, ": access denied (HTTP ", reply.status,
                                    error.code.empty() ? "" : " " + error.code,
                                    "); check the credentials (from ", credentials_->Source(),
                                    ") and the region '", config_.region, "'");
    }
    return arrow::Status::IOError(what, ": HTTP ", reply.status,
                                  error.code.empty() ? "" : " " + error.code,
                                  error.message.empty() ? "" : ": " + error.message);
  }

  // ---- ObjectStore ---------------------------------------------------------------------------

  arrow::Result<std::shared_ptr<arrow::Buffer>> Get(const std::string& path) override {
    Call call;
    call.key = Key(path);
    call.what = "GET " + Url(path);
    ARROW_ASSIGN_OR_RAISE(auto reply, Send(call));
    if (reply.status == 404 && ParseError(reply).code != "NoSuchBucket") return NotFound(path);
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
    call.key = Key(path);
    call.headers["Range"] = "bytes=" + std::to_string(offset) + "-" + std::to_string(offset + length - 1);
    call.expected_bytes = length;
    call.what = "GET " + Url(path);
    ARROW_ASSIGN_OR_RAISE(auto reply, Send(call));
    if (reply.status == 404 && ParseError(reply).code != "NoSuchBucket") return NotFound(path);
    if (reply.status == 416) return std::make_shared<arrow::Buffer>(nullptr, 0);  // past the end
    if (reply.status == 200) {  // the server ignored the range: cut it here
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
    call.key = Key(path);
    call.what = "HEAD " + Url(path);
    ARROW_ASSIGN_OR_RAISE(auto reply, Send(call));
    if (reply.status == 404) return NotFound(path);
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

  // PUT with the given condition headers: true if written, false if a condition failed.
  arrow::Result<bool> PutWith(const std::string& path, const std::shared_ptr<arrow::Buffer>& data,
                              std::map<std::string, std::string> conditions) {
    Call call;
    call.method = "PUT";
    call.key = Key(path);
    call.headers = std::move(conditions);
    call.headers["Content-Type"] = "application/octet-stream";
    call.body = data ? data : std::make_shared<arrow::Buffer>(nullptr, 0);
    call.what = "PUT " + Url(path);
    RetryOutcome outcome;
    auto reply = Send(call, &outcome);
    if (!reply.ok()) return WriteFailure(reply.status(), outcome);
    if (reply->status == 200) return true;
    if (!call.headers.count("If-None-Match") && !call.headers.count("If-Match")) {
      return WriteFailure(ReplyError(call.what, *reply), outcome);
    }
    // 412: the condition failed. 404: If-Match on a missing object. (Old MinIO answers 304.)
    if (reply->status == 412 || reply->status == 304 ||
        (reply->status == 404 && call.headers.count("If-Match") &&
         ParseError(*reply).code != "NoSuchBucket")) {
      return false;
    }
    if (reply->status == 501 || ParseError(*reply).code == "NotImplemented") {
      return arrow::Status::NotImplemented(
          call.what, ": this S3 service does not support conditional writes, which timelake "
          "commits need (AWS S3 has them since 2024; MinIO, R2 and moto too)");
    }
    return WriteFailure(ReplyError(call.what, *reply), outcome);
  }

  arrow::Result<std::shared_ptr<ObjectOutput>> OpenOutput(const std::string& path,
                                                          const OutputOptions& options) override {
    ARROW_RETURN_NOT_OK(options.Validate());
    return std::make_shared<MultipartOutput>(
        std::make_unique<S3PartUploader>(shared_from_this(), path,
                                         std::max(1, config_.upload_parallelism), options.in_place),
        options.part_size);
  }

  arrow::Result<std::shared_ptr<arrow::io::RandomAccessFile>> OpenInput(
      const std::string& path) override {
    return std::make_shared<RangedInput>(shared_from_this(), path);
  }

  arrow::Result<ObjectPage> ListPage(const ListPageRequest& request) override {
    Call call;
    call.query["list-type"] = "2";
    call.query["prefix"] = Key(request.prefix);
    if (config_.prefix.empty() && request.prefix.empty()) call.query.erase("prefix");
    if (!request.start_after.empty()) call.query["start-after"] = Key(request.start_after);
    if (!request.continuation.empty()) call.query["continuation-token"] = request.continuation;
    call.query["max-keys"] = std::to_string(std::clamp<int64_t>(request.max_keys, 1, 1000));
    call.what = "LIST " + Url(request.prefix);
    ARROW_ASSIGN_OR_RAISE(auto xml, ListCall(call));
    ObjectPage page;
    const std::string strip = config_.prefix.empty() ? "" : config_.prefix + "/";
    for (const XmlElement* c : xml.Children("Contents")) {
      ObjectMeta meta;
      std::string key = c->ChildText("Key");
      if (key.compare(0, strip.size(), strip) != 0) continue;
      meta.path = key.substr(strip.size());
      if (!InListing(meta.path, request.prefix, request.start_after)) continue;
      meta.size = std::atoll(c->ChildText("Size").c_str());
      meta.modified_ms = ParseServiceTimeMs(c->ChildText("LastModified"));
      meta.etag = c->ChildText("ETag");
      page.objects.push_back(std::move(meta));
    }
    std::sort(page.objects.begin(), page.objects.end(),
              [](const ObjectMeta& a, const ObjectMeta& b) { return a.path < b.path; });
    if (xml.ChildText("IsTruncated") == "true") {
      page.continuation = xml.ChildText("NextContinuationToken");
      if (page.continuation.empty()) {
        return arrow::Status::IOError(call.what, ": a truncated listing without a continuation token");
      }
    }
    return page;
  }

  arrow::Result<std::vector<std::string>> ListChildren(const std::string& prefix) override {
    std::vector<std::string> out;
    const std::string full = Key(prefix);
    std::string continuation;
    do {
      Call call;
      call.query["list-type"] = "2";
      if (!full.empty()) call.query["prefix"] = full;
      call.query["delimiter"] = "/";
      if (!continuation.empty()) call.query["continuation-token"] = continuation;
      call.what = "LIST " + Url(prefix);
      ARROW_ASSIGN_OR_RAISE(auto xml, ListCall(call));
      for (const XmlElement* p : xml.Children("CommonPrefixes")) {
        std::string name = p->ChildText("Prefix");
        if (name.compare(0, full.size(), full) != 0 || name.size() <= full.size() + 1) continue;
        name = name.substr(full.size());
        if (!name.empty() && name.back() == '/') name.pop_back();
        if (name.find('/') == std::string::npos) out.push_back(name);
      }
      continuation = xml.ChildText("IsTruncated") == "true" ? xml.ChildText("NextContinuationToken")
                                                            : "";
    } while (!continuation.empty());
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }

  arrow::Result<XmlElement> ListCall(const Call& call) {
    ARROW_ASSIGN_OR_RAISE(auto reply, Send(call));
    if (reply.status != 200) return ReplyError(call.what, reply);
    auto xml = ParseXml(reply.BodyText());
    if (!xml.ok()) return arrow::Status::IOError(call.what, ": ", xml.status().message());
    if (xml->name != "ListBucketResult") {
      return arrow::Status::IOError(call.what, ": unexpected reply <", xml->name, ">");
    }
    return xml;
  }

  arrow::Status Delete(const std::string& path) override {
    Call call;
    call.method = "DELETE";
    call.key = Key(path);
    call.what = "DELETE " + Url(path);
    RetryOutcome outcome;
    auto reply = Send(call, &outcome);
    if (!reply.ok()) return WriteFailure(reply.status(), outcome);
    if (reply->status == 204 || reply->status == 200) return arrow::Status::OK();
    if (reply->status == 404 && ParseError(*reply).code != "NoSuchBucket") return arrow::Status::OK();
    return ReplyError(call.what, *reply);
  }

  arrow::Status DeleteMany(const std::vector<std::string>& paths) override {
    for (size_t start = 0; start < paths.size(); start += kDeleteBatch) {
      const size_t end = std::min(paths.size(), start + static_cast<size_t>(kDeleteBatch));
      std::string body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Delete><Quiet>true</Quiet>";
      for (size_t i = start; i < end; ++i) {
        body += "<Object><Key>" + XmlEscape(Key(paths[i])) + "</Key></Object>";
      }
      body += "</Delete>";
      Call call;
      call.method = "POST";
      call.query["delete"] = "";
      call.headers["Content-MD5"] = ContentMd5(body);
      call.headers["Content-Type"] = "application/xml";
      call.body = arrow::Buffer::FromString(std::move(body));
      call.what = "DELETE " + std::to_string(end - start) + " objects under " + root_url_;
      RetryOutcome outcome;
      auto reply = Send(call, &outcome);
      if (!reply.ok()) return WriteFailure(reply.status(), outcome);
      if (reply->status != 200) return ReplyError(call.what, *reply);
      auto xml = ParseXml(reply->BodyText());
      if (!xml.ok()) return arrow::Status::IOError(call.what, ": ", xml.status().message());
      for (const XmlElement* e : xml->Children("Error")) {
        const std::string code = e->ChildText("Code");
        if (code == "NoSuchKey") continue;
        return arrow::Status::IOError(call.what, ": ", e->ChildText("Key"), ": ", code, " ",
                                      e->ChildText("Message"));
      }
    }
    return arrow::Status::OK();
  }

  arrow::Status DeletePrefix(const std::string& prefix) override {
    ARROW_ASSIGN_OR_RAISE(auto objects, List(prefix));
    std::vector<std::string> paths;
    paths.reserve(objects.size());
    for (auto& o : objects) paths.push_back(std::move(o.path));
    return DeleteMany(paths);
  }

  arrow::Status CreateBucket() {
    Call call;
    call.method = "PUT";
    call.what = "CreateBucket s3://" + config_.bucket;
    if (config_.region != "us-east-1") {
      call.headers["Content-Type"] = "application/xml";
      call.body = arrow::Buffer::FromString(
          "<CreateBucketConfiguration><LocationConstraint>" + XmlEscape(config_.region) +
          "</LocationConstraint></CreateBucketConfiguration>");
    }
    ARROW_ASSIGN_OR_RAISE(auto reply, Send(call));
    if (reply.status == 200 || ParseError(reply).code == "BucketAlreadyOwnedByYou") {
      return arrow::Status::OK();
    }
    return ReplyError(call.what, reply);
  }

  std::string RootUrl() const override { return root_url_; }
  std::string Identity() const override { return root_url_ + " at " + config_.endpoint + " in " + config_.region; }
  std::string ExternalPath(const std::string& path) const override { return Url(path); }

  // ---- multipart uploads (used by S3PartUploader) ----------------------------------------------

  arrow::Result<std::string> CreateUpload(const std::string& path, bool unique_name) {
    Call call;
    call.method = "POST";
    call.key = Key(path);
    call.query["uploads"] = "";
    call.headers["Content-Type"] = "application/octet-stream";
    call.what = "CreateMultipartUpload " + Url(path);
    const int64_t started = NowMillis();
    RetryOutcome outcome;
    ARROW_ASSIGN_OR_RAISE(auto reply, Send(call, &outcome));
    if (reply.status != 200) return ReplyError(call.what, reply);
    ARROW_ASSIGN_OR_RAISE(auto xml, ParseXml(reply.BodyText()));
    std::string id = xml.ChildText("UploadId");
    if (id.empty()) return arrow::Status::IOError(call.what, ": no UploadId in the reply");
    if (outcome.maybe_applied) {
      // The request is not idempotent: an attempt whose reply was lost (or one curl resent)
      // may have started an upload of its own, which nobody would ever complete or abort.
      AbortStrayUploads(path, id, unique_name, reply, NowMillis() - started);
    }
    return id;
  }

  // Aborts the uploads of `path` other than `kept` that this CreateMultipartUpload may have
  // started: all of them for a name nobody else writes (`unique_name`, a data file); for any
  // other name, those that began while it was being tried (`elapsed_ms`), by the server's clock:
  // from its reply's Date back over the time the attempts took, with slack for the Date's
  // rounding. Best effort: an upload left behind holds no part yet.
  void AbortStrayUploads(const std::string& path, const std::string& kept, bool unique_name,
                         const HttpResponse& reply, int64_t elapsed_ms) {
    const std::string date = reply.Header("date");
    if (!unique_name && date.empty()) return;  // no server time to judge by: leave them alone
    const int64_t answered = date.empty() ? 0 : ParseServiceTimeMs(date);
    const int64_t from = answered - elapsed_ms - 2000, to = answered + 1000;
    Call list;
    list.query["uploads"] = "";
    list.query["prefix"] = Key(path);
    list.what = "ListMultipartUploads " + Url(path);
    auto listed = Send(list);
    if (!listed.ok() || listed->status != 200) return;
    auto xml = ParseXml(listed->BodyText());
    if (!xml.ok()) return;
    for (const XmlElement* upload : xml->Children("Upload")) {
      const std::string id = upload->ChildText("UploadId");
      if (upload->ChildText("Key") != Key(path) || id.empty() || id == kept) continue;
      const int64_t initiated = ParseServiceTimeMs(upload->ChildText("Initiated"));
      if (unique_name || (initiated >= from && initiated <= to)) (void)AbortUpload(path, id);
    }
  }

  arrow::Result<std::string> UploadPart(const std::string& path, const std::string& upload_id,
                                        int number, std::shared_ptr<arrow::Buffer> data) {
    Call call;
    call.method = "PUT";
    call.key = Key(path);
    call.query["partNumber"] = std::to_string(number);
    call.query["uploadId"] = upload_id;
    call.body = std::move(data);
    call.what = "UploadPart " + std::to_string(number) + " of " + Url(path);
    ARROW_ASSIGN_OR_RAISE(auto reply, Send(call));
    if (reply.status != 200) return ReplyError(call.what, reply);
    std::string etag = reply.Header("etag");
    if (etag.empty()) return arrow::Status::IOError(call.what, ": no ETag in the reply");
    return etag;
  }

  arrow::Status CompleteUpload(const std::string& path, const std::string& upload_id,
                               const std::vector<std::pair<int, std::string>>& parts) {
    std::string body = "<CompleteMultipartUpload>";
    for (const auto& [number, etag] : parts) {
      body += "<Part><PartNumber>" + std::to_string(number) + "</PartNumber><ETag>" +
              XmlEscape(etag) + "</ETag></Part>";
    }
    body += "</CompleteMultipartUpload>";
    Call call;
    call.method = "POST";
    call.key = Key(path);
    call.query["uploadId"] = upload_id;
    call.headers["Content-Type"] = "application/xml";
    call.body = arrow::Buffer::FromString(std::move(body));
    call.what = "CompleteMultipartUpload " + Url(path);
    RetryOutcome outcome;
    auto reply = Send(call, &outcome, CompleteVerdict);
    if (!reply.ok()) return WriteFailure(reply.status(), outcome);
    if (reply->status == 200) return arrow::Status::OK();  // CompleteVerdict checked the body
    if (reply->status == 404 && ParseError(*reply).code == "NoSuchUpload") {
      // An earlier attempt completed the upload and its reply was lost: the object is there
      // when its tag says it was assembled from as many parts.
      auto meta = Head(path);
      const std::string suffix = "-" + std::to_string(parts.size()) + "\"";
      if (meta.ok() && meta->etag.size() > suffix.size() &&
          meta->etag.compare(meta->etag.size() - suffix.size(), suffix.size(), suffix) == 0) {
        return arrow::Status::OK();
      }
    }
    return WriteFailure(ReplyError(call.what, *reply), outcome);
  }

  arrow::Status AbortUpload(const std::string& path, const std::string& upload_id) {
    Call call;
    call.method = "DELETE";
    call.key = Key(path);
    call.query["uploadId"] = upload_id;
    call.what = "AbortMultipartUpload " + Url(path);
    ARROW_ASSIGN_OR_RAISE(auto reply, Send(call));
    if (reply.status == 204 || reply.status == 200 || reply.status == 404) return arrow::Status::OK();
    return ReplyError(call.what, reply);
  }

 private:
  S3Config config_;
  std::shared_ptr<AwsCredentialProvider> credentials_;
  std::shared_ptr<HttpClient> client_;
  std::string scheme_;
  std::string host_;
  std::string bucket_path_;
  std::string root_url_;
};

// ---- S3PartUploader ----------------------------------------------------------------------------

arrow::Status S3PartUploader::PutWhole(std::shared_ptr<arrow::Buffer> data) {
  return store_->Put(path_, data);
}
arrow::Result<std::string> S3PartUploader::Begin() { return store_->CreateUpload(path_, unique_name_); }
arrow::Result<std::string> S3PartUploader::UploadPart(const std::string& upload_id, int number,
                                                      int64_t, std::shared_ptr<arrow::Buffer> data,
                                                      bool) {
  return store_->UploadPart(path_, upload_id, number, std::move(data));
}
arrow::Status S3PartUploader::Complete(const std::string& upload_id,
                                       const std::vector<std::pair<int, std::string>>& parts,
                                       int64_t) {
  return store_->CompleteUpload(path_, upload_id, parts);
}
arrow::Status S3PartUploader::Abort(const std::string& upload_id) {
  return store_->AbortUpload(path_, upload_id);
}
std::string S3PartUploader::Describe() const { return store_->ExternalPath(path_); }

}  // namespace

arrow::Result<std::shared_ptr<ObjectStore>> MakeS3Store(
    const S3Config& config, std::shared_ptr<AwsCredentialProvider> credentials) {
  ARROW_ASSIGN_OR_RAISE(auto client, HttpClient::Make(config.http));
  return std::make_shared<S3Store>(config, std::move(credentials), std::move(client));
}

arrow::Result<std::shared_ptr<ObjectStore>> OpenS3Store(const std::string& url,
                                                        const StorageOptions& given) {
  const auto scheme_end = url.find("://");
  S3Config config;
  ARROW_RETURN_NOT_OK(SplitBucketAndPrefix(url, url.substr(scheme_end + 3), "s3://bucket/path",
                                           &config.bucket, &config.prefix));

  // Options the user gave win; AWS_* environment variables fill in the rest (as in delta-rs).
  // Credentials are left to the credential chain, which reads the environment itself.
  const StorageOptions options = WithEnvironment(
      given, {"aws_endpoint", "aws_endpoint_url", "aws_allow_http", "aws_region",
              "aws_default_region", "aws_virtual_hosted_style_request", "aws_unsigned_payload",
              "aws_skip_signature", "aws_conditional_put"});
  auto get = [&](const std::string& key) { return OptionValue(options, key); };
  ARROW_RETURN_NOT_OK(RefuseOtherClouds(options, {"aws_"}, {"delta_dynamo_table_name"},
                                        "an s3:// lake"));
  std::string endpoint = get("aws_endpoint");
  if (endpoint.empty()) endpoint = get("aws_endpoint_url");
  if (!endpoint.empty() && endpoint.find("://") == std::string::npos) {
    return arrow::Status::Invalid("storage option 'aws_endpoint' must be a URL such as "
                                  "http://127.0.0.1:9000");
  }
  config.endpoint = endpoint;

  AwsCredentialInputs inputs;
  inputs.options = options;
  config.region = ResolveAwsRegion(inputs);

  ARROW_ASSIGN_OR_RAISE(
      config.virtual_hosted,
      BoolOption(options, "aws_virtual_hosted_style_request",
                 endpoint.empty() && config.bucket.find('.') == std::string::npos));
  ARROW_ASSIGN_OR_RAISE(config.unsigned_payload, BoolOption(options, "aws_unsigned_payload", false));
  ARROW_ASSIGN_OR_RAISE(config.http.allow_http, BoolOption(options, "aws_allow_http", false));
  ARROW_RETURN_NOT_OK(ApplyClientOptions(options, &config.http, &config.retry));

  // delta-rs's ways around S3's former lack of conditional writes. Unsafe renames are never
  // needed here (nothing is renamed), so the flag changes nothing; a DynamoDB lock is refused.
  for (const char* key : {"aws_s3_locking_provider", "delta_dynamo_table_name"}) {
    if (!get(key).empty()) {
      return arrow::Status::Invalid(
          "storage option '", key, "' is not supported: timelake needs no lock table, it commits "
          "with S3's own conditional writes (If-None-Match); remove the option");
    }
  }
  if (!get("aws_s3_allow_unsafe_rename").empty()) {
    ARROW_RETURN_NOT_OK(ParseBoolOption("aws_s3_allow_unsafe_rename",
                                        get("aws_s3_allow_unsafe_rename")).status());
  }
  const std::string conditional = get("aws_conditional_put");
  if (!conditional.empty() && conditional != "etag") {
    return arrow::Status::Invalid(
        "this value of storage option 'aws_conditional_put' is not supported: timelake commits with S3's own conditional writes (If-None-Match), "
        "as delta-rs does with 'etag'; remove the option or set it to 'etag'");
  }
  // How the chain reaches STS, the container endpoint and instance metadata: a client of its
  // own with short timeouts (metadata endpoints answer at once or not at all) and few retries.
  HttpClientOptions metadata;
  metadata.connect_timeout_ms = 1'000;
  metadata.request_timeout_ms = 5'000;
  metadata.stall_timeout_ms = 5'000;
  metadata.allow_http = true;  // IMDS and the container endpoint are plain http on link-local hosts
  metadata.user_agent = config.http.user_agent;
  ARROW_ASSIGN_OR_RAISE(auto metadata_client, HttpClient::Make(metadata));
  inputs.fetch = [metadata_client](const HttpRequest& request) {
    RetryOptions retry;
    retry.max_retries = 2;
    retry.max_total_ms = 10'000;
    return SendWithRetry(*metadata_client, retry, request.method + " " + RedactUrl(request.url),
                         [&request]() -> arrow::Result<HttpRequest> { return request; });
  };
  ARROW_ASSIGN_OR_RAISE(auto credentials, MakeAwsCredentialChain(inputs));
  return MakeS3Store(config, std::move(credentials));
}

arrow::Status CreateS3Bucket(const std::string& url, const StorageOptions& options) {
  ARROW_ASSIGN_OR_RAISE(auto store, OpenS3Store(url, options));
  return std::static_pointer_cast<S3Store>(store)->CreateBucket();
}

}  // namespace timelake
