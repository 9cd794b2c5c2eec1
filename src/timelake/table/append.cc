// Appending: input batches become data files (ingest/), then one commit (see table/append.h).
#include "timelake/table/append.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "timelake/table/group_commit.h"
#include "timelake/util/status.h"
#include "timelake/util/time.h"

namespace timelake {

// TIMELAKE_PROFILE=1 prints where each append's time went to stderr (bench/README.md).
void PrintAppendProfile(const TableContext& t, const IngestProfile& p, double commit_ms,
                        double hooks_ms, int64_t rows) {
  static const bool enabled = [] {
    const char* v = std::getenv("TIMELAKE_PROFILE");
    return v != nullptr && *v != '\0' && std::string(v) != "0";
  }();
  if (!enabled) return;
  std::fprintf(stderr,
               "timelake profile: append to %s, %lld rows: ingest %.1f ms wall (align %.1f, "
               "arrange %.1f, gather %.1f, summarise %.1f, encode %.1f, close %.1f ms of thread "
               "time), "
               "commit %.2f ms, post-commit %.2f ms\n",
               t.name.c_str(), static_cast<long long>(rows), p.wall * 1e3, p.align * 1e3,
               p.arrange * 1e3, p.gather * 1e3, p.summarise * 1e3, p.encode * 1e3, p.close * 1e3, commit_ms,
               hooks_ms);
}

arrow::Result<std::optional<AppendResult>> PrepareAppend(TableContext& t, const AppendOptions& options,
                                                         AppendPlan* plan) {
  ARROW_RETURN_NOT_OK(UpdateWhole(t));
  ARROW_RETURN_NOT_OK(CheckWritable(t));
  // Judged against the snapshot now, so that a duplicate writes no files; the committer judges
  // the id again on the snapshot it commits on (txn/committer.h).
  std::set<std::string> recorded;
  if (options.batch_id) {
    ARROW_ASSIGN_OR_RAISE(recorded,
                          RecordedTxns({{BatchAppId(*options.batch_id), options.batch_version}}, t.snapshot));
  }
  if (!recorded.empty()) {
    AppendResult result;
    result.version = t.snapshot.version;
    result.duplicate = true;
    return result;
  }
  *plan = AppendPlan{t.store, t.table_path, t.name, t.contract, t.declared, t.storage,
                     t.ingest_options, t.snapshot.version, NowMillis()};
  return std::nullopt;
}

arrow::Status StageAppend(const AppendPlan& plan, arrow::RecordBatchReader* reader,
                          const AppendOptions& options, StagedAppend* out, int64_t share_max_rows) {
  IngestOptions ingest_options = plan.ingest_options;
  ingest_options.interrupt = options.interrupt;
  if (options.buffer_bytes) ingest_options.buffer_bytes = std::max<int64_t>(1, *options.buffer_bytes);
  ingest_options.copy_input = options.copy_input;
  out->batch_id = options.batch_id;
  out->batch_version = options.batch_version;
  out->replace = options.replace;
  out->compact_after = options.maintain.value_or(true);
  out->head_checked_ms = plan.head_checked_ms;
  out->ingestor = std::make_unique<Ingestor>(plan.store, plan.table_path, plan.contract, plan.declared,
                                             plan.storage, ingest_options);
  arrow::Status st = out->ingestor->Consume(reader);
  if (st.ok()) {
    auto kept = out->ingestor->FinishOrKeep(share_max_rows);
    if (!kept.ok()) {
      st = kept.status();
    } else if (*kept) {
      out->shared = true;
      auto rows = out->ingestor->BufferedRowsAfterDedup();
      if (rows.ok()) out->rows = *rows;
      st = rows.status();
    } else {
      auto finished = out->ingestor->Finish();  // returns what FinishOrKeep wrote
      if (finished.ok()) out->files = std::move(*finished);
      st = finished.status();
    }
  }
  if (st.ok()) st = CheckInterrupt(options.interrupt);  // the last chance before committing
  if (!st.ok()) out->ingestor->Abort();
  return st;
}

arrow::Result<AppendResult> AppendBatches(TableContext& t, arrow::RecordBatchReader* reader,
                                          const AppendOptions& options) {
  AppendPlan plan;
  ARROW_ASSIGN_OR_RAISE(auto answered, PrepareAppend(t, options, &plan));
  if (answered) return *answered;
  StagedAppend staged;
  if (arrow::Status st = StageAppend(plan, reader, options, &staged); !st.ok()) {
    return DroppedOr(t, st);
  }
  if (staged.files.empty() && !options.batch_id && options.replace.empty()) {
    AppendResult empty;
    empty.version = t.snapshot.version;
    return empty;
  }
  const bool inline_maintenance = options.maintain.value_or(AutoMaintain(t));
  // Inline maintenance replaces the background pass.
  if (inline_maintenance) staged.compact_after = false;
  auto committed = CommitStaged(t, {&staged});
  ARROW_ASSIGN_OR_RAISE(AppendResult result, std::move(committed[0]));
  if (result.duplicate) return result;

  // The append is acknowledged: from here on nothing may turn it into an error. Only
  // maintenance the caller asked for runs before returning.
  PostCommitHooks hooks;
  if (inline_maintenance) {
    hooks.Add("inline maintenance", [&]() -> arrow::Status {
      // Maintenance reads the index: let it find this commit's record.
      ARROW_RETURN_NOT_OK(FinishUpkeep(t));
      MaintainResult maintenance;
      arrow::Status upkeep = MaintainLocked(t, MaintainOptions{}, /*inline_only=*/true, &maintenance);
      if (!upkeep.ok() || maintenance.partitions_dropped + maintenance.partitions_compacted +
                                  maintenance.snapshots_expired + maintenance.objects_deleted >
                              0) {
        result.maintenance = maintenance;
      }
      return upkeep;
    });
  }
  const auto hooks_started = std::chrono::steady_clock::now();
  auto failures = hooks.Run();
  PrintAppendProfile(t, staged.ingestor->profile(), result.commit_ms,
               std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                         hooks_started)
                   .count(),
               result.rows);
  ReportUpkeepFailures(t, std::move(failures), &result);
  return result;
}

