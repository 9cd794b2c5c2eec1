// Committer: puts one commit into a table's log as the next version.
//
// The whole commit protocol lives here: one attempt puts the commit as version N = head + 1 with
// put-if-absent. Then, whatever the put replied:
//  * It wrote the version: the commit stands once the committer has checked that version N - 1
//    is still the head it built on (a table dropped and created again at the same path would
//    otherwise receive a stray version; it is taken back).
//  * It said "exists" or failed: the reply may be wrong (a put that landed while its reply was
//    lost, a client that retried its own put and got "exists"), so the committer reads version N
//    and compares commitInfo.txnId with its own. Its own commit there is a success. Another
//    writer's commit is a lost race. Nothing there after an error: the put is retried as it was.
//    A commit of another incarnation of the table (its commitInfo names another table id: the
//    writer's table was dropped and created again at this path) is taken back and the version
//    tried again.
//  * A lost race: back off (jittered, growing), read every winning commit, judge each by the
//    conflict rules (conflict.h), and rebase on top of them, abandon, or fail with a
//    CommitConflict.
// Batch ids: before every attempt the committer asks RecordedTxns (conflict.h) which of the
// commit's txn appIds the snapshot it commits on already records (there when the commit was
// built, or recorded by a winner it rebased over). It answers those per appId
// (CommitOutcome::recorded), has the caller leave them out (PendingCommit::withdraw) and goes on
// with the rest in the same loop; only a commit with nothing left is abandoned. This loop is the
// only retry loop of a commit: its attempts, withdrawals included, are capped at kMaxAttempts.
// Work that follows a commit (checkpoints, index records, inline upkeep) is not the committer's:
// see PostCommitHooks, which callers run once a commit is acknowledged, outside this loop.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "timelake/log/delta_log.h"
#include "timelake/txn/conflict.h"

namespace timelake {

/// A commit to be made.
struct PendingCommit {
  Commit commit;  // its actions; commit_info must be set, with a txn_id no other commit has
  CommitIntent intent;
  /// Fills in what depends on the version the commit is tried at (unset: nothing does, and the
  /// bytes written before the first attempt serve every attempt: see Committer::Commit).
  std::function<void(Commit*, int64_t version)> prepare;
  /// False: only the version after the snapshot will do (creating a table at version 0); a lost
  /// race abandons instead of rebasing.
  bool rebase = true;
  /// When (NowMillis) the caller last confirmed the snapshot's head commit by reading it, 0 if
  /// it did not. A first attempt within Committer::kFreshHeadMs of that skips the head check
  /// before the put (the check after the put, which takes a stray back, always runs): on an
  /// object store that saves a request per append.
  int64_t head_checked_ms = 0;
  /// The newest version the caller's process committed through another handle (its background
  /// compaction), -1 if none; unset: unknown. Commits up to it are read and judged before the
  /// first put instead of after losing it, and a version lost to it is not contention: the
  /// rebase follows without a back-off.
  std::function<int64_t()> own_head;
  /// Leaves out of `commit` the parts that record the txn appIds in `recorded` (ids of
  /// intent.txn_app_ids, which the committer has already taken out of the intent) because the
  /// table records them already; it may rewrite actions and commitInfo's other fields, never
  /// commitInfo.txnId (the commit's identity across attempts). Returns false when nothing is
  /// left to commit. Called by the committer, on its thread, between attempts and without the
  /// commit turn. Unset: a commit with a recorded appId is abandoned.
  std::function<arrow::Result<bool>(const std::set<std::string>& recorded, Commit* commit)>
      withdraw;
};

/// The first file `intent` removes that is not live in `snapshot`, if any: a commit that
/// removes files never lands on a version where one of them is gone (Committer::Commit checks
/// before every put).
std::optional<std::string> FirstRemovedNotLive(const CommitIntent& intent, const Snapshot& snapshot);

/// How a commit ended when Commit() returned OK or an error.
struct CommitOutcome {
  std::optional<int64_t> version;  // the version committed; unset if abandoned
  int attempts = 0;
  /// Why the commit was abandoned (when `version` is unset and the status OK).
  std::optional<Verdict> abandoned;
  /// The txn appIds the table already recorded, which left the commit (PendingCommit::withdraw),
  /// each with the version of the snapshot that showed it recorded. Filled whatever the status.
  std::map<std::string, int64_t> recorded;
  /// Set with an error status: the commit may have landed (or may land later), so the files it
  /// references must not be deleted; vacuum decides once the outcome is settled.
  bool outcome_unknown = false;
};

class Committer {
 public:
  /// Attempts after which a commit fails with a CommitConflict: puts lost to other writers in a
  /// row, and the attempts that withdrew batch ids a winner recorded (each withdraws at least
  /// one, so they are few).
  static constexpr int kMaxAttempts = 64;
  /// Failed puts of one version (with nothing landed) after which a commit fails.
  static constexpr int kMaxPutErrors = 3;
  /// A stray commit (see IsStrayCommit) older than this has outlived its writer, which takes its
  /// strays back at once; the next writer of the table takes it back.
  static constexpr int64_t kStrayAgeMs = 30'000;
  /// How long a confirmed head stands in for the check before a put (PendingCommit).
  static constexpr int64_t kFreshHeadMs = 5'000;

  /// `log` must outlive the committer; `table_name` is for messages.
  Committer(DeltaLog* log, std::string table_name);

  /// Commits `pending` on top of `*snapshot`, which it advances through every winner it rebases
  /// over and then its own commit. OK with `out->version` set: committed (without the appIds
  /// in `out->recorded`). OK without it: abandoned by a conflict rule, or nothing was left once
  /// the recorded appIds were withdrawn (`out->abandoned` says why; `*snapshot` includes the
  /// winner).
  /// Errors: TableDropped (KeyError) when the table was dropped meanwhile, CommitConflict when
  /// the rules say so or too many races were lost, `withdraw`'s errors, storage errors
  /// otherwise (with `out->outcome_unknown` when the commit may have landed).
  /// Not thread-safe for one `snapshot` and `pending`; commits of one log from several
  /// committers (threads, processes) are what the protocol is for.
  arrow::Status Commit(Snapshot* snapshot, PendingCommit* pending, CommitOutcome* out);

 private:
  enum class PutResult { kWon, kLost };
  /// Puts `body` as `version` and settles what happened (see the top of this file); `visible`
  /// runs once a put's outcome is visible, before it is durable (DeltaLog::TryCommit).
  arrow::Result<PutResult> Put(int64_t version, const std::string& body, ObjectStore::Staged* staged,
                               const std::string& txn_id,
                               const std::string& table_id, const std::string& what,
                               uint64_t* fingerprint, CommitOutcome* out,
                               const std::function<void()>& visible);
  /// Reads the commits after `*snapshot`, judging each against `pending`.
  arrow::Result<Verdict> Rebase(Snapshot* snapshot, const PendingCommit& pending);
  std::string Describe(const PendingCommit& pending, int64_t version) const;

  DeltaLog* log_;
  std::string table_name_;
};

}  // namespace timelake
