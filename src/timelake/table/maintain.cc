// Table maintenance: retention, compaction, log expiry, vacuum and index folds (see
// table/maintain.h).
#include "timelake/table/maintain.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <system_error>
#include <thread>

#include <unistd.h>

#include "timelake/log/file_tags.h"
#include "timelake/maintain/cleanup.h"
#include "timelake/maintain/compaction.h"
#include "timelake/table/upkeep.h"
#include "timelake/util/parallel.h"
#include "timelake/util/status.h"
#include "timelake/util/time.h"

namespace timelake {
namespace {

// Commits the removal of every chunk that ended before now - retention.
arrow::Status DropExpiredChunks(TableContext& t, MaintainResult* result) {
  if (t.contract.retention_us <= 0) return arrow::Status::OK();
  for (int round = 1; round <= Committer::kMaxAttempts; ++round) {
    const int64_t cutoff = NowMicros() - t.contract.retention_us;
    Commit commit;
    std::set<std::string> chunks;
    const int64_t now_ms = NowMillis();
    for (const auto& [path, add] : t.snapshot.files) {
      const int64_t min_time = TagInt(add, kMinTimeTag, INT64_MAX);
      if (min_time == INT64_MAX) continue;
      if (ChunkEnd(t.contract.chunk, ChunkOrdinal(t.contract.chunk, min_time)) > cutoff) continue;
      commit.removes.push_back(RemoveOf(add, /*data_change=*/true, now_ms, kRemovedByRetention));
      chunks.insert(add.tags.count(kChunkTag) ? add.tags.at(kChunkTag) : path);
    }
    if (commit.removes.empty()) return arrow::Status::OK();
    CommitInfo info = NewCommitInfo("DELETE");
    info.operation_parameters = {{"predicate", "timelake retention: chunks that ended before " +
                                                   FormatIsoMillis(cutoff)}};
    info.metrics = {{"numRemovedFiles", static_cast<int64_t>(commit.removes.size())}};
    commit.commit_info = info;
    PendingCommit pending;
    pending.intent.kind = CommitKind::kRetention;
    for (const auto& remove : commit.removes) pending.intent.removes.insert(remove.path);
    pending.commit = std::move(commit);
    CommitOutcome outcome;
    ARROW_RETURN_NOT_OK(CommitPending(t, &pending, &outcome));
    if (outcome.version) {
      (void)HooksAfter(t, nullptr, *outcome.version, 0).Run();  // best effort, see post_commit.h
      result->partitions_dropped += static_cast<int64_t>(chunks.size());
      return arrow::Status::OK();
    }
    // Abandoned: a winner removed some of the same files. Plan again against the winners.
  }
  return CommitConflict("commit conflict: retention on '" + t.name + "' was overtaken by " +
                        std::to_string(Committer::kMaxAttempts) +
                        " concurrent removals in a row; retry later");
}

// How much one compaction does: everything worth doing for maintain(); bounded work, once a
// chunk has gathered enough small files, for inline maintenance (one group) and background
// passes (a few).
enum class CompactionScope { kFull, kInline, kBackground };

CompactionOptions CompactionOptionsFor(const TableContext& t, CompactionScope scope) {
  CompactionOptions options;
  options.target_file_bytes =
      ParseInt64(t.snapshot.Config("timelake.targetFileSize")).value_or(options.target_file_bytes);
  if (scope != CompactionScope::kFull) {
    options.tiered = true;
    options.min_files = 16;
    options.max_groups = scope == CompactionScope::kInline ? 1 : 4;
  }
  return options;
}

// Rewrites crowded chunks as `options` bounds; `interrupt` is checked before each group's commit
// (an interruption waits for the rewrites under way and deletes what they wrote).
arrow::Status Compact(TableContext& t, const CompactionOptions& options,
                      const InterruptCheck& interrupt, MaintainResult* result) {
  const std::vector<CompactionGroup> groups = PlanCompaction(t.snapshot, t.contract, options);
  if (groups.empty()) return arrow::Status::OK();
  ARROW_RETURN_NOT_OK(CheckInterrupt(interrupt));
  // Groups are rewritten on all cores, each mostly one thread's work (reading, merging one
  // chunk), sharing the memory budget; this thread commits them one by one in plan order as each
  // is ready. Commits overlap the next rewrites, and no core waits for a slower group of the same
  // round to finish.
  const size_t workers = std::max<size_t>(1, std::min<size_t>(CpuParallelism(), groups.size()));
  const int64_t budget = std::max<int64_t>(1, options.memory_budget / static_cast<int64_t>(workers));
  // What a rewrite reads, copied: a commit here may update the context (rebasing) meanwhile.
  const std::shared_ptr<ObjectStore> store = t.store;
  const std::string table_path = t.table_path;
  const Contract contract = t.contract;
  const std::shared_ptr<arrow::Schema> declared = t.declared, storage = t.storage;
  std::mutex mutex;
  std::condition_variable ready;
  std::vector<std::optional<arrow::Result<RewrittenGroup>>> rewrites(groups.size());
  size_t next = 0;
  bool stopping = false;
  auto work = [&] {
    for (;;) {
      size_t k;
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (stopping || next == groups.size()) return;
        k = next++;
      }
      RewriteOptions rewrite;
      rewrite.memory_budget = budget;
      arrow::Result<RewrittenGroup> rewritten = arrow::Status::UnknownError("not rewritten");
      try {
        rewritten = RewriteGroup(store, table_path, contract, declared, storage, groups[k], rewrite);
      } catch (const std::exception& e) {  // (bad_alloc): an error of this group, not the process's end
        rewritten = arrow::Status::OutOfMemory("rewriting chunk ", groups[k].chunk, ": ", e.what());
      }
      {
        std::lock_guard<std::mutex> lock(mutex);
        rewrites[k] = std::move(rewritten);
      }
      ready.notify_all();
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(workers);
  // On the way out, however it goes: the workers stop after the group each is rewriting, and
  // outputs rewritten but not committed (groups from `uncommitted` on) are deleted.
  size_t uncommitted = 0;
  struct StopWorkers {
    std::function<void()> stop;
    ~StopWorkers() { stop(); }
  } stop_workers{[&] {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    for (auto& thread : pool) thread.join();
    for (size_t k = uncommitted; k < groups.size(); ++k) {
      if (!rewrites[k] || !rewrites[k]->ok()) continue;
      for (const auto& f : (*rewrites[k])->outputs) (void)t.store->Delete(t.table_path + "/" + f.path);
    }
  }};
  try {
    for (size_t w = 0; w < workers; ++w) pool.emplace_back(work);
  } catch (const std::exception&) {
    // Fewer threads than asked: the ones started do the work.
  }
  if (pool.empty()) work();  // no thread at all: every group rewritten here first
  for (size_t k = 0; k < groups.size(); ++k) {
    uncommitted = k;
    {
      std::unique_lock<std::mutex> lock(mutex);
      ready.wait(lock, [&] { return rewrites[k].has_value(); });
      if (k > 0) rewrites[k - 1].reset();  // committed or given up: its rows' summaries go
    }
    arrow::Result<RewrittenGroup>& rewrite = *rewrites[k];
    const CompactionGroup& group = groups[k];
    if (!rewrite.ok() && IsNotFound(rewrite.status())) {
      // An input vanished: another process compacted the group (or retention dropped it) and
      // vacuumed the files since this snapshot was taken. That is a lost race, not damage,
      // unless the newest snapshot still lists the file.
      ARROW_RETURN_NOT_OK(Update(t));
      const bool overtaken = std::any_of(group.inputs.begin(), group.inputs.end(), [&](const AddFile& f) {
        return !t.snapshot.files.count(f.path);
      });
      if (overtaken) continue;
    }
    if (!rewrite.ok()) return rewrite.status();
    // Rewritten but not committed: deleted (on the way out) if this stops here.
    ARROW_RETURN_NOT_OK(CheckInterrupt(interrupt));
    RewrittenGroup& rewritten = *rewrite;
    // Deduplication changes what readers see; merging files alone does not.
    const bool data_change = rewritten.rows_out != rewritten.rows_in;
    const int64_t now_ms = NowMillis();
    Commit commit;
    for (const auto& input : group.inputs) {
      commit.removes.push_back(RemoveOf(input, data_change, now_ms, kRemovedByCompaction));
    }
    for (size_t i = 0; i < rewritten.outputs.size(); ++i) {
      AddFile add = ToAddAction(rewritten.outputs[i], data_change, now_ms);
      if (i < rewritten.full.size() && rewritten.full[i]) add.tags[kFullTag] = "true";
      add.tags[kSeqTag] = std::to_string(group.seq);  // the rows are as new as the newest input
      commit.adds.push_back(std::move(add));
    }
    CommitInfo info = NewCommitInfo("OPTIMIZE");
    info.operation_parameters = {{"targetSize", std::to_string(options.target_file_bytes)},
                                 {"predicate", "[\"chunk = '" + group.chunk + "'\"]"}};
    info.metrics = {{"numRemovedFiles", static_cast<int64_t>(group.inputs.size())},
                    {"numAddedFiles", static_cast<int64_t>(rewritten.outputs.size())},
                    {"numDeduplicatedRows", rewritten.rows_in - rewritten.rows_out}};
    commit.commit_info = info;
    // Appends never conflict; a winner that removed one of the inputs (another compaction,
    // retention) abandons this group: the next maintain plans again.
    PendingCommit pending;
    pending.intent.kind = CommitKind::kCompaction;
    for (const auto& input : group.inputs) pending.intent.removes.insert(input.path);
    pending.commit = std::move(commit);
    CommitOutcome outcome;
    // From here this group's outputs are committed, deleted below, or of unknown fate: never
    // deleted on the way out (not even if the commit throws after its entry landed).
    uncommitted = k + 1;
    arrow::Status st = CommitPending(t, &pending, &outcome);
    if (!st.ok() || !outcome.version) {
      if (!outcome.outcome_unknown) {
        for (const auto& f : rewritten.outputs) (void)t.store->Delete(t.table_path + "/" + f.path);
      }
      if (!st.ok()) return st;
      continue;
    }
    // Best effort (see post_commit.h): a missing index record only makes latest() read the
    // outputs.
    (void)HooksAfter(t, &rewritten.outputs, *outcome.version, group.seq).Run();
    result->partitions_compacted += 1;
    result->files_rewritten += static_cast<int64_t>(group.inputs.size());
    result->files_written += static_cast<int64_t>(rewritten.outputs.size());
    result->rows_rewritten += rewritten.rows_in;
    result->duplicates_removed += rewritten.rows_in - rewritten.rows_out;
  }
  return arrow::Status::OK();
}

}  // namespace

// The background passes of one handle (MaybeCompactInBackground). Shared by the handle and its
// queued pass; `table` is touched on the upkeep thread only.
struct BackgroundCompaction {
  // The process whose pass is queued and has not started yet (0: none). A child made by fork()
  // inherits this but not the parent's upkeep queue (table/upkeep.h): seeing its parent's id here,
  // it queues passes of its own.
  std::atomic<pid_t> queued_by{0};
  std::atomic<int64_t> committed{-1};  // the newest version a pass committed
  std::unique_ptr<TableContext> table;
  pid_t table_of = 0;  // the process that opened `table`

