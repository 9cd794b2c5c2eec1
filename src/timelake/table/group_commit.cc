// Group commit: the in-process queue, one commit for a group, and the group across processes
// (see table/group_commit.h).
#include "timelake/table/group_commit.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <thread>

#include "timelake/log/file_tags.h"
#include "timelake/table/spool.h"
#include "timelake/util/ids.h"
#include "timelake/util/status.h"
#include "timelake/util/time.h"

namespace timelake {

namespace {
// How long a group commit's leader waits for the appends it expects (GroupCommit::Commit).
constexpr std::chrono::microseconds kGroupWait{1000};
}  // namespace

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
    st = out->ingestor->Add(*member.ingestor);
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
  auto fail = [&](size_t i, const arrow::Status& st, bool keep_files) {
    if (!keep_files) group[i]->ingestor->Abort();
    results[i] = st;
  };
  const auto started = std::chrono::steady_clock::now();
  // The appends the commit carries, and those repeating the batch id of an earlier one of the
  // group, which are answered with it: duplicates once it commits (or is found recorded), or its
  // failure.
  std::vector<size_t> live;
  std::vector<size_t> repeated;
  std::set<std::string> ids;
  for (size_t i = 0; i < group.size(); ++i) {
    const auto& id = group[i]->batch_id;
    (id && !ids.insert(*id).second ? repeated : live).push_back(i);
  }
  // The shared files hold the rows of the live appends that kept theirs; written again when one
  // of them leaves the commit (its batch id was already recorded).
  auto drop_shared = [&] {
    if (shared.ingestor) shared.ingestor->Abort();
    shared = SharedFiles{};
  };
  std::vector<size_t> sharing;
  auto share = [&]() -> arrow::Status {
    std::vector<size_t> members;
    for (size_t i : live) {
      if (group[i]->shared) members.push_back(i);
    }
    if (members != shared.members) {
      drop_shared();
      ARROW_RETURN_NOT_OK(WriteSharedFiles(group, members, &shared));
    }
    sharing = shared.members;
    return arrow::Status::OK();
  };
  // The commit's actions for the live appends: every file of each (the shared files in place of
  // the first append whose rows they hold) and a `txn` per batch id.
  auto fill = [&](Commit* commit) {
    commit->adds.clear();
    commit->txns.clear();
    CommitInfo& info = *commit->commit_info;
    int64_t rows = 0, bytes = 0, files = 0;
    const int64_t now_ms = NowMillis();
    int order = 0;  // write order across the group: later appends win ties, as later commits do
    for (size_t i : live) {
      // Appends grouped together are concurrent: none of them is later than another.
      auto& own = group[i]->files;
      auto& written = !sharing.empty() && i == sharing[0] ? shared.files : own;
      for (auto& f : written) {
        f.order = order++;
        rows += f.rows;
        bytes += f.size;
        ++files;
        commit->adds.push_back(ToAddAction(f, /*data_change=*/true, now_ms));
      }
      if (group[i]->batch_id) {
        commit->txns.push_back({BatchAppId(*group[i]->batch_id), group[i]->batch_version, now_ms});
      }
    }
    info.metrics = {{"numFiles", files}, {"numOutputRows", rows}, {"numOutputBytes", bytes}};
    info.operation_parameters = {{"mode", "Append"}};
    if (live.size() > 1) info.operation_parameters["timelake.groupedAppends"] = std::to_string(live.size());
    std::set<std::string> spooled;  // other processes' requests: how their writers find this commit
    for (size_t i : live) {
      if (!group[i]->spool_id.empty()) spooled.insert(group[i]->spool_id);
    }
    if (!spooled.empty()) {
      std::string list;
      for (const auto& id : spooled) list += (list.empty() ? "" : ",") + id;
      info.operation_parameters[Spool::kCommitParameter] = list;
    }
  };

