// Upkeep: a handle's background queue of post-commit work, and the Lake's runtime that keeps them.
#include "timelake/table/upkeep.h"
#include "timelake/table/lake_runtime.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace timelake {
namespace {

TEST(UpkeepTest, TasksRunInOrderAndDrainWaitsForThem) {
  Upkeep upkeep;
  std::vector<int> ran;  // touched by the upkeep thread only until Drain() returns
  for (int i = 0; i < 50; ++i) {
    upkeep.Post("task", [&ran, i] {
      if (i % 10 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      ran.push_back(i);
      return arrow::Status::OK();
    });
  }
  upkeep.Drain();
  ASSERT_EQ(ran.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(ran[i], i);
}

// Upkeep runs below the priority of the threads that append: a fold or a compaction pass that
// shares a core with an append yields to it.
TEST(UpkeepTest, TasksRunAtALowerPriorityThanTheirPoster) {
  errno = 0;
  const int mine = ::getpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()));
  ASSERT_EQ(errno, 0);
  Upkeep upkeep;
  std::atomic<int> theirs{-100};
  upkeep.Post("probe", [&] {
    theirs = ::getpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()));
    return arrow::Status::OK();
  });
  upkeep.Drain();
  EXPECT_EQ(theirs.load(), std::min(mine + 10, 19));  // 19: the lowest there is
}

TEST(UpkeepTest, AFailingTaskIsReportedAndDoesNotStopTheOthers) {
  Upkeep upkeep;
  std::atomic<int> after{0};
  upkeep.Post("checkpoint", [] { return arrow::Status::IOError("disk full"); });
  upkeep.Post("index", [&] {
    ++after;
    return arrow::Status::OK();
  });
  upkeep.Drain();
  EXPECT_EQ(after.load(), 1);
  auto failures = upkeep.TakeFailures();
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0], "checkpoint: disk full");
  EXPECT_TRUE(upkeep.TakeFailures().empty());
}

TEST(UpkeepTest, DestroyingRunsWhatIsQueued) {
  std::atomic<int> ran{0};
  {
    Upkeep upkeep;
    for (int i = 0; i < 5; ++i) {
      upkeep.Post("slow", [&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        ++ran;
        return arrow::Status::OK();
      });
    }
  }
  EXPECT_EQ(ran.load(), 5);
}

// The queues of a Lake's handles live in its LakeRuntime (table/lake_runtime.h).

Upkeep::Task Slow(std::atomic<int>& ran, int ms) {
  return [&ran, ms] {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    ++ran;
    return arrow::Status::OK();
  };
}

TEST(LakeRuntimeTest, DrainAllWaitsForEveryQueue) {
  std::atomic<int> ran{0};
  auto runtime = LakeRuntime::Make();
  const uint64_t a = LakeRuntime::NewQueueId(), b = LakeRuntime::NewQueueId();
  runtime->Post(a, "memory://lake/default/t", "slow", Slow(ran, 20));
  runtime->Post(b, "memory://lake/default/u", "slow", Slow(ran, 20));
  runtime->DrainAll();
  EXPECT_EQ(ran.load(), 2);
}

TEST(LakeRuntimeTest, DrainEveryUpkeepReachesEveryLiveRuntimeOfTheProcess) {
  std::atomic<int> ran{0};
  auto one = LakeRuntime::Make(), two = LakeRuntime::Make();
  one->Post(LakeRuntime::NewQueueId(), "memory://lake/default/t", "slow", Slow(ran, 20));
  two->Post(LakeRuntime::NewQueueId(), "memory://other/default/t", "slow", Slow(ran, 20));
  DrainEveryUpkeep();
  EXPECT_EQ(ran.load(), 2);
}

// A drop drains the table's queues in every Lake of the process (another Lake may hold a handle
// of the same table), and only that table's.
TEST(LakeRuntimeTest, DrainTableUpkeepDrainsThatTablesQueuesInEveryRuntime) {
  std::atomic<int> ran{0};
  std::atomic<bool> release{false};
  auto one = LakeRuntime::Make(), two = LakeRuntime::Make();
  const uint64_t other_table = LakeRuntime::NewQueueId();
  one->Post(LakeRuntime::NewQueueId(), "memory://lake/default/t", "slow", Slow(ran, 20));
  two->Post(LakeRuntime::NewQueueId(), "memory://lake/default/t", "slow", Slow(ran, 20));
  two->Post(other_table, "memory://lake/default/u", "stalled", [&release] {
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return arrow::Status::OK();
  });
  DrainTableUpkeep("memory://lake/default/t");  // would wait forever for "u"'s stalled task
  EXPECT_EQ(ran.load(), 2);
  release = true;
  two->Drain(other_table);
}

