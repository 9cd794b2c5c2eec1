// FileCache: local copies of a remote lake's data files, for engines that read local files.
//
// DuckDB reads Parquet from local paths (timelake loads no DuckDB extension at run time, and
// would otherwise have to hand DuckDB a second set of credentials). For a lake in an object
// store, sql() asks the cache for the files a scan plan lists; the cache downloads the missing
// ones in parallel and answers with local paths.
//
// Never stale: data files are immutable once committed (timelake gives every file a fresh name),
// but a table dropped and recreated, or another writer (Spark, a hand-made table), can put other
// bytes at a path a copy was made from. So a copy is named by the file's path *and* the
// modificationTime its add action records (dir/name@<ms>.ext), and trusted only when its size is the
// one the log records: other bytes at the same path come with another add action, whose time
// (or size) differs, and are copied afresh. Log objects (_delta_log/, _last_checkpoint) never go
// through this cache: the log reader reads them from the store.
//
// Two tiers: the files' Parquet footers, which every query over large files reads first, are
// kept in a MemoryTier (scan/memory_tier.h) as well as on disk; the copies themselves are on
// disk only (the operating system's page cache holds their hot pages). CacheStats counts what
// each lookup was answered from, since the cache was made.
//
// Row-group copies: for a large Parquet file, a caller that knows which row groups a query can
// need (a RowGroupChooser, scan/row_groups.h) gets a partial copy instead: a sparse local file
// in which those row groups (and the page indexes and bloom filters after the last row group)
// sit at their original offsets, the rest is a hole, and a new footer lists only the chosen row
// groups, so a reader cannot reach bytes that were not fetched. The file costs one footer read
// plus the chosen row groups' bytes. A whole copy, when present, is used instead.
//
// Layout: <root>/<hash of the store's root URL>/<path in the store, with @<modificationTime>
// before its extension>, and a row-group copy beside it named <that>.rg-<hash of the chosen row
// groups>. Downloads go to a temporary name beside the target (16 MiB ranges, up to 8 at once
// over all files of a request), are synced, and renamed into place, so concurrent processes
// sharing a cache see whole files or none.
//
// Eviction: when the cache holds more than its budget, the least recently used copies (by the
// time a request last asked for them) are deleted, except those that are pinned or were asked
// for within the last minute. A request pins the copies it answers with (CachePin) until the
// caller releases the pin (sql() holds it until its statement's result is read), so a query in
// any process never loses a copy it still reads. Pins are files under <directory>/.pins/, each
// flock()ed by its holder: a pin whose holder died is unlocked, and the next eviction deletes
// it. Pins are written under a shared lock of .pins/evict.lock and an eviction holds it
// exclusively, so no copy is deleted between a request's pin and its use.
//
// Thread-safe: every method may be called from any thread, by the queries of one Lake at once.
// The counters are atomics, the memory tier locks itself, mutex_ guards only the download tally
// that triggers eviction; files are shared with other processes as described above.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <arrow/result.h>

#include "timelake/scan/memory_tier.h"
#include "timelake/scan/row_groups.h"
#include "timelake/store/object_store.h"

namespace timelake {

struct CachedFile {
  std::string store_path;  // path in the store
  int64_t size = -1;       // expected size; -1: unknown (asked of the store)
  /// The modificationTime of the file's add action (ms); -1: none known. Part of the copy's
  /// name, so that other bytes put at the same path are never answered with this copy.
  int64_t modified_ms = -1;
};

/// What a FileCache did since it was made. Every lookup of a cached object (a file's footer, a
/// whole copy, a row-group copy) counts once, as a memory hit, a disk hit or a miss.
struct CacheStats {
  int64_t memory_hits = 0;
  int64_t disk_hits = 0;
  int64_t misses = 0;
  int64_t requests = 0;       // requests the cache sent to the store (ranged GETs, HEADs)
  int64_t bytes_fetched = 0;  // bytes those requests brought
  int64_t bytes_served = 0;   // bytes answered from memory or disk instead of the store
  int64_t memory_bytes = 0;   // what the memory tier holds now
  int64_t memory_budget = 0;
  int64_t disk_budget = 0;
};

/// The copies one request answered with, kept from eviction (in every process sharing the
/// cache) until Release or destruction. Not copyable.
class CachePin {
 public:
  CachePin(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~CachePin() { Release(); }
  CachePin(const CachePin&) = delete;
  CachePin& operator=(const CachePin&) = delete;
  /// Unpins (idempotent).
  void Release();

 private:
  std::mutex mutex_;
  int fd_;
  std::string path_;
};

/// What a query engine reads for a scan plan over an object store: a local path per plan file, in
/// the plan's order, and the pin that keeps them.
struct PlanCopies {
  std::vector<std::string> paths;
  std::shared_ptr<CachePin> pin;
};

/// How a lake's cache is set up: storage_options' timelake_cache* keys (docs/object-stores.md).
struct FileCacheOptions {
  std::string root;              // "": FileCache::DefaultRoot()
  int64_t disk_bytes = -1;       // -1: FileCache::DefaultBudget()
  int64_t memory_bytes = -1;     // -1: FileCache::kDefaultMemoryBytes
  /// timelake_cache=memory: the copies go to a folder of their own, deleted with the cache, so
  /// nothing outlives the Lake.
  bool temporary = false;
  /// Whether any timelake_cache* key was given.
  bool given = false;