  arrow::Status st = share();
  CommitOutcome outcome;
  if (st.ok()) {
    PendingCommit pending;
    pending.commit.commit_info = NewCommitInfo("WRITE");
    pending.commit.commit_info->is_blind_append = true;
    fill(&pending.commit);
    pending.intent.kind = CommitKind::kAppend;
    for (size_t i : live) {
      if (group[i]->batch_id) pending.intent.txn_app_ids[BatchAppId(*group[i]->batch_id)] = group[i]->batch_version;
    }
    // The oldest of the appends' head checks (the handle's snapshot head is at least as fresh).
    pending.head_checked_ms = INT64_MAX;
    for (size_t i : live) {
      pending.head_checked_ms = std::min(pending.head_checked_ms, group[i]->head_checked_ms);
    }
    pending.own_head = [&t] { return BackgroundCompactionVersion(t); };
    pending.prepare = [](Commit* c, int64_t version) {
      for (auto& add : c->adds) add.tags[kSeqTag] = std::to_string(version);
    };
    // Batch ids the table records by the time of an attempt (the committer judges them) leave
    // the commit; the other appends go on in the same commit loop.
    pending.withdraw = [&](const std::set<std::string>& recorded,
                           Commit* commit) -> arrow::Result<bool> {
      std::erase_if(live, [&](size_t i) {
        return group[i]->batch_id && recorded.count(BatchAppId(*group[i]->batch_id));
      });
      if (live.empty()) return false;
      ARROW_RETURN_NOT_OK(share());
      fill(commit);
      return true;
    };
    st = CommitPending(t, &pending, &outcome);
  }
  // Appends whose batch id the table already recorded are duplicates, whatever became of the
  // others: their files were in no commit that landed.
  for (size_t i = 0; i < group.size(); ++i) {
    const auto& id = group[i]->batch_id;
    if (!id) continue;
    auto found = outcome.recorded.find(BatchAppId(*id));
    if (found != outcome.recorded.end()) answer_duplicate(i, found->second);
  }
  if (!st.ok()) {
    // With an unknown outcome the files may be referenced by a commit: vacuum decides later.
    st = DroppedOr(t, st);
    if (outcome.outcome_unknown) shared.ingestor.reset();  // keep the shared files too
    drop_shared();
    for (size_t i : live) {
      if (!results[i]) fail(i, st, outcome.outcome_unknown);
    }
    for (size_t i : repeated) {
      if (!results[i]) fail(i, st, /*keep_files=*/false);
    }
  } else if (!outcome.version) {
    // Abandoned with nothing left to commit: every append was answered above.
    drop_shared();
    for (size_t i = 0; i < group.size(); ++i) {
      if (!results[i]) answer_duplicate(i, t.snapshot.version);
    }
  } else {
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
      r.attempts = outcome.attempts;
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
    for (size_t i : repeated) {
      if (!results[i]) answer_duplicate(i, version);
    }
    // Acknowledged: the checkpoint and the index record go to the upkeep thread.
    QueueAfterAppend(t, all, version);
    MaybeCompactInBackground(t, compact_files);
  }
  std::vector<arrow::Result<AppendResult>> out;
  for (auto& r : results) out.push_back(std::move(*r));  // every append is answered by now
  return out;
}