arrow::Result<AppendResult> AppendThroughGroup(OperationLock& mutex, TableContext& t,
                                               GroupCommit& group, arrow::RecordBatchReader* reader,
                                               const AppendOptions& options) {
  if (options.batch_id && options.batch_id->empty()) {
    return arrow::Status::Invalid("batch_id must not be empty");
  }
  AppendPlan plan;
  if (!group.PlanWhileCommitting(options, &plan)) {
    ARROW_ASSIGN_OR_RAISE(auto lock, mutex.Acquire("append", options.interrupt));
    if (options.maintain.value_or(AutoMaintain(t)) || options.batch_version != 0 || !options.replace.empty()) {
      // Inline maintenance runs right after the append's own commit: all of it under the lock.
      return AppendBatches(t, reader, options);
    }
    ARROW_ASSIGN_OR_RAISE(auto answered, PrepareAppend(t, options, &plan));
    if (answered) return *answered;  // `plan` is not filled then
    group.Publish(plan, AutoMaintain(t));
  }
  // Writing the files needs no handle state: other threads' appends write theirs meanwhile. The
  // input stream may call back into user code, which must not re-enter the handle.
  StagedAppend staged;
  arrow::Status staging;
  {
    auto busy = mutex.MarkBusy("append");
    staging = StageAppend(plan, reader, options, &staged, kSharedFileMaxRows);
  }
  if (!staging.ok() || (staged.files.empty() && !staged.shared && !options.batch_id)) {
    ARROW_ASSIGN_OR_RAISE(auto lock, mutex.Acquire("append"));
    if (!staging.ok()) return DroppedOr(t, staging);
    AppendResult empty;
    empty.version = t.snapshot.version;
    return empty;
  }
  ARROW_ASSIGN_OR_RAISE(AppendResult result, group.Commit(&staged, options.interrupt));
  PrintAppendProfile(t, staged.ingestor->profile(), result.commit_ms, 0, result.rows);
  return result;
}

void ReportUpkeepFailures(TableContext& t, std::vector<std::string> failures, AppendResult* result) {
  // Upkeep of earlier appends that failed (a checkpoint that could not be written, say) is
  // reported here, with the first append that can tell.
  for (auto& earlier : t.upkeep.TakeFailures()) failures.push_back("earlier append's " + earlier);
  if (failures.empty()) return;
  std::string message;
  for (const auto& f : failures) message += (message.empty() ? "" : "; ") + f;
  if (!result->maintenance) result->maintenance = MaintainResult{};
  result->maintenance_error = message;
}

}  // namespace timelake