  /// Takes the timelake_cache* keys out of `options` (leaving the store's own); Invalid, naming
  /// the key, for a value it cannot take.
  static arrow::Result<FileCacheOptions> Take(std::map<std::string, std::string>* options);
};

class FileCache {
 public:
  /// The default root: $TIMELAKE_CACHE_DIR, else $XDG_CACHE_HOME/timelake, else
  /// ~/.cache/timelake, else <temp>/timelake-cache. The budget: $TIMELAKE_CACHE_MAX_BYTES, else
  /// 20 GiB.
  static std::string DefaultRoot();
  static int64_t DefaultBudget();
  /// The memory tier's default budget: 64 MiB (the footers of some thousands of files).
  static constexpr int64_t kDefaultMemoryBytes = int64_t{64} << 20;

  /// A cache of `store`'s files under `root`, at most `max_bytes` on disk and `memory_bytes` in
  /// memory (0: no memory tier).
  FileCache(std::shared_ptr<ObjectStore> store, std::string root, int64_t max_bytes,
            int64_t memory_bytes = kDefaultMemoryBytes);
  /// The cache `options` describe (a temporary one gets a new folder under the temp directory).
  static arrow::Result<std::shared_ptr<FileCache>> Make(std::shared_ptr<ObjectStore> store,
                                                        const FileCacheOptions& options);
  /// Deletes the folder of a temporary cache (in the process that made it, not in a fork child).
  ~FileCache();
  FileCache(const FileCache&) = delete;
  FileCache& operator=(const FileCache&) = delete;

  /// The folder holding this store's copies (with a trailing '/').
  const std::string& directory() const { return directory_; }

  /// Files of at least this size get row-group copies when a chooser is given.
  static constexpr int64_t kRowGroupCopyMinBytes = int64_t{8} << 20;

  /// Local paths of `files`, in order, downloading the missing ones. With `choose`, a Parquet
  /// file of at least kRowGroupCopyMinBytes that has no whole copy gets a row-group copy of the
  /// row groups `choose` names (a whole copy when it names all of them, or when the footer is
  /// not one timelake can rewrite).
  /// With `pin`, the copies stay pinned until the caller releases *pin; without, only until
  /// this call returns.
  arrow::Result<std::vector<std::string>> Materialize(const std::vector<CachedFile>& files,
                                                      const RowGroupChooser& choose = nullptr,
                                                      std::shared_ptr<CachePin>* pin = nullptr);

  /// The local copies sql() reads for `plan`: Materialize over every file of the plan, choosing
  /// the row groups the plan's filter may admit (ChooseRowGroups), pinned until the caller
  /// releases the pin. IOError for a file the log names outside the lake's store (no
  /// store_path), which the cache cannot copy.
  arrow::Result<PlanCopies> MaterializePlan(const ScanPlan& plan);

  /// The counters since this cache was made.
  CacheStats Stats() const;

  /// Runs one eviction pass now (Materialize runs one after every tenth of the budget it
  /// downloads). For tests and tools.
  void EvictNow() { Evict(); }

 private:
  struct Target;
  arrow::Result<std::optional<Target>> PlanRowGroupCopy(const CachedFile& file, const std::string& whole,
                                                        const RowGroupChooser& choose);
  arrow::Status Download(std::vector<Target>& targets);
  /// The local name of `file`'s whole copy: its path in the store, keyed by its add action.
  std::string CopyName(const CachedFile& file) const;
  /// The footer (with its length and magic) of the Parquet file `file` of `size` bytes, from
  /// memory, the footer copy `footer_copy` or the store (then kept in both); "" for a file that is
  /// not plain Parquet.
  arrow::Result<std::shared_ptr<const std::string>> Footer(const CachedFile& file, const std::string& footer_copy);
  /// Pins the copies of `store_paths` (and their row-group and footer copies).
  arrow::Result<std::shared_ptr<CachePin>> Pin(const std::vector<CachedFile>& files);
  void Evict();

  std::shared_ptr<ObjectStore> store_;
  std::string directory_;
  int64_t max_bytes_;
  std::string temporary_root_;  // deleted with the cache ("" : none), by the process that made it
  int creator_pid_ = 0;
  MemoryTier memory_;
  std::mutex mutex_;
  int64_t downloaded_since_check_ = 0;
  struct Counters {
    std::atomic<int64_t> memory_hits{0}, disk_hits{0}, misses{0}, requests{0}, bytes_fetched{0}, bytes_served{0};
  } counters_;
};

}  // namespace timelake
