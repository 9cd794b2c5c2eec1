// GcsStore: an ObjectStore in a Google Cloud Storage bucket, through GCS's JSON API (or any
// service speaking it, such as the fake-gcs-server the tests use).
//
// Requests carry an OAuth bearer token (store/gcs/gcs_credentials.h) fetched afresh for every
// attempt, are sent by the shared HttpClient and retried by SendWithRetry (http/). Object names
// are percent-encoded whole, '/' included, in /storage/v1/b/{bucket}/o/{object}. How each
// ObjectStore call maps to GCS:
//   Get / GetRange / OpenInput   GET …/o/{object}?alt=media (with a Range header), 404 → NotFound
//   Head                         GET …/o/{object} (the object's JSON resource)
//   Put                          POST /upload/…/o?uploadType=media&name={object}
//   PutIfAbsent                  the same with ifGenerationMatch=0            (412 → false)
//   PutIfMatch                   the same with ifGenerationMatch=<generation> (412 or 404 → false)
//   OpenOutput                   one media upload for objects up to a part, else a resumable
//                                upload whose chunks go up in order (the session is cancelled
//                                on failure or Abort)
//   ListPage / ListAfter         GET …/o?prefix=&startOffset=&pageToken=&maxResults=
//   ListChildren                 the same with delimiter=/ (its "prefixes")
//   Delete                       DELETE …/o/{object}
//   DeleteMany / DeletePrefix    parallel DELETEs (a listing first, for DeletePrefix)
//   RenamePrefix                 NotImplemented (GCS has no atomic rename)
// The entity tag is the object's generation: it changes with every write, even of identical
// bytes. A 404 that is about the bucket, not the object, is an error saying to create the bucket.
// A write that fails after an attempt may have reached GCS (a timeout, a reset, a 5xx) returns
// an error marked OutcomeUnknown (util/status.h), as the ObjectStore contract asks.
#pragma once

#include <memory>
#include <string>

#include "timelake/http/http_client.h"
#include "timelake/http/retry.h"
#include "timelake/store/gcs/gcs_credentials.h"
#include "timelake/store/object_store.h"
#include "timelake/store/store_factory.h"

namespace timelake {

struct GcsConfig {
  std::string bucket;
  std::string prefix;  // the lake's folder in the bucket: no leading or trailing '/', may be ""
  /// scheme://host[:port] of the service, no trailing '/'.
  std::string base_url = "https://storage.googleapis.com";
  HttpClientOptions http;
  RetryOptions retry;
  /// DELETE requests in flight at once in DeleteMany.
  int delete_parallelism = 8;
};

/// Opens the store for a gs:// URL with delta-rs's storage_options: google_service_account
/// (also google_service_account_path, service_account, service_account_path),
/// google_service_account_key (also service_account_key), google_application_credentials,
/// google_bearer_token, google_skip_signature, google_base_url (such as http://127.0.0.1:4443
/// for fake-gcs-server) and the options every cloud store takes (store/cloud/options.h). GOOGLE_*
/// environment variables fill in keys the options leave out. Invalid for bad option values,
/// naming the key, and for options of another cloud.
arrow::Result<std::shared_ptr<ObjectStore>> OpenGcsStore(const std::string& url,
                                                         const StorageOptions& options);

/// Creates the bucket of a gs:// URL (for tests and tools) in the project GOOGLE_CLOUD_PROJECT
/// (else "test", which emulators accept); OK if a bucket of that name exists already (GCS's
/// 409 does not say whose it is).
arrow::Status CreateGcsBucket(const std::string& url, const StorageOptions& options);

/// The store for an explicit configuration.
arrow::Result<std::shared_ptr<ObjectStore>> MakeGcsStore(
    const GcsConfig& config, std::shared_ptr<GoogleCredentialProvider> credentials);

}  // namespace timelake
