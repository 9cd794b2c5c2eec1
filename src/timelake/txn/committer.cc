#include "timelake/txn/committer.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "timelake/util/status.h"
#include "timelake/util/time.h"

namespace timelake {
namespace {

// Sleeps a random time below a cap that doubles with each attempt (up to 100 ms), so that
// writers racing for one version spread out instead of colliding again.
void BackOff(int attempt) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  const int64_t cap_us = std::min<int64_t>(100'000, 500LL << std::min(attempt, 8));
  std::this_thread::sleep_for(std::chrono::microseconds(rng() % static_cast<uint64_t>(cap_us)));
}

}  // namespace

std::optional<std::string> FirstRemovedNotLive(const CommitIntent& intent, const Snapshot& snapshot) {
  for (const auto& path : intent.removes) {
    if (!snapshot.files.count(path)) return path;
  }
  return std::nullopt;
}

Committer::Committer(DeltaLog* log, std::string table_name)
    : log_(log), table_name_(std::move(table_name)) {}

std::string Committer::Describe(const PendingCommit& pending, int64_t version) const {
  return pending.commit.commit_info->operation + " commit of version " + std::to_string(version) +
         " to table '" + table_name_ + "'";
}

arrow::Status Committer::Commit(Snapshot* snapshot, PendingCommit* pending, CommitOutcome* out) {
  if (!pending->commit.commit_info || pending->commit.commit_info->txn_id.empty()) {
    return arrow::Status::Invalid("a commit needs a commitInfo with a txnId");
  }
  const std::string txn_id = pending->commit.commit_info->txn_id;
  auto own_head = [&] { return pending->own_head ? pending->own_head() : int64_t{-1}; };
  // What the rules said of the winners for the commit of `version`: the status to return, or
  // nothing to go on with the next attempt.
  auto settle = [&](Verdict verdict, int64_t version) -> std::optional<arrow::Status> {
    if (verdict.resolution == Resolution::kConflict) {
      return CommitConflict("commit conflict: the " + Describe(*pending, version) +
                            " cannot be rebased: " + verdict.reason + " concurrently; retry");
    }
    if (verdict.resolution == Resolution::kAbandon) {
      // A winner recorded some of the commit's batch ids: those leave the commit before the
      // next put (withdraw_recorded), the rest goes on.
      if (verdict.effect == WinnerEffect::kRecordedSameTxn && pending->withdraw) {
        return std::nullopt;
      }
      out->abandoned = std::move(verdict);
      return arrow::Status::OK();
    }
    return std::nullopt;
  };
  // Bind the commit to this table's incarnation, so that if the table is dropped and created
  // again at the same path meanwhile, readers of the new table ignore it (IsStrayCommit).
  CommitInfo& info = *pending->commit.commit_info;
  const std::string table_id = pending->commit.metadata ? pending->commit.metadata->id
                                                        : snapshot->metadata.id;
  if (!table_id.empty()) info.table_id = table_id;
  // A commit whose bytes do not depend on its version (no `prepare`: a compaction's, whose files
  // carry their inputs' sequence tags) is written (on a local disk: fsynced, with its data files
  // waited for) before the turn, which then only links it: writers of one disk hold each other
  // up for a link instead of a write and an fsync. One that holds its version (an append's files'
  // sequence tags, which must be in the commit: any Delta writer's checkpoint copies tags and
  // nothing else) is written under the turn, once the version is known. (Staging an append for
  // the version after the snapshot and again when the turn found it taken was measured: with four
  // writer processes most guesses were wrong, and the extra writes made them slower.)
  std::string body;
  std::unique_ptr<ObjectStore::Staged> staged;
  int64_t staged_version = -1;
  auto stage = [&](int64_t version) -> arrow::Status {
    if (snapshot->version >= 0) info.read_version = snapshot->version;
    info.timestamp = NowMillis();
    if (pending->prepare) pending->prepare(&pending->commit, version);
    body = SerializeCommit(pending->commit);
    staged.reset();
    ARROW_ASSIGN_OR_RAISE(staged, log_->StageCommit(version, body));
    staged_version = version;
    return arrow::Status::OK();
  };
  if (!pending->prepare) ARROW_RETURN_NOT_OK(stage(snapshot->version + 1));
  // The commit's appIds that `*snapshot` records (RecordedTxns, the judgement of batch ids)
  // leave it, through `withdraw`. True when nothing is left: the commit is abandoned then.
  auto withdraw_recorded = [&]() -> arrow::Result<bool> {
    ARROW_ASSIGN_OR_RAISE(std::set<std::string> recorded,
                          RecordedTxns(pending->intent.txn_app_ids, *snapshot));
    if (recorded.empty()) return false;
    for (const auto& app_id : recorded) {
      out->recorded[app_id] = snapshot->version;
      pending->intent.txn_app_ids.erase(app_id);
    }
    bool left = false;
    if (pending->withdraw) {
      ARROW_ASSIGN_OR_RAISE(left, pending->withdraw(recorded, &pending->commit));
    }
    if (!left) {
      out->abandoned = Verdict{Resolution::kAbandon, WinnerEffect::kRecordedSameTxn,
                               "the table already records its batch_id"};
      return true;
    }
    // The bytes staged so far hold the appends withdrawn.
    if (pending->prepare) {
      staged_version = -1;
    } else {
      ARROW_RETURN_NOT_OK(stage(snapshot->version + 1));
    }
    return false;
  };
  for (int attempt = 1;; ++attempt) {
    out->attempts = attempt;
    ARROW_ASSIGN_OR_RAISE(bool nothing_left, withdraw_recorded());
    if (nothing_left) return arrow::Status::OK();
    // Writers of one disk take turns: with the turn, read what was committed since the snapshot
    // and put the next version, which then only another machine's writer can take first. Where
    // there are no turns (object stores), only commits this process is known to have made are
    // read ahead; any other winner is found by losing the put.
    std::unique_ptr<StoreLock> turn;
    if (pending->rebase) {
      ARROW_ASSIGN_OR_RAISE(turn, log_->CommitTurn());
    }
    if (pending->rebase && (turn || own_head() > snapshot->version)) {
      ARROW_ASSIGN_OR_RAISE(Verdict verdict, Rebase(snapshot, *pending));
      if (auto done = settle(std::move(verdict), snapshot->version + 1)) return *done;
      // A winner recorded some of the batch ids: withdrawn at the top of the next attempt,
      // without the turn (withdrawing may rewrite files).
      ARROW_ASSIGN_OR_RAISE(auto recorded, RecordedTxns(pending->intent.txn_app_ids, *snapshot));
      if (!recorded.empty()) continue;
    }
    const int64_t version = snapshot->version + 1;
    // Whatever path led here (a first attempt on a snapshot an earlier commit of the same
    // operation advanced, a rebase, a retry), a commit that removes files lands only on a
    // version where each of them is still live: otherwise two compactions of the same files
    // would both add their outputs, and a compaction racing retention would bring back rows
    // it dropped.
    if (auto gone = FirstRemovedNotLive(pending->intent, *snapshot)) {
      out->abandoned = Verdict{Resolution::kAbandon, WinnerEffect::kRemovedSameFile,
                               "file " + *gone + ", which this " + CommitKindName(pending->intent.kind) +
                                   " removes, is no longer live at version " +
                                   std::to_string(snapshot->version)};
      return arrow::Status::OK();
    }
    if (pending->prepare && version != staged_version) ARROW_RETURN_NOT_OK(stage(version));
    // Never put a version into a folder whose version - 1 is not this handle's head: after a
    // drop (and a create at the same path) that would leave a stray version, and a gap, in
    // another table's log for as long as it takes to notice. The check after the put covers
    // the rest.
    const bool fresh_head = attempt == 1 && pending->head_checked_ms > 0 &&
                            NowMillis() - pending->head_checked_ms < kFreshHeadMs;
    if (version > 0 && !fresh_head) {
      ARROW_RETURN_NOT_OK(log_->CheckHead(version - 1, snapshot->head_fingerprint));
    }
    uint64_t fingerprint = 0;
    // The turn ends as soon as the put's outcome is visible: the next writer can read this
    // commit and link its own while this one's folder fsync runs (that fsync, or the next
    // writer's of the same folder, makes both names durable, in order).
    ARROW_ASSIGN_OR_RAISE(PutResult put, Put(version, body, staged.get(), txn_id, table_id,
                                             Describe(*pending, version), &fingerprint, out,
                                             [&turn] { turn.reset(); }));
    turn.reset();
    if (put == PutResult::kWon) {
      // The commit counts only if it follows this handle's snapshot in the same table: if the
      // table was dropped (and maybe created again) meanwhile, the put created a stray version
      // in the new folder. Take it back; nothing else can have built on it yet.
      if (version > 0) {
        arrow::Status same_table = log_->CheckHead(version - 1, snapshot->head_fingerprint);
        // A check that could not be made (a timeout, a 500) says nothing about the table: ask
        // again, a few times.
        for (int retry = 1; !same_table.ok() && !IsTableNotFound(same_table) && retry <= 3; ++retry) {
          BackOff(retry);
          same_table = log_->CheckHead(version - 1, snapshot->head_fingerprint);
        }
        if (IsTableNotFound(same_table)) {
          // Only this commit may be taken back: by now the new table's writers may have
          // taken it back themselves and committed that version.
          auto landed = log_->ReadCommit(version);
          if (landed.ok() && landed->commit_info && landed->commit_info->txn_id == txn_id) {
            (void)log_->store().DeleteCommit(version);
          }
          return same_table;
        }
        if (!same_table.ok()) {
          // The commit landed and may stand (others may already build on it): never take it
          // back on a failed read, and keep its files. Whether it counts is for a retry with
          // the same batch id to find out.
          out->outcome_unknown = true;
          return OutcomeUnknown(arrow::Status::IOError(
              "the ", Describe(*pending, version), " was written but could not be confirmed (",
              same_table.message(), "); it may have committed: retry with the same batch_id"));
        }
      }
      snapshot->Apply(pending->commit, version);
      snapshot->head_fingerprint = fingerprint;
      out->version = version;
      return arrow::Status::OK();
    }
    if (!pending->rebase) {
      out->abandoned = Verdict{Resolution::kAbandon, WinnerEffect::kAddedFiles,
                               "another writer committed version " + std::to_string(version)};
      return arrow::Status::OK();
    }
    if (attempt >= kMaxAttempts) {
      return CommitConflict("commit conflict: the " + Describe(*pending, version) + " lost " +
                            std::to_string(attempt) + " races with concurrent writers in a row; "
                            "retry later");
    }
    // Back off before reading the winners: a version computed before the pause would mostly
    // lose again. Not when the winner was this process's own background work.
    if (own_head() != version) BackOff(attempt);
    ARROW_ASSIGN_OR_RAISE(Verdict verdict, Rebase(snapshot, *pending));
    if (auto done = settle(std::move(verdict), version)) return *done;
  }
}

arrow::Result<Committer::PutResult> Committer::Put(int64_t version, const std::string& body,
                                                   ObjectStore::Staged* staged,
                                                   const std::string& txn_id,
                                                   const std::string& table_id,
                                                   const std::string& what, uint64_t* fingerprint,
                                                   CommitOutcome* out,
                                                   const std::function<void()>& visible) {
  bool maybe_landed = false;
  for (int errors = 0;;) {
    auto written = log_->TryCommit(version, body, visible, staged);
    if (written.ok() && *written) {
      *fingerprint = CommitFingerprint(body);
      return PutResult::kWon;
    }
    // A store answers NotFound to a put whose folder is gone (LocalStore: the table was
    // dropped, its folder renamed away): nothing landed, and nothing will.
    if (!written.ok() && IsNotFound(written.status())) return written.status();
    if (!written.ok() && IsNotDurable(written.status())) {
      // Landed, visible, and perhaps lost in a crash: neither a success nor a failure to retry
      // blindly. The same batch id tells on a retry.
      out->outcome_unknown = true;
      return arrow::Status::IOError("the ", what, " was written but could not be made durable (",
                                    written.status().message(),
                                    "); it may have committed: retry with the same batch_id once "
                                    "the disk is healthy");
    }
    if (!written.ok()) {
      maybe_landed = maybe_landed || IsOutcomeUnknown(written.status());
    }
    // The reply may be wrong either way: look at what the version holds.
    auto landed = log_->ReadCommit(version, fingerprint);
    if (landed.ok()) {
      if (landed->commit_info && landed->commit_info->txn_id == txn_id) return PutResult::kWon;
      if (!IsStrayCommit(*landed, table_id)) return PutResult::kLost;
      // Another table's commit: a stray of a dropped table's writer in this table's log, or
      // this writer's own table dropped and created again, so that what it takes for strays
      // are the new table's commits (it would lose every race to them until it gave up). The
      // identity of the table the log holds now tells which.
      auto current = log_->Load();
      if ((!current.ok() && IsTableNotFound(current.status())) ||
          (current.ok() && current->metadata.id != table_id)) {
        return TableDropped(table_name_);
      }
      // A dropped table's writer put this into our log. Its writer takes it back within
      // milliseconds (and until then nobody else can take the version): treat it as a lost race
      // and retry. One older than kStrayAgeMs has no writer left: take it back here.
      auto meta = log_->store().HeadCommit(version);
      if (meta.ok() && NowMillis() - meta->modified_ms > kStrayAgeMs) {
        ARROW_RETURN_NOT_OK(log_->store().DeleteCommit(version));
        if (++errors >= kMaxPutErrors) {
          return arrow::Status::IOError("the ", what, " failed: version ", version,
                                        " keeps being taken by commits of a dropped table");
        }
        continue;
      }
      return PutResult::kLost;
    }
    if (!IsNotFound(landed.status())) {
      // Cannot tell whether the put landed: the files must stay for vacuum to judge later.
      out->outcome_unknown = true;
      const std::string why = written.ok() ? landed.status().message() : written.status().message();
      return arrow::Status::IOError(
          "the ", what, " failed and its outcome is unknown: ", why,
          "; retry (with the same batch_id for appends, so that it lands exactly once)");
    }
    // Nothing there. "Exists" with nothing there: a stray commit was taken back meanwhile; an
    // error: the put did not land (yet). Either way the same put may be tried again.
    if (!written.ok() && ++errors >= kMaxPutErrors) {
      out->outcome_unknown = maybe_landed;
      return arrow::Status::IOError("the ", what, " failed: ", written.status().message(),
                                    maybe_landed ? "; its outcome is unknown: retry (with the same "
                                                   "batch_id for appends, so that it lands exactly "
                                                   "once)"
                                                 : "");
    }
    if (!written.ok()) BackOff(errors);
  }
}

arrow::Result<Verdict> Committer::Rebase(Snapshot* snapshot, const PendingCommit& pending) {
  Verdict strictest;
  strictest.reason = "no concurrent commit touches this one";
  bool reloaded = false;
  ARROW_RETURN_NOT_OK(log_->UpdateVisiting(
      snapshot,
      [&](int64_t, const timelake::Commit& winner, const Snapshot& before) {
        Verdict verdict = Judge(pending.intent, winner, before);
        if (static_cast<int>(verdict.resolution) > static_cast<int>(strictest.resolution)) {
          strictest = std::move(verdict);
        }
        return arrow::Status::OK();
      },
      &reloaded));
  if (reloaded) {
    // Log expiry removed the versions between this handle's head and now: the winners cannot
    // be judged one by one.
    return Verdict{Resolution::kConflict, WinnerEffect::kChangedMetadata,
                   "the log was expired past the version this commit was prepared on"};
  }
  return strictest;
}

}  // namespace timelake
