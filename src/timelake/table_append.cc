// Appending: input batches become data files (ingest/), then one commit (see table_context.h).
#include "timelake/table_context.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "timelake/log/file_tags.h"
#include "timelake/util/time.h"

namespace timelake {
namespace {

// TIMELAKE_PROFILE=1 prints where each append's time went to stderr (bench/README.md).
void PrintProfile(const TableContext& t, const IngestProfile& p, double commit_ms, double hooks_ms,
                  int64_t rows) {
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

}  // namespace

arrow::Result<AppendResult> AppendBatches(TableContext& t, arrow::RecordBatchReader* reader,
                                          const AppendOptions& options) {
  ARROW_RETURN_NOT_OK(Update(t));
  const int64_t head_checked_ms = NowMillis();  // Update read the head commit just now
  ARROW_RETURN_NOT_OK(CheckWritable(t));

  AppendResult result;
  if (options.batch_id) {
    if (options.batch_id->empty()) return arrow::Status::Invalid("batch_id must not be empty");
    if (HasBatch(t, *options.batch_id)) {
      result.version = t.snapshot.version;
      result.duplicate = true;
      return result;
    }
  }

  IngestOptions ingest_options = t.ingest_options;
  ingest_options.interrupt = options.interrupt;
  Ingestor ingestor(t.store, t.table_path, t.contract, t.declared, t.storage, ingest_options);
  std::vector<WrittenFile> files;
  {
    arrow::Status st = ingestor.Consume(reader);
    if (st.ok()) {
      auto finished = ingestor.Finish();
      if (finished.ok()) {
        files = std::move(*finished);
      } else {
        st = finished.status();
      }
    }
    if (st.ok()) st = CheckInterrupt(options.interrupt);  // the last chance before committing
    if (!st.ok()) {
      ingestor.Abort();
      return DroppedOr(t, st);
    }
  }
  if (files.empty() && !options.batch_id) {
    result.version = t.snapshot.version;
    return result;
  }

  Commit commit;
  CommitInfo info = NewCommitInfo("WRITE");
  info.operation_parameters = {{"mode", "Append"}};
  info.is_blind_append = true;
  for (const auto& f : files) {
    result.rows += f.rows;
    result.bytes += f.size;
  }
  result.files = static_cast<int64_t>(files.size());
  info.metrics = {{"numFiles", result.files}, {"numOutputRows", result.rows},
                  {"numOutputBytes", result.bytes}};
  if (options.batch_id) {
    commit.txns.push_back({BatchAppId(*options.batch_id), 0, NowMillis()});
  }
  const int64_t now_ms = NowMillis();
  for (const auto& f : files) commit.adds.push_back(ToAddAction(f, /*data_change=*/true, now_ms));

  commit.commit_info = info;

  PendingCommit pending;
  pending.commit = std::move(commit);
  pending.intent.kind = CommitKind::kAppend;
  pending.head_checked_ms = head_checked_ms;
  if (options.batch_id) pending.intent.txn_app_ids.insert(BatchAppId(*options.batch_id));
  pending.prepare = [](Commit* c, int64_t version) {
    for (auto& add : c->adds) add.tags[kSeqTag] = std::to_string(version);
  };
  const auto started = std::chrono::steady_clock::now();
  CommitOutcome outcome;
  if (arrow::Status st = CommitPending(t, &pending, &outcome); !st.ok()) {
    // With an unknown outcome the files may be referenced by a commit: vacuum decides later.
    if (!outcome.outcome_unknown) ingestor.Abort();
    return DroppedOr(t, st);
  }
  if (!outcome.version) {
    // A concurrent append recorded the same batch id: this one is its duplicate.
    ingestor.Abort();
    AppendResult dup;
    dup.version = t.snapshot.version;
    dup.duplicate = outcome.abandoned && outcome.abandoned->effect == WinnerEffect::kRecordedSameTxn;
    dup.attempts = outcome.attempts;
    return dup;
  }
  result.version = *outcome.version;
  result.attempts = outcome.attempts;
  result.commit_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  // The append is acknowledged: from here on nothing may turn it into an error. The checkpoint
  // and the index record go to the handle's upkeep thread (txn/upkeep.h); only maintenance the
  // caller asked for runs before returning.
  QueueAfterAppend(t, files, result.version);
  PostCommitHooks hooks;
  const bool inline_maintenance = options.maintain.value_or(AutoMaintain(t));
  // maintain=False asks for no maintenance at all from this append, background passes included.
  if (!inline_maintenance && !options.maintain) MaybeCompactInBackground(t, result.files);
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
  PrintProfile(t, ingestor.profile(), result.commit_ms,
               std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                         hooks_started)
                   .count(),
               result.rows);
  // Upkeep of earlier appends that failed (a checkpoint that could not be written, say) is
  // reported here, with the first append that can tell.
  for (auto& earlier : t.upkeep->TakeFailures()) failures.push_back("earlier append's " + earlier);
  if (!failures.empty()) {
    std::string message;
    for (const auto& f : failures) message += (message.empty() ? "" : "; ") + f;
    if (!result.maintenance) result.maintenance = MaintainResult{};
    result.maintenance_error = message;
  }
  return result;
}

}  // namespace timelake
