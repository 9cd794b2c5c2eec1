// Table maintenance: retention, compaction, log expiry, vacuum and index upkeep (see table.h).
#include "timelake/table.h"

#include <chrono>
#include <set>

#include "timelake/log/file_tags.h"
#include "timelake/maintain/cleanup.h"
#include "timelake/maintain/compaction.h"
#include "timelake/util/status.h"
#include "timelake/util/time.h"

namespace timelake {

bool Table::AutoMaintain() const { return snapshot_.Config("timelake.autoMaintain") == "true"; }

arrow::Result<MaintainResult> Table::Maintain(const MaintainOptions& options) {
  ARROW_ASSIGN_OR_RAISE(auto lock, mutex_.Acquire("maintain", options.interrupt));
  const auto started = std::chrono::steady_clock::now();
  ARROW_RETURN_NOT_OK(log_.Update(&snapshot_));
  if (snapshot_.metadata.id != metadata_id_) ARROW_RETURN_NOT_OK(LoadDerived());
  MaintainResult result;
  ARROW_RETURN_NOT_OK(DroppedOr(MaintainLocked(options, /*inline_only=*/false, &result)));
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

arrow::Status Table::MaintainLocked(const MaintainOptions& options, bool inline_only,
                                    MaintainResult* result) {
  ARROW_RETURN_NOT_OK(CheckWritable());
  const bool time_series = contract_.is_time_series();
  // Every step commits (or deletes) on its own: an interruption between steps leaves the
  // table consistent.
  ARROW_RETURN_NOT_OK(CheckInterrupt(options.interrupt));
  if (options.retention && time_series) ARROW_RETURN_NOT_OK(DropExpiredChunks(result));
  ARROW_RETURN_NOT_OK(CheckInterrupt(options.interrupt));
  if (options.compact) ARROW_RETURN_NOT_OK(Compact(inline_only, options.interrupt, result));
  if (options.expire && !inline_only) {
    // Listing the log and the data folder is not bounded work: full maintain() only.
    const int64_t now_ms = NowMillis();
    ARROW_RETURN_NOT_OK(CheckInterrupt(options.interrupt));
    ARROW_ASSIGN_OR_RAISE(auto expired, ExpireLog(store_.get(), table_path_, snapshot_, now_ms));
    ARROW_RETURN_NOT_OK(CheckInterrupt(options.interrupt));
    ARROW_ASSIGN_OR_RAISE(auto vacuumed, Vacuum(store_.get(), table_path_, snapshot_, now_ms));
    result->snapshots_expired += expired.snapshots_expired;
    result->objects_deleted += expired.objects_deleted + vacuumed.objects_deleted;
    if (expired.oldest_version > snapshot_.oldest_version) {
      snapshot_.oldest_version = expired.oldest_version;
    }
  }
  if (!time_series) return arrow::Status::OK();
  ARROW_RETURN_NOT_OK(CheckInterrupt(options.interrupt));
  // Fold the last-value index once enough records piled up (always on a full maintain).
  ARROW_ASSIGN_OR_RAISE(auto state, index_->Read(snapshot_));
  // Inline upkeep folds once reading the index costs enough: many records, files that no record
  // summarises, or objects that had to be rebuilt.
  if (!inline_only || state.records >= 64 || state.files_read >= 16 || state.rebuilt) {
    if (state.records > 0 || state.base_version < snapshot_.version) {
      ARROW_ASSIGN_OR_RAISE(int64_t deleted, index_->Fold(state));
      result->objects_deleted += deleted;
    }
  }
  return arrow::Status::OK();
}

arrow::Status Table::DropExpiredChunks(MaintainResult* result) {
  if (contract_.retention_us <= 0) return arrow::Status::OK();
  for (int round = 1; round <= kMaxCommitAttempts; ++round) {
    const int64_t cutoff = NowMicros() - contract_.retention_us;
    Commit commit;
    std::set<std::string> chunks;
    const int64_t now_ms = NowMillis();
    for (const auto& [path, add] : snapshot_.files) {
      const int64_t min_time = TagInt(add, kMinTimeTag, INT64_MAX);
      if (min_time == INT64_MAX) continue;
      if (ChunkEnd(contract_.chunk, ChunkOrdinal(contract_.chunk, min_time)) > cutoff) continue;
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
    ARROW_RETURN_NOT_OK(CommitPending(&pending, &outcome));
    if (outcome.version) {
      (void)HooksAfter(nullptr, *outcome.version, 0).Run();  // best effort, see post_commit.h
      result->partitions_dropped += static_cast<int64_t>(chunks.size());
      return arrow::Status::OK();
    }
    // Abandoned: a winner removed some of the same files. Plan again against the winners.
  }
  return CommitConflict("commit conflict: retention on '" + name_ + "' was overtaken by " +
                        std::to_string(kMaxCommitAttempts) +
                        " concurrent removals in a row; retry later");
}

arrow::Status Table::Compact(bool inline_only, const InterruptCheck& interrupt,
                             MaintainResult* result) {
  CompactionOptions options;
  options.target_file_bytes =
      ParseInt64(snapshot_.Config("timelake.targetFileSize")).value_or(options.target_file_bytes);
  if (inline_only) {
    // Bounded work: one group, and only once a chunk has gathered enough small files.
    options.max_groups = 1;
    options.min_files = 16;
  }
  for (const auto& group : PlanCompaction(snapshot_, contract_, options)) {
    ARROW_RETURN_NOT_OK(CheckInterrupt(interrupt));
    ARROW_ASSIGN_OR_RAISE(auto rewritten,
                          RewriteGroup(store_, table_path_, contract_, declared_, storage_, group));
    auto delete_outputs = [&] {
      for (const auto& f : rewritten.outputs) (void)store_->Delete(table_path_ + "/" + f.path);
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
    arrow::Status st = CommitPending(&pending, &outcome);
    if (!st.ok() || !outcome.version) {
      if (!outcome.outcome_unknown) delete_outputs();
      ARROW_RETURN_NOT_OK(st);
      continue;
    }
    // Best effort (see post_commit.h): a missing index record only makes latest() read the
    // outputs.
    (void)HooksAfter(&rewritten.outputs, *outcome.version, group.seq).Run();
    result->partitions_compacted += 1;
    result->files_rewritten += static_cast<int64_t>(group.inputs.size());
    result->files_written += static_cast<int64_t>(rewritten.outputs.size());
    result->rows_rewritten += rewritten.rows_in;
    result->duplicates_removed += rewritten.rows_in - rewritten.rows_out;
  }
  return arrow::Status::OK();
}

}  // namespace timelake
