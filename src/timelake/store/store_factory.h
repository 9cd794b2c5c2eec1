// OpenStore: the one place that turns a lake location (a path or URL) into an ObjectStore.
//
// It alone knows URL schemes and storage_options: a new store (S3, GCS, Azure) is added here and
// in its own files, and nowhere else. Locations:
//   /abs/path, relative/path, file:///abs/path  LocalStore over the (absolute, normalized) folder
//   memory://name                              a new, empty MemoryStore named `name`; each call
//                                              makes its own (nothing is shared by name)
//   s3://bucket/path, s3a://…                  S3Store (store/s3/s3_store.h)
//   az://container/path, azure://…,            AzureStore (store/azure/azure_store.h)
//   abfs[s]://container@account.dfs.core.windows.net/path
//   gs://bucket/path                           GcsStore (store/gcs/gcs_store.h)
// Anything else is Invalid naming the scheme.
//
// storage_options use the key names of delta-rs/object_store (aws_region, aws_endpoint,
// azure_storage_account_name, …). An unknown key is Invalid naming it; a known key that the
// location's store does not take is Invalid too (local and memory stores take none); the
// cloud stores, when they come, receive all of them.
// Option values are secrets as far as errors go: no message here repeats one.
#pragma once

#include <map>
#include <memory>
#include <string>

#include <arrow/result.h>

#include "timelake/store/object_store.h"

namespace timelake {

/// storage_options as the user gave them: key → value.
using StorageOptions = std::map<std::string, std::string>;

/// The store for `location` (see above), configured with `options`.
arrow::Result<std::shared_ptr<ObjectStore>> OpenStore(const std::string& location,
                                                      const StorageOptions& options);

}  // namespace timelake