  arrow::Status Pass(const std::shared_ptr<ObjectStore>& store, const std::string& table_path,
                     const std::string& name, bool heads) {
    if (table && table_of != getpid()) {
      // A forked child's copy of its parent's context, possibly taken mid-pass: not ours to
      // use or to destroy.
      (void)table.release();
    }
    if (!table) {
      auto opened = std::make_unique<TableContext>(store, table_path, name);
      opened->heads = heads;  // its commits write the table head, as the handle's do
      auto snapshot = opened->log.Load();
      if (!snapshot.ok()) {
        // Dropped since the append: nothing left to compact.
        return snapshot.status().IsKeyError() ? arrow::Status::OK() : snapshot.status();
      }
      opened->snapshot = std::move(*snapshot);
      ARROW_RETURN_NOT_OK(LoadDerived(*opened));
      table = std::move(opened);
      table_of = getpid();
    } else if (arrow::Status st = Update(*table); !st.ok()) {
      return IsTableNotFound(st) ? arrow::Status::OK() : st;
    }
    TableContext& t = *table;
    // The property may have been switched off since, or another engine raised the protocol.
    if (!BackgroundCompactionOn(t) || !CheckWritable(t).ok()) return arrow::Status::OK();
    // One background pass per table at a time on this machine: writer processes each run their
    // own passes, and two passes over the same files waste a rewrite (the later one conflicts).
    // A pass that finds another running skips: that one compacts what this one would have.
    ARROW_ASSIGN_OR_RAISE(auto turn, store->LockExclusive(table_path + "/_timelake/compaction.lock", 0));
    if (!turn && store->HasLocks()) return arrow::Status::OK();
    MaintainResult done;
    arrow::Status st = Compact(t, CompactionOptionsFor(t, CompactionScope::kBackground), nullptr, &done);
    if (done.partitions_compacted > 0) committed = t.snapshot.version;
    // Losing to a concurrent compaction or retention is the normal outcome of a race, and a
    // table dropped meanwhile has nothing left to compact.
    if (IsCommitConflict(st)) return arrow::Status::OK();
    st = DroppedOr(t, st);
    return IsTableNotFound(st) ? arrow::Status::OK() : st;
  }
};

int64_t BackgroundCompactionVersion(const TableContext& t) {
  return t.compaction ? t.compaction->committed.load() : -1;
}

void MaybeCompactInBackground(TableContext& t, int64_t files_added) {
  // Enough new files that a chunk may have reached the threshold (CompactionOptionsFor): planning
  // a pass walks the snapshot, which is not work to do after every small append.
  constexpr int64_t kFilesPerPass = 8;
  if (files_added <= 0 || !BackgroundCompactionOn(t)) return;
  t.files_since_compaction += files_added;
  if (t.files_since_compaction < kFilesPerPass) return;
  if (!t.compaction) t.compaction = std::make_shared<BackgroundCompaction>();
  const pid_t self = getpid();
  if (t.compaction->queued_by.exchange(self) == self) return;  // the waiting pass will see these files
  t.files_since_compaction = 0;
  t.upkeep.Post("background compaction",
                 [compaction = t.compaction, store = t.store, path = t.table_path, name = t.name,
                  heads = t.heads] {
                   compaction->queued_by = 0;
                   return compaction->Pass(store, path, name, heads);
                 });
}

arrow::Status MaintainLocked(TableContext& t, const MaintainOptions& options, bool inline_only,
                             MaintainResult* result) {
  ARROW_RETURN_NOT_OK(CheckWritable(t));
  const bool time_series = t.contract.is_time_series();
  // Every step commits (or deletes) on its own: an interruption between steps leaves the
  // table consistent.
  ARROW_RETURN_NOT_OK(CheckInterrupt(options.interrupt));
  if (options.retention && time_series) ARROW_RETURN_NOT_OK(DropExpiredChunks(t, result));
  ARROW_RETURN_NOT_OK(CheckInterrupt(options.interrupt));
  if (options.compact) {
    ARROW_RETURN_NOT_OK(Compact(
        t, CompactionOptionsFor(t, inline_only ? CompactionScope::kInline : CompactionScope::kFull),
        options.interrupt, result));
  }
  if (options.expire && !inline_only) {
    // Listing the log and the data folder is not bounded work: full maintain() only.
    const int64_t now_ms = NowMillis();
    ARROW_RETURN_NOT_OK(CheckInterrupt(options.interrupt));
    ARROW_ASSIGN_OR_RAISE(auto expired, ExpireLog(t.store.get(), t.table_path, t.snapshot, now_ms));
    ARROW_RETURN_NOT_OK(CheckInterrupt(options.interrupt));
    ARROW_ASSIGN_OR_RAISE(auto vacuumed, Vacuum(t.store.get(), t.table_path, t.snapshot, now_ms));
    result->snapshots_expired += expired.snapshots_expired;
    result->objects_deleted += expired.objects_deleted + vacuumed.objects_deleted;
    if (expired.oldest_version > t.snapshot.oldest_version) {
      t.snapshot.oldest_version = expired.oldest_version;
    }
  }
  if (!time_series) return arrow::Status::OK();
  ARROW_RETURN_NOT_OK(CheckInterrupt(options.interrupt));
  // Fold the last-value index once enough records piled up (always on a full maintain).
  ARROW_ASSIGN_OR_RAISE(auto state, t.index->Read(t.snapshot));
  // Inline upkeep folds once reading the index costs enough: many records, files that no record
  // summarises, or objects that had to be rebuilt.
  if (!inline_only || state.records >= 64 || state.files_read >= 16 || state.rebuilt) {
    if (state.records > 0 || state.base_version < t.snapshot.version) {
      ARROW_ASSIGN_OR_RAISE(int64_t deleted, t.index->Fold(state));
      result->objects_deleted += deleted;
    }
  }
  return arrow::Status::OK();
}

}  // namespace timelake
