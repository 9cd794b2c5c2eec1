// AzureStore: an ObjectStore in an Azure Blob Storage container (also ADLS Gen2 accounts, whose
// blob endpoint serves the same data; and Azurite, the emulator the tests use).
//
// Requests are signed afresh for every attempt (SharedKey, a bearer token or a SAS:
// store/azure/azure_credentials.h), sent by the shared HttpClient and retried by SendWithRetry
// (http/). How each ObjectStore call maps to the Blob service (x-ms-version 2023-11-03):
//   Get / GetRange / OpenInput   Get Blob (x-ms-range), 404 BlobNotFound → NotFound
//   Head                         Get Blob Properties (HEAD)
//   Put                          Put Blob (BlockBlob)
//   PutIfAbsent                  Put Blob with If-None-Match: *  (409 BlobAlreadyExists or 412
//                                → false: the service answers either, judged by x-ms-error-code)
//   PutIfMatch                   Put Blob with If-Match: <etag>  (412 ConditionNotMet or 404 → false)
//   OpenOutput                   one Put Blob for objects up to a part, else Put Block for each part
//                                (in parallel) and Put Block List; an aborted upload leaves
//                                uncommitted blocks, which no reader sees and the service
//                                discards after a week
//   ListPage / ListAfter         List Blobs (prefix, marker). The service cannot start a listing
//                                after a name, so `start_after` filters the pages it returns
//   ListChildren                 List Blobs with delimiter '/'
//   Delete                       Delete Blob (404 → OK)
//   DeleteMany / DeletePrefix    Delete Blob, 8 at once
//   RenamePrefix                 NotImplemented (no atomic rename of many blobs)
// ETags change at every write, even of identical bytes. A write that fails after an attempt may
// have reached the service returns an error marked OutcomeUnknown (util/status.h).
#pragma once

#include <memory>
#include <string>

#include "timelake/http/http_client.h"
#include "timelake/http/retry.h"
#include "timelake/store/azure/azure_credentials.h"
#include "timelake/store/object_store.h"
#include "timelake/store/store_factory.h"

namespace timelake {

struct AzureConfig {
  std::string container;
  std::string prefix;  // the lake's folder in the container: no leading or trailing '/', may be ""
  /// The URL the lake was opened with, normalised (RootUrl).
  std::string root_url;
  AzureSettings settings;
  HttpClientOptions http;
  RetryOptions retry;
  /// Blocks of one output stream in flight at once.
  int upload_parallelism = 4;
};

/// Opens the store for an az://, azure://, abfs:// or abfss:// URL with delta-rs's
/// storage_options (AZURE_* environment variables fill in keys the options leave out). Invalid
/// for bad option values, naming the key.
arrow::Result<std::shared_ptr<ObjectStore>> OpenAzureStore(const std::string& url,
                                                           const StorageOptions& options);

/// Creates the container of an Azure lake URL (for tests and tools); OK if it exists.
arrow::Status CreateAzureContainer(const std::string& url, const StorageOptions& options);

/// The store for an explicit configuration.
arrow::Result<std::shared_ptr<ObjectStore>> MakeAzureStore(const AzureConfig& config);

/// storage_options keys the Azure store reads (delta-rs's names and their aliases).
const std::vector<std::string>& AzureStorageOptionKeys();

}  // namespace timelake
