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

arrow::Result<OperationLock::Hold> OperationLock::Acquire(const char* operation,
                                                          const InterruptCheck& interrupt) {
  if (HeldByThisThread()) {
    return arrow::Status::ExecutionError(
        owner_, " is busy with ", operation_, "() on this thread: ", operation,
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
