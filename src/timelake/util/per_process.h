// PerProcess<T>: state that belongs to one process, so that fork() needs no handlers.
//
// A child made by fork() (Python's multiprocessing) inherits a copy of its parent's memory but
// only the thread that forked: a mutex another thread held is held for good there, a thread to
// join does not exist, a queue may be half modified. PerProcess keeps its T together with the
// pid that made it; Get() in another process never touches that T (not its mutexes, not its
// threads) and makes a fresh one for the calling process instead. The parent's copy is
// abandoned in the child: leaked, never destroyed, since its destructor could wait for threads
// that exist only in the parent.
//
// Thread safety: Get() and IfMade() may be called from any thread, concurrently; the T they
// return is as thread-safe as T is. Destroying a PerProcess REQUIRES that no other thread uses it
// (it destroys this process's T; one made by another process is abandoned).
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <atomic>

namespace timelake {

template <typename T>
class PerProcess {
 public:
  PerProcess() = default;
  ~PerProcess() {
    if (Slot* slot = slot_.load(std::memory_order_acquire); slot && slot->pid == ::getpid()) {
      delete slot;
    }
  }
  PerProcess(const PerProcess&) = delete;
  PerProcess& operator=(const PerProcess&) = delete;

  /// The calling process's T, default-constructed on the first call in this process.
  T& Get() {
    const pid_t self = ::getpid();
    Slot* seen = slot_.load(std::memory_order_acquire);
    while (seen == nullptr || seen->pid != self) {
      auto* fresh = new Slot(self);
      // On success the slot seen (another process's, or none) is abandoned, never touched.
      if (slot_.compare_exchange_strong(seen, fresh, std::memory_order_acq_rel)) {
        return fresh->value;
      }
      delete fresh;  // another thread of this process made one first: `seen` is it
    }
    return seen->value;
  }

  /// The calling process's T if Get() made one in this process; null otherwise.
  T* IfMade() {
    Slot* slot = slot_.load(std::memory_order_acquire);
    return slot && slot->pid == ::getpid() ? &slot->value : nullptr;
  }

 private:
  struct Slot {
    explicit Slot(pid_t p) : pid(p) {}
    const pid_t pid;
    T value;
  };
  std::atomic<Slot*> slot_{nullptr};
};

}  // namespace timelake
