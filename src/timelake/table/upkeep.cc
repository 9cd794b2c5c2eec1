// Upkeep: the post-commit work of a handle and the thread that does it (see table/upkeep.h).
#include "timelake/table/upkeep.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <system_error>

#include "timelake/log/file_tags.h"
#include "timelake/rows/newest_rows.h"
#include "timelake/table/context.h"
#include "timelake/table/head.h"
#include "timelake/table/latest.h"
#include "timelake/table/maintain.h"
#include "timelake/util/parallel.h"
#include "timelake/util/status.h"

namespace timelake {
namespace {

constexpr int kNiceIncrement = 10;  // the upkeep thread's nice value above its creator's

}  // namespace

Upkeep::~Upkeep() {
  // Another process's state (a child's inherited copy) is not ours to stop: PerProcess leaves it.
  State* s = state_.IfMade();
  if (s == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(s->mutex);
    s->stopping = true;
  }
  s->changed.notify_all();
  if (s->thread.joinable()) s->thread.join();
}

void Upkeep::Post(std::string name, Task task) {
  State& s = state_.Get();
  std::unique_lock<std::mutex> lock(s.mutex);
  s.queue.emplace_back(std::move(name), std::move(task));
  ++s.posted;
  if (!s.thread.joinable()) {
    try {
      s.thread = std::thread([&s] { Run(s); });
    } catch (const std::system_error&) {
      // No thread to be had: run the queue here and now.
      while (!s.queue.empty()) RunFront(s, lock);
      return;
    }
  }
  s.changed.notify_all();
}

void Upkeep::Drain() {
  State* s = state_.IfMade();
  if (s == nullptr) return;  // nothing was posted in this process
  std::unique_lock<std::mutex> lock(s->mutex);
  const uint64_t target = s->posted;
  s->changed.wait(lock, [s, target] { return s->finished >= target; });
}

std::vector<std::string> Upkeep::TakeFailures() {
  State* s = state_.IfMade();
  if (s == nullptr) return {};
  std::lock_guard<std::mutex> lock(s->mutex);
  return std::exchange(s->failures, {});
}

void Upkeep::Run(State& s) {
  // Upkeep is work nobody waits for (until a Drain, which then leaves the cores to it): it runs
  // at a lower priority than the threads that append and query, so that a fold, a checkpoint or
  // a compaction pass sharing a core with an append does not add to that append's latency.
  // Threads it starts inherit that. Best effort: the nice value of a thread can only go up.
  const id_t self = static_cast<id_t>(::gettid());
  errno = 0;
  const int nice = ::getpriority(PRIO_PROCESS, self);
  if (errno == 0) (void)::setpriority(PRIO_PROCESS, self, std::min(nice + kNiceIncrement, 19));
  std::unique_lock<std::mutex> lock(s.mutex);
  for (;;) {
    s.changed.wait(lock, [&s] { return s.stopping || !s.queue.empty(); });
    if (s.queue.empty()) return;  // stopping, and everything ran
    RunFront(s, lock);
  }
}

void Upkeep::RunFront(State& s, std::unique_lock<std::mutex>& lock) {
  auto [name, task] = std::move(s.queue.front());
  s.queue.pop_front();
  lock.unlock();
  // A task that throws (std::bad_alloc) fails as a task; the exception must not end the thread.
  arrow::Status status = NoThrow(name.c_str(), task);
  lock.lock();
  ++s.finished;
  if (!status.ok()) {
    if (s.failures.size() >= 100) s.failures.erase(s.failures.begin());
    s.failures.push_back(name + ": " + status.message());
  }
  s.changed.notify_all();
}

// The work itself: what an acknowledged commit leaves to do.

namespace {

// A checkpoint entry (a live file, a tombstone, an application's transaction) per this many
// makes one more commit of replay as costly as writing the checkpoint again (CheckpointStride).
constexpr int64_t kCheckpointEntriesPerCommit = 50;

// Commits between checkpoints: `delta.checkpointInterval` (10), doubled while the checkpoint
// would hold more than kCheckpointEntriesPerCommit entries per commit of the stride. Writing a
// checkpoint costs O(entries); with a fixed interval a table of many files spent most of its
// append's CPU on them (bench/README.md). So the work per commit stays bounded, and a reader
// replays at most about twice the commits a checkpoint's read costs. A function of the
// snapshot, so that writers of version v agree whether v gets one (one that counts fewer expired
// tombstones may not: a checkpoint more or less, which no reader minds).
int64_t CheckpointStride(const Snapshot& snapshot) {
  const int64_t interval =
      ParseInt64(snapshot.Config("delta.checkpointInterval", "10")).value_or(10);
  if (interval <= 0) return interval;
  const int64_t entries = static_cast<int64_t>(snapshot.files.size()) + snapshot.HistoryEntries();
  int64_t stride = interval;
  while (stride * kCheckpointEntriesPerCommit < entries && stride < (int64_t{1} << 40)) stride *= 2;
  return stride;
}

bool CheckpointDue(const Snapshot& snapshot) {
  const int64_t stride = CheckpointStride(snapshot);
  return stride > 0 && snapshot.version > 0 && snapshot.version % stride == 0;
}

// Writes the checkpoint of `snapshot`. A drop between the commit and here would make the
// checkpoint revive the dropped folder as a broken table: it is taken back if the commit is no
// longer there. Only a definite answer takes it back: a read that failed (a timeout, a 500)
// leaves the checkpoint, which is right as long as the commit stands, as it almost always does.
arrow::Status WriteCheckpoint(DeltaLog& log, const Snapshot& snapshot) {
  ARROW_RETURN_NOT_OK(log.Checkpoint(snapshot));
  if (arrow::Status head = log.CheckHead(snapshot.version, snapshot.head_fingerprint); !head.ok()) {
    if (IsTableNotFound(head)) (void)log.store().DeleteCheckpoint(snapshot.version);
    return head;
  }
  return arrow::Status::OK();
}

}  // namespace

arrow::Status WriteCheckpointUnlessSuperseded(DeltaLog& log, const Snapshot& snapshot) {
  if (auto newest = log.store().LastCheckpointHint(); newest && *newest >= snapshot.version) {
    return arrow::Status::OK();
  }
  return WriteCheckpoint(log, snapshot);
}

arrow::Status MaybeCheckpoint(TableContext& t) {
  if (!CheckpointDue(t.snapshot)) return arrow::Status::OK();
  ARROW_RETURN_NOT_OK(WriteCheckpoint(t.log, t.snapshot));
  t.snapshot.checkpoint_version = t.snapshot.version;
  return arrow::Status::OK();
}

void QueueAfterAppend(TableContext& t, const std::vector<WrittenFile>& files, int64_t version) {
  if (t.contract.is_time_series()) {
    LatestDelta delta;
    if (!files.empty()) delta.kind = LatestDelta::kAppend;
    for (const auto& f : files) {
      delta.paths.push_back(f.path);
      delta.newest.push_back(f.newest);
    }
    t.latest.Note(version, std::move(delta));
  }
  const bool checkpoint = CheckpointDue(t.snapshot);
  int64_t record_rows = 0;  // at most: the record merges these
  int64_t file_rows = 0;
  for (const auto& f : files) {
    record_rows += f.newest ? f.newest->num_rows() : 0;
    file_rows += f.rows;
  }
  const bool indexed = t.contract.is_time_series() && !files.empty();
  const bool record = indexed && RecordWorthWriting(file_rows);
  const bool fold = indexed && version % FoldInterval(record_rows) == 0;
  const bool head = t.heads && version % t.head_interval == 0;
  // The snapshot of the commit, for the tasks that need all of it (copied only then).
  std::shared_ptr<const Snapshot> snapshot;
  if (checkpoint || fold || head) snapshot = std::make_shared<Snapshot>(t.snapshot);
  if (checkpoint) {
    t.upkeep.Post("checkpoint", [store = t.store, path = t.table_path, snapshot,
                                  checkpointed = t.checkpointed] {
      DeltaLog log(store, path);  // the handle's own log belongs to the handle's thread
      ARROW_RETURN_NOT_OK(WriteCheckpointUnlessSuperseded(log, *snapshot));
      int64_t seen = checkpointed->load();
      while (seen < snapshot->version && !checkpointed->compare_exchange_weak(seen, snapshot->version)) {
      }
      return arrow::Status::OK();
    });
  }
  if (record || fold) {
    std::vector<std::shared_ptr<arrow::Table>> newest;
    std::vector<std::string> paths;
    for (const auto& f : files) {
      if (record) newest.push_back(f.newest);
      paths.push_back(f.path);
    }
    t.upkeep.Post("last-value index", [index = t.index, contract = t.contract, version,
                                        newest = std::move(newest), paths = std::move(paths),
                                        snapshot = fold ? snapshot : nullptr] {
      std::shared_ptr<arrow::Table> rows;
      if (!newest.empty()) {
        ARROW_ASSIGN_OR_RAISE(rows, RecordRows(newest, version, contract));
      }
      return RecordAndFold(*index, version, paths, rows, snapshot.get());
    });
  }
  if (head) {
    std::vector<std::shared_ptr<arrow::Table>> newest;
    for (const auto& f : files) newest.push_back(f.newest);
    t.upkeep.Post("table head", [store = t.store, path = t.table_path, snapshot, index = t.index,
                                  contract = t.contract, checkpointed = t.checkpointed,
                                  newest = std::move(newest)] {
      Snapshot at = *snapshot;
      // Checkpoint tasks run before this one: a reader of the head starts from the newest.
      const int64_t checkpoint = checkpointed->load();
      if (checkpoint > at.checkpoint_version && checkpoint <= at.version) {
        at.checkpoint_version = checkpoint;
      }
      DeltaLog log(store, path);
      const int64_t version = at.version;
      return WriteHead(*store, log, std::move(at), [&](const std::optional<HeadContents>& previous,
                                                       const Snapshot& written)
                           -> arrow::Result<std::shared_ptr<arrow::Table>> {
        if (!contract.is_time_series()) return nullptr;
        // The head before this commit's, advanced by this commit's rows: O(series).
        if (previous && previous->latest && written.version == version &&
            previous->snapshot.version == version - 1 &&
            previous->snapshot.metadata.id == written.metadata.id &&
            previous->snapshot.metadata.schema_string == written.metadata.schema_string) {
          if (newest.empty()) return previous->latest;
          ARROW_ASSIGN_OR_RAISE(auto record, RecordRows(newest, version, contract));
          if (record) return MergeNewest({previous->latest, record}, contract);
        }
        ARROW_ASSIGN_OR_RAISE(auto state, index->Read(written));
        return state.rows;
      });
    });
  }
}

arrow::Status FinishUpkeep(TableContext& t) {
  t.upkeep.Drain();
  const int64_t checkpointed = t.checkpointed->load();
  if (checkpointed <= t.snapshot.version && checkpointed > t.snapshot.checkpoint_version) {
    t.snapshot.checkpoint_version = checkpointed;
  }
  // The handle's own compactions are part of what it did: show them.
  if (BackgroundCompactionVersion(t) > t.snapshot.version) return Update(t);
  return arrow::Status::OK();
}

PostCommitHooks HooksAfter(TableContext& t, const std::vector<WrittenFile>* files,
                           int64_t version, int64_t seq) {
  PostCommitHooks hooks;
  hooks.Add("checkpoint", [&t] { return MaybeCheckpoint(t); });
  if (files != nullptr) {
    hooks.Add("last-value index", [&t, files, version, seq] {
      return RecordNewest(t, *files, version, seq);
    });
  }
  if (t.heads) {
    hooks.Add("table head", [&t] {
      return WriteHead(*t.store, t.log, t.snapshot, [&t](const std::optional<HeadContents>&,
                                                         const Snapshot& written)
                           -> arrow::Result<std::shared_ptr<arrow::Table>> {
        if (!t.contract.is_time_series()) return nullptr;
        ARROW_ASSIGN_OR_RAISE(auto state, t.index->Read(written));
        return state.rows;
      });
    });
  }
  return hooks;
}

}  // namespace timelake
