// LakeRuntime: the upkeep queues of a Lake's handles (see table/lake_runtime.h).
#include "timelake/table/lake_runtime.h"

#include <atomic>
#include <set>
#include <utility>

#include "timelake/util/parallel.h"

namespace timelake {
namespace {

// The runtimes of the process that made a queue in it: weak references, nothing else. Per
// process, so that a child made by fork() starts with an empty list (its inherited runtimes
// enter it when they make a queue there).
struct LiveRuntimes {
  std::mutex mutex;
  std::vector<std::weak_ptr<LakeRuntime>> runtimes;  // GUARDED_BY(mutex)
};

PerProcess<LiveRuntimes>& Live() {
  static auto* live = new PerProcess<LiveRuntimes>;  // never destroyed: drained at exit
  return *live;
}
// Made when the library loads, before any thread can: a fork() while another thread was inside
// the first Live() (its static initialization) would leave the child waiting for it forever.
[[maybe_unused]] const bool kLiveRuntimesMade = (Live(), true);

void Enlist(std::weak_ptr<LakeRuntime> runtime) {
  LiveRuntimes& live = Live().Get();
  std::lock_guard<std::mutex> lock(live.mutex);
  std::erase_if(live.runtimes, [](const auto& r) { return r.expired(); });
  live.runtimes.push_back(std::move(runtime));
}

std::vector<std::shared_ptr<LakeRuntime>> LiveNow() {
  LiveRuntimes& live = Live().Get();
  std::vector<std::shared_ptr<LakeRuntime>> out;
  std::lock_guard<std::mutex> lock(live.mutex);
  for (const auto& weak : live.runtimes) {
    if (auto runtime = weak.lock()) out.push_back(std::move(runtime));
  }
  return out;
}

std::atomic<uint64_t> next_queue_id{1};

}  // namespace

std::shared_ptr<LakeRuntime> LakeRuntime::Make() {
  return std::shared_ptr<LakeRuntime>(new LakeRuntime());
}

uint64_t LakeRuntime::NewQueueId() { return next_queue_id++; }

LakeRuntime::~LakeRuntime() {
  Queues* queues = queues_.IfMade();  // another process's are abandoned, not ours to run
  if (queues == nullptr) return;
  std::map<uint64_t, Queue> closing;
  {
    std::lock_guard<std::mutex> lock(queues->mutex);
    closing.swap(queues->by_id);
  }
  // Each Upkeep runs what it holds and joins its thread as it goes (unless a drain of another
  // thread still holds it: then that thread's release does).
  closing.clear();
}

void LakeRuntime::Post(uint64_t id, const std::string& table, std::string name, Upkeep::Task task) {
  std::shared_ptr<Upkeep> upkeep;
  bool enlist = false;
  {
    Queues& queues = queues_.Get();
    std::lock_guard<std::mutex> lock(queues.mutex);
    Queue& queue = queues.by_id[id];
    if (!queue.upkeep) {
      queue.table = table;
      queue.upkeep = std::make_shared<Upkeep>();
    }
    upkeep = queue.upkeep;
    enlist = !std::exchange(queues.listed, true);
  }
  if (enlist) Enlist(weak_from_this());
  upkeep->Post(std::move(name), std::move(task));
}

std::shared_ptr<Upkeep> LakeRuntime::Find(uint64_t id) {
  Queues* queues = queues_.IfMade();
  if (queues == nullptr) return nullptr;
  std::lock_guard<std::mutex> lock(queues->mutex);
  auto it = queues->by_id.find(id);
  return it == queues->by_id.end() ? nullptr : it->second.upkeep;
}

void LakeRuntime::Drain(uint64_t id) {
  if (auto upkeep = Find(id)) upkeep->Drain();
}

std::vector<std::string> LakeRuntime::TakeFailures(uint64_t id) {
  auto upkeep = Find(id);
  return upkeep ? upkeep->TakeFailures() : std::vector<std::string>{};
}

void LakeRuntime::Close(uint64_t id) {
  Queues* queues = queues_.IfMade();
  if (queues == nullptr) return;
  Queue closing;
  {
    std::lock_guard<std::mutex> lock(queues->mutex);
    auto it = queues->by_id.find(id);
    if (it == queues->by_id.end()) return;
    closing = std::move(it->second);
    queues->by_id.erase(it);
  }
  // Released outside the lock: the Upkeep runs what it holds and joins its thread.
}

template <typename Pick>
void LakeRuntime::DrainWhere(Pick pick) {
  Queues* queues = queues_.IfMade();
  if (queues == nullptr) return;
  // The lock is never held while waiting: a task may post to a queue of this runtime. Each queue
  // is drained once, those made meanwhile too: appends that keep posting cannot hold this up.
  std::set<uint64_t> drained;
  for (;;) {
    std::vector<std::shared_ptr<Upkeep>> round;
    {
      std::lock_guard<std::mutex> lock(queues->mutex);
      for (const auto& [id, queue] : queues->by_id) {
        if (pick(queue) && drained.insert(id).second) round.push_back(queue.upkeep);
      }
    }
    if (round.empty()) return;
    for (const auto& upkeep : round) upkeep->Drain();
  }
}

void LakeRuntime::DrainTable(const std::string& table) {
  DrainWhere([&table](const Queue& queue) { return queue.table == table; });
}

void LakeRuntime::DrainAll() {
  DrainWhere([](const Queue&) { return true; });
}

UpkeepQueue::UpkeepQueue(std::weak_ptr<LakeRuntime> runtime, std::string table)
    : runtime_(std::move(runtime)), table_(std::move(table)) {}

UpkeepQueue::~UpkeepQueue() {
  if (auto runtime = runtime_.lock()) runtime->Close(id_);
}

void UpkeepQueue::Post(std::string name, Upkeep::Task task) {
  if (auto runtime = runtime_.lock()) {
    runtime->Post(id_, table_, std::move(name), std::move(task));
    return;
  }
  // No Lake (any more): the work is done here, as an Upkeep does when it cannot start a thread.
  arrow::Status status = NoThrow(name.c_str(), task);
  if (status.ok()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (inline_failures_.size() >= 100) inline_failures_.erase(inline_failures_.begin());
  inline_failures_.push_back(name + ": " + status.message());
}

void UpkeepQueue::Drain() {
  if (auto runtime = runtime_.lock()) runtime->Drain(id_);
}

std::vector<std::string> UpkeepQueue::TakeFailures() {
  std::vector<std::string> failures;
  if (auto runtime = runtime_.lock()) failures = runtime->TakeFailures(id_);
  std::lock_guard<std::mutex> lock(mutex_);
  failures.insert(failures.end(), inline_failures_.begin(), inline_failures_.end());
  inline_failures_.clear();
  return failures;
}

void DrainTableUpkeep(const std::string& table) {
  for (const auto& runtime : LiveNow()) runtime->DrainTable(table);
}

void DrainEveryUpkeep() {
  for (const auto& runtime : LiveNow()) runtime->DrainAll();
}

}  // namespace timelake
