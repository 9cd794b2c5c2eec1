// Group commit: the appends staged meanwhile, committed as ONE Delta commit.
//
// An append writes its files without the handle's lock (table/append.h), then joins a group:
// the appends of a handle's threads queue in its GroupCommit, whose first waiting thread leads,
// takes the handle's lock and commits every append queued by then; on a local lake the leader
// also takes in the appends other writer processes handed over through the table's spool
// (table/spool.h). The commit holds every file of every append, the shared file(s) holding the
// rows of small appends, and a `txn` action per batch id; its checkpoint and index record go to
// the handle's upkeep thread (table/upkeep.h).
//
// A batch id earlier in the group, or already recorded in the table, makes its append a
// duplicate: it is answered as one and its files are deleted. The group's commit judges no batch
// id itself: the committer finds the ids the table records (when the commit begins, or recorded
// by a winner it rebased over), and the group leaves those appends out of the commit and goes on
// with the rest in the committer's one retry loop (PendingCommit::withdraw). An append is
// acknowledged only once the commit holding it is in the log; what a failed commit wrote is
// deleted, unless its outcome is unknown (then vacuum decides later).
//
// Thread safety: GroupCommit's methods may be called from any thread (Publish needs the handle's
// lock as well). The free functions REQUIRE the handle's lock held, except WriteSharedFiles,
// which touches no handle state.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include <arrow/result.h>

#include "timelake/table/append.h"
#include "timelake/table/context.h"
#include "timelake/util/interrupt.h"
#include "timelake/util/operation_lock.h"

namespace timelake {

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
/// shared file(s) holding the rows of the appends that kept theirs, a `txn` per batch id. An
/// append repeating the batch id of an earlier one of `group` is answered with it (a duplicate
/// of it, or its failure). Appends whose batch id the committer finds recorded
/// (CommitOutcome::recorded) leave the commit between its attempts, and are answered as
/// duplicates at the version that showed the id, their files deleted (and their rows left out
/// of the shared file, written again without them). `shared` may hold the shared files written
/// before the lock was taken. One result per staged append, in order. The commit's checkpoint
/// and index record go to the upkeep thread. REQUIRES: the handle's lock held.
std::vector<arrow::Result<AppendResult>> CommitStaged(TableContext& t,
                                                      const std::vector<StagedAppend*>& group,
                                                      SharedFiles shared = {});

/// CommitStaged across processes: on a local lake, appends that kept their rows join the commit
/// of another writer process when one is committing, or lead one that takes in the appends the
/// other processes handed over meanwhile (table/spool.h). Otherwise CommitStaged.
/// REQUIRES: the handle's lock held.
std::vector<arrow::Result<AppendResult>> CommitAcrossProcesses(TableContext& t,
                                                               const std::vector<StagedAppend*>& group);

/// The in-process queue of one handle's appends waiting for their commit.
class GroupCommit {
 public:
  /// `lock` and `context` are the handle's, and must outlive this object.
  GroupCommit(OperationLock* lock, TableContext* context) : lock_(lock), ctx_(context) {}
  GroupCommit(const GroupCommit&) = delete;
  GroupCommit& operator=(const GroupCommit&) = delete;

  /// Commits `staged` together with the appends of other threads staged meanwhile: the first
  /// waiting thread leads, takes the handle's lock and commits every staged append queued by
  /// then as one Delta commit (CommitAcrossProcesses); the others wait for its answer.
  /// `interrupt` may stop the wait for the lock (cancelling this append only). REQUIRES: the
  /// handle's lock NOT held by the calling thread.
  ///
  /// Commit delay: threads appending in a loop come back right after their group's commit; a
  /// leader that took the queue at once would commit without them and split the threads into
  /// two groups taking turns, each waiting out the other's commit. So a leader holding the lock
  /// waits (at most kGroupWait) until as many appends are queued as the last group had, with
  /// those queued when it was committed.
  arrow::Result<AppendResult> Commit(StagedAppend* staged, const InterruptCheck& interrupt);

  /// Keeps `plan` (the handle's, just planned) and the table's autoMaintain then for
  /// PlanWhileCommitting. REQUIRES: the handle's lock held.
  void Publish(const AppendPlan& plan, bool auto_maintain);

  /// While a group commit is in flight (the handle's lock is held for it), an append need not
  /// wait for the lock to start writing its files: it plans from the last published plan. Its
  /// batch id is then judged by the committer only (CommitStaged), and a table dropped or
  /// replaced meanwhile fails the commit as it would fail the planning. False: plan under the
  /// lock.
  bool PlanWhileCommitting(const AppendOptions& options, AppendPlan* plan);

 private:
  struct Queued {
    StagedAppend* staged;
    std::optional<arrow::Result<AppendResult>> result;  // set by the leader
  };
  OperationLock* const lock_;
  TableContext* const ctx_;  // GUARDED_BY(*lock_)

  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Queued*> queue_;  // GUARDED_BY(mutex_)
  bool leader_ = false;         // GUARDED_BY(mutex_)
  std::condition_variable grew_;  // an append joined the queue
  // GUARDED_BY(mutex_): the appends of the last group and those queued when it was committed:
  // the threads appending now, which a leader waits for a moment (Commit).
  size_t expected_ = 1;
  std::shared_ptr<const AppendPlan> plan_;  // GUARDED_BY(mutex_): the last planned append
  bool plan_auto_maintain_ = false;         // GUARDED_BY(mutex_): the table's autoMaintain then
};

}  // namespace timelake