namespace {

// How long a writer waits for the leader that holds its rows (a commit takes milliseconds; one
// that takes this long has stopped).
constexpr int64_t kSpoolWaitMs = 30000;
// How long a leader waits for the requests it expects (the last commit's count).
constexpr auto kSpoolGatherWait = std::chrono::microseconds(1000);

Spool* SpoolOf(TableContext& t) {
  if (!t.spool_checked) {
    t.spool_checked = true;
    if (auto files = t.store->AsLocalFiles()) {
      t.spool = std::make_shared<Spool>(std::move(files), t.table_path + "/_timelake");
    }
  }
  return t.spool.get();
}

// The version of the commit holding request `id`, looking at the commits after `since`.
std::optional<int64_t> FindSpooled(TableContext& t, const std::string& id, int64_t since) {
  for (int64_t v = since + 1;; ++v) {
    auto commit = t.log.ReadCommit(v);
    if (!commit.ok()) return std::nullopt;
    if (!commit->commit_info) continue;
    auto it = commit->commit_info->operation_parameters.find(Spool::kCommitParameter);
    if (it == commit->commit_info->operation_parameters.end()) continue;
    const std::string& list = it->second;
    for (size_t start = 0; start <= list.size();) {
      size_t end = list.find(',', start);
      if (end == std::string::npos) end = list.size();
      if (list.compare(start, end - start, id) == 0) return v;
      start = end + 1;
    }
  }
}

// The version of the commit holding request `id` (FindSpooled), made durable; an error when it
// is there but could not be made durable.
arrow::Result<std::optional<int64_t>> FindSpooledDurable(TableContext& t, const std::string& id,
                                                         int64_t since) {
  auto version = FindSpooled(t, id, since);
  if (version) {
    // Found in the log, put by a process that died before it answered: its put is visible
    // before its folder's fsync, so made durable before it is acknowledged.
    arrow::Status synced = t.store->SyncFolder(t.table_path + "/_delta_log/");
    if (!synced.ok()) return OutcomeUnknown(synced);
  }
  return version;
}

// The result of an append found in the commit at `version` of a leader that did not answer.
AppendResult FoundInLog(StagedAppend* s, int64_t version) {
  s->ingestor->Abort();
  AppendResult r;
  r.version = version;
  r.rows = s->rows;
  r.attempts = 1;
  return r;
}

// The results of a group, every one settled, in order. The handle then shows the newest version
// its appends created, as after its own commits. Best effort: the appends are acknowledged, and
// the next operation reads the log anyway.
std::vector<arrow::Result<AppendResult>> Settled(
    TableContext& t, std::vector<std::optional<arrow::Result<AppendResult>>>& answered) {
  std::vector<arrow::Result<AppendResult>> out;
  int64_t newest = -1;
  for (auto& r : answered) {
    if (r->ok()) newest = std::max(newest, (*r)->version);
    out.push_back(std::move(*r));
  }
  if (newest > t.snapshot.version) (void)Update(t);
  return out;
}

AppendResult FromAnswer(const SpoolAnswer& a) {
  AppendResult r;
  r.version = a.version;
  r.duplicate = a.duplicate;
  r.rows = a.rows;
  r.files = a.files;
  r.bytes = a.bytes;
  r.attempts = static_cast<int>(a.attempts);
  r.commit_ms = a.commit_ms;
  return r;
}

SpoolAnswer ToAnswer(const arrow::Result<AppendResult>& r) {
  SpoolAnswer a;
  if (!r.ok()) {
    a.error = r.status().ToString();
    return a;
  }
  a.ok = true;
  a.version = r->version;
  a.duplicate = r->duplicate;
  a.rows = r->rows;
  a.files = r->files;
  a.bytes = r->bytes;
  a.attempts = r->attempts;
  a.commit_ms = r->commit_ms;
  return a;
}

}  // namespace

