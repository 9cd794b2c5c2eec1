// OperationLock: serialises the operations of one handle, and refuses re-entry.
//
// A plain mutex deadlocks when the thread holding it asks for it again, which happens when an
// operation calls back into user code (an append pulls its input stream, which may be a Python
// generator) and that code uses the same handle. An OperationLock remembers which thread holds
// it and for which operation: another thread waits its turn, while the holding thread gets an
// error status (ExecutionError: a usage error, not bad input) that names the running operation.
// Waiting can be interrupted (InterruptCheck).
//
// Thread-safe. Not recursive by design: a handle's operations assume they run alone.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <arrow/result.h>

#include "timelake/util/interrupt.h"

namespace timelake {

class OperationLock {
 public:
  /// Held while alive (moves transfer the hold; a moved-from or default Hold holds nothing).
  class Hold {
   public:
    Hold() = default;
    Hold(Hold&& other) noexcept : lock_(other.lock_) { other.lock_ = nullptr; }
    Hold& operator=(Hold&& other) noexcept;
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;
    ~Hold() { Release(); }

   private:
    friend class OperationLock;
    explicit Hold(OperationLock* lock) : lock_(lock) {}
    void Release();
    OperationLock* lock_ = nullptr;
  };

  /// `owner` names what is locked in error messages ("table handle 'default.t'"); `remedy` says
  /// what to do instead of re-entering ("use a second handle, from lake.table('default.t')").
  OperationLock(std::string owner, std::string remedy)
      : owner_(std::move(owner)), remedy_(std::move(remedy)) {}

  /// Waits until no other thread holds the lock, then holds it for `operation` (e.g. "append").
  /// Status::ExecutionError, naming the operation in progress, if this thread already holds it;
  /// the status of `interrupt` if it asks to stop while waiting (it is asked every 50 ms).
  arrow::Result<Hold> Acquire(const char* operation, const InterruptCheck& interrupt = {},
                              bool allow_busy = false);

  /// True if the calling thread holds the lock (lets cheap reads made from a callback of the
  /// running operation skip the lock: the operation is suspended in that callback).
  bool HeldByThisThread() const { return holder_.load() == std::this_thread::get_id(); }

  /// Marks the calling thread busy with `operation` without holding the lock, for as long as the
  /// returned guard lives: the part of an operation that runs unlocked but still calls back into
  /// user code (an append reading its input stream). Acquire from that thread then fails as if
  /// it held the lock, unless it passes `allow_busy`.
  class Busy {
   public:
    Busy(Busy&& other) noexcept : lock_(other.lock_) { other.lock_ = nullptr; }
    Busy(const Busy&) = delete;
    Busy& operator=(const Busy&) = delete;
    Busy& operator=(Busy&&) = delete;
    ~Busy();

   private:
    friend class OperationLock;
    explicit Busy(OperationLock* lock) : lock_(lock) {}
    OperationLock* lock_;
  };
  Busy MarkBusy(const char* operation);

 private:
  std::string owner_;
  std::string remedy_;
  std::timed_mutex mutex_;
  std::atomic<std::thread::id> holder_{};
  const char* operation_ = "";  // written and read by the holder only
  std::mutex busy_mutex_;
  std::vector<std::pair<std::thread::id, const char*>> busy_;  // GUARDED_BY(busy_mutex_)
};

}  // namespace timelake
