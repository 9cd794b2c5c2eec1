#include "timelake/store/s3/s3_store.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>

#include "timelake/http/xml.h"
#include "timelake/store/cloud/cloud_store.h"
#include "timelake/store/cloud/identity_client.h"
#include "timelake/store/cloud/location.h"
#include "timelake/store/cloud/options.h"
#include "timelake/store/cloud/service_time.h"
#include "timelake/store/s3/sigv4.h"
#include "timelake/util/encoding.h"
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

class S3Store : public CloudStore {
 public:
  S3Store(S3Config config, std::shared_ptr<AwsCredentialProvider> credentials,
          std::shared_ptr<HttpClient> client)
      : CloudStore(CloudLocation{config.bucket, config.prefix,
                                 "s3://" + config.bucket +
                                     (config.prefix.empty() ? "" : "/" + config.prefix)},
                   std::move(client), config.retry),
        config_(std::move(config)), credentials_(std::move(credentials)) {
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
  }

  std::string Identity() const override {
    return RootUrl() + " at " + config_.endpoint + " in " + config_.region;
  }

  arrow::Status DeleteMany(const std::vector<std::string>& paths) override {
    for (size_t start = 0; start < paths.size(); start += kDeleteBatch) {
      const size_t end = std::min(paths.size(), start + static_cast<size_t>(kDeleteBatch));
      std::string body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Delete><Quiet>true</Quiet>";
      for (size_t i = start; i < end; ++i) {
        body += "<Object><Key>" + XmlEscape(Key(paths[i])) + "</Key></Object>";
      }
      body += "</Delete>";
      CloudCall call;
      call.method = "POST";
      call.query["delete"] = "";
      call.headers["Content-MD5"] = ContentMd5(body);
      call.headers["Content-Type"] = "application/xml";
      call.body = arrow::Buffer::FromString(std::move(body));
      call.what = "DELETE " + std::to_string(end - start) + " objects under " + RootUrl();
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

  arrow::Status CreateBucket() {
    CloudCall call;
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

  // ---- multipart uploads -----------------------------------------------------------------------

  arrow::Result<std::string> BeginUpload(const std::string& path, bool unique_name) override {
    CloudCall call;
    call.method = "POST";
    call.object = Key(path);
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
    CloudCall list;
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
                                        int number, int64_t, std::shared_ptr<arrow::Buffer> data,
                                        bool) override {
    CloudCall call;
    call.method = "PUT";
    call.object = Key(path);
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
                               const std::vector<std::pair<int, std::string>>& parts) override {
    std::string body = "<CompleteMultipartUpload>";
    for (const auto& [number, etag] : parts) {
      body += "<Part><PartNumber>" + std::to_string(number) + "</PartNumber><ETag>" +
              XmlEscape(etag) + "</ETag></Part>";
    }
    body += "</CompleteMultipartUpload>";
    CloudCall call;
    call.method = "POST";
    call.object = Key(path);
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

  arrow::Status AbortUpload(const std::string& path, const std::string& upload_id) override {
    CloudCall call;
    call.method = "DELETE";
    call.object = Key(path);
    call.query["uploadId"] = upload_id;
    call.what = "AbortMultipartUpload " + Url(path);
    ARROW_ASSIGN_OR_RAISE(auto reply, Send(call));
    if (reply.status == 204 || reply.status == 200 || reply.status == 404) return arrow::Status::OK();
    return ReplyError(call.what, reply);
  }

 protected:
  // ---- the S3 dialect --------------------------------------------------------------------------

  arrow::Status Sign(const CloudCall& call, const std::string& query,
                     HttpRequest* request) override {
    std::string payload_hash = "UNSIGNED-PAYLOAD";
    if (!config_.unsigned_payload) {
      payload_hash = call.body ? Sha256Hex(std::string_view(
                                     reinterpret_cast<const char*>(call.body->data()),
                                     static_cast<size_t>(call.body->size())))
                               : Sha256Hex("");
    }
    const std::string path =
        bucket_path_ +
        (call.object.empty() ? (bucket_path_.empty() ? "/" : "") : "/" + UriEncodePath(call.object));
    ARROW_ASSIGN_OR_RAISE(AwsCredentials credentials, credentials_->Get());
    SigV4Request sig;
    sig.method = call.method;
    sig.path = path;
    sig.query = call.query;
    sig.headers = call.headers;
    sig.payload_hash = payload_hash;
    request->url = scheme_ + "://" + host_ + path + query;
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
    for (const auto& [name, value] : sig.headers) request->headers.emplace_back(name, value);
    return arrow::Status::OK();
  }

  std::function<ReplyVerdict(const HttpResponse&)> NewJudge() override { return S3Verdict; }
  std::string ObjectNoun() const override { return "S3 object"; }

  arrow::Result<bool> PutReplied(const HttpResponse& reply, const PutCondition& condition,
                                 const std::string& what, const RetryOutcome& outcome) override {
    if (reply.status == 200) return true;
    if (condition.kind == PutCondition::Kind::kNone) {
      return WriteFailure(ReplyError(what, reply), outcome);
    }
    // 412: the condition failed. 404: If-Match on a missing object. (Old MinIO answers 304.)
    if (reply.status == 412 || reply.status == 304 ||
        (reply.status == 404 && condition.kind == PutCondition::Kind::kMatch &&
         ParseError(reply).code != "NoSuchBucket")) {
      return false;
    }
    if (reply.status == 501 || ParseError(reply).code == "NotImplemented") {
      return arrow::Status::NotImplemented(
          what, ": this S3 service does not support conditional writes, which timelake "
          "commits need (AWS S3 has them since 2024; MinIO, R2 and moto too)");
    }
    return WriteFailure(ReplyError(what, reply), outcome);
  }

  CloudCall ListCall(const ListQuery& query) const override {
    CloudCall call;
    call.query["list-type"] = "2";
    if (!query.prefix.empty()) call.query["prefix"] = query.prefix;
    if (!query.start_after.empty()) call.query["start-after"] = query.start_after;
    if (query.delimited) call.query["delimiter"] = "/";
    if (!query.continuation.empty()) call.query["continuation-token"] = query.continuation;
    if (query.max_keys > 0) {
      call.query["max-keys"] = std::to_string(std::clamp<int64_t>(query.max_keys, 1, 1000));
    }
    return call;
  }

  arrow::Result<ListedPage> ParseListing(const HttpResponse& reply,
                                         const std::string& what) const override {
    ARROW_ASSIGN_OR_RAISE(const XmlElement xml, ParseXmlReply(reply.BodyText(), "ListBucketResult", what));
    ListedPage page;
    for (const XmlElement* c : xml.Children("Contents")) {
      ObjectMeta meta;
      meta.path = c->ChildText("Key");
      meta.size = std::atoll(c->ChildText("Size").c_str());
      meta.modified_ms = ParseServiceTimeMs(c->ChildText("LastModified"));
      meta.etag = c->ChildText("ETag");
      page.objects.push_back(std::move(meta));
    }
    for (const XmlElement* p : xml.Children("CommonPrefixes")) {
      page.prefixes.push_back(p->ChildText("Prefix"));
    }
    page.truncated = xml.ChildText("IsTruncated") == "true";
    if (page.truncated) page.continuation = xml.ChildText("NextContinuationToken");
    return page;
  }

  Missing MissingOf(const HttpResponse& reply) override {
    return ParseError(reply).code == "NoSuchBucket" ? Missing::kBucket : Missing::kObject;
  }

  arrow::Status MissingBucket(const std::string& what) const override {
    return arrow::Status::IOError(what, ": the bucket '", config_.bucket,
                                  "' does not exist; create it first");
  }

  // Replies from S3 do not echo credentials; the URL has no query.
  arrow::Status ReplyError(const std::string& what, const HttpResponse& reply) const override {
    const S3Error error = ParseError(reply);
    if (error.code == "NoSuchBucket") return MissingBucket(what);
    if (reply.status == 403 || error.code == "AccessDenied" ||
        error.code == "SignatureDoesNotMatch" || error.code == "InvalidAccessKeyId") {
      return AccessDenied(what, reply.status, error.code.empty() ? "" : " " + error.code,
                          credentials_->Source(), " and the region '" + config_.region + "'");
    }
    return HttpFailure(what, reply.status, error.code, error.message);
  }

  int UploadParallelism() const override { return config_.upload_parallelism; }

 private:
  S3Config config_;
  std::shared_ptr<AwsCredentialProvider> credentials_;
  std::string scheme_;
  std::string host_;
  std::string bucket_path_;
};

}  // namespace

arrow::Result<std::shared_ptr<ObjectStore>> MakeS3Store(
    const S3Config& config, std::shared_ptr<AwsCredentialProvider> credentials) {
  ARROW_ASSIGN_OR_RAISE(auto client, HttpClient::Make(config.http));
  return std::make_shared<S3Store>(config, std::move(credentials), std::move(client));
}

arrow::Result<std::shared_ptr<ObjectStore>> OpenS3Store(const std::string& url,
                                                        const StorageOptions& given) {
  S3Config config;
  ARROW_RETURN_NOT_OK(
      SplitBucketAndPrefix(url, "s3://bucket/path", &config.bucket, &config.prefix));

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
  // How the chain reaches STS, the container endpoint and instance metadata (not through the
  // store's proxy).
  IdentityClientOptions identity;
  identity.store_proxy = false;
  ARROW_ASSIGN_OR_RAISE(inputs.fetch, MakeIdentityFetch(config.http, identity));
  ARROW_ASSIGN_OR_RAISE(auto credentials, MakeAwsCredentialChain(inputs));
  return MakeS3Store(config, std::move(credentials));
}

arrow::Status CreateS3Bucket(const std::string& url, const StorageOptions& options) {
  ARROW_ASSIGN_OR_RAISE(auto store, OpenS3Store(url, options));
  return std::static_pointer_cast<S3Store>(store)->CreateBucket();
}

}  // namespace timelake