std::vector<arrow::Result<AppendResult>> CommitAcrossProcesses(TableContext& t,
                                                               const std::vector<StagedAppend*>& group) {
  Spool* spool = SpoolOf(t);
  bool spoolable = spool != nullptr && !group.empty();
  for (const auto* s : group) spoolable = spoolable && s->shared && s->rows > 0;
  if (!spoolable) return CommitStaged(t, group);
  const std::string lock_path = t.table_path + "/_timelake/spool.lock";
  auto tried = t.store->LockExclusive(lock_path, 0);
  if (!tried.ok()) return CommitStaged(t, group);
  std::unique_ptr<StoreLock> lock = std::move(*tried);
  std::vector<std::optional<arrow::Result<AppendResult>>> answered(group.size());
  if (!lock) {
    // Another process is committing: hand it these appends, and wait for its answer, or for the
    // lock (then the leader before is done, or dead, and left them or failed them).
    SpoolRequest request;
    request.id = NewUuid();
    request.table_id = t.snapshot.metadata.id;
    for (const auto* s : group) request.members.push_back({s->batch_id, s->ingestor->buffered()});
    auto ticket = spool->Submit(request);
    if (!ticket.ok()) return CommitStaged(t, group);  // (a dropped table: CommitStaged says so)
    const int64_t since = t.snapshot.version;
    std::optional<std::vector<SpoolAnswer>> answers;
    bool claimed = false;  // known to be in a leader's hands
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kSpoolWaitMs);
    for (int64_t pause_us = 20;; pause_us = std::min<int64_t>(pause_us * 2, 200)) {
      answers = spool->TakeAnswers(**ticket);
      if (answers) {
        claimed = true;
        break;
      }
      auto tried_again = t.store->LockExclusive(lock_path, 0);
      if (tried_again.ok() && *tried_again) {
        lock = std::move(*tried_again);
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
    }
    if (!answers) {
      auto withdrawn = spool->Withdraw(**ticket);
      claimed = !withdrawn.ok() || !*withdrawn;
      // Claimed and answered between the last look and the withdrawal.
      if (claimed) answers = spool->TakeAnswers(**ticket);
    }
    if (!answers && claimed && !lock) {
      // The leader has stopped with these appends in its hands: only its commit can tell.
      auto found = FindSpooledDurable(t, (*ticket)->id(), since);
      std::vector<arrow::Result<AppendResult>> out;
      const std::optional<int64_t> version = found.ok() ? *found : std::nullopt;
      for (size_t i = 0; i < group.size(); ++i) {
        if (!found.ok()) {
          out.push_back(found.status());
        } else if (version) {
          out.push_back(FoundInLog(group[i], *version));
        } else {
          out.push_back(OutcomeUnknown(arrow::Status::IOError(
              "another writer process took this append into its commit and stopped answering "
              "for ", kSpoolWaitMs / 1000, " s: the append may or may not be committed; retry it "
              "with the same batch_id")));
        }
      }
      return out;
    }
    bool unanswered = false;
    for (size_t i = 0; i < group.size(); ++i) {
      if (answers && answers->size() == group.size() && (*answers)[i].ok) {
        group[i]->ingestor->Abort();
        answered[i] = FromAnswer((*answers)[i]);
      } else {
        unanswered = true;
      }
    }
    if (unanswered && claimed) {
      // The leader died, or failed these appends: committed only if its commit names the request.
      auto found = FindSpooledDurable(t, (*ticket)->id(), since);
      if (!found.ok() || *found) {
        for (size_t i = 0; i < group.size(); ++i) {
          if (answered[i]) continue;
          if (!found.ok()) {
            answered[i] = found.status();  // committed, maybe not durably: not to be committed again
            continue;
          }
          answered[i] = FoundInLog(group[i], **found);
        }
      }
    }
    if (!lock) {
      // Answered, or withdrawn without the lock (the wait ran out): what is left commits on its own.
      std::vector<StagedAppend*> left;
      std::vector<size_t> where;
      for (size_t i = 0; i < group.size(); ++i) {
        if (answered[i]) continue;
        left.push_back(group[i]);
        where.push_back(i);
      }
      if (!left.empty()) {
        auto results = CommitStaged(t, left);
        for (size_t k = 0; k < left.size(); ++k) answered[where[k]] = std::move(results[k]);
      }
      return Settled(t, answered);
    }
  }
  // Leading: this process's appends not answered yet, and the ones other processes handed over.
  std::vector<StagedAppend*> members;
  std::vector<size_t> own;  // members index -> group index
  for (size_t i = 0; i < group.size(); ++i) {
    if (answered[i]) continue;
    members.push_back(group[i]);
    own.push_back(i);
  }
  if (members.empty()) return Settled(t, answered);
  struct Claimed {
    std::string id;
    std::vector<std::unique_ptr<StagedAppend>> staged;  // null: could not be staged
    std::vector<arrow::Status> failures;
    std::vector<size_t> positions;                      // in `members`, for the staged ones
  };
  // Other processes' appends arrive about as often as the last commit found them: wait for as
  // many, briefly (a commit with them costs little more than one without).
  const auto deadline = std::chrono::steady_clock::now() + kSpoolGatherWait;
  while (t.spool_expected > 0 && spool->Pending() < t.spool_expected &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  std::vector<SpoolRequest> requests = spool->Claim();
  std::vector<Claimed> claimed;
  for (auto& request : requests) {
    Claimed c;
    c.id = request.id;
    // A writer whose table was dropped (and this one created at its path since) must not
    // commit into this one: it is told, and commits nothing (its own commit finds the drop).
    const bool same_table = request.table_id == t.snapshot.metadata.id;
    for (auto& m : request.members) {
      if (!same_table) {
        c.staged.push_back(nullptr);
        c.failures.push_back(arrow::Status::Invalid("the append was for another table at this path"));
        continue;
      }
      auto staged = std::make_unique<StagedAppend>();
      AppendPlan plan{t.store, t.table_path, t.name, t.contract, t.declared, t.storage,
                      t.ingest_options, t.snapshot.version, 0};
      AppendOptions options;
      options.batch_id = m.batch_id;
      arrow::Status st;
      auto reader = arrow::RecordBatchReader::Make(m.rows, m.rows.empty() ? t.storage : m.rows[0]->schema());
      if (!reader.ok()) {
        st = reader.status();
      } else {
        st = StageAppend(plan, reader->get(), options, staged.get(), kSharedFileMaxRows);
      }
      if (st.ok()) {
        staged->spool_id = request.id;
        c.positions.push_back(members.size());
        members.push_back(staged.get());
        c.staged.push_back(std::move(staged));
      } else {
        c.staged.push_back(nullptr);
      }
      c.failures.push_back(st);
    }
    claimed.push_back(std::move(c));
  }
  std::vector<arrow::Result<AppendResult>> results = CommitStaged(t, members);
  for (auto& c : claimed) {
    std::vector<SpoolAnswer> answers;
    size_t next = 0;
    for (size_t k = 0; k < c.staged.size(); ++k) {
      answers.push_back(c.staged[k] ? ToAnswer(results[c.positions[next++]])
                                    : ToAnswer(arrow::Result<AppendResult>(c.failures[k])));
    }
    (void)spool->Answer(c.id, answers);
  }
  // The next commit led here expects these requests and the ones that arrived during this one
  // (writers that lost the last round would otherwise keep alternating in two cohorts).
  t.spool_expected = static_cast<int>(requests.size()) + spool->Pending();
  lock.reset();  // answered: the writers waiting for it can read their answers
  for (size_t k = 0; k < own.size(); ++k) answered[own[k]] = std::move(results[k]);
  std::vector<arrow::Result<AppendResult>> out;
  for (auto& r : answered) out.push_back(std::move(*r));
  return out;
}

void GroupCommit::Publish(const AppendPlan& plan, bool auto_maintain) {
  std::lock_guard<std::mutex> published(mutex_);
  plan_ = std::make_shared<const AppendPlan>(plan);
  plan_auto_maintain_ = auto_maintain;
}

bool GroupCommit::PlanWhileCommitting(const AppendOptions& options, AppendPlan* plan) {
  if (options.maintain == true || options.batch_version != 0) return false;
  std::lock_guard<std::mutex> group(mutex_);
  if (!leader_ || !plan_ || (plan_auto_maintain_ && !options.maintain)) return false;
  *plan = *plan_;
  plan->head_checked_ms = 0;  // not checked now
  return true;
}

arrow::Result<AppendResult> GroupCommit::Commit(StagedAppend* staged, const InterruptCheck& interrupt) {
  Queued mine{staged, std::nullopt};
  std::unique_lock<std::mutex> group(mutex_);
  queue_.push_back(&mine);
  grew_.notify_one();
  while (!mine.result) {
    if (leader_) {
      changed_.wait(group);
      continue;
    }
    leader_ = true;
    group.unlock();
    {
      // Appends staged while the leader waits for the lock join this commit. Ctrl-C while
      // waiting cancels the leader's own append only: another waiting append leads instead.
      auto lock = lock_->Acquire("append", interrupt);
      group.lock();
      if (!lock.ok()) {
        queue_.erase(std::find(queue_.begin(), queue_.end(), &mine));
        leader_ = false;
        changed_.notify_all();
        staged->ingestor->Abort();
        return lock.status();
      }
      const auto deadline = std::chrono::steady_clock::now() + kGroupWait;
      while (queue_.size() < expected_ &&
             grew_.wait_until(group, deadline) == std::cv_status::no_timeout) {
      }
      std::vector<Queued*> members;
      members.swap(queue_);
      group.unlock();
      std::vector<StagedAppend*> staged_members;
      for (auto* q : members) staged_members.push_back(q->staged);
      std::vector<arrow::Result<AppendResult>> results = CommitAcrossProcesses(*ctx_, staged_members);
      if (!results.empty() && results.front().ok()) {
        // Failed upkeep of earlier appends goes to one of the appends of this commit.
        ReportUpkeepFailures(*ctx_, {}, &*results.front());
      }
      group.lock();
      for (size_t i = 0; i < members.size(); ++i) members[i]->result = std::move(results[i]);
      expected_ = members.size() + queue_.size();
    }
    leader_ = false;
    changed_.notify_all();
  }
  return std::move(*mine.result);
}

}  // namespace timelake
