// Table maintenance: retention, compaction, log expiry, vacuum and index upkeep (see
// table_context.h).
#include "timelake/table_context.h"

#include <algorithm>
#include <chrono>
#include <set>

#include "timelake/log/file_tags.h"
#include "timelake/maintain/cleanup.h"
#include "timelake/maintain/compaction.h"
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

// Rewrites crowded chunks (bounded to one group when `inline_only`); `interrupt` is checked
// before and after rewriting each group.
arrow::Status Compact(TableContext& t, bool inline_only, const InterruptCheck& interrupt,
                      MaintainResult* result) {
  CompactionOptions options;
  options.target_file_bytes =
      ParseInt64(t.snapshot.Config("timelake.targetFileSize")).value_or(options.target_file_bytes);
  if (inline_only) {
    // Bounded work: one group, and only once a chunk has gathered enough small files.
    options.max_groups = 1;
    options.min_files = 16;
  }
  for (const auto& group : PlanCompaction(t.snapshot, t.contract, options)) {
    ARROW_RETURN_NOT_OK(CheckInterrupt(interrupt));
    auto rewriting = RewriteGroup(t.store, t.table_path, t.contract, t.declared, t.storage, group);
    if (!rewriting.ok() && IsNotFound(rewriting.status())) {
      // An input vanished: another process compacted the group (or retention dropped it) and
      // vacuumed the files since this snapshot was taken. That is a lost race, not damage,
      // unless the newest snapshot still lists the file.
      ARROW_RETURN_NOT_OK(Update(t));
      const bool overtaken = std::any_of(group.inputs.begin(), group.inputs.end(), [&](const AddFile& f) {
        return !t.snapshot.files.count(f.path);
      });
      if (overtaken) continue;
    }
    ARROW_ASSIGN_OR_RAISE(auto rewritten, std::move(rewriting));
    auto delete_outputs = [&] {
      for (const auto& f : rewritten.outputs) (void)t.store->Delete(t.table_path + "/" + f.path);
    };
    if (arrow::Status st = CheckInterrupt(interrupt); !st.ok()) {
      delete_outputs();  // rewritten but not committed
      return st;
    }
    // Deduplication changes what readers see; merging files alone does not.
    const bool data_change = rewritten.rows_out != rewritten.rows_in;
    const int64_t now_ms = NowMillis();
    Commit commit;
    for (const auto& input : group.inputs) {
      commit.removes.push_back(RemoveOf(input, data_change, now_ms, kRemovedByCompaction));
    }
    for (const auto& f : rewritten.outputs) {
      AddFile add = ToAddAction(f, data_change, now_ms);
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
    arrow::Status st = CommitPending(t, &pending, &outcome);
    if (!st.ok() || !outcome.version) {
      if (!outcome.outcome_unknown) delete_outputs();
      ARROW_RETURN_NOT_OK(st);
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

arrow::Status MaintainLocked(TableContext& t, const MaintainOptions& options, bool inline_only,
                             MaintainResult* result) {
  ARROW_RETURN_NOT_OK(CheckWritable(t));
  const bool time_series = t.contract.is_time_series();
  // Every step commits (or deletes) on its own: an interruption between steps leaves the
  // table consistent.
  ARROW_RETURN_NOT_OK(CheckInterrupt(options.interrupt));
  if (options.retention && time_series) ARROW_RETURN_NOT_OK(DropExpiredChunks(t, result));
  ARROW_RETURN_NOT_OK(CheckInterrupt(options.interrupt));
  if (options.compact) ARROW_RETURN_NOT_OK(Compact(t, inline_only, options.interrupt, result));
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
