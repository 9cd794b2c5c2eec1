// What the cloud stores (S3, Azure Blob Storage, Google Cloud Storage) share beyond HTTP itself:
// reading storage_options that every store takes (timeouts, retries, proxies), reading the times
// their replies use, and the output stream that sends a large object in parts. (Digests and
// encodings: util/encoding.h.)
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <arrow/buffer_builder.h>
#include <arrow/result.h>
#include <arrow/status.h>

#include "timelake/http/http_client.h"
#include "timelake/http/retry.h"
#include "timelake/store/object_store.h"
#include "timelake/store/store_factory.h"
#include "timelake/util/encoding.h"
#include "timelake/util/parallel.h"

namespace timelake {

/// An environment variable's value, nullopt when unset or empty.
std::optional<std::string> EnvValue(const std::string& name);

/// `key` in upper case (the environment variable delta-rs reads for a storage option).
std::string UpperKey(std::string key);

/// `options` with, for each of `keys` the options leave out, the value of the environment variable
/// named as the key in upper case (delta-rs's rule: options given win over the environment).
StorageOptions WithEnvironment(const StorageOptions& options,
                               const std::vector<std::string>& keys);

/// The option's value, "" when absent.
std::string OptionValue(const StorageOptions& options, const std::string& key);

/// Invalid, naming the key, if `options` holds a key of another cloud than `own_prefixes`
/// (e.g. {"aws_"}); `scheme` names the lake kind in the message ("an az:// lake").
arrow::Status RefuseOtherClouds(const StorageOptions& options,
                                const std::vector<std::string>& own_prefixes,
                                const std::vector<std::string>& own_keys,
                                const std::string& lake_kind);

/// Applies the options every cloud store takes (timeout, connect_timeout, pool_idle_timeout,
/// retry_timeout, max_retries, proxy_url, user_agent, allow_http, allow_invalid_certificates)
/// to `http` and `retry`. Invalid naming the key for a bad value.
arrow::Status ApplyClientOptions(const StorageOptions& options, HttpClientOptions* http,
                                 RetryOptions* retry);

/// A boolean option, `fallback` when absent; Invalid naming the key when unreadable.
arrow::Result<bool> BoolOption(const StorageOptions& options, const std::string& key, bool fallback);

/// Milliseconds since the epoch of an HTTP date ("Wed, 21 Oct 2015 07:28:00 GMT") or an RFC 3339
/// time ("2015-10-21T07:28:00.123Z"). A time that cannot be read counts as now: callers judge
/// age by it (a stray commit is taken back once old), and "new" is the safe mistake.
int64_t ParseServiceTimeMs(const std::string& text);

/// An RFC 1123 HTTP date for `unix_seconds` ("Wed, 21 Oct 2015 07:28:00 GMT").
std::string HttpDate(int64_t unix_seconds);

/// True if `path` has a "." or ".." segment: URL normalisation somewhere between the client and
/// the service would resolve it (and sign or address something else), so it names no object.
bool HasDotSegment(const std::string& path);

/// Splits "bucket/some/prefix" into the bucket and the prefix (no leading or trailing '/');
/// Invalid, quoting `url`, for an empty bucket or an empty path segment.
arrow::Status SplitBucketAndPrefix(const std::string& url, const std::string& rest,
                                   const std::string& example, std::string* bucket,
                                   std::string* prefix);

/// A failed write whose attempts may have reached the service, marked OutcomeUnknown.
arrow::Status WriteFailure(arrow::Status status, const RetryOutcome& outcome);

/// A judge for SendWithRetry that, at the first 401 reply, calls `invalidate` (which drops a
/// refreshing credential's token and says whether it did) and, if it did, calls the reply
/// transient, so the request is rebuilt with a fresh token; a static credential's 401, and any
/// later one, is final. Every other reply goes to `judge`. One judge per logical request.
std::function<ReplyVerdict(const HttpResponse&)> RetryOnceWithFreshToken(
    std::function<bool()> invalidate, std::function<ReplyVerdict(const HttpResponse&)> judge);

/// Random access to one object of a store by ranged reads (GetRange); the size comes from one
/// Head, on first need. For stores whose objects are read over the network.
class RangedInput : public arrow::io::RandomAccessFile {
 public:
  RangedInput(std::shared_ptr<ObjectStore> store, std::string path)
      : store_(std::move(store)), path_(std::move(path)) {}

