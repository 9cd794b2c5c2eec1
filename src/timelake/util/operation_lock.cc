#include "timelake/util/operation_lock.h"

#include <chrono>

namespace timelake {

OperationLock::Hold& OperationLock::Hold::operator=(Hold&& other) noexcept {
  if (this != &other) {
    Release();
    lock_ = other.lock_;
    other.lock_ = nullptr;
  }
  return *this;
}

void OperationLock::Hold::Release() {
  if (lock_ == nullptr) return;
  lock_->holder_.store(std::thread::id());
  lock_->operation_ = "";
  lock_->mutex_.unlock();
  lock_ = nullptr;
}

OperationLock::Busy OperationLock::MarkBusy(const char* operation) {
  std::lock_guard<std::mutex> lock(busy_mutex_);
  busy_.emplace_back(std::this_thread::get_id(), operation);
  return Busy(this);
}

OperationLock::Busy::~Busy() {
  if (lock_ == nullptr) return;
  std::lock_guard<std::mutex> lock(lock_->busy_mutex_);
  auto& busy = lock_->busy_;
  for (auto it = busy.begin(); it != busy.end(); ++it) {
    if (it->first == std::this_thread::get_id()) {
      busy.erase(it);
      break;
    }
  }
}

arrow::Result<OperationLock::Hold> OperationLock::Acquire(const char* operation,
                                                          const InterruptCheck& interrupt,
                                                          bool allow_busy) {
  const char* running = HeldByThisThread() ? operation_ : nullptr;
  if (running == nullptr && !allow_busy) {
    std::lock_guard<std::mutex> lock(busy_mutex_);
    for (const auto& [thread, busy_with] : busy_) {
      if (thread == std::this_thread::get_id()) running = busy_with;
    }
  }
  if (running != nullptr) {
    return arrow::Status::ExecutionError(
        owner_, " is busy with ", running, "() on this thread: ", operation,
        "() was called from inside it (for example from the input stream of an append) and "
        "cannot run until it returns; ", remedy_);
  }
  if (interrupt) {
    while (!mutex_.try_lock_for(std::chrono::milliseconds(50))) {
      ARROW_RETURN_NOT_OK(interrupt());
    }
  } else {
    mutex_.lock();
  }
  holder_.store(std::this_thread::get_id());
  operation_ = operation;
  return Hold(this);
}

}  // namespace timelake
