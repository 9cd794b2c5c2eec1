// Lake: a warehouse of tables under one root (a local folder or a bucket prefix).
//
// Tables live at `<root>/<namespace>/<table>/` and are named "namespace.table"; an unqualified
// name means namespace "default". Each name part is an identifier ([A-Za-z_][A-Za-z0-9_]*, at most
// 128 bytes), which also keeps paths such as "../" out of storage.
//
// Names are case-insensitive, as SQL identifiers are, and keep the case they were created with:
// no two tables of a lake differ only in case (CreateTable refuses the second), and every call
// that takes a name finds the table whatever case the name is written in.
//
// A Lake owns the threads of its tables' work: its LakeRuntime (table/lake_runtime.h) keeps the
// upkeep queue of every handle it opens, and its store the workers of its deferred fsyncs
// (store/local_store.h). Destroying the Lake runs what its handles queued and joins those
// threads; handles may outlive it (they then do their upkeep inline).
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <arrow/result.h>
#include <arrow/type_fwd.h>

#include "timelake/contract.h"
#include "timelake/scan/file_cache.h"
#include "timelake/store/object_store.h"
#include "timelake/table/lake_runtime.h"
#include "timelake/table/table.h"

namespace timelake {

struct TableName {
  std::string ns;
  std::string table;
  std::string qualified() const { return ns + "." + table; }
  std::string path() const { return ns + "/" + table; }
};

/// Parses "table" or "namespace.table"; Status::Invalid explains a bad name.
arrow::Result<TableName> ParseTableName(const std::string& name);

class Lake {
 public:
  /// Opens the lake at `location` (a local path, file://, memory://, or a cloud URL once its
  /// store exists) over the store OpenStore (store/store_factory.h) makes, which also checks
  /// `storage_options`: unknown keys are Status::Invalid naming the key. The timelake_cache*
  /// keys configure cache() (FileCacheOptions) and are Invalid on a local lake.
  static arrow::Result<std::shared_ptr<Lake>> Open(
      const std::string& location, const std::map<std::string, std::string>& storage_options);
  /// The storage option (kept by the lake, not passed to the store) that sets how long reads may
  /// skip the version check: a duration ("1s", "500ms", "0": check at every read). Default 1 s on
  /// object stores, 0 on local lakes (docs/object-stores.md, "The table head").
  static constexpr const char* kVersionCheckIntervalKey = "version_check_interval";

  /// A lake over an existing store (tests use a MemoryStore), opening its tables with `open`.
  static std::shared_ptr<Lake> OverStore(std::shared_ptr<ObjectStore> store,
                                         const TableOpenOptions& open = {});

  std::string location() const { return store_->RootUrl(); }
  const std::shared_ptr<ObjectStore>& store() const { return store_; }

  /// Status::AlreadyExists if the table exists; Status::Invalid for a bad name or contract.
  arrow::Result<std::shared_ptr<Table>> CreateTable(const std::string& name,
                                                    const std::shared_ptr<arrow::Schema>& schema,
                                                    const ContractOptions& options);
  /// Status::KeyError if the table does not exist.
  arrow::Result<std::shared_ptr<Table>> OpenTable(const std::string& name);
  /// "namespace.table" for every folder holding a Delta log, sorted.
  arrow::Result<std::vector<std::string>> Tables();
  /// Tables() for a query resolving its table names: the list of the last call when it was made
  /// within the version check interval and no Lake of this process has created or dropped a
  /// table since (the freshness rule of reads, docs/object-stores.md).
  arrow::Result<std::vector<std::string>> TablesForRead();
  /// Makes the table disappear in one atomic step (its folder is renamed out of sight, so
  /// readers and writers see the whole table or nothing, and handles opened before can no longer
  /// commit), then deletes its files.
  arrow::Status DropTable(const std::string& name);

  /// The file cache of a lake outside the local disk (scan/file_cache.h), shared by every query
  /// of this Lake: made by Open as storage_options' timelake_cache* keys say (Open takes those
  /// keys out before OpenStore sees the others), or with the defaults on first use for a lake
  /// made by OverStore; null for local lakes, whose files engines open where they are.
  std::shared_ptr<FileCache> cache();

 private:
  Lake(std::shared_ptr<ObjectStore> store, const TableOpenOptions& open)
      : store_(std::move(store)), open_(open), runtime_(LakeRuntime::Make()) {}
  /// `name` parsed, with the case of the existing table whose name equals it ignoring case (if
  /// one exists).
  arrow::Result<TableName> Resolve(const std::string& name);
  /// Existing tables other than `name` whose names equal it ignoring case.
  arrow::Result<std::vector<TableName>> CaseTwins(const TableName& name);
  /// Takes the lock that creations of names equal to `name` ignoring case share (waiting for a
  /// running creation; breaking a lock left by a creator that died); returns its path, which the
  /// caller deletes to release it.
  arrow::Result<std::string> LockName(const TableName& name);
  /// Deletes leftovers of drops that did not finish (a crash between rename and delete).
  void SweepDropped(const std::string& ns);
  std::shared_ptr<ObjectStore> store_;
  const TableOpenOptions open_;
  /// The upkeep queues of the handles this Lake opened; they hold it weakly.
  std::shared_ptr<LakeRuntime> runtime_;
  std::mutex cache_mutex_;
  std::shared_ptr<FileCache> cache_;
  std::mutex tables_mutex_;
  std::vector<std::string> tables_;  // GUARDED_BY(tables_mutex_): TablesForRead's last list
  int64_t tables_listed_ms_ = -1;    // GUARDED_BY(tables_mutex_): when (steady clock), -1: never
  uint64_t tables_generation_ = 0;   // GUARDED_BY(tables_mutex_): CatalogGeneration() then
};

}  // namespace timelake