  arrow::Status Close() override {
    closed_ = true;
    return arrow::Status::OK();
  }
  bool closed() const override { return closed_; }
  arrow::Result<int64_t> Tell() const override { return position_; }
  arrow::Status Seek(int64_t position) override;
  arrow::Result<int64_t> GetSize() override;
  arrow::Result<std::shared_ptr<arrow::Buffer>> ReadAt(int64_t position, int64_t nbytes) override;
  arrow::Result<int64_t> ReadAt(int64_t position, int64_t nbytes, void* out) override;
  arrow::Result<std::shared_ptr<arrow::Buffer>> Read(int64_t nbytes) override;
  arrow::Result<int64_t> Read(int64_t nbytes, void* out) override;

 private:
  std::shared_ptr<ObjectStore> store_;
  std::string path_;
  int64_t position_ = 0;
  std::mutex size_mutex_;
  int64_t size_ = -1;  // GUARDED_BY(size_mutex_)
  bool closed_ = false;
};

/// How a store sends one object in parts (S3 multipart uploads, Azure blocks, GCS resumable
/// uploads). MultipartOutput calls it: PutWhole for an object that fits one part, otherwise Begin,
/// UploadPart for each part (at most `Parallelism()` at once, in any order), then Complete or
/// Abort.
class PartUploader {
 public:
  virtual ~PartUploader() = default;
  /// The whole object in one request.
  virtual arrow::Status PutWhole(std::shared_ptr<arrow::Buffer> data) = 0;
  /// Starts an upload; returns its id ("" if the service needs none).
  virtual arrow::Result<std::string> Begin() = 0;
  /// Sends part `number` (1-based), which starts at byte `offset`; `last` is true for the final
  /// part (whose end is the object's size). Returns what Complete needs of the part (an ETag, a
  /// block id).
  virtual arrow::Result<std::string> UploadPart(const std::string& upload_id, int number,
                                                int64_t offset, std::shared_ptr<arrow::Buffer> data,
                                                bool last) = 0;
  /// Makes the object of the parts (sorted by number) visible.
  virtual arrow::Status Complete(const std::string& upload_id,
                                 const std::vector<std::pair<int, std::string>>& parts,
                                 int64_t size) = 0;
  /// Discards the upload's parts.
  virtual arrow::Status Abort(const std::string& upload_id) = 0;
  /// Parts in flight at once (1 for services whose parts must go in order).
  virtual int Parallelism() const = 0;
  /// For messages: the object's URL.
  virtual std::string Describe() const = 0;
};

/// An ObjectOutput over a PartUploader: buffers up to one part; an object that fits one part is
/// one PutWhole at Close; a larger one goes up part by part with up to Parallelism() parts in
/// flight. A full part is sent only once more bytes follow it, so the final part (sent at Close)
/// is never empty and always knows the object's size.
class MultipartOutput : public ObjectOutput {
 public:
  MultipartOutput(std::unique_ptr<PartUploader> uploader, int64_t part_size)
      : uploader_(std::move(uploader)), part_size_(part_size) {}
  ~MultipartOutput() override { (void)Abort(); }

  arrow::Status Write(const void* data, int64_t nbytes) override;
  arrow::Status Close() override;
  arrow::Status Abort() override;
  arrow::Result<int64_t> Tell() const override { return written_; }
  bool closed() const override { return closed_; }

 private:
  arrow::Status SendPart(bool last);
  arrow::Status WaitForParts(size_t at_most);
  arrow::Status Fail(arrow::Status status) {
    (void)Abort();
    failure_ = status;
    return status;
  }

  std::unique_ptr<PartUploader> uploader_;
  int64_t part_size_;
  arrow::BufferBuilder buffer_;
  int64_t written_ = 0;
  int64_t sent_ = 0;  // bytes handed to parts
  bool closed_ = false;
  arrow::Status failure_;  // why the stream failed (then Close reports it, not OK)
  bool begun_ = false;
  std::string upload_id_;
  struct Part {
    int number;
    std::future<arrow::Result<std::string>> token;
  };
  std::deque<Part> in_flight_;
  std::vector<std::pair<int, std::string>> done_;
  int next_part_ = 1;
};

}  // namespace timelake
