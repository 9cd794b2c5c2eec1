// OperationLock: one operation at a time per handle; re-entry from the holding thread is an error
// rather than a deadlock; waiting can be interrupted.
#include "timelake/util/operation_lock.h"

#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "test_util.h"

namespace timelake::testing {
namespace {


TEST(OperationLockTest, ReentryFromTheHoldingThreadIsAnErrorNamingBothOperations) {
  OperationLock lock("table handle 'default.t'", "use a second handle");
  ASSERT_OK_AND_ASSIGN(auto held, lock.Acquire("append"));
  auto again = lock.Acquire("info");
  EXPECT_TRUE(FailsWith(again, arrow::StatusCode::ExecutionError,
                        "table handle 'default.t' is busy with append() on this thread: info()"));
  EXPECT_TRUE(FailsWith(again, arrow::StatusCode::ExecutionError, "use a second handle"));
}

TEST(OperationLockTest, ReleasedLockCanBeTakenAgain) {
  OperationLock lock("x", "y");
  { ASSERT_OK_AND_ASSIGN(auto held, lock.Acquire("append")); }
  EXPECT_FALSE(lock.HeldByThisThread());
  ASSERT_OK_AND_ASSIGN(auto held, lock.Acquire("maintain"));
  EXPECT_TRUE(lock.HeldByThisThread());
}

TEST(OperationLockTest, MovedHoldReleasesOnce) {
  OperationLock lock("x", "y");
  {
    ASSERT_OK_AND_ASSIGN(auto held, lock.Acquire("append"));
    OperationLock::Hold moved = std::move(held);
    EXPECT_TRUE(lock.HeldByThisThread());
  }
  EXPECT_FALSE(lock.HeldByThisThread());
}

TEST(OperationLockTest, OtherThreadsWaitTheirTurn) {
  OperationLock lock("x", "y");
  std::atomic<bool> released{false};
  std::atomic<bool> acquired_early{false};
  auto held = lock.Acquire("append");
  ASSERT_OK(held.status());
  std::thread other([&] {
    auto mine = lock.Acquire("info");
    EXPECT_TRUE(mine.ok()) << mine.status().ToString();
    if (!released) acquired_early = true;
    EXPECT_TRUE(lock.HeldByThisThread());
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  released = true;
  { auto drop = std::move(held).ValueOrDie(); }
  other.join();
  EXPECT_FALSE(acquired_early);
}

TEST(OperationLockTest, WaitingStopsWhenTheInterruptCheckSaysSo) {
  OperationLock lock("x", "y");
  ASSERT_OK_AND_ASSIGN(auto held, lock.Acquire("append"));
  std::atomic<int> checks{0};
  arrow::Status waited;
  std::thread other([&] {
    waited = lock
                 .Acquire("maintain",
                          [&]() -> arrow::Status {
                            return ++checks < 3 ? arrow::Status::OK()
                                                : arrow::Status::Cancelled("interrupted");
                          })
                 .status();
  });
  other.join();  // returns although the lock is still held
  EXPECT_TRUE(FailsWith(waited, arrow::StatusCode::Cancelled));
  EXPECT_EQ(checks, 3);
  EXPECT_TRUE(lock.HeldByThisThread());
}

}  // namespace
}  // namespace timelake::testing
