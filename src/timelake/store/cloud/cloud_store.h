// CloudStore: the ObjectStore of every cloud (S3, Azure Blob Storage, Google Cloud Storage),
// written once over a small per-cloud dialect.
//
// The base owns what the clouds do alike: building, signing afresh and retrying each request
// (SendWithRetry, http/retry.h), the object names under the lake's folder, ranged reads, the
// put and put-if-absent/put-if-match path with its ambiguous outcomes (a write whose attempts
// may have reached the service and failed is marked OutcomeUnknown, util/status.h), the output
// stream that sends large objects in parts (MultipartOutput over the base's uploader), the
// listing loops, deletes and the messages that name the lake URL.
//
// A cloud derives from it and gives its dialect, the pure virtual methods below: how a request
// is addressed and signed (Sign), how it names objects and conditional writes (ObjectCall,
// PutCall, RangeHeader), how listings and errors read (ListCall, ParseListing, ReplyError,
// Missing), how the service's replies to a put are judged (PutReplied), and how an upload
// goes up in parts (BeginUpload, UploadPart, CompleteUpload, AbortUpload). Credentials stay with
// the cloud (store/s3/, store/azure/, store/gcs/).
//
// Threads: as every ObjectStore, callable from any number of threads; a dialect's methods are
// called concurrently and must keep no per-request state in the store.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <arrow/buffer.h>
#include <arrow/result.h>
#include <arrow/status.h>

#include "timelake/http/http_client.h"
#include "timelake/http/retry.h"
#include "timelake/store/object_store.h"

namespace timelake {

/// A failed write whose attempts may have reached the service, marked OutcomeUnknown.
arrow::Status WriteFailure(arrow::Status status, const RetryOutcome& outcome);

/// A judge for SendWithRetry that, at the first 401 reply, calls `invalidate` (which drops a
/// refreshing credential's token and says whether it did) and, if it did, calls the reply
/// transient, so the request is rebuilt with a fresh token; a static credential's 401, and any
/// later one, is final. Every other reply goes to `judge`. One judge per logical request.
std::function<ReplyVerdict(const HttpResponse&)> RetryOnceWithFreshToken(
    std::function<bool()> invalidate, std::function<ReplyVerdict(const HttpResponse&)> judge);

/// One request of a cloud store, before it is addressed and signed (CloudStore::Sign).
struct CloudCall {
  std::string method = "GET";
  /// The object's full name in the bucket or container (the lake's folder included); "" for
  /// calls about the bucket itself. Names with '.' or '..' segments are refused before sending.
  std::string object;
  /// For dialects whose calls are not addressed by `object` alone (GCS's JSON API): the path
  /// after the service's base URL, encoded; or an absolute URL (an upload session), which wins.
  std::string path;
  std::string url;
  std::map<std::string, std::string> query;
  std::map<std::string, std::string> headers;
  std::shared_ptr<arrow::Buffer> body;
  std::string what;            // for messages: "GET s3://bucket/key", never a secret
  int64_t expected_bytes = 0;  // a ranged GET's length (see RequestTimeoutMs)
};

/// What a put asks of the object already at its path.
struct PutCondition {
  enum class Kind { kNone, kAbsent, kMatch };
  Kind kind = Kind::kNone;
  std::string etag;  // kMatch: the entity tag the object must still have
};

/// A listing query (ListPage, ListChildren) in the service's own names.
struct ListQuery {
  std::string prefix;       // full object names start with it ("" for the whole bucket)
  std::string start_after;  // a full object name, "" for none
  std::string continuation;
  int64_t max_keys = 0;     // 0: the service's default
  bool delimited = false;   // ListChildren: group names by '/' after the prefix
};

/// One page of a listing as the service wrote it.
struct ListedPage {
  std::vector<ObjectMeta> objects;    // `path` holds the full object name
  std::vector<std::string> prefixes;  // with delimited queries: "folders", full names
  std::string continuation;           // "" when this was the last page or none was given
  bool truncated = false;             // the service says more pages follow
};

/// The lake's place in a cloud: what every cloud store is configured with.
struct CloudLocation {
  std::string bucket;  // the bucket or container
  std::string prefix;  // the lake's folder in it: no leading or trailing '/', may be ""
  std::string root_url;  // the lake's URL, normalised, without a trailing '/'
};

class CloudStore : public ObjectStore, public std::enable_shared_from_this<CloudStore> {
 public:
  arrow::Result<std::shared_ptr<arrow::Buffer>> Get(const std::string& path) override;
  arrow::Result<std::shared_ptr<arrow::Buffer>> GetRange(const std::string& path, int64_t offset,
                                                         int64_t length) override;
  arrow::Result<ObjectMeta> Head(const std::string& path) override;
  arrow::Result<DatedObject> GetDated(const std::string& path) override;
  arrow::Status Put(const std::string& path, const std::shared_ptr<arrow::Buffer>& data) override;
  arrow::Result<bool> PutIfAbsent(const std::string& path,
                                  const std::shared_ptr<arrow::Buffer>& data) override;
  arrow::Result<bool> PutIfMatch(const std::string& path, const std::shared_ptr<arrow::Buffer>& data,
                                 const std::string& etag) override;
  arrow::Result<std::shared_ptr<ObjectOutput>> OpenOutput(const std::string& path,
                                                          const OutputOptions& options) override;
  arrow::Result<std::shared_ptr<arrow::io::RandomAccessFile>> OpenInput(
      const std::string& path) override;
  arrow::Result<ObjectPage> ListPage(const ListPageRequest& request) override;
  arrow::Result<std::vector<std::string>> ListChildren(const std::string& prefix) override;
  arrow::Status Delete(const std::string& path) override;
  /// Deletes in parallel, DeleteParallelism() at once (S3 overrides it with batch requests).
  arrow::Status DeleteMany(const std::vector<std::string>& paths) override;
  arrow::Status DeletePrefix(const std::string& prefix) override;
  std::string RootUrl() const override { return location_.root_url; }
  std::string ExternalPath(const std::string& path) const override { return Url(path); }

