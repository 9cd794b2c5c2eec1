// Table: one time-series (or plain) table of a lake, at a snapshot.
//
// A Table handle holds the snapshot it last saw. Operations that commit (append, maintain)
// advance the handle to the version they create; refresh() advances it to the latest version.
// A handle may be used from several threads: operations on one handle are serialised, except
// that appends write their files concurrently and then share commits (group commit); and
// concurrent handles (in this or other processes or hosts) coordinate through put-if-absent
// commits only. An operation called on a handle from inside another operation of the same handle
// on the same thread (from the input stream of an append) fails with Status::ExecutionError
// instead of deadlocking; version() alone answers there.
//
// Append and Maintain take an InterruptCheck in their options: they call it between input
// batches, before committing and between compaction groups (and while waiting for the handle),
// and stop with its status. What a stopped operation wrote but did not commit is deleted.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <arrow/record_batch.h>
#include <arrow/result.h>

#include "timelake/contract.h"
#include "timelake/scan/scan_planner.h"
#include "timelake/table/append.h"
#include "timelake/table/context.h"
#include "timelake/table/group_commit.h"
#include "timelake/table/maintain.h"
#include "timelake/util/interrupt.h"
#include "timelake/util/operation_lock.h"

namespace timelake {

struct TableInfo {
  Contract contract;
  int64_t rows = 0;
  int64_t files = 0;
  int64_t bytes = 0;
  int64_t snapshots = 0;
  int64_t manifests = 0;
  int64_t index_series = 0;
  int64_t index_version = -1;
  int64_t index_bytes = 0;
  /// Why the index could not be read (a damaged data file it had to read): the other index
  /// figures are then unknown (-1), and the rest of the info stands.
  std::optional<std::string> index_error;
};

/// How a Lake opens its tables (table/head.h).
struct TableOpenOptions {
  /// Open from the table head when it can be trusted, and write it after commits (appends: those
  /// at a multiple of `head_interval`).
  bool heads = false;
  int64_t head_interval = 1;
  /// The version check interval of reads (TableContext::check_interval_ms).
  int64_t check_interval_ms = 0;
};

class Table {
 public:
  /// Opens the table at `table_path` (relative to the store root) at its latest version. Its
  /// appends leave their upkeep to `runtime` (its Lake's, table/lake_runtime.h) while that lives,
  /// and do it inline once it is gone (or without one).
  /// With `options.heads`, the table head is read first (one request): a head written within
  /// `options.check_interval_ms` (by the service's clock) opens the table at its version with no
  /// other request, unless this process committed a newer version; an older one opens at its
  /// version and reads the log from there (CheckHead, then the newer commits); a missing,
  /// damaged or foreign head, or one whose version the log does not hold, opens from the log.
  static arrow::Result<std::shared_ptr<Table>> Open(std::shared_ptr<ObjectStore> store,
                                                    std::string table_path, std::string name,
                                                    std::weak_ptr<LakeRuntime> runtime = {},
                                                    const TableOpenOptions& options = {});

  const std::string& name() const { return ctx_.name; }
  std::string location() const;
  int64_t version();
  std::shared_ptr<arrow::Schema> schema() const { return ctx_.declared; }
  const Contract& contract() const { return ctx_.contract; }

  arrow::Result<AppendResult> Append(arrow::RecordBatchReader* reader, const AppendOptions& options);
  arrow::Result<MaintainResult> Maintain(const MaintainOptions& options);
  arrow::Result<TableInfo> Info();
  /// The newest row of every series (storage types), from the last-value index, at the latest
  /// version. Status::Invalid for a plain table.
  arrow::Result<std::shared_ptr<arrow::Table>> Latest();
  /// Advances the handle to the latest version (always checks the log).
  arrow::Status Refresh();
  /// Refresh() for a read that may skip the log check: within the lake's version check
  /// interval of the last check, unless this process committed a newer version (see
  /// UpdateForRead, table/context.h). Latest() refreshes the same way.
  arrow::Status RefreshIfDue();
  /// Waits for the work earlier appends left to the handle's upkeep thread (checkpoints, index
  /// records and folds; table/upkeep.h). latest(), info() and maintain() wait for it themselves.
  arrow::Status WaitForUpkeep();
  /// The files of the handle's current snapshot that may hold rows `filter` admits, annotated
  /// for a query engine (see scan/scan_planner.h).
  arrow::Result<ScanPlan> Scan(const ScanFilter& filter = {});
  /// The same for an older version of the table (time travel): `version`, or when it is not
  /// given the newest version committed at or before `timestamp_ms` (DeltaLog::VersionAt). Read
  /// with that version's schema and contract. KeyError naming the versions that can be read when
  /// the one asked for was removed by log expiry or is not written yet.
  arrow::Result<ScanPlan> ScanAsOf(std::optional<int64_t> version, std::optional<int64_t> timestamp_ms,
                                   const ScanFilter& filter = {});

