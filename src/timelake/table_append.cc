// Appending: input batches become data files (ingest/), then one commit (see table_context.h).
#include "timelake/table_context.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "timelake/log/file_tags.h"
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
  ARROW_RETURN_NOT_OK(Update(t));
  ARROW_RETURN_NOT_OK(CheckWritable(t));
  if (options.batch_id) {
    if (options.batch_id->empty()) return arrow::Status::Invalid("batch_id must not be empty");
    if (HasBatch(t, *options.batch_id)) {
      AppendResult result;
      result.version = t.snapshot.version;
      result.duplicate = true;
      return result;
    }
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

arrow::Status WriteSharedFiles(const std::vector<StagedAppend*>& group,
                               const std::vector<size_t>& members, SharedFiles* out) {
  *out = SharedFiles{};
  if (members.empty()) return arrow::Status::OK();
  const auto& schema = group[members[0]]->ingestor->storage();
  out->ingestor = group[members[0]]->ingestor->Sibling();
  arrow::Status st;
  for (size_t i : members) {
    StagedAppend& member = *group[i];
    if (!member.ingestor->storage()->Equals(*schema)) {
      auto own = member.ingestor->Finish();
      if (!own.ok()) {
        st = own.status();
        break;
      }
      member.files = std::move(*own);
      member.shared = false;
      continue;
    }
    st = out->ingestor->Add(member.ingestor->buffered());
    if (!st.ok()) break;
    out->members.push_back(i);
  }
  if (st.ok()) {
    auto written = out->ingestor->Finish();
    if (written.ok()) out->files = std::move(*written);
    st = written.status();
  }
  if (!st.ok()) {
    out->ingestor->Abort();
    *out = SharedFiles{};
  }
  return st;
}

std::vector<arrow::Result<AppendResult>> CommitStaged(TableContext& t,
                                                      const std::vector<StagedAppend*>& group,
                                                      SharedFiles shared) {
  std::vector<std::optional<arrow::Result<AppendResult>>> results(group.size());
  auto answer_duplicate = [&](size_t i, int64_t version) {
    group[i]->ingestor->Abort();
    AppendResult dup;
    dup.version = version;
    dup.duplicate = true;
    results[i] = dup;
  };
  const auto started = std::chrono::steady_clock::now();
  int attempts = 0;
  // The shared files hold the rows of the live appends that kept theirs; rewritten when a round
  // answers one of them as a duplicate.
  auto drop_shared = [&] {
    if (shared.ingestor) shared.ingestor->Abort();
    shared = SharedFiles{};
  };
  // Each round commits the appends not answered yet; a round is lost only when a concurrent
  // writer recorded one of their batch ids, which makes that append a duplicate.
  for (int round = 0; round < Committer::kMaxAttempts; ++round) {
    std::vector<size_t> live;
    std::vector<size_t> repeated;  // a batch id an earlier live append of the group carries
    std::set<std::string> ids;
    for (size_t i = 0; i < group.size(); ++i) {
      if (results[i]) continue;
      const auto& id = group[i]->batch_id;
      if (id && HasBatch(t, *id)) {
        answer_duplicate(i, t.snapshot.version);
      } else if (id && !ids.insert(*id).second) {
        repeated.push_back(i);
      } else {
        live.push_back(i);
      }
    }
    if (live.empty()) break;

    std::vector<size_t> sharing;
    for (size_t i : live) {
      if (group[i]->shared) sharing.push_back(i);
    }
    if (sharing != shared.members) {
      drop_shared();
      if (arrow::Status st = WriteSharedFiles(group, sharing, &shared); !st.ok()) {
        st = DroppedOr(t, st);
        for (size_t i : live) {
          group[i]->ingestor->Abort();
          results[i] = st;
        }
        for (size_t i : repeated) {
          group[i]->ingestor->Abort();
          results[i] = st;
        }
        break;
      }
      sharing = shared.members;
    }

    Commit commit;
    CommitInfo info = NewCommitInfo("WRITE");
    info.operation_parameters = {{"mode", "Append"}};
    info.is_blind_append = true;
    int64_t rows = 0, bytes = 0, files = 0;
    const int64_t now_ms = NowMillis();
    int order = 0;  // write order across the group: later appends win ties, as later commits do
    for (size_t i : live) {
      // The shared files take the place of the first append whose rows they hold (appends
      // grouped together are concurrent: none of them is later than another).
      auto& own = group[i]->files;
      auto& written = !sharing.empty() && i == sharing[0] ? shared.files : own;
      for (auto& f : written) {
        f.order = order++;
        rows += f.rows;
        bytes += f.size;
        ++files;
        commit.adds.push_back(ToAddAction(f, /*data_change=*/true, now_ms));
      }
      if (group[i]->batch_id) commit.txns.push_back({BatchAppId(*group[i]->batch_id), 0, now_ms});
    }
    info.metrics = {{"numFiles", files}, {"numOutputRows", rows}, {"numOutputBytes", bytes}};
    if (live.size() > 1) info.operation_parameters["timelake.groupedAppends"] = std::to_string(live.size());
    commit.commit_info = info;

    PendingCommit pending;
    pending.commit = std::move(commit);
    pending.intent.kind = CommitKind::kAppend;
    // The oldest of the appends' head checks (the handle's snapshot head is at least as fresh).
    pending.head_checked_ms = INT64_MAX;
    for (size_t i : live) {
      pending.head_checked_ms = std::min(pending.head_checked_ms, group[i]->head_checked_ms);
    }
    if (round > 0) pending.head_checked_ms = 0;
    pending.own_head = [&t] { return BackgroundCompactionVersion(t); };
    for (const auto& id : ids) pending.intent.txn_app_ids.insert(BatchAppId(id));
    pending.prepare = [](Commit* c, int64_t version) {
      for (auto& add : c->adds) add.tags[kSeqTag] = std::to_string(version);
    };
    CommitOutcome outcome;
    arrow::Status st = CommitPending(t, &pending, &outcome);
    attempts += outcome.attempts;
    if (!st.ok()) {
      // With an unknown outcome the files may be referenced by a commit: vacuum decides later.
      st = DroppedOr(t, st);
      if (outcome.outcome_unknown) shared.ingestor.reset();  // keep the shared files too
      drop_shared();
      for (size_t i : live) {
        if (!outcome.outcome_unknown) group[i]->ingestor->Abort();
        results[i] = st;
      }
      for (size_t i : repeated) {
        group[i]->ingestor->Abort();
        results[i] = st;
      }
      break;
    }
    if (!outcome.version) {
      // A concurrent append recorded one of the batch ids: the next round answers it as a
      // duplicate and commits the others.
      if (outcome.abandoned && outcome.abandoned->effect == WinnerEffect::kRecordedSameTxn) continue;
      drop_shared();
      for (size_t i : live) answer_duplicate(i, t.snapshot.version);
      for (size_t i : repeated) answer_duplicate(i, t.snapshot.version);
      break;
    }
    const int64_t version = *outcome.version;
    const double commit_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
    std::vector<WrittenFile> all = shared.files;
    int64_t compact_files = 0;
    int64_t shared_rows = 0, shared_bytes = 0;
    for (size_t i : sharing) shared_rows += group[i]->rows;
    for (const auto& f : shared.files) shared_bytes += f.size;
    bool compact_shared = false;
    for (size_t i : live) {
      AppendResult r;
      r.version = version;
      r.attempts = attempts;
      r.commit_ms = commit_ms;
      if (group[i]->shared) {
        // Each append sharing the files counts them, and its share of their bytes by rows.
        r.files = static_cast<int64_t>(shared.files.size());
        r.rows = group[i]->rows;
        r.bytes = shared_rows > 0 ? shared_bytes * r.rows / shared_rows : 0;
        compact_shared = compact_shared || group[i]->compact_after;
      } else {
        r.files = static_cast<int64_t>(group[i]->files.size());
        for (const auto& f : group[i]->files) {
          r.rows += f.rows;
          r.bytes += f.size;
          all.push_back(f);
        }
        if (group[i]->compact_after) compact_files += r.files;
      }
      results[i] = r;
    }
    if (compact_shared) compact_files += static_cast<int64_t>(shared.files.size());
    shared.ingestor.reset();  // committed: the files are the table's now
    for (size_t i : repeated) answer_duplicate(i, version);
    // Acknowledged: the checkpoint and the index record go to the upkeep thread.
    QueueAfterAppend(t, all, version);
    MaybeCompactInBackground(t, compact_files);
    break;
  }
  drop_shared();  // unless committed (or maybe committed): every append was answered otherwise
  std::vector<arrow::Result<AppendResult>> out;
  for (auto& r : results) {
    out.push_back(r ? std::move(*r)
                    : arrow::Result<AppendResult>(CommitConflict(
                          "commit conflict: an append to '" + t.name + "' lost " +
                          std::to_string(Committer::kMaxAttempts) + " rounds in a row; retry it")));
  }
  return out;
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
  if (staged.files.empty() && !options.batch_id) {
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

void ReportUpkeepFailures(TableContext& t, std::vector<std::string> failures, AppendResult* result) {
  // Upkeep of earlier appends that failed (a checkpoint that could not be written, say) is
  // reported here, with the first append that can tell.
  for (auto& earlier : t.upkeep->TakeFailures()) failures.push_back("earlier append's " + earlier);
  if (failures.empty()) return;
  std::string message;
  for (const auto& f : failures) message += (message.empty() ? "" : "; ") + f;
  if (!result->maintenance) result->maintenance = MaintainResult{};
  result->maintenance_error = message;
}

}  // namespace timelake
