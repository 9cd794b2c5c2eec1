// TableContext: what the operations on one table handle work on.
//
// A context holds a handle's state: where the table lives, the snapshot the handle last saw, the
// schemas and contract derived from its metadata, its committer and its last-value index. The
// operations are functions over a context, each family in its own file: appends in
// table/append.cc, retention/compaction/expiry in table/maintain.cc, the steps they share
// (loading derived fields, writability checks, committing, post-commit hooks) in
// table/context.cc. Table (table/table.h) is the handle users hold: it serialises operations on its
// context with its lock. Every function here REQUIRES that lock held.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <arrow/record_batch.h>
#include <arrow/result.h>

#include "timelake/contract.h"
#include "timelake/index/last_value_index.h"
#include "timelake/ingest/ingestor.h"
#include "timelake/log/delta_log.h"
#include "timelake/txn/committer.h"
#include "timelake/txn/post_commit.h"
#include "timelake/txn/upkeep.h"
#include "timelake/util/interrupt.h"

namespace timelake {

struct AppendOptions {
  std::optional<std::string> batch_id;
  std::optional<bool> maintain;  // unset: the table's timelake.autoMaintain property
  InterruptCheck interrupt;      // see the top of this file
  /// Aligned input buffered before it is written out (unset: IngestOptions' default). A smaller
  /// buffer bounds memory and writes more, smaller files per chunk.
  std::optional<int64_t> buffer_bytes;
  /// Whether the buffer copies each input batch (IngestOptions::copy_input).
  bool copy_input = true;
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
  /// Why the index could not be read (a damaged data file it had to read): the other index
  /// figures are then unknown (-1), and the rest of the info stands.
  std::optional<std::string> index_error;
};

/// What a commit did to the newest row of each series, as the handle's latest() state sees it.
struct LatestDelta {
  enum Kind {
    kNone,    // rows unchanged: no data files, or a compaction (same rows in new files)
    kAppend,  // timelake data files added, nothing removed
  };
  Kind kind = kNone;
  std::vector<std::string> paths;  // kAppend: the files added
  /// kAppend: the rows of those files by their statistics, -1 if unknown. An append of at most
  /// LastValueIndex::kRecordMinFileRows rows has no record to look for.
  int64_t rows = -1;
  /// kAppend by this handle: each file's newest rows (no sequence column); empty for other
  /// writers' appends, whose index record is read instead.
  std::vector<std::shared_ptr<arrow::Table>> newest;
};

/// latest() kept in the handle: the newest row per series (with the sequence column) exact at
/// `version`, and what each later commit did. latest() advances it over the commits in between
/// (O(series + new rows)) when they are all known appends or compactions; a gap (commits the
/// handle applied without seeing them), a removal of rows, another engine's files or a reload
/// sends it back to LastValueIndex::Read.
struct LatestState {
  static constexpr size_t kMaxDeltas = 1024;  // beyond this a full read is as cheap
  std::shared_ptr<arrow::Table> rows;  // null: nothing known yet
  int64_t version = -1;
  std::map<int64_t, LatestDelta> deltas;  // by commit version, only after `version`
  /// Notes commit `version`; a delta that cannot be followed (or too many) drops the state.
  void Note(int64_t version, std::optional<LatestDelta> delta);
};

struct BackgroundCompaction;  // table/maintain.cc
class Spool;                  // txn/spool.h

struct TableContext {
  TableContext(std::shared_ptr<ObjectStore> store, std::string table_path, std::string name)
      : store(store), table_path(table_path), name(std::move(name)), log(store, table_path),
        committer(&log, this->name) {}
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
  /// The table's spool for group commits across processes (local lakes only; CommitAcrossProcesses).
  std::shared_ptr<Spool> spool;
  bool spool_checked = false;
  int spool_expected = 0;  // requests the last commit led here took in: worth waiting for
  /// Post-commit work of appends (txn/upkeep.h). Last member: destroyed (drained) first.
  std::unique_ptr<Upkeep> upkeep = std::make_unique<Upkeep>();
};

/// Schema, contract and index from `t.snapshot.metadata`; NotImplemented if timelake cannot read
/// the table (column mapping, reader features it lacks).
arrow::Status LoadDerived(TableContext& t);
/// timelake's Arrow schema text in `m` (empty when absent).
const std::string& ArrowSchemaText(const Metadata& m);
/// Advances `t` to the latest version, deriving again if the table changed identity or schema.
arrow::Status Update(TableContext& t);
/// NotImplemented if the table uses writer features timelake cannot honour.
arrow::Status CheckWritable(const TableContext& t);
/// The Delta txn appId that records `batch_id`.
std::string BatchAppId(const std::string& batch_id);
/// True if the snapshot records `batch_id` (within the table's txn retention).
bool HasBatch(const TableContext& t, const std::string& batch_id);
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

/// Post-commit hook of every commit: a checkpoint when one is due (taken back if the table was
/// dropped meanwhile).
arrow::Status MaybeCheckpoint(TableContext& t);
/// The checkpoint of `snapshot`, written by a handle's upkeep thread after the commit was
/// acknowledged. Writer processes each checkpoint the versions they commit: one whose upkeep lags
/// behind finds a newer checkpoint named in `_last_checkpoint` and writes none (it would cost as
/// much as the newer one and point `_last_checkpoint` back to an older version).
arrow::Status WriteCheckpointUnlessSuperseded(DeltaLog& log, const Snapshot& snapshot);
/// Post-commit hook of commits that add files: writes the index record of commit `version` for
/// `files` (whose rows carry sequence number `seq`) and folds the index when due. A missing
/// record only makes latest() read those files.
arrow::Status RecordNewest(TableContext& t, const std::vector<WrittenFile>& files, int64_t version,
                           int64_t seq);
/// Writes the index record of commit `version` (`record`, unless null) for the files `paths` it
/// added, then folds the index at `snapshot` (unless null; skipped when a base at least as new
/// exists).
arrow::Status RecordAndFold(LastValueIndex& index, int64_t version,
                            const std::vector<std::string>& paths,
                            const std::shared_ptr<arrow::Table>& record, const Snapshot* snapshot);
/// The hooks a commit runs once acknowledged (see txn/post_commit.h): the checkpoint, and the
/// index record when it added `files` (which must outlive the hooks).
PostCommitHooks HooksAfter(TableContext& t, const std::vector<WrittenFile>* files, int64_t version,
                           int64_t seq);
/// The same work for append commit `version` (which added `files`, sequence number = version),
/// queued on the handle's upkeep instead of run now (txn/upkeep.h).
void QueueAfterAppend(TableContext& t, const std::vector<WrittenFile>& files, int64_t version);
/// Waits for the handle's queued upkeep and takes in what it did: the newest checkpoint, and
/// the commits of its background compaction passes (the handle advances to the latest version
/// when a pass committed beyond it).
arrow::Status FinishUpkeep(TableContext& t);
/// The newest version a background compaction pass of `t` committed (-1: none).
int64_t BackgroundCompactionVersion(const TableContext& t);
/// The newest row of every series at `t.snapshot` (with the sequence column), from the handle's
/// latest state when it can be advanced, else from the index (see LatestState).
arrow::Result<std::shared_ptr<arrow::Table>> LatestRows(TableContext& t);

/// After append commit(s) that added `files_added` files with no inline maintenance: once the
/// handle has appended enough files, queues a compaction pass on its upkeep thread (at most one
/// waiting at a time). The pass commits through a table context of its own, like a second
/// handle: it rewrites chunks that gathered many small files, bounded per pass, so that a table
/// fed by small appends keeps few files per chunk without anyone calling maintain(). Dying
/// midway loses nothing: a pass is one ordinary compaction commit (table/maintain.cc).
void MaybeCompactInBackground(TableContext& t, int64_t files_added);

/// What writing an append's files needs from the handle, copied under its lock so that the files
/// can be written without it (table/append.cc).
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

/// The first step of an append, under the lock: brings the handle up to date, checks the table
/// is writable and the batch id, and fills `plan`. A result when the append is already answered
/// (its batch id is in the table).
arrow::Result<std::optional<AppendResult>> PrepareAppend(TableContext& t, const AppendOptions& options,
                                                         AppendPlan* plan);
/// Writes the files of `reader` into `out` (no lock needed: touches no handle state), or, for
/// input of at most `share_max_rows` rows, keeps its rows for the group's shared file. On
/// failure what was written is deleted.
arrow::Status StageAppend(const AppendPlan& plan, arrow::RecordBatchReader* reader,
                          const AppendOptions& options, StagedAppend* out,
                          int64_t share_max_rows = 0);
/// The file(s), one per chunk, holding the rows of the appends of a group that kept theirs
/// (StagedAppend::shared).
struct SharedFiles {
  std::unique_ptr<Ingestor> ingestor;  // wrote them; deletes them if they are not committed
  std::vector<WrittenFile> files;
  std::vector<size_t> members;  // the appends whose rows they hold: indices into the group
};
/// Writes the rows of `group[i]` for each i of `members` (appends that kept their rows) into
/// `out` (no lock needed). An append planned with another storage schema than the first (a
/// schema change between their plans) writes its own files instead and stops sharing. On failure
/// nothing is left written.
arrow::Status WriteSharedFiles(const std::vector<StagedAppend*>& group,
                               const std::vector<size_t>& members, SharedFiles* out);

/// Commits staged appends as ONE Delta commit (group commit): every file of every append, the
/// shared file(s) holding the rows of the appends that kept theirs, a `txn` per batch id. Appends
/// whose batch id is already in the table, or earlier in `group`, are answered as duplicates and
/// their files deleted (and their rows left out of the shared file, rewritten without them).
/// `shared` may hold the shared files written before the lock was taken. One result per staged
/// append, in order. The commit's checkpoint and index record go to the upkeep thread.
std::vector<arrow::Result<AppendResult>> CommitStaged(TableContext& t,
                                                      const std::vector<StagedAppend*>& group,
                                                      SharedFiles shared = {});

/// CommitStaged across processes: on a local lake, appends that kept their rows join the commit
/// of another writer process when one is committing, or lead one that takes in the appends the
/// other processes handed over meanwhile (txn/spool.h). Otherwise CommitStaged.
std::vector<arrow::Result<AppendResult>> CommitAcrossProcesses(TableContext& t,
                                                               const std::vector<StagedAppend*>& group);

/// Adds the failures of earlier appends' upkeep (and `failures`) to `result`'s maintenance error.
void ReportUpkeepFailures(TableContext& t, std::vector<std::string> failures, AppendResult* result);
/// Prints where an append's time went when TIMELAKE_PROFILE is set (bench/README.md).
void PrintAppendProfile(const TableContext& t, const IngestProfile& p, double commit_ms,
                        double hooks_ms, int64_t rows);

/// Appends the batches of `reader` as one commit, the whole append under the handle's lock, with
/// the inline maintenance `options` ask for (table/append.cc).
arrow::Result<AppendResult> AppendBatches(TableContext& t, arrow::RecordBatchReader* reader,
                                          const AppendOptions& options);
/// The maintenance steps (table/maintain.cc). `inline_only` keeps the work bounded: what an
/// append may do after its commit.
arrow::Status MaintainLocked(TableContext& t, const MaintainOptions& options, bool inline_only,
                             MaintainResult* result);

}  // namespace timelake