  /// Adds nullable columns after the existing ones, in one commit (a new metaData with the same
  /// table id); returns its version. Files written before read the new columns as null; appends
  /// may bring them from then on and still refuse columns the table does not have. Invalid for
  /// an empty list, a column that is not nullable, a name the table has (ignoring case) or a
  /// type timelake cannot store. An append that raced it rebases (its rows have nulls there);
  /// another add_columns that raced it fails with a commit conflict.
  arrow::Result<int64_t> AddColumns(const arrow::FieldVector& fields);

  /// Changes the types of columns to wider ones, in one commit; returns its version. Each field
  /// names a column and its new declared type, which must hold every value of the old one, and
  /// the stored type may only change as Delta's typeWidening allows (DeltaAllowsWidening): no
  /// file is rewritten, readers cast older files up. The table gains the typeWidening feature
  /// (Delta protocol reader 3, writer 7) and `delta.enableTypeWidening`. Invalid for an empty
  /// list, an unknown column, the time column or a series key column, or a narrowing or
  /// unrelated type. Appends, compactions and retention that raced it rebase; a schema change
  /// that raced it fails with a commit conflict.
  arrow::Result<int64_t> WidenColumns(const arrow::FieldVector& fields);

  /// The txn version at which the table's latest version records `batch_id`
  /// (AppendOptions::batch_version), or nullopt when it does not (never recorded, or forgotten
  /// after delta.setTransactionRetentionDuration). Brings the handle up to date first.
  arrow::Result<std::optional<int64_t>> RecordedBatchVersion(const std::string& batch_id);
  /// The table's Delta id (metaData.id) at the handle's version: a table dropped and created
  /// again under the same name has another.
  std::string id();
  /// The table's properties (Delta metaData.configuration) at the handle's version.
  std::map<std::string, std::string> properties();

  /// The Delta txn appId that records `batch_id`.
  static std::string BatchAppId(const std::string& batch_id) { return timelake::BatchAppId(batch_id); }

 private:
  Table(std::shared_ptr<ObjectStore> store, std::string table_path, std::string name,
        std::weak_ptr<LakeRuntime> runtime);
  // Commits a new schema (same table id): `declared` and its `storage` schema, the Delta field
  // JSON to keep for the columns it names (FieldsOf, WidenedField), a protocol action when the
  // change needs one, and table properties to set (`config`). `call` names the public method in
  // a conflict message.
  arrow::Result<int64_t> CommitSchemaChange(const std::shared_ptr<arrow::Schema>& declared,
                                            const arrow::Schema& storage,
                                            const std::map<std::string, std::string>& kept,
                                            const std::optional<Protocol>& protocol,
                                            const std::map<std::string, std::string>& config,
                                            const std::string& operation,
                                            std::map<std::string, std::string> parameters,
                                            const std::string& call);
  /// Opens the handle from the table head (see Open); false when it must open from the log.
  bool OpenFromHead();
  // Keeps the handle's state for other handles of the process opened soon after (RememberHead).
  void Remember();
  /// `st` with the table's folder replaced by its name in a KeyError's message.
  arrow::Status TableMessage(const arrow::Status& st) const;

  OperationLock mutex_;
  TableContext ctx_;  // GUARDED_BY(mutex_)

  GroupCommit group_{&mutex_, &ctx_};  // the appends waiting for their commit
};

}  // namespace timelake
