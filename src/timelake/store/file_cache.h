// FileCache: local copies of a remote lake's data files, for engines that read local files.
//
// DuckDB reads Parquet from local paths (timelake loads no DuckDB extension at run time, and
// would otherwise have to hand DuckDB a second set of credentials). For a lake in an object
// store, sql() asks the cache for the files a scan plan lists; the cache downloads the missing
// ones in parallel and answers with local paths. Data files are immutable once committed (every
// file has a fresh name), so a copy never goes stale; a copy is trusted only when its size is the
// one the log records.
//
// Layout: <root>/<hash of the store's root URL>/<path in the store>. Downloads go to a temporary
// name beside the target and are renamed into place, so concurrent processes sharing a cache see
// whole files or none. When the cache holds more than its budget, the least recently used
// copies not needed by the current request and untouched for a minute are deleted.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <arrow/result.h>

#include "timelake/store/object_store.h"

namespace timelake {

struct CachedFile {
  std::string store_path;  // path in the store
  int64_t size = -1;       // expected size; -1: unknown (asked of the store)
};

class FileCache {
 public:
  /// The default root: $TIMELAKE_CACHE_DIR, else $XDG_CACHE_HOME/timelake, else
  /// ~/.cache/timelake, else <temp>/timelake-cache. The budget: $TIMELAKE_CACHE_MAX_BYTES, else
  /// 20 GiB.
  static std::string DefaultRoot();
  static int64_t DefaultBudget();

  FileCache(std::shared_ptr<ObjectStore> store, std::string root, int64_t max_bytes);

  /// The folder holding this store's copies (with a trailing '/').
  const std::string& directory() const { return directory_; }

  /// Local paths of `files`, in order, downloading the missing ones (up to 8 at once).
  arrow::Result<std::vector<std::string>> Materialize(const std::vector<CachedFile>& files);

 private:
  arrow::Status Download(const CachedFile& file, const std::string& local);
  void Evict(const std::vector<std::string>& keep);

  std::shared_ptr<ObjectStore> store_;
  std::string directory_;
  int64_t max_bytes_;
  std::mutex mutex_;
  int64_t downloaded_since_check_ = 0;
};

}  // namespace timelake