  // ---- uploads in parts (called by the base's PartUploader, from MultipartOutput) -------------

  /// Starts an upload of `path`; returns its id ("" if the service needs none). `unique_name`:
  /// nobody else writes `path` (OutputOptions::in_place).
  virtual arrow::Result<std::string> BeginUpload(const std::string& path, bool unique_name) = 0;
  /// Sends part `number` (1-based) starting at byte `offset`; `last` for the final part.
  /// Returns what CompleteUpload needs of the part.
  virtual arrow::Result<std::string> UploadPart(const std::string& path,
                                                const std::string& upload_id, int number,
                                                int64_t offset,
                                                std::shared_ptr<arrow::Buffer> data, bool last) = 0;
  /// Makes the object of the parts (sorted by number) visible.
  virtual arrow::Status CompleteUpload(const std::string& path, const std::string& upload_id,
                                       const std::vector<std::pair<int, std::string>>& parts) = 0;
  /// Discards the upload's parts.
  virtual arrow::Status AbortUpload(const std::string& path, const std::string& upload_id) = 0;

 protected:
  CloudStore(CloudLocation location, std::shared_ptr<HttpClient> client, RetryOptions retry)
      : location_(std::move(location)), client_(std::move(client)), retry_(retry) {}

  // ---- the dialect ---------------------------------------------------------------------------

  /// Fills in `request`'s URL and headers for `call` (whose query, encoded, is `query`: "" or
  /// "?a=b&…"), signed with a credential fetched now; called afresh for every attempt.
  virtual arrow::Status Sign(const CloudCall& call, const std::string& query,
                             HttpRequest* request) = 0;
  /// The judge of a request's replies (one per logical request): which are worth another
  /// attempt. Default: DefaultVerdict, with one more attempt after a 401 when InvalidateToken
  /// dropped a token.
  virtual std::function<ReplyVerdict(const HttpResponse&)> NewJudge();
  /// Drops a refused access token so that the next attempt fetches another; false if there is
  /// none to drop.
  virtual bool InvalidateToken() { return false; }
  /// What the service calls an object, for messages ("S3 object").
  virtual std::string ObjectNoun() const = 0;

  enum class Access { kRead, kHead, kDelete };
  /// The call that reads, heads or deletes `object` (the method, address and query). Default:
  /// GET, HEAD or DELETE of the object's own address.
  virtual CloudCall ObjectCall(Access access, const std::string& object) const;
  /// The header that asks for a byte range ("Range").
  virtual std::string RangeHeader() const { return "Range"; }
  /// The size, time and tag of an object from the reply (200) to its kHead call.
  virtual arrow::Result<ObjectMeta> MetaOfHead(const HttpResponse& reply, const std::string& what);

