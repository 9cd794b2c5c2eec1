// Upkeep: the work an acknowledged commit leaves behind, and the thread that does it.
//
// An append is acknowledged once its commit is in the log; a checkpoint, the last-value index
// record of the commit and the index fold are derived data (txn/post_commit.h) that only make
// later reads faster. Doing them inside append() put a checkpoint or a fold into every tenth or
// thirty-second call's latency, so appends hand them to their handle's upkeep queue instead (an
// Upkeep kept in the Lake's runtime, table/lake_runtime.h), which runs them in order on one
// thread of its own while the caller goes on (QueueAfterAppend); a handle whose Lake is gone runs
// them inline.
// Other commits (maintenance, schema changes) run the same work as hooks right after the commit
// (HooksAfter). Background compaction passes (table/maintain.h) run on the same thread.
//
// Nothing is lost if the process dies before a task ran: a missing checkpoint costs replay time
// and a missing index record makes latest() read that commit's files, exactly as when a hook
// fails. Operations that want the work done (latest(), info(), maintain(), closing the handle)
// call Drain() first (FinishUpkeep). Tasks must not use the handle's context: they carry what
// they need (a snapshot copy, the newest rows of the files) and use thread-safe parts only (the
// store, the last-value index, a DeltaLog of their own).
//
// Thread safety: every method of Upkeep may be called from any thread. An Upkeep keeps its queue
// and thread per process (util/per_process.h): a child made by fork() (Python's multiprocessing)
// finds it empty and without a thread, never touches its parent's, and its own posts start a
// thread of its own. The free functions taking a TableContext REQUIRE the handle's lock held;
// WriteCheckpointUnlessSuperseded needs none.
//
// Ownership: the queues of a Lake's handles belong to the Lake's LakeRuntime
// (table/lake_runtime.h), which a handle reaches through its UpkeepQueue; an Upkeep alone is the
// queue and its thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <arrow/status.h>

#include "timelake/ingest/ingestor.h"
#include "timelake/log/delta_log.h"
#include "timelake/txn/post_commit.h"
#include "timelake/util/per_process.h"

namespace timelake {

class Upkeep {
 public:
  using Task = std::function<arrow::Status()>;

  Upkeep() = default;
  /// Runs what this process queued, then stops its thread.
  ~Upkeep();
  Upkeep(const Upkeep&) = delete;
  Upkeep& operator=(const Upkeep&) = delete;

  /// Queues `task` (named for failure messages); starts the thread if it is not running. If no
  /// thread can be started the task runs here and now.
  void Post(std::string name, Task task);

  /// Waits until every task posted before the call has run (not those posted meanwhile: a
  /// drain of a queue that appends keep feeding still returns).
  void Drain();

  /// The failures since the last call, each "<name>: <message>" (at most the last 100).
  std::vector<std::string> TakeFailures();

 private:
  // The queue of one process and the thread that runs it.
  struct State {
    std::mutex mutex;
    std::condition_variable changed;
    std::deque<std::pair<std::string, Task>> queue;  // GUARDED_BY(mutex), like the rest
    uint64_t posted = 0;    // tasks ever posted
    uint64_t finished = 0;  // tasks that ran (they run in order: the first `finished` posted)
    bool stopping = false;
    std::thread thread;
    std::vector<std::string> failures;
  };
  static void Run(State& s);
  /// Runs the task at the front of the queue with `lock` released (held on entry and on return).
  static void RunFront(State& s, std::unique_lock<std::mutex>& lock);

  PerProcess<State> state_;
};

struct TableContext;  // table/context.h

/// Post-commit hook of every commit: a checkpoint when one is due (taken back if the table was
/// dropped meanwhile).
arrow::Status MaybeCheckpoint(TableContext& t);
/// The checkpoint of `snapshot`, written by a handle's upkeep thread after the commit was
/// acknowledged. Writer processes each checkpoint the versions they commit: one whose upkeep lags
/// behind finds a newer checkpoint named in `_last_checkpoint` and writes none (it would cost as
/// much as the newer one and point `_last_checkpoint` back to an older version).
arrow::Status WriteCheckpointUnlessSuperseded(DeltaLog& log, const Snapshot& snapshot);
/// The hooks a commit runs once acknowledged (see txn/post_commit.h): the checkpoint, and the
/// index record when it added `files` (which must outlive the hooks).
PostCommitHooks HooksAfter(TableContext& t, const std::vector<WrittenFile>* files, int64_t version,
                           int64_t seq);
/// The same work for append commit `version` (which added `files`, sequence number = version),
/// queued on the handle's Upkeep instead of run now.
void QueueAfterAppend(TableContext& t, const std::vector<WrittenFile>& files, int64_t version);
/// Waits for the handle's queued upkeep and takes in what it did: the newest checkpoint, and
/// the commits of its background compaction passes (the handle advances to the latest version
/// when a pass committed beyond it).
arrow::Status FinishUpkeep(TableContext& t);

}  // namespace timelake
