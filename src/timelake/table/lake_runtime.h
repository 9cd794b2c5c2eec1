// LakeRuntime: the threads a Lake owns for the work its table handles leave behind.
//
// Every handle a Lake opens gets an upkeep queue (table/upkeep.h: checkpoints, index records and
// folds, background compaction passes) in its Lake's runtime, through an UpkeepQueue. The runtime
// owns the queues and their threads: destroying it (the Lake going away) runs what is queued and
// stops the threads. A handle reaches its queue through a weak reference, so a handle may
// outlive its Lake: from then on its post-commit work runs inline, on the thread that
// committed (append() is slower, nothing is lost, nothing touches freed memory).
//
// Dropping a table must not let a queued checkpoint or index record of any handle of the process
// write into the table after it is gone (it could bring the folder back on stores without
// folders), and handles of the same table may belong to other Lakes of the process: so
// DrainTableUpkeep drains the queues of that table in every live runtime, and DrainEveryUpkeep
// (called before the interpreter exits) drains them all. Both walk the process's list of live
// runtimes: weak references only, no work state; a runtime enters it in each process where it
// makes its first queue. A runtime already being destroyed is not waited for (it runs its queues
// as it goes, as a handle closed during a drop always did); a checkpoint written after the drop is
// taken back by its writer (table/upkeep.cc).
//
// fork() (Python's multiprocessing): a runtime keeps its queues per process (util/per_process.h).
// A child never touches its parent's queues, threads or mutexes (it abandons them) and starts
// fresh queues on its handles' first posts; the process's list of runtimes starts empty too.
//
// Thread safety: every function and method here may be called from any thread, except that a
// LakeRuntime must not be destroyed on one of its own upkeep threads (no task holds a runtime).
// Tasks may open tables (a background pass does): no runtime lock is held while a queue is
// drained or a task runs.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "timelake/table/upkeep.h"
#include "timelake/util/per_process.h"

namespace timelake {

class LakeRuntime : public std::enable_shared_from_this<LakeRuntime> {
 public:
  static std::shared_ptr<LakeRuntime> Make();
  /// Runs what its queues hold (this process's), then stops their threads.
  ~LakeRuntime();
  LakeRuntime(const LakeRuntime&) = delete;
  LakeRuntime& operator=(const LakeRuntime&) = delete;

  /// Queues `task` on queue `id` (a handle's, UpkeepQueue), made on the first post in this
  /// process; `table` is the table's location (what DrainTable matches).
  void Post(uint64_t id, const std::string& table, std::string name, Upkeep::Task task);
  /// Waits for what queue `id` held at the call (nothing if it has no queue in this process).
  void Drain(uint64_t id);
  /// Queue `id`'s failures since the last call (Upkeep::TakeFailures).
  std::vector<std::string> TakeFailures(uint64_t id);
  /// Runs what queue `id` holds and removes it (its handle is going away).
  void Close(uint64_t id);

  /// Drains every queue of `table` (a table location) once.
  void DrainTable(const std::string& table);
  /// Drains every queue once.
  void DrainAll();

  /// A process-wide unique id for a new queue.
  static uint64_t NewQueueId();

 private:
  LakeRuntime() = default;
  struct Queue {
    std::string table;
    std::shared_ptr<Upkeep> upkeep;
  };
  struct Queues {
    std::mutex mutex;
    std::map<uint64_t, Queue> by_id;  // GUARDED_BY(mutex)
    bool listed = false;              // entered in the process's list; GUARDED_BY(mutex)
  };
  /// The queue `id` of this process, or null.
  std::shared_ptr<Upkeep> Find(uint64_t id);
  /// Drains the queues `pick` selects, each once, until none that is busy is left undrained.
  template <typename Pick>
  void DrainWhere(Pick pick);

  PerProcess<Queues> queues_;
};

/// A handle's upkeep queue: in its Lake's runtime while the Lake lives, inline afterwards (and
/// for contexts opened without a Lake: time travel, background passes, which never post).
/// Thread-safe, like Upkeep.
class UpkeepQueue {
 public:
  UpkeepQueue() = default;  // inline
  /// A queue of `runtime` for a handle of the table at location `table`.
  UpkeepQueue(std::weak_ptr<LakeRuntime> runtime, std::string table);
  /// Runs what the queue holds and removes it from the runtime.
  ~UpkeepQueue();
  UpkeepQueue(const UpkeepQueue&) = delete;
  UpkeepQueue& operator=(const UpkeepQueue&) = delete;

  /// Queues `task` on the runtime's thread, or runs it now if the Lake is gone.
  void Post(std::string name, Upkeep::Task task);
  /// Waits for what was queued before the call (at once when the Lake is gone: its runtime ran
  /// everything before it went).
  void Drain();
  /// The failures since the last call (queued and inline), as Upkeep::TakeFailures.
  std::vector<std::string> TakeFailures();

 private:
  std::weak_ptr<LakeRuntime> runtime_;
  std::string table_;
  uint64_t id_ = LakeRuntime::NewQueueId();
  std::mutex mutex_;
  std::vector<std::string> inline_failures_;  // GUARDED_BY(mutex_)
};

/// Drains the queues of the table at location `table` in every live runtime of the process:
/// before a drop.
void DrainTableUpkeep(const std::string& table);
/// Drains every queue of every live runtime of the process: before the interpreter exits.
void DrainEveryUpkeep();

}  // namespace timelake
