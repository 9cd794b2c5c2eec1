// TableContext: a table handle's state, and the steps every operation on it shares.
//
// A context holds what a handle knows: where the table lives, the snapshot the handle last saw,
// the schemas and contract derived from its metadata, its committer, its last-value index and
// latest() state (table/latest.h), its group-commit spool (table/spool.h) and its upkeep queue
// (table/upkeep.h, kept in its Lake's runtime: table/lake_runtime.h). The operations are
// functions over a context, each family in its own room:
// appending in table/append.h, group commit in table/group_commit.h, maintenance in
// table/maintain.h, schema changes in table/schema_change.cc, latest() in table/latest.h, the
// work after a commit in table/upkeep.h. This file keeps the steps they share: deriving the
// schema and contract, bringing the snapshot up to date, writability, batch ids, committing.
//
// Thread safety: Table (table/table.h) is the handle users hold: it serialises the operations on
// its context with its lock (an OperationLock). A context's fields, and every function here,
// REQUIRE that lock held, except where a field says it is shared with the upkeep thread (then it
// is itself thread-safe) and except BatchAppId, ArrowSchemaText, NewCommitInfo and RemoveOf,
// which touch no context.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <arrow/result.h>

#include "timelake/contract.h"
#include "timelake/index/last_value_index.h"
#include "timelake/ingest/ingestor.h"
#include "timelake/log/delta_log.h"
#include "timelake/table/lake_runtime.h"
#include "timelake/table/latest.h"
#include "timelake/table/upkeep.h"
#include "timelake/txn/committer.h"

namespace timelake {

struct BackgroundCompaction;  // table/maintain.h
class Spool;                  // table/spool.h

struct TableContext {
  /// A context whose appends queue their upkeep in `runtime` (its Lake's); without one (time
  /// travel, background passes: contexts that never append) the work would run inline.
  TableContext(std::shared_ptr<ObjectStore> store, std::string table_path, std::string name,
               std::weak_ptr<LakeRuntime> runtime = {})
      : store(store), table_path(table_path), name(std::move(name)), log(store, table_path),
        committer(&log, this->name),
        upkeep(std::move(runtime), store->RootUrl() + "/" + table_path) {}
  TableContext(const TableContext&) = delete;
  TableContext& operator=(const TableContext&) = delete;

  std::shared_ptr<ObjectStore> store;
  std::string table_path;  // the table's folder relative to the store root
  std::string name;        // "namespace.table", for messages
  DeltaLog log;
  Committer committer;  // commits to `log`
  Snapshot snapshot;    // the version the handle last saw
  std::string metadata_id;  // the metaData.id the fields below were derived from
  // and the schema texts (add_columns changes them, not the id): Delta's and timelake's Arrow one
  std::string derived_schema_string;
  std::string derived_arrow_schema;
  std::shared_ptr<arrow::Schema> declared;  // the schema users see
  std::shared_ptr<arrow::Schema> storage;   // the schema the files hold
  Contract contract;
  IngestOptions ingest_options;
  std::shared_ptr<LastValueIndex> index;  // shared with upkeep tasks
  LatestState latest;
  /// The newest checkpoint an upkeep task wrote (-1: none yet); folded into snapshot by Info().
  std::shared_ptr<std::atomic<int64_t>> checkpointed = std::make_shared<std::atomic<int64_t>>(-1);
  /// Files this handle appended since it last queued a background compaction pass, and the
  /// state of those passes (MaybeCompactInBackground).
  int64_t files_since_compaction = 0;
  std::shared_ptr<BackgroundCompaction> compaction;
  /// The table's spool for group commits across processes (stores with LocalFiles only, local
  /// lakes; CommitAcrossProcesses, table/group_commit.h).
  std::shared_ptr<Spool> spool;
  bool spool_checked = false;
  int spool_expected = 0;  // requests the last commit led here took in: worth waiting for
  /// Whether commits write the table head (table/head.h), and after which appends: those whose
  /// version is a multiple of `head_interval` (1 on object stores, where opening from the log
  /// takes many requests; kLocalHeadInterval on local disks). Other commits write it every time.
  bool heads = false;
  int64_t head_interval = 1;
  /// Reads (Refresh, Latest) skip the log check within this many ms of the last one, unless this
  /// process committed a newer version (the `version_check_interval` storage option; 0: always).
  int64_t check_interval_ms = 0;
  /// When the log was last checked for reads (steady clock, ms; -1: never), and CatalogChanges()
  /// then (table/head.h): a drop or creation by this process since makes the next read check.
  int64_t checked_at_ms = -1;
  uint64_t checked_changes = 0;
  /// The snapshot came from the table head: it lacks the checkpoint's history (batch ids,
  /// tombstones), which writers load first (UpdateWhole).
  bool partial = false;
  /// Post-commit work of appends (table/upkeep.h), queued in the Lake's runtime; thread-safe.
  /// Last member: destroyed (drained) first.
  UpkeepQueue upkeep;
};

/// Schema, contract and index from `t.snapshot.metadata`; NotImplemented if timelake cannot read
/// the table (column mapping, reader features it lacks).
arrow::Status LoadDerived(TableContext& t);
/// timelake's Arrow schema text in `m` (empty when absent).
const std::string& ArrowSchemaText(const Metadata& m);
/// Advances `t` to the latest version, deriving again if the table changed identity or schema.
arrow::Status Update(TableContext& t);
/// Update() for a read: skipped within `t.check_interval_ms` of the last check, unless this
/// process committed or read a version newer than the handle's (table/head.h, NoteVersionSeen).
arrow::Status UpdateForRead(TableContext& t);
/// Milliseconds of the steady clock, the time base of `checked_at_ms`.
int64_t SteadyMillis();
/// Before an operation that commits: a snapshot opened from the table head (`t.partial`) is
/// replaced by the latest one loaded from the log, with the checkpoint's history; then, as
/// without a head, Update(). TableDropped when the log holds another table (or none).
arrow::Status UpdateWhole(TableContext& t);
/// NotImplemented if the table uses writer features timelake cannot honour.
arrow::Status CheckWritable(const TableContext& t);
/// The Delta txn appId that records `batch_id` (whether the table records it: RecordedTxns,
/// txn/conflict.h).
std::string BatchAppId(const std::string& batch_id);
/// The table's timelake.autoMaintain property.
bool AutoMaintain(const TableContext& t);
/// The table's timelake.backgroundCompaction property (default on).
bool BackgroundCompactionOn(const TableContext& t);
/// `st`, or TableDropped when `st` is a storage failure and the table is gone: a folder renamed
/// away by a drop makes writes into it fail with "no such file".
arrow::Status DroppedOr(TableContext& t, arrow::Status st);
/// A commitInfo for `operation` with a fresh txnId.
CommitInfo NewCommitInfo(const std::string& operation);
/// A `remove` for `add`, tagged with why timelake removed it (kRemovedByCompaction/Retention).
RemoveFile RemoveOf(const AddFile& add, bool data_change, int64_t now_ms, const char* reason);
/// Commits `pending` through the committer, on top of `t.snapshot`.
arrow::Status CommitPending(TableContext& t, PendingCommit* pending, CommitOutcome* out);

}  // namespace timelake