TEST(LakeRuntimeTest, DrainsReturnWhileOtherThreadsKeepPosting) {
  // A drop drains every queue of the table while appends of other threads keep posting to
  // them: each drain waits for what was posted before it, not for the queue to run dry.
  auto runtime = LakeRuntime::Make();
  const uint64_t id = LakeRuntime::NewQueueId();
  const std::string table = "memory://lake/default/t";
  std::atomic<bool> stop{false};
  std::atomic<int> ran{0}, posted{0};
  std::thread feeder([&] {
    while (!stop) {
      // Posts faster than tasks run, but keeps the backlog under 200 tasks: the queue never runs
      // dry, and a drain's share stays bounded on a loaded machine (where a task at the upkeep
      // thread's low priority can take milliseconds).
      if (posted - ran < 200) {
        runtime->Post(id, table, "task", [&ran] {
          std::this_thread::sleep_for(std::chrono::microseconds(200));
          ++ran;
          return arrow::Status::OK();
        });
        ++posted;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (posted < 20 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  int before = 0;
  {
    runtime->Post(id, table, "marker", [&before, &ran] {
      before = ran.load();
      return arrow::Status::OK();
    });
    const auto started = std::chrono::steady_clock::now();
    runtime->Drain(id);
    DrainTableUpkeep(table);
    runtime->DrainAll();
    // Bounded by the queue at the call (at most 200 tasks of 0.2 ms): far below this.
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(20));
  }
  EXPECT_GT(before, 0) << "the marker, posted before the drain, ran";
  stop = true;
  feeder.join();
  runtime->Drain(id);
}

// At exit, a task may post to a new queue of the runtime while every queue is being drained
// (the drain waits for it too). The drain must not hold the runtime's lock while it waits (it
// deadlocked: CI hung in a writer's atexit). Run in a child so that a hang fails the test.
TEST(LakeRuntimeTest, DrainAllLetsATaskCreateAnotherQueue) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(120);  // a deadlock ends the child with SIGALRM
    std::atomic<int> inner_ran{0};
    auto runtime = LakeRuntime::Make();
    const uint64_t outer = LakeRuntime::NewQueueId(), inner = LakeRuntime::NewQueueId();
    runtime->Post(outer, "memory://lake/default/t", "opens a table", [&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // DrainAll is waiting
      runtime->Post(inner, "memory://lake/default/u", "inner", [&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        ++inner_ran;
        return arrow::Status::OK();
      });
      return arrow::Status::OK();
    });
    runtime->DrainAll();
    const int ok = inner_ran.load() == 1 ? 0 : 1;
    runtime.reset();
    _exit(ok);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "DrainAll deadlocked (signal " << WTERMSIG(status) << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// A drain holds the queue it waits on: closing that queue (its handle going away) meanwhile is
// safe, and the queue's tasks still run.
TEST(LakeRuntimeTest, ClosingAQueueWhileAllAreDrainedIsSafe) {
  auto runtime = LakeRuntime::Make();
  for (int round = 0; round < 20; ++round) {
    std::atomic<int> ran{0};
    const uint64_t id = LakeRuntime::NewQueueId();
    runtime->Post(id, "memory://lake/default/t", "slow", Slow(ran, 2));
    std::thread drainer([&] { runtime->DrainAll(); });
    runtime->Close(id);
    drainer.join();
    EXPECT_EQ(ran.load(), 1);
  }
}

// A Lake going away takes its runtime with it: what its handles queued runs first.
TEST(LakeRuntimeTest, DestroyingARuntimeRunsWhatIsQueued) {
  std::atomic<int> ran{0};
  auto runtime = LakeRuntime::Make();
  UpkeepQueue queue(runtime, "memory://lake/default/t");
  for (int i = 0; i < 5; ++i) queue.Post("slow", Slow(ran, 5));
  runtime.reset();
  EXPECT_EQ(ran.load(), 5);
}

// A handle may outlive its Lake: its work then runs on the thread that posts it, and its
// failures are still reported.
TEST(LakeRuntimeTest, AQueueWhoseRuntimeIsGoneRunsItsTasksInline) {
  auto runtime = LakeRuntime::Make();
  UpkeepQueue queue(runtime, "memory://lake/default/t");
  runtime.reset();
  std::thread::id ran_on;
  queue.Post("checkpoint", [&ran_on] {
    ran_on = std::this_thread::get_id();
    return arrow::Status::IOError("disk full");
  });
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  queue.Drain();  // nothing to wait for
  EXPECT_EQ(queue.TakeFailures(), (std::vector<std::string>{"checkpoint: disk full"}));
}

// Python's multiprocessing forks while a Lake's queues are busy. The child never waits for (or
// joins) the parent's upkeep threads: its drains return, its handles' posts run on queues of its
// own, and destroying the runtime there is safe.
TEST(LakeRuntimeTest, AForkedChildStartsItsRuntimeAfresh) {
  auto runtime = LakeRuntime::Make();
  const uint64_t id = LakeRuntime::NewQueueId();
  const std::string table = "memory://lake/default/t";
  std::atomic<bool> release{false};
  runtime->Post(id, table, "busy at the fork", [&] {
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return arrow::Status::OK();
  });
  runtime->Post(id, table, "queued at the fork", [] { return arrow::Status::OK(); });
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(120);  // waiting for the parent's task would end the child with SIGALRM
    DrainEveryUpkeep();
    DrainTableUpkeep(table);
    runtime->Drain(id);
    std::atomic<int> ran{0};
    runtime->Post(id, table, "child's", [&] {
      ++ran;
      return arrow::Status::OK();
    });
    DrainTableUpkeep(table);
    const int ok = ran.load() == 1 ? 0 : 1;
    runtime.reset();  // joins the child's own thread only
    _exit(ok);
  }
  release = true;
  runtime->Drain(id);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child hung or crashed (signal " << WTERMSIG(status) << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// Python's multiprocessing forks: the child inherits the Upkeep but not its thread. It must be
// able to post and drain (not wait for a thread that does not exist), and to destroy it.
TEST(UpkeepTest, AForkedChildRunsItsOwnTasks) {
  auto upkeep = std::make_unique<Upkeep>();
  std::atomic<bool> release{false};
  upkeep->Post("busy at the fork", [&] {
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return arrow::Status::OK();
  });
  upkeep->Post("queued at the fork", [] { return arrow::Status::OK(); });
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Only async-signal-safe calls are formally allowed here; the handlers made this work.
    std::atomic<int> ran{0};
    upkeep->Post("child's", [&] {
      ++ran;
      return arrow::Status::OK();
    });
    upkeep->Drain();
    const int ok = ran.load() == 1 ? 0 : 1;
    upkeep.reset();  // joins the child's own thread
    _exit(ok);
  }
  release = true;
  upkeep->Drain();
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child hung or crashed";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace timelake
