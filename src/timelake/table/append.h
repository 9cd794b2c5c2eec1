// Appending: input batches become data files (ingest/), then one commit.
//
// An append's batch id is checked once, at its entry (AppendThroughGroup: not empty). It is
// planned under the handle's lock (PrepareAppend: the snapshot brought up to date, writability,
// a batch id the snapshot already records answered as a duplicate, so that it writes no files;
// the judgement is RecordedTxns, txn/conflict.h, the committer's own), stages its files
// without the lock (StageAppend: aligned, arranged and written through ingest/; an input of a
// few rows keeps them for its group's shared file), and is then committed with the appends
// staged meanwhile (table/group_commit.h). An append with inline maintenance does all of it
// under the lock (AppendBatches). Nothing is visible before the commit: what a failed or
// stopped append wrote is deleted.
//
// Thread safety: as each function says; StageAppend touches no handle state.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <arrow/record_batch.h>
#include <arrow/result.h>

#include "timelake/table/context.h"
#include "timelake/table/maintain.h"
#include "timelake/util/interrupt.h"
#include "timelake/util/operation_lock.h"

namespace timelake {

class GroupCommit;  // table/group_commit.h

struct AppendOptions {
  std::optional<std::string> batch_id;
  /// The version of the Delta txn that records `batch_id`: the append is a duplicate when the
  /// table records the batch id at this version or a later one. Batch ids of users record 0; a
  /// rollup refresh records the source version it reflects, so that an older refresh never
  /// lands after a newer one. An append with a nonzero version commits alone (no group, no spool).
  int64_t batch_version = 0;
  std::optional<bool> maintain;  // unset: the table's timelake.autoMaintain property
  InterruptCheck interrupt;      // see table/table.h
  /// Aligned input buffered before it is written out (unset: IngestOptions' default). A smaller
  /// buffer bounds memory and writes more, smaller files per chunk.
  std::optional<int64_t> buffer_bytes;
  /// Whether the buffer copies each input batch (IngestOptions::copy_input).
  bool copy_input = true;
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

/// What writing an append's files needs from the handle, copied under its lock so that the files
/// can be written without it.
struct AppendPlan {
  std::shared_ptr<ObjectStore> store;
  std::string table_path;
  std::string name;
  Contract contract;
  std::shared_ptr<arrow::Schema> declared;
  std::shared_ptr<arrow::Schema> storage;
  IngestOptions ingest_options;
  int64_t version = 0;          // the handle's version when planned
  int64_t head_checked_ms = 0;  // when planning read the head commit (PendingCommit)
};

/// Appends of at most this many rows, staged for a group commit, leave their rows to the commit:
/// it writes the rows of all such appends of the group as one file per chunk (a file and its
/// fsyncs per append would cost more than the rows' encoding).
constexpr int64_t kSharedFileMaxRows = 4096;

/// An append whose files are written (or whose rows are kept for a shared file) and wait for
/// their commit.
struct StagedAppend {
  std::optional<std::string> batch_id;
  int64_t batch_version = 0;  // AppendOptions::batch_version
  std::unique_ptr<Ingestor> ingestor;  // deletes the files if they are not committed
  std::vector<WrittenFile> files;
  // The rows wait in the ingestor's buffer for the group's shared file (files is empty); `rows`
  // counts them after the append's own in-batch deduplication.
  bool shared = false;
  int64_t rows = 0;
  bool compact_after = true;  // may queue a background compaction pass (not maintain=False)
  int64_t head_checked_ms = 0;
  std::string spool_id;  // another process's append: the id of the request it came in (Spool)
};

/// The first step of an append, under the lock (REQUIRES: the handle's lock held, and
/// `options.batch_id`, if set, not empty): brings the handle up to date, checks the table is
/// writable and fills `plan`. A result when the append is already answered: its batch id is
/// recorded in the handle's snapshot (RecordedTxns). Ids recorded later are the committer's to
/// find (CommitStaged).
arrow::Result<std::optional<AppendResult>> PrepareAppend(TableContext& t, const AppendOptions& options,
                                                         AppendPlan* plan);
/// Writes the files of `reader` into `out` (no lock needed: touches no handle state), or, for
/// input of at most `share_max_rows` rows, keeps its rows for the group's shared file. On
/// failure what was written is deleted.
arrow::Status StageAppend(const AppendPlan& plan, arrow::RecordBatchReader* reader,
                          const AppendOptions& options, StagedAppend* out,
                          int64_t share_max_rows = 0);
/// Adds the failures of earlier appends' upkeep (and `failures`) to `result`'s maintenance error
/// (the upkeep queue is thread-safe: no lock needed).
void ReportUpkeepFailures(TableContext& t, std::vector<std::string> failures, AppendResult* result);
/// Prints where an append's time went when TIMELAKE_PROFILE is set (bench/README.md).
void PrintAppendProfile(const TableContext& t, const IngestProfile& p, double commit_ms,
                        double hooks_ms, int64_t rows);

/// An append through the handle (Table::Append), the one entry of an append: an empty batch id
/// is Invalid here, before anything else. Then planned under the handle's lock `mutex` (or,
/// while a group commit is in flight, from the plan `group` published), its files staged without
/// the lock, then committed with the appends staged meanwhile (GroupCommit::Commit). An append
/// with inline maintenance runs whole under the lock (AppendBatches). REQUIRES: `mutex` NOT held
/// by the calling thread (re-entry fails with Status::ExecutionError).
arrow::Result<AppendResult> AppendThroughGroup(OperationLock& mutex, TableContext& t,
                                               GroupCommit& group, arrow::RecordBatchReader* reader,
                                               const AppendOptions& options);

/// Appends the batches of `reader` as one commit, the whole append under the handle's lock, with
/// the inline maintenance `options` ask for. REQUIRES: the handle's lock held; `options.batch_id`,
/// if set, not empty (AppendThroughGroup checks it).
arrow::Result<AppendResult> AppendBatches(TableContext& t, arrow::RecordBatchReader* reader,
                                          const AppendOptions& options);

}  // namespace timelake
