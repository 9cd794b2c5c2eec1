// S3Store: an ObjectStore in an S3 bucket (AWS S3 or any service speaking its API, such as
// the moto server the tests use).
//
// Requests are signed with SigV4 (store/s3/sigv4.h) afresh for every attempt, sent by the shared
// HttpClient and retried by SendWithRetry (http/). How each ObjectStore call maps to S3:
//   Get / GetRange / OpenInput   GET (with a Range header), 404 → NotFound
//   Head                         HEAD
//   Put                          PUT
//   PutIfAbsent                  PUT with If-None-Match: *   (412 → false; 409 → retried)
//   PutIfMatch                   PUT with If-Match: <etag>   (412 or 404 → false)
//   OpenOutput                   one PUT for objects up to a part, else a multipart upload whose
//                                parts go up in parallel (aborted on failure or Abort)
//   ListPage / ListAfter         ListObjectsV2 (prefix, start-after, continuation-token)
//   ListChildren                 ListObjectsV2 with delimiter '/'
//   DeleteMany / DeletePrefix    DeleteObjects, 1,000 keys per request
//   RenamePrefix                 NotImplemented (S3 has no atomic rename)
// A write that fails after an attempt may have reached S3 (a timeout, a reset, a 5xx) returns an
// error marked OutcomeUnknown (util/status.h), as the ObjectStore contract asks.
#pragma once

#include <memory>
#include <string>

#include "timelake/http/http_client.h"
#include "timelake/http/retry.h"
#include "timelake/store/object_store.h"
#include "timelake/store/s3/aws_credentials.h"
#include "timelake/store/store_factory.h"

namespace timelake {

struct S3Config {
  std::string bucket;
  std::string prefix;  // the lake's folder in the bucket: no leading or trailing '/', may be ""
  std::string region = "us-east-1";
  /// scheme://host[:port] of the service; "" for AWS (https://s3.<region>.amazonaws.com).
  std::string endpoint;
  /// Address buckets as <bucket>.<host> instead of <host>/<bucket>.
  bool virtual_hosted = false;
  /// Sign "UNSIGNED-PAYLOAD" instead of hashing each body.
  bool unsigned_payload = false;
  HttpClientOptions http;
  RetryOptions retry;
  /// Parts of a multipart upload in flight at once per output stream.
  int upload_parallelism = 4;
};

/// Opens the store for an s3:// or s3a:// URL with delta-rs's storage_options (AWS_* environment
/// variables fill in keys the options leave out). Invalid for bad option values, naming the key.
arrow::Result<std::shared_ptr<ObjectStore>> OpenS3Store(const std::string& url,
                                                        const StorageOptions& options);

/// Creates the bucket of an s3:// URL (for tests and tools); OK if it exists and is the
/// caller's already.
arrow::Status CreateS3Bucket(const std::string& url, const StorageOptions& options);

/// The store for an explicit configuration.
arrow::Result<std::shared_ptr<ObjectStore>> MakeS3Store(
    const S3Config& config, std::shared_ptr<AwsCredentialProvider> credentials);

}  // namespace timelake
