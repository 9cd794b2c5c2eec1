#include "timelake/txn/upkeep.h"

#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>

#include <new>
#include <set>
#include <system_error>

#include "timelake/util/parallel.h"

namespace timelake {
namespace {

constexpr int kNiceIncrement = 10;  // the upkeep thread's nice value above its creator's

// Every live Upkeep, so that DrainAllUpkeep() can finish their work before the process exits.
std::mutex& RegistryMutex() {
  static std::mutex* mutex = new std::mutex;  // never destroyed: used during exit
  return *mutex;
}
std::set<Upkeep*>& Registry() {
  static std::set<Upkeep*>* live = new std::set<Upkeep*>;
  return *live;
}
// Signalled (under RegistryMutex) when a pin is released.
std::condition_variable*& Unpinned() {
  static std::condition_variable* unpinned = new std::condition_variable;
  return unpinned;
}

}  // namespace

void DrainAllUpkeep() {
  // The registry lock is never held while waiting: a task may open a table (a background
  // compaction pass does), whose new Upkeep registers itself; it would wait for the lock while
  // the drain waited for the task. An Upkeep is pinned instead, so that it outlives the wait, and
  // the registry is walked again for the queues not drained yet, the ones created meanwhile
  // included. Each queue is drained once: appends that keep posting cannot hold the drain up.
  std::set<uint64_t> drained;
  for (;;) {
    Upkeep* busy = nullptr;
    {
      std::lock_guard<std::mutex> lock(RegistryMutex());
      for (Upkeep* upkeep : Registry()) {
        if (!drained.count(upkeep->id_) && upkeep->Busy()) {
          busy = upkeep;
          ++busy->pins_;
          break;
        }
      }
    }
    if (!busy) return;
    drained.insert(busy->id_);
    busy->Drain();
    {
      std::lock_guard<std::mutex> lock(RegistryMutex());
      --busy->pins_;
    }
    Unpinned()->notify_all();
  }
}

void Upkeep::InitializeForFork() {
  static std::once_flag registered;
  std::call_once(registered, [] {
    (void)RegistryMutex();
    (void)Registry();
    (void)Unpinned();
    pthread_atfork(&ForkPrepare, &ForkParent, &ForkChild);
  });
}

namespace {
[[maybe_unused]] const bool kUpkeepReadyForFork = (Upkeep::InitializeForFork(), true);
}  // namespace

namespace {
std::atomic<uint64_t> next_upkeep_id{1};
}  // namespace

Upkeep::Upkeep() : id_(next_upkeep_id++) {
  InitializeForFork();
  std::lock_guard<std::mutex> lock(RegistryMutex());
  Registry().insert(this);
}

void Upkeep::ForkPrepare() {
  RegistryMutex().lock();
  for (Upkeep* upkeep : Registry()) upkeep->mutex_.lock();
}

void Upkeep::ForkParent() {
  for (Upkeep* upkeep : Registry()) upkeep->mutex_.unlock();
  RegistryMutex().unlock();
}

void Upkeep::ForkChild() {
  // The child's only thread is the one that forked, which holds every lock (ForkPrepare). A
  // drain waiting in the parent has no thread here: its pins and its condition go.
  Unpinned() = new std::condition_variable;  // the parent's may be mid-wait: leaked, not reused
  for (Upkeep* upkeep : Registry()) {
    upkeep->pins_ = 0;
    new (&upkeep->thread_) std::thread();  // the parent's thread does not exist here
    new (&upkeep->changed_) std::condition_variable();
    upkeep->queue_.clear();
    upkeep->finished_ = upkeep->posted_;  // the parent runs them
    upkeep->running_task_ = false;
    upkeep->stopping_ = false;
    upkeep->mutex_.unlock();
  }
  RegistryMutex().unlock();
}

Upkeep::~Upkeep() {
  {
    // A drain pinned this one: it waits for the queue to empty, which the thread still does.
    std::unique_lock<std::mutex> lock(RegistryMutex());
    Unpinned()->wait(lock, [this] { return pins_ == 0; });
    Registry().erase(this);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Upkeep::Post(std::string name, Task task) {
  std::unique_lock<std::mutex> lock(mutex_);
  queue_.emplace_back(std::move(name), std::move(task));
  ++posted_;
  if (!thread_.joinable()) {
    try {
      thread_ = std::thread([this] { Run(); });
    } catch (const std::system_error&) {
      // No thread to be had: run the queue here and now.
      while (!queue_.empty()) RunFront(lock);
      return;
    }
  }
  changed_.notify_all();
}

bool Upkeep::Busy() {
  std::lock_guard<std::mutex> lock(mutex_);
  return !queue_.empty() || running_task_;
}

void Upkeep::Drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  const uint64_t target = posted_;
  changed_.wait(lock, [this, target] { return finished_ >= target; });
}

std::vector<std::string> Upkeep::TakeFailures() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(failures_, {});
}

void Upkeep::Record(const std::string& name, const arrow::Status& status) {
  if (failures_.size() >= 100) failures_.erase(failures_.begin());
  failures_.push_back(name + ": " + status.message());
}

void Upkeep::Run() {
  // Upkeep is work nobody waits for (until a Drain, which then leaves the cores to it): it runs
  // at a lower priority than the threads that append and query, so that a fold, a checkpoint or
  // a compaction pass sharing a core with an append does not add to that append's latency.
  // Threads it starts inherit that. Best effort: the nice value of a thread can only go up.
  const id_t self = static_cast<id_t>(::gettid());
  errno = 0;
  const int nice = ::getpriority(PRIO_PROCESS, self);
  if (errno == 0) (void)::setpriority(PRIO_PROCESS, self, std::min(nice + kNiceIncrement, 19));
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything ran
    RunFront(lock);
  }
}

void Upkeep::RunFront(std::unique_lock<std::mutex>& lock) {
  auto [name, task] = std::move(queue_.front());
  queue_.pop_front();
  running_task_ = true;
  lock.unlock();
  // A task that throws (std::bad_alloc) fails as a task; the exception must not end the thread.
  arrow::Status status = NoThrow(name.c_str(), task);
  lock.lock();
  running_task_ = false;
  ++finished_;
  if (!status.ok()) Record(name, status);
  changed_.notify_all();
}

}  // namespace timelake