  /// The call that puts `object` under `condition` (its body is set by the caller). Default: a
  /// PUT of the object's own address with HTTP's conditional-request headers (If-None-Match: *,
  /// If-Match: <etag>), Content-Type application/octet-stream.
  virtual CloudCall PutCall(const std::string& object, const PutCondition& condition) const;
  /// PutIfMatch's etag, checked before any request (empty ones are refused already).
  virtual arrow::Status CheckEtag(const std::string& path, const std::string& etag) const {
    (void)path;
    (void)etag;
    return arrow::Status::OK();
  }
  /// The put's outcome from the service's final reply: true if written, false if the condition
  /// failed, else the error (marked with WriteFailure by the dialect where `outcome` says the
  /// write may have been applied).
  virtual arrow::Result<bool> PutReplied(const HttpResponse& reply, const PutCondition& condition,
                                         const std::string& what,
                                         const RetryOutcome& outcome) = 0;

  /// The call of one listing page.
  virtual CloudCall ListCall(const ListQuery& query) const = 0;
  /// The page a listing call's 200 reply holds.
  virtual arrow::Result<ListedPage> ParseListing(const HttpResponse& reply,
                                                 const std::string& what) const = 0;
  /// The error for a listing's reply other than 200. Default: ReplyError.
  virtual arrow::Status ListingFailure(const std::string& what, const HttpResponse& reply) {
    return ReplyError(what, reply);
  }

  /// What a 404 reply to a call naming an object is about.
  enum class Missing { kObject, kBucket };
  virtual Missing MissingOf(const HttpResponse& reply) = 0;
  /// The error saying that the bucket (container) does not exist.
  virtual arrow::Status MissingBucket(const std::string& what) const = 0;
  /// The error for a reply that was not what the call wanted; never carries a secret.
  virtual arrow::Status ReplyError(const std::string& what, const HttpResponse& reply) const = 0;

  /// Parts of one output stream in flight at once.
  virtual int UploadParallelism() const = 0;
  /// The part size a stream uses when asked for `requested` (the service's limits).
  virtual int64_t PartSize(int64_t requested) const { return requested; }
  /// DELETE requests in flight at once in DeleteMany.
  virtual int DeleteParallelism() const { return 8; }

  // ---- for the dialects ----------------------------------------------------------------------

  /// Sends `call` with retries. `judge` null: NewJudge().
  arrow::Result<HttpResponse> Send(
      const CloudCall& call, RetryOutcome* outcome = nullptr,
      std::function<ReplyVerdict(const HttpResponse&)> judge = nullptr);
  /// Sends the call `make()` returns, made afresh for every attempt.
  arrow::Result<HttpResponse> SendMade(
      const std::string& what, const std::function<arrow::Result<CloudCall>()>& make,
      RetryOutcome* outcome = nullptr,
      std::function<ReplyVerdict(const HttpResponse&)> judge = nullptr);

  /// The full object name of a path of the lake.
  std::string Key(const std::string& path) const {
    return location_.prefix.empty() ? path : location_.prefix + "/" + path;
  }
  /// The URL of a path of the lake, for messages.
  std::string Url(const std::string& path) const { return location_.root_url + "/" + path; }
  /// The reply's failure as IOError: "<what>: access denied (HTTP <status><detail>); check the
  /// credentials (from <source>)<hint>".
  static arrow::Status AccessDenied(const std::string& what, int status, const std::string& detail,
                                    const std::string& source, const std::string& hint);
  /// "<what>: HTTP <status>[ <code>][: <message>]".
  static arrow::Status HttpFailure(const std::string& what, int status, const std::string& code,
                                   const std::string& message);

  const CloudLocation& location() const { return location_; }
  const RetryOptions& retry() const { return retry_; }

 private:
  arrow::Result<bool> PutWith(const std::string& path, const std::shared_ptr<arrow::Buffer>& data,
                              const PutCondition& condition);
  // Sends a call that reads `path`; a 404 becomes NotFound (or the missing bucket's error).
  arrow::Result<HttpResponse> SendRead(const CloudCall& call, const std::string& path);
  // Sends a listing call; its page on a 200 reply.
  arrow::Result<ListedPage> FetchListing(const ListQuery& query, const std::string& what);

  CloudLocation location_;
  std::shared_ptr<HttpClient> client_;
  RetryOptions retry_;
};

}  // namespace timelake
