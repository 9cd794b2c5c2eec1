// Table: one time-series (or plain) table of a lake, at a snapshot.
//
// A Table handle holds the snapshot it last saw. Operations that commit (append, maintain)
// advance the handle to the version they create; refresh() advances it to the latest version.
// A handle may be used from several threads: operations on one handle are serialised, and
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
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <arrow/record_batch.h>
#include <arrow/result.h>

#include "timelake/contract.h"
#include "timelake/index/last_value_index.h"
#include "timelake/ingest/ingestor.h"
#include "timelake/log/delta_log.h"
#include "timelake/scan/scan_planner.h"
#include "timelake/util/interrupt.h"
#include "timelake/util/operation_lock.h"

namespace timelake {

struct AppendOptions {
  std::optional<std::string> batch_id;
  std::optional<bool> maintain;  // unset: the table's timelake.autoMaintain property
  InterruptCheck interrupt;      // see the top of this file
};

struct MaintainOptions {
  bool compact = true;
  bool retention = true;
  bool expire = true;
  InterruptCheck interrupt;  // see the top of this file
};

struct MaintainResult {
  int64_t partitions_compacted = 0;
  int64_t files_rewritten = 0;
  int64_t files_written = 0;
  int64_t rows_rewritten = 0;
  int64_t duplicates_removed = 0;
  int64_t partitions_dropped = 0;
  int64_t snapshots_expired = 0;
  int64_t objects_deleted = 0;
  double seconds = 0;
};

struct AppendResult {
  int64_t rows = 0;
  int64_t files = 0;
  int64_t bytes = 0;
  int64_t version = 0;
  double commit_ms = 0;
  int attempts = 0;
  bool duplicate = false;
  std::optional<MaintainResult> maintenance;  // set when inline maintenance did work or failed
  /// Inline maintenance failed after the append was committed (the append itself stands).
  std::optional<std::string> maintenance_error;
};

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
};

class Table {
 public:
  /// Opens the table at `table_path` (relative to the store root) at its latest version.
  static arrow::Result<std::shared_ptr<Table>> Open(std::shared_ptr<ObjectStore> store,
                                                    std::string table_path, std::string name);

  const std::string& name() const { return name_; }
  std::string location() const;
  int64_t version();
  std::shared_ptr<arrow::Schema> schema() const { return declared_; }
  const Contract& contract() const { return contract_; }

  arrow::Result<AppendResult> Append(arrow::RecordBatchReader* reader, const AppendOptions& options);
  arrow::Result<MaintainResult> Maintain(const MaintainOptions& options);
  arrow::Result<TableInfo> Info();
  /// The newest row of every series (storage types), from the last-value index, at the latest
  /// version. Status::Invalid for a plain table.
  arrow::Result<std::shared_ptr<arrow::Table>> Latest();
  arrow::Status Refresh();
  /// The files of the handle's current snapshot that may hold rows `filter` admits, annotated
  /// for a query engine (see scan/scan_planner.h).
  arrow::Result<ScanPlan> Scan(const ScanFilter& filter = {});

  /// The Delta txn appId that records `batch_id`.
  static std::string BatchAppId(const std::string& batch_id);

  /// Lost commit races in a row after which a commit gives up.
  static constexpr int kMaxCommitAttempts = 64;

 private:
  Table(std::shared_ptr<ObjectStore> store, std::string table_path, std::string name);
  arrow::Status LoadDerived();  // schema and contract from snapshot_.metadata
  arrow::Status CheckWritable() const;
  bool HasBatch(const std::string& batch_id) const;
  void MaybeCheckpoint();
  /// The maintenance steps, with the handle's lock held. `inline_only` keeps the work bounded.
  arrow::Status MaintainLocked(const MaintainOptions& options, bool inline_only, MaintainResult* result);
  /// Commits the removal of every chunk that ended before now - retention.
  arrow::Status DropExpiredChunks(MaintainResult* result);
  /// Rewrites crowded chunks (bounded to one group when `inline_only`); `interrupt` is checked
  /// before and after rewriting each group.
  arrow::Status Compact(bool inline_only, const InterruptCheck& interrupt, MaintainResult* result);

  /// What a committer does after losing a race (the snapshot has been advanced to the winners).
  enum class AfterLostRace { kRetry, kAbandon };
  struct CommitOutcome {
    std::optional<int64_t> version;  // the version committed; unset if the commit was abandoned
    int attempts = 0;
    bool outcome_unknown = false;  // the error left open whether the commit landed
  };
  /// Commits `commit` at the version after the handle's snapshot, rebasing over concurrent
  /// commits: `prepare` fills in what depends on the version; after each lost race the snapshot
  /// is advanced and `on_lost_race` decides. A winner that changed the schema or protocol, a
  /// storage error, and kMaxCommitAttempts lost races fail the commit. A put that reported an
  /// error but landed is recognised by its commitInfo.txnId.
  arrow::Status CommitRebasing(Commit* commit, const std::function<void(Commit*, int64_t)>& prepare,
                               const std::function<arrow::Result<AfterLostRace>()>& on_lost_race,
                               CommitOutcome* out);
  CommitInfo NewCommitInfo(const std::string& operation) const;
  /// A `remove` for `add`, tagged with why timelake removed it (kRemovedByCompaction/Retention).
  static RemoveFile RemoveOf(const AddFile& add, bool data_change, int64_t now_ms,
                             const char* reason);
  bool AutoMaintain() const;
  /// `st`, or TableDropped when `st` is a storage failure and the table is gone: a folder
  /// renamed away by a drop makes writes into it fail with "no such file".
  /// REQUIRES: mutex_ held.
  arrow::Status DroppedOr(arrow::Status st);
  /// Post-commit hook of every commit: a checkpoint when one is due. Never fails the commit.
  void AfterCommit();
  /// Post-commit hook of commits that add files: writes the index record of commit `version`
  /// for `files` (whose rows carry sequence number `seq`) and folds the index when due. Best
  /// effort: a missing record only makes latest() read those files.
  void RecordNewest(const std::vector<WrittenFile>& files, int64_t version, int64_t seq);

  std::shared_ptr<ObjectStore> store_;
  std::string table_path_;
  std::string name_;
  DeltaLog log_;
  OperationLock mutex_;
  Snapshot snapshot_;
  std::string metadata_id_;  // the metaData.id the derived fields were computed from
  std::shared_ptr<arrow::Schema> declared_;
  std::shared_ptr<arrow::Schema> storage_;
  Contract contract_;
  IngestOptions ingest_options_;
  std::unique_ptr<LastValueIndex> index_;
};

}  // namespace timelake
