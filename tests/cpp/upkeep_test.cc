// Upkeep: a handle's background queue of post-commit work.
#include "timelake/table/upkeep.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
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

TEST(UpkeepTest, DrainAllWaitsForEveryLiveQueue) {
  std::atomic<int> ran{0};
  Upkeep a, b;
  for (Upkeep* u : {&a, &b}) {
    u->Post("slow", [&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      ++ran;
      return arrow::Status::OK();
    });
  }
  DrainAllUpkeep();
  EXPECT_EQ(ran.load(), 2);
}

// At exit, a background compaction pass opens a table of its own while every queue is being
// drained: its new Upkeep registers itself. The drain must not hold the registry while it waits
// (it deadlocked: CI hung in a writer's atexit). Run in a child so that a hang fails the test.
TEST(UpkeepTest, DrainsReturnWhileOtherThreadsKeepPosting) {
  // A drop drains every queue of the process while appends of other threads keep posting to
  // them: each drain waits for what was posted before it, not for the queue to run dry.
  Upkeep upkeep;
  std::atomic<bool> stop{false};
  std::atomic<int> ran{0}, posted{0};
  std::thread feeder([&] {
    while (!stop) {
      // Posts faster than tasks run, but keeps the backlog under 200 tasks: the queue never runs
      // dry, and a drain's share stays bounded on a loaded machine (where a task at the upkeep
      // thread's low priority can take milliseconds).
      if (posted - ran < 200) {
        upkeep.Post("task", [&ran] {
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
    upkeep.Post("marker", [&before, &ran] {
      before = ran.load();
      return arrow::Status::OK();
    });
    const auto started = std::chrono::steady_clock::now();
    upkeep.Drain();
    DrainAllUpkeep();
    // Bounded by the queue at the call (at most 200 tasks of 0.2 ms): far below this.
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(20));
  }
  EXPECT_GT(before, 0) << "the marker, posted before the drain, ran";
  stop = true;
  feeder.join();
  upkeep.Drain();
}

TEST(UpkeepTest, DrainAllLetsATaskCreateAnotherQueue) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(120);  // a deadlock ends the child with SIGALRM
    std::atomic<int> inner_ran{0};
    auto outer = std::make_unique<Upkeep>();
    outer->Post("opens a table", [&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // DrainAllUpkeep is waiting
      Upkeep inner;
      inner.Post("inner", [&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        ++inner_ran;
        return arrow::Status::OK();
      });
      return arrow::Status::OK();
    });
    DrainAllUpkeep();
    const int ok = inner_ran.load() == 1 ? 0 : 1;
    outer.reset();
    _exit(ok);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "DrainAllUpkeep deadlocked (signal " << WTERMSIG(status) << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// A drain pins the queue it waits on: destroying that queue meanwhile waits for the drain.
TEST(UpkeepTest, DestroyingAQueueWhileAllAreDrainedIsSafe) {
  for (int round = 0; round < 20; ++round) {
    auto upkeep = std::make_unique<Upkeep>();
    upkeep->Post("slow", [] {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      return arrow::Status::OK();
    });
    std::thread drainer([] { DrainAllUpkeep(); });
    upkeep.reset();
    drainer.join();
  }
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
