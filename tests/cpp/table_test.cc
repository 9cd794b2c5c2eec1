// Table: appends (idempotent batch ids, optimistic commits that rebase), checkpoints, info and
// the scan plan, over a MemoryStore whose fault hook stages the races.
#include "timelake/table/table.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <future>
#include <mutex>
#include <set>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include <arrow/api.h>
#include <map>

#include <gtest/gtest.h>
#include <parquet/arrow/reader.h>

#include "test_util.h"
#include "timelake/lake.h"
#include "timelake/log/schema.h"
#include "timelake/table/context.h"
#include "timelake/store/forwarding_store.h"
#include "timelake/store/local_store.h"
#include "timelake/store/memory_store.h"
#include "temp_dir.h"
#include "timelake/log/file_tags.h"
#include "timelake/util/time.h"

namespace timelake::testing {
namespace {

using arrow::field;

class TableTest : public ::testing::Test {
 protected:
  void SetUp() override { table_ = Create({}); }

  std::shared_ptr<Table> Create(ContractOptions options) {
    options.series_key = std::vector<std::string>{"sensor"};
    return lake_->CreateTable("t", schema_, options).ValueOrDie();
  }
  std::shared_ptr<Table> OpenHandle() { return lake_->OpenTable("t").ValueOrDie(); }

  // Appends one row per (day, hour) pair of January 2025, all for sensor "a".
  arrow::Result<AppendResult> AppendAt(Table* table, std::vector<std::pair<int, int>> times,
                                       std::optional<std::string> batch_id = std::nullopt) {
    std::string ts = "[", sensors = "[", values = "[";
    for (size_t i = 0; i < times.size(); ++i) {
      const char* sep = i ? "," : "";
      ts += sep + std::to_string(Micros(2025, 1, times[i].first, times[i].second));
      sensors += std::string(sep) + "\"a\"";
      values += sep + std::to_string(i);
    }
    auto reader = Reader(schema_, {Batch(schema_, {ts + "]", sensors + "]", values + "]"})});
    AppendOptions options;
    options.batch_id = std::move(batch_id);
    return table->Append(reader.get(), options);
  }

  std::vector<std::string> Objects(const std::string& prefix) {
    std::vector<std::string> out;
    for (const auto& meta : store_->List(prefix).ValueOrDie()) out.push_back(meta.path);
    return out;
  }
  std::vector<std::string> DataFiles() { return Objects("default/t/data/"); }
  std::vector<std::string> Commits() {
    std::vector<std::string> out;
    for (const auto& path : Objects("default/t/_delta_log/")) {
      if (path.size() > 5 && path.compare(path.size() - 5, 5, ".json") == 0) out.push_back(path);
    }
    return out;
  }

  // The data files the latest snapshot references, as store paths, sorted.
  std::vector<std::string> LiveFiles() {
    auto plan = OpenHandle()->Scan().ValueOrDie();
    std::vector<std::string> out;
    const size_t root = std::string("memory://lake/").size();
    for (const auto& f : plan.files) out.push_back(f.path.substr(root));
    std::sort(out.begin(), out.end());
    return out;
  }

  // Runs `during` once, just before the first commit attempt of `version`.
  void BeforeCommitOf(int64_t version, std::function<void()> during) {
    auto fired = std::make_shared<bool>(false);
    const std::string name = CommitFileName(version);
    store_->SetFaultHook([=](const std::string& op, const std::string& path) {
      if (op == "put_if_absent" && !*fired && path.size() >= name.size() &&
          path.compare(path.size() - name.size(), name.size(), name) == 0) {
        *fired = true;
        during();
      }
      return arrow::Status::OK();
    });
  }

  std::shared_ptr<MemoryStore> store_ = std::make_shared<MemoryStore>("lake");
  std::shared_ptr<Lake> lake_ = Lake::OverStore(store_);
  std::shared_ptr<arrow::Schema> schema_ =
      arrow::schema({field("ts", arrow::timestamp(arrow::TimeUnit::MICRO, "UTC"), false),
                     field("sensor", arrow::utf8()), field("value", arrow::float64())});
  std::shared_ptr<Table> table_;
};

TEST_F(TableTest, AppendReportsRowsFilesAndVersion) {
  ASSERT_OK_AND_ASSIGN(auto result, AppendAt(table_.get(), {{1, 0}, {1, 5}, {2, 3}}));
  EXPECT_EQ(result.rows, 3);
  EXPECT_EQ(result.files, 2);  // two days
  EXPECT_EQ(result.version, 1);
  EXPECT_EQ(result.attempts, 1);
  EXPECT_FALSE(result.duplicate);
  EXPECT_GT(result.bytes, 0);
  EXPECT_EQ(table_->version(), 1);
  EXPECT_EQ(DataFiles().size(), 2u);
}

TEST_F(TableTest, AppendWithSameBatchIdIsDuplicate) {
  ASSERT_OK(AppendAt(table_.get(), {{1, 0}}, "batch-7").status());
  const auto commits = Commits();
  const auto files = DataFiles();
  ASSERT_OK_AND_ASSIGN(auto again, AppendAt(table_.get(), {{1, 1}}, "batch-7"));
  EXPECT_TRUE(again.duplicate);
  EXPECT_EQ(again.version, 1);
  EXPECT_EQ(again.rows, 0);
  EXPECT_EQ(Commits(), commits);
  EXPECT_EQ(DataFiles(), files);
}

TEST_F(TableTest, BatchIdIsRememberedByOtherHandles) {
  ASSERT_OK(AppendAt(table_.get(), {{1, 0}}, "batch-7").status());
  ASSERT_OK_AND_ASSIGN(auto again, AppendAt(OpenHandle().get(), {{1, 0}}, "batch-7"));
  EXPECT_TRUE(again.duplicate);
}

TEST_F(TableTest, DifferentBatchIdsBothCommit) {
  ASSERT_OK(AppendAt(table_.get(), {{1, 0}}, "batch-1").status());
  ASSERT_OK_AND_ASSIGN(auto second, AppendAt(table_.get(), {{1, 0}}, "batch-2"));
  EXPECT_FALSE(second.duplicate);
  EXPECT_EQ(second.version, 2);
}

TEST_F(TableTest, EmptyBatchIdIsInvalid) {
  EXPECT_TRUE(IsInvalid(AppendAt(table_.get(), {{1, 0}}, ""), "batch_id"));
}

TEST_F(TableTest, AppendOfNothingCommitsNothing) {
  auto reader = Reader(schema_, {});
  ASSERT_OK_AND_ASSIGN(auto result, table_->Append(reader.get(), {}));
  EXPECT_EQ(result.version, 0);
  EXPECT_EQ(Commits().size(), 1u);
}

TEST_F(TableTest, InvalidInputCommitsAndLeavesNothing) {
  auto bad = arrow::schema({field("ts", arrow::int64()), field("colour", arrow::utf8())});
  auto reader = Reader(bad, {Batch(bad, {"[1]", R"(["red"])"})});
  EXPECT_TRUE(IsInvalid(table_->Append(reader.get(), {}), "colour"));
  EXPECT_EQ(Commits().size(), 1u);
  EXPECT_TRUE(DataFiles().empty());
}

TEST_F(TableTest, StaleHandleCatchesUpAndBothAppendsSurvive) {
  auto other = OpenHandle();
  ASSERT_OK_AND_ASSIGN(auto first, AppendAt(table_.get(), {{1, 0}}));
  ASSERT_OK_AND_ASSIGN(auto second, AppendAt(other.get(), {{1, 1}, {1, 2}}));
  EXPECT_EQ(first.version, 1);
  EXPECT_EQ(second.version, 2);
  ASSERT_OK_AND_ASSIGN(auto info, OpenHandle()->Info());
  EXPECT_EQ(info.rows, 3);
  EXPECT_EQ(info.files, 2);
}

TEST_F(TableTest, ConcurrentAppendsFromTwoHandlesAllSurvive) {
  constexpr int kPerHandle = 12;
  std::vector<std::shared_ptr<Table>> handles = {table_, OpenHandle()};
  std::vector<std::vector<int64_t>> versions(2);
  std::vector<std::thread> threads;
  for (int h = 0; h < 2; ++h) {
    threads.emplace_back([&, h] {
      for (int i = 0; i < kPerHandle; ++i) {
        auto result = AppendAt(handles[h].get(), {{1 + h, i}});
        EXPECT_TRUE(result.ok()) << result.status().ToString();
        if (result.ok()) versions[h].push_back(result->version);
      }
    });
  }
  for (auto& t : threads) t.join();
  std::set<int64_t> all;
  for (const auto& v : versions) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), 2u * kPerHandle) << "two appends reported the same version";
  ASSERT_OK_AND_ASSIGN(auto info, OpenHandle()->Info());
  EXPECT_EQ(info.rows, 2 * kPerHandle);
  EXPECT_EQ(DataFiles(), LiveFiles());
}

TEST_F(TableTest, ThreadsAppendingToOneHandleShareCommits) {
  // Group commit: while one commit is in flight (slowed down here), the appends other threads
  // stage meanwhile wait and then go into one commit together, each batch id its own txn.
  store_->SetFaultHook([](const std::string& op, const std::string& path) {
    if (op == "put_if_absent" && path.find("_delta_log/") != std::string::npos) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return arrow::Status::OK();
  });
  constexpr int kThreads = 8, kPerThread = 12;
  std::vector<std::thread> threads;
  std::mutex mutex;
  std::map<std::string, std::vector<AppendResult>> by_batch;
  for (int w = 0; w < kThreads; ++w) {
    threads.emplace_back([&, w] {
      for (int i = 0; i < kPerThread; ++i) {
        // Threads 0 and 1 send the same batches: each must land once.
        const std::string batch = "w" + std::to_string(w < 2 ? 0 : w) + "-" + std::to_string(i);
        auto result = AppendAt(table_.get(), {{1 + (w < 2 ? 0 : w), i}}, batch);
        EXPECT_TRUE(result.ok()) << result.status().ToString();
        if (!result.ok()) continue;
        std::lock_guard<std::mutex> lock(mutex);
        by_batch[batch].push_back(*result);
      }
    });
  }
  for (auto& t : threads) t.join();
  store_->SetFaultHook(nullptr);

  const int batches = (kThreads - 1) * kPerThread;
  ASSERT_EQ(by_batch.size(), static_cast<size_t>(batches));
  std::set<int64_t> versions;
  for (const auto& [batch, results] : by_batch) {
    int committed = 0;
    for (const auto& r : results) {
      if (!r.duplicate) {
        ++committed;
        EXPECT_EQ(r.rows, 1);
        versions.insert(r.version);
      }
    }
    EXPECT_EQ(committed, 1) << batch << " committed " << committed << " times";
  }
  // Fewer commits than appends: some commits carried several appends.
  const int64_t commits = static_cast<int64_t>(Commits().size()) - 1;
  EXPECT_LT(commits, batches);
  EXPECT_EQ(static_cast<int64_t>(versions.size()), commits);
  ASSERT_OK_AND_ASSIGN(auto info, OpenHandle()->Info());
  EXPECT_EQ(info.rows, batches);
  EXPECT_EQ(DataFiles(), LiveFiles());
  // Every batch id is recorded: appending any again is a duplicate.
  for (const auto& [batch, results] : by_batch) {
    ASSERT_OK_AND_ASSIGN(auto again, AppendAt(OpenHandle().get(), {{28, 0}}, batch));
    EXPECT_TRUE(again.duplicate) << batch;
  }
}

TEST_F(TableTest, AForkedChildCompactsInTheBackgroundThoughItsParentHadAPassQueued) {
  // Python's multiprocessing forks. A pass the parent queued is not the child's (the child's
  // upkeep queue starts empty), so the child must queue passes of its own.
  auto release = std::make_shared<std::atomic<bool>>(false);
  store_->SetFaultHook([release](const std::string& op, const std::string& path) {
    // The parent's upkeep thread stalls on the first index record: the pass stays queued.
    if (path.find("_timelake/") != std::string::npos) {
      while (!*release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return arrow::Status::OK();
  });
  for (int hour = 0; hour < 8; ++hour) ASSERT_OK(AppendAt(table_.get(), {{1, hour}}).status());
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    *release = true;
    int code = 0;
    for (int hour = 8; hour < 16 && code == 0; ++hour) {
      if (!AppendAt(table_.get(), {{1, hour}}).ok()) code = 2;
    }
    // info() waits for the handle's passes; 16 small files of one chunk are worth one.
    auto info = table_->Info();
    if (code == 0 && !info.ok()) code = 3;
    if (code == 0 && info->files >= 16) code = 4;
    if (code == 0 && info->rows != 16) code = 5;
    _exit(code);
  }
  *release = true;
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child hung or crashed";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: append failed, 3: info failed, 4: not compacted, 5: rows";
  ASSERT_OK(table_->WaitForUpkeep());
  ASSERT_OK_AND_ASSIGN(auto info, table_->Info());
  EXPECT_EQ(info.rows, 8);  // the child's memory store was its own
}

TEST_F(TableTest, CommitRaceLostToAnotherHandleIsRetried) {
  auto other = OpenHandle();
  BeforeCommitOf(1, [&] { EXPECT_OK(AppendAt(other.get(), {{2, 0}}).status()); });
  ASSERT_OK_AND_ASSIGN(auto result, AppendAt(table_.get(), {{1, 0}}));
  store_->SetFaultHook(nullptr);
  EXPECT_EQ(result.version, 2);
  EXPECT_EQ(result.attempts, 2);
  EXPECT_EQ(LiveFiles(), DataFiles());
  EXPECT_EQ(DataFiles().size(), 2u);
}

// The `add` actions of each commit after the first, in version order.
std::vector<int> AddsPerCommit(MemoryStore* store, const std::vector<std::string>& commits) {
  std::vector<int> out;
  for (size_t v = 1; v < commits.size(); ++v) {
    const std::string body = store->Get(commits[v]).ValueOrDie()->ToString();
    int adds = 0;
    for (size_t at = body.find("{\"add\""); at != std::string::npos; at = body.find("{\"add\"", at + 1)) {
      ++adds;
    }
    out.push_back(adds);
  }
  return out;
}

TEST_F(TableTest, GroupedSmallAppendsShareOneFilePerChunk) {
  // While the first commit is in flight (slowed down), four threads stage small appends to one
  // day; they are committed together, and their rows go into ONE data file, not one each.
  std::promise<void> in_flight;
  std::atomic<bool> fired{false};
  store_->SetFaultHook([&](const std::string& op, const std::string& path) {
    if (op == "put_if_absent" && path.find("_delta_log/") != std::string::npos && !fired.exchange(true)) {
      in_flight.set_value();
      std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // time to queue, even loaded
    }
    return arrow::Status::OK();
  });
  std::thread first([&] { EXPECT_OK(AppendAt(table_.get(), {{1, 0}}, "first").status()); });
  in_flight.get_future().wait();
  std::vector<AppendResult> results(4);
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      auto r = AppendAt(table_.get(), {{1, 1 + 2 * w}, {1, 2 + 2 * w}}, "w" + std::to_string(w));
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      if (r.ok()) results[w] = *r;
    });
  }
  first.join();
  for (auto& t : threads) t.join();
  store_->SetFaultHook(nullptr);

  std::set<int64_t> versions;
  int64_t bytes = 0;
  for (const auto& r : results) {
    EXPECT_FALSE(r.duplicate);
    EXPECT_EQ(r.rows, 2);
    EXPECT_EQ(r.files, 1);
    bytes += r.bytes;
    versions.insert(r.version);
  }
  EXPECT_LT(versions.size(), 4u) << "the four appends should have shared a commit";
  // Every commit holds one chunk's rows, so one file, however many appends it carried.
  for (int adds : AddsPerCommit(store_.get(), Commits())) EXPECT_EQ(adds, 1);
  EXPECT_EQ(DataFiles().size(), 1 + versions.size());
  EXPECT_EQ(DataFiles(), LiveFiles());
  ASSERT_OK_AND_ASSIGN(auto info, OpenHandle()->Info());
  EXPECT_EQ(info.rows, 9);
  // The appends' bytes are their shares of the shared files: together at most the files' bytes.
  EXPECT_GT(bytes, 0);
  EXPECT_LE(bytes, info.bytes);
}

TEST_F(TableTest, AGroupedAppendFoundDuplicateAtItsCommitIsLeftOutOfTheSharedFile) {
  // Three appends staged while the first commit is in flight go into one commit with one shared
  // file. Before that commit is put, another handle commits the batch id of one of them: the
  // group loses the race, answers that append as a duplicate, and writes the shared file again
  // without its rows (the first shared file is deleted).
  auto other = OpenHandle();
  std::promise<void> in_flight;
  std::atomic<int> puts{0};
  store_->SetFaultHook([&](const std::string& op, const std::string& path) {
    if (op != "put_if_absent" || path.find("_delta_log/") == std::string::npos) {
      return arrow::Status::OK();
    }
    const int n = puts++;
    if (n == 0) {  // version 1: hold it while the others queue
      in_flight.set_value();
      std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // time to queue, even loaded
    } else if (n == 1) {  // the group's first try at version 2: the racing handle wins it
      EXPECT_OK(AppendAt(other.get(), {{3, 0}}, "w1").status());
    }
    return arrow::Status::OK();
  });
  std::thread first([&] { EXPECT_OK(AppendAt(table_.get(), {{1, 0}}, "first").status()); });
  in_flight.get_future().wait();
  std::vector<AppendResult> results(3);
  std::vector<std::thread> threads;
  for (int w = 0; w < 3; ++w) {
    threads.emplace_back([&, w] {
      auto r = AppendAt(table_.get(), {{2, w}}, "w" + std::to_string(w));
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      if (r.ok()) results[w] = *r;
    });
  }
  first.join();
  for (auto& t : threads) t.join();
  store_->SetFaultHook(nullptr);

  ASSERT_GE(puts.load(), 3) << "the group never raced the other handle";
  EXPECT_TRUE(results[1].duplicate);
  EXPECT_FALSE(results[0].duplicate);
  EXPECT_FALSE(results[2].duplicate);
  EXPECT_EQ(results[0].version, 3);
  EXPECT_EQ(results[2].version, 3);
  EXPECT_EQ(results[0].rows, 1);
  EXPECT_EQ(DataFiles(), LiveFiles()) << "the first shared file must be deleted";
  EXPECT_EQ(DataFiles().size(), 3u);
  // Day 2 holds the rows of w0 and w2 only; w1's row is the racing handle's, on day 3.
  ASSERT_OK_AND_ASSIGN(auto info, OpenHandle()->Info());
  EXPECT_EQ(info.rows, 4);
  for (const auto& path : LiveFiles()) {
    if (path.find("2025-01-02") == std::string::npos) continue;
    auto input = store_->OpenInput(path).ValueOrDie();
    auto reader = parquet::arrow::OpenFile(input, arrow::default_memory_pool()).ValueOrDie();
    std::shared_ptr<arrow::Table> rows;
    ASSERT_OK(reader->ReadTable(&rows));
    EXPECT_EQ(rows->num_rows(), 2);
  }
}

// A store that keeps the body of every commit put tried through it, landed or not.
class CommitBodyStore : public ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;

  arrow::Result<bool> PutIfAbsent(const std::string& path,
                                  const std::shared_ptr<arrow::Buffer>& data) override {
    if (path.find("/_delta_log/") != std::string::npos) {
      std::lock_guard<std::mutex> lock(mutex_);
      tried_.emplace_back(path, data->ToString());
    }
    return ForwardingStore::PutIfAbsent(path, data);
  }
  std::vector<std::pair<std::string, std::string>> tried() {
    std::lock_guard<std::mutex> lock(mutex_);
    return tried_;
  }

 private:
  std::mutex mutex_;
  std::vector<std::pair<std::string, std::string>> tried_;
};

TEST_F(TableTest, AGroupedAppendWhoseBatchIdAWinnerRecordedLeavesTheCommitInItsOwnLoop) {
  // Three appends too large to share a file, staged while the first commit is in flight, go into
  // one commit. Before its first put another handle commits the batch id of one of them. The
  // committer answers that append as a duplicate and commits the other two in the same loop:
  // the put that lands is the same commit (commitInfo.txnId) as the one that lost, with one
  // append fewer, and the duplicate's file is deleted, never referenced.
  auto bodies = std::make_shared<CommitBodyStore>(store_);
  auto mine = Lake::OverStore(bodies)->OpenTable("t").ValueOrDie();
  auto other = OpenHandle();
  std::promise<void> in_flight;
  std::atomic<int> puts{0};
  store_->SetFaultHook([&](const std::string& op, const std::string& path) {
    if (op != "put_if_absent" || path.find("_delta_log/") == std::string::npos) {
      return arrow::Status::OK();
    }
    const int n = puts++;
    if (n == 0) {  // version 1: hold it while the others queue
      in_flight.set_value();
      std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // time to queue, even loaded
    } else if (n == 1) {  // the group's first try at version 2: the racing handle wins it
      EXPECT_OK(AppendAt(other.get(), {{9, 0}}, "w1").status());
    }
    return arrow::Status::OK();
  });
  const int rows = static_cast<int>(kSharedFileMaxRows) + 10;
  auto append_large = [&](int day, const std::string& batch) {
    // One row per second of the day's first hours: distinct times, one chunk.
    std::string ts = "[", sensors = "[", values = "[";
    for (int k = 0; k < rows; ++k) {
      const char* sep = k ? "," : "";
      ts += sep + std::to_string(Micros(2025, 1, day, 0) + k * 1'000'000LL);
      sensors += std::string(sep) + "\"a\"";
      values += sep + std::to_string(k);
    }
    auto reader = Reader(schema_, {Batch(schema_, {ts + "]", sensors + "]", values + "]"})});
    AppendOptions options;
    options.batch_id = batch;
    return mine->Append(reader.get(), options);
  };
  std::thread first([&] { EXPECT_OK(AppendAt(mine.get(), {{1, 0}}, "first").status()); });
  in_flight.get_future().wait();
  std::vector<AppendResult> results(3);
  std::vector<std::thread> threads;
  for (int w = 0; w < 3; ++w) {
    threads.emplace_back([&, w] {
      auto r = append_large(2 + w, "w" + std::to_string(w));
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      if (r.ok()) results[w] = *r;
    });
  }
  first.join();
  for (auto& t : threads) t.join();
  store_->SetFaultHook(nullptr);

  ASSERT_GE(puts.load(), 3) << "the group never raced the other handle";
  EXPECT_TRUE(results[1].duplicate);
  EXPECT_EQ(results[1].version, 2);  // the version that showed w1 recorded
  for (int w : {0, 2}) {
    EXPECT_FALSE(results[w].duplicate);
    EXPECT_EQ(results[w].version, 3);
    EXPECT_EQ(results[w].rows, rows);
    EXPECT_EQ(results[w].attempts, 2);  // one lost race, one put that landed
  }
  // The group's tries, as put: version 2 (lost, three appends), then version 3 (two).
  std::vector<Commit> group_tries;
  for (const auto& [path, body] : bodies->tried()) {
    if (path.find(CommitFileName(1)) != std::string::npos) continue;
    ASSERT_OK_AND_ASSIGN(auto commit, ParseCommit(body, path));
    group_tries.push_back(std::move(commit));
  }
  ASSERT_EQ(group_tries.size(), 2u);
  EXPECT_EQ(group_tries[0].txns.size(), 3u);
  EXPECT_EQ(group_tries[1].txns.size(), 2u);
  EXPECT_EQ(group_tries[0].commit_info->txn_id, group_tries[1].commit_info->txn_id)
      << "the appends left were committed by another commit (a second round), not the same loop";
  for (const auto& txn : group_tries[1].txns) EXPECT_NE(txn.app_id, "timelake:w1");
  // w1's file is deleted: every data file is live (first, w0, w2 and the racing handle's).
  EXPECT_EQ(DataFiles(), LiveFiles()) << "the duplicate's staged file leaked";
  EXPECT_EQ(DataFiles().size(), 4u);
  ASSERT_OK_AND_ASSIGN(auto info, OpenHandle()->Info());
  EXPECT_EQ(info.rows, 2 + 2 * rows);
}

TEST_F(TableTest, AnAppendPlannedWhileACommitOfItsBatchIdWasInFlightIsADuplicate) {
  // While the commit of batch "first" is in flight, two appends plan from its published plan
  // (without the snapshot check): one repeats "first". The commit of the next group finds that
  // id recorded in the snapshot before its first put: a duplicate whose file is deleted; the
  // other append commits at the first put.
  std::promise<void> in_flight;
  std::atomic<bool> fired{false};
  store_->SetFaultHook([&](const std::string& op, const std::string& path) {
    if (op == "put_if_absent" && path.find("_delta_log/") != std::string::npos && !fired.exchange(true)) {
      in_flight.set_value();
      std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // time to queue, even loaded
    }
    return arrow::Status::OK();
  });
  std::thread first([&] { EXPECT_OK(AppendAt(table_.get(), {{1, 0}}, "first").status()); });
  in_flight.get_future().wait();
  arrow::Result<AppendResult> again = arrow::Status::UnknownError("not run");
  arrow::Result<AppendResult> next = arrow::Status::UnknownError("not run");
  std::thread repeat([&] { again = AppendAt(table_.get(), {{3, 0}}, "first"); });
  std::thread other([&] { next = AppendAt(table_.get(), {{2, 0}}, "second"); });
  first.join();
  repeat.join();
  other.join();
  store_->SetFaultHook(nullptr);
  ASSERT_OK(again.status());
  ASSERT_OK(next.status());
  EXPECT_TRUE(again->duplicate);
  EXPECT_EQ(again->version, 1);
  EXPECT_FALSE(next->duplicate);
  EXPECT_EQ(next->version, 2);
  EXPECT_EQ(next->attempts, 1);
  EXPECT_EQ(DataFiles(), LiveFiles()) << "the duplicate's staged file leaked";
  ASSERT_OK_AND_ASSIGN(auto info, OpenHandle()->Info());
  EXPECT_EQ(info.rows, 2);
}

TEST(SharedFilesTest, AnAppendPlannedUnderAnotherSchemaWritesItsOwnFiles) {
  // The appends of a group were planned at different times: one under the schema after a column
  // was added. Its rows cannot share the others' file; it writes its own.
  auto store = std::make_shared<MemoryStore>("lake");
  Contract contract;
  contract.time_column = "ts";
  contract.series_key = {"sensor"};
  contract.chunk = ChunkWidth::kDay;
  auto ts = field("ts", arrow::timestamp(arrow::TimeUnit::MICRO, "UTC"), false);
  auto v1 = arrow::schema({ts, field("sensor", arrow::utf8()), field("value", arrow::float64())});
  auto v2 = arrow::schema({ts, field("sensor", arrow::utf8()), field("value", arrow::float64()),
                           field("note", arrow::utf8())});
  auto stage = [&](const std::shared_ptr<arrow::Schema>& schema, int hour,
                   std::vector<std::string> columns, StagedAppend* out) -> arrow::Status {
    columns.insert(columns.begin(), "[" + std::to_string(Micros(2025, 1, 1, hour)) + "]");
    ARROW_ASSIGN_OR_RAISE(auto storage, StorageSchemaOf(*schema));
    out->ingestor = std::make_unique<Ingestor>(store, "t", contract, schema, storage);
    auto reader = Reader(schema, {Batch(schema, columns)});
    ARROW_RETURN_NOT_OK(out->ingestor->Consume(reader.get()));
    ARROW_ASSIGN_OR_RAISE(out->shared, out->ingestor->FinishOrKeep(kSharedFileMaxRows));
    out->rows = 1;
    return arrow::Status::OK();
  };
  StagedAppend a, b, c;
  ASSERT_OK(stage(v1, 0, {R"(["a"])", "[1.0]"}, &a));
  ASSERT_OK(stage(v2, 1, {R"(["b"])", "[2.0]", R"(["x"])"}, &b));
  ASSERT_OK(stage(v1, 2, {R"(["c"])", "[3.0]"}, &c));
  ASSERT_TRUE(a.shared && b.shared && c.shared);
  SharedFiles shared;
  ASSERT_OK(WriteSharedFiles({&a, &b, &c}, {0, 1, 2}, &shared));
  EXPECT_EQ(shared.members, (std::vector<size_t>{0, 2}));
  ASSERT_EQ(shared.files.size(), 1u);
  EXPECT_EQ(shared.files[0].rows, 2);
  EXPECT_FALSE(b.shared);
  ASSERT_EQ(b.files.size(), 1u);
  EXPECT_EQ(b.files[0].rows, 1);
  // Read back: the shared file holds a's and c's rows in the arranged order, b's file its own.
  auto read = [&](const std::string& path) {
    auto input = store->OpenInput("t/" + path).ValueOrDie();
    auto reader = parquet::arrow::OpenFile(input, arrow::default_memory_pool()).ValueOrDie();
    std::shared_ptr<arrow::Table> rows;
    EXPECT_OK(reader->ReadTable(&rows));
    return rows;
  };
  auto both = read(shared.files[0].path);
  ASSERT_EQ(both->num_rows(), 2);
  EXPECT_TRUE(both->GetColumnByName("value")->Equals(arrow::ChunkedArray(Json(arrow::float64(), "[1.0, 3.0]"))));
  EXPECT_EQ(read(b.files[0].path)->num_columns(), 4);
  shared.ingestor->Abort();
  b.ingestor->Abort();
  EXPECT_TRUE(store->List("t/").ValueOrDie().empty()) << "Abort deletes every file written";
}

// The timelake.seq tag of every add of commit `path` ("" for an add without one).
std::vector<std::string> SeqTags(ObjectStore* store, const std::string& path) {
  std::vector<std::string> out;
  auto commit = ParseCommit(store->Get(path).ValueOrDie()->ToString(), path).ValueOrDie();
  for (const auto& add : commit.adds) {
    auto it = add.tags.find(kSeqTag);
    out.push_back(it == add.tags.end() ? "" : it->second);
  }
  return out;
}

TEST_F(TableTest, ARebasedAppendsCommitCarriesTheVersionItLandedAt) {
  // The files' sequence tags are in the commit itself, so that any Delta writer's checkpoint
  // (which copies tags and nothing else) keeps them: an append staged for version 1 that loses
  // it to a racer is staged again and lands at 2 with "2" in its tags.
  auto other = OpenHandle();
  BeforeCommitOf(1, [&] { EXPECT_OK(AppendAt(other.get(), {{2, 0}}, "racer").status()); });
  ASSERT_OK_AND_ASSIGN(auto mine, AppendAt(table_.get(), {{1, 0}}, "mine"));
  store_->SetFaultHook(nullptr);
  ASSERT_EQ(mine.version, 2);
  const auto commits = Commits();
  ASSERT_EQ(commits.size(), 3u);
  EXPECT_EQ(SeqTags(store_.get(), commits[1]), std::vector<std::string>{"1"});
  EXPECT_EQ(SeqTags(store_.get(), commits[2]), std::vector<std::string>{"2"});
}

// A local store whose Stage runs `before_stage` first (once): another writer commits while this
// one's bytes are staged for the version it expects.
class StageHookStore : public ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  arrow::Result<std::unique_ptr<Staged>> Stage(const std::string& path,
                                               std::shared_ptr<arrow::Buffer> data) override {
    if (before_stage) {
      auto hook = std::move(before_stage);
      before_stage = nullptr;
      hook();
    }
    ++stages;
    return target()->Stage(path, std::move(data));
  }
  arrow::Result<bool> PutStagedIfAbsent(const std::string& path, Staged* staged,
                                        const std::function<void()>& visible) override {
    return target()->PutStagedIfAbsent(path, staged, visible);
  }
  std::function<void()> before_stage;
  int stages = 0;
};

TEST(StagedCommitTest, ACompactionStagedBeforeItsTurnLandsAfterAnAppendThatTookItsVersion) {
  // On a local disk a commit whose bytes do not hold its version (a compaction's) is written and
  // fsynced before the commit turn. An append that takes that version meanwhile is judged under
  // the turn (no conflict) and the same bytes are linked as the next version.
  TempDir dir;
  auto local = LocalStore::Make(dir.path()).ValueOrDie();
  auto hooked = std::make_shared<StageHookStore>(local);
  auto lake = Lake::OverStore(hooked);
  auto schema = arrow::schema({field("ts", arrow::timestamp(arrow::TimeUnit::MICRO, "UTC"), false),
                               field("sensor", arrow::utf8()), field("value", arrow::float64())});
  ContractOptions options;
  options.series_key = std::vector<std::string>{"sensor"};
  options.properties = {{"timelake.backgroundCompaction", "false"}};
  auto table = lake->CreateTable("t", schema, options).ValueOrDie();
  auto racer = Lake::OverStore(local)->OpenTable("t").ValueOrDie();
  auto append = [&](Table* t, int day, const std::string& batch) {
    auto reader = Reader(schema, {Batch(schema, {"[" + std::to_string(Micros(2025, 1, day, 0)) + "]",
                                                 R"(["a"])", "[1.0]"})});
    AppendOptions o;
    o.batch_id = batch;
    return t->Append(reader.get(), o);
  };
  ASSERT_OK(append(table.get(), 1, "one").status());
  ASSERT_OK(append(table.get(), 1, "two").status());
  hooked->before_stage = [&] { EXPECT_OK(append(racer.get(), 2, "racer").status()); };
  MaintainOptions maintain;
  ASSERT_OK_AND_ASSIGN(auto done, table->Maintain(maintain));
  EXPECT_EQ(done.partitions_compacted, 1);
  EXPECT_FALSE(hooked->before_stage) << "the compaction's commit was not staged";
  const std::string body = local->Get("default/t/_delta_log/" + CommitFileName(4)).ValueOrDie()->ToString();
  EXPECT_NE(body.find("OPTIMIZE"), std::string::npos) << body;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path() + "/default/t/_delta_log")) {
    EXPECT_NE(entry.path().filename().string().rfind(".tmp-", 0), 0u) << entry.path();
  }
  ASSERT_OK_AND_ASSIGN(auto info, lake->OpenTable("t").ValueOrDie()->Info());
  EXPECT_EQ(info.rows, 3);
  EXPECT_EQ(info.files, 2);
}

TEST_F(TableTest, BatchCommittedByARacingHandleMakesTheAppendDuplicate) {
  auto other = OpenHandle();
  BeforeCommitOf(1, [&] { EXPECT_OK(AppendAt(other.get(), {{2, 0}}, "shared").status()); });
  ASSERT_OK_AND_ASSIGN(auto result, AppendAt(table_.get(), {{1, 0}}, "shared"));
  store_->SetFaultHook(nullptr);
  EXPECT_TRUE(result.duplicate);
  EXPECT_EQ(result.version, 1);
  EXPECT_EQ(Commits().size(), 2u);
  EXPECT_EQ(DataFiles(), LiveFiles()) << "the loser's data files must be deleted";
  EXPECT_EQ(DataFiles().size(), 1u);
}

TEST_F(TableTest, FailedCommitDeletesItsDataFiles) {
  store_->SetFaultHook([](const std::string& op, const std::string&) {
    return op == "put_if_absent" ? arrow::Status::IOError("store unavailable")
                                 : arrow::Status::OK();
  });
  EXPECT_TRUE(FailsWith(AppendAt(table_.get(), {{1, 0}, {2, 0}}), arrow::StatusCode::IOError,
                        "store unavailable"));
  store_->SetFaultHook(nullptr);
  EXPECT_TRUE(DataFiles().empty());
  EXPECT_EQ(Commits().size(), 1u);
}

TEST_F(TableTest, ALostRaceWhoseWinnerCannotBeReadKeepsTheDataFiles) {
  // Another handle wins version 1; then reading the winner's commit fails, so the append can
  // tell neither whose commit version 1 is (a put reported as "exists" may be its own, landed by
  // a retry inside the store client) nor rebase. The outcome is unknown: its data files stay
  // for vacuum to judge, and the error says to retry with the same batch_id.
  auto other = OpenHandle();
  bool started = false, raced = false;
  store_->SetFaultHook([&](const std::string& op, const std::string& path) {
    const bool commit_1 = path.find(CommitFileName(1)) != std::string::npos;
    if (op == "put_if_absent" && commit_1 && !started) {
      started = true;
      EXPECT_OK(AppendAt(other.get(), {{2, 0}}).status());
      raced = true;
    } else if (op == "get" && commit_1 && raced) {
      return arrow::Status::IOError("injected read failure");
    }
    return arrow::Status::OK();
  });
  EXPECT_TRUE(FailsWith(AppendAt(table_.get(), {{1, 0}}), arrow::StatusCode::IOError, "injected"));
  store_->SetFaultHook(nullptr);
  EXPECT_EQ(DataFiles().size(), LiveFiles().size() + 1) << "the unsettled append's file was deleted";
}

// A store whose commit writes succeed but report a failure, as when a connection drops after
// the server applied a conditional put, or the directory fsync fails after link(2).
class OutcomeUnknownStore : public ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  bool lose_commit_replies = false;

  arrow::Result<bool> PutIfAbsent(const std::string& path,
                                  const std::shared_ptr<arrow::Buffer>& data) override {
    ARROW_ASSIGN_OR_RAISE(bool created, ForwardingStore::PutIfAbsent(path, data));
    if (lose_commit_replies && path.find("/_delta_log/") != std::string::npos) {
      return arrow::Status::IOError("connection reset after the request was sent");
    }
    return created;
  }
};

TEST_F(TableTest, CommitWithLostReplyIsRecognisedByItsTxnId) {
  auto flaky = std::make_shared<OutcomeUnknownStore>(store_);
  ASSERT_OK_AND_ASSIGN(auto handle, Lake::OverStore(flaky)->OpenTable("t"));
  flaky->lose_commit_replies = true;
  // The put landed but reported an error: the append reads the version back, finds its own
  // commitInfo.txnId there and reports success rather than failing or committing twice.
  auto result = AppendAt(handle.get(), {{1, 0}});
  flaky->lose_commit_replies = false;
  ASSERT_OK(result.status());
  EXPECT_EQ(result->version, 1);
  EXPECT_EQ(result->attempts, 1);
  // Whatever the append reported, every file the table now references must exist.
  const auto live = LiveFiles();
  ASSERT_EQ(Commits().size(), 2u) << "the commit did land";
  EXPECT_EQ(DataFiles(), live) << "a committed data file was deleted";
}

TEST_F(TableTest, RefreshSeesCommitsOfOtherHandles) {
  auto other = OpenHandle();
  ASSERT_OK(AppendAt(table_.get(), {{1, 0}}).status());
  EXPECT_EQ(other->version(), 0);
  ASSERT_OK(other->Refresh());
  EXPECT_EQ(other->version(), 1);
}

TEST_F(TableTest, CheckpointAppearsAfterCommitTen) {
  for (int i = 0; i < 9; ++i) ASSERT_OK(AppendAt(table_.get(), {{1, i}}).status());
  EXPECT_TRUE(Objects("default/t/_delta_log/00000000000000000009.checkpoint").empty());
  ASSERT_OK(AppendAt(table_.get(), {{1, 9}}).status());
  EXPECT_EQ(table_->version(), 10);
  ASSERT_OK(table_->WaitForUpkeep());  // checkpoints are written after the append returned
  EXPECT_EQ(Objects("default/t/_delta_log/00000000000000000010.checkpoint").size(), 1u);
  EXPECT_EQ(Objects("default/t/_delta_log/_last_checkpoint").size(), 1u);
  ASSERT_OK_AND_ASSIGN(auto info, table_->Info());
  EXPECT_EQ(info.manifests, 1);
}

// Writer processes each checkpoint the versions they commit, on their own upkeep threads. One
// that lags (its checkpoint of 10 comes after another's of 20) must neither write the older
// checkpoint nor point `_last_checkpoint` back to it.
TEST_F(TableTest, ACheckpointOlderThanTheNewestIsNotWritten) {
  for (int i = 0; i < 20; ++i) ASSERT_OK(AppendAt(table_.get(), {{1, i}}).status());
  ASSERT_OK(table_->WaitForUpkeep());
  ASSERT_OK(store_->Delete("default/t/_delta_log/00000000000000000010.checkpoint.parquet"));
  ASSERT_EQ(Objects("default/t/_delta_log/00000000000000000020.checkpoint").size(), 1u);
  DeltaLog log(store_, "default/t");
  ASSERT_OK_AND_ASSIGN(auto at10, log.LoadAt(10));
  ASSERT_OK(WriteCheckpointUnlessSuperseded(log, at10));
  EXPECT_TRUE(Objects("default/t/_delta_log/00000000000000000010.checkpoint").empty());
  EXPECT_EQ(log.store().LastCheckpointHint(), std::optional<int64_t>(20));
  // Without a newer one it is written.
  ASSERT_OK(store_->Delete("default/t/_delta_log/_last_checkpoint"));
  ASSERT_OK(WriteCheckpointUnlessSuperseded(log, at10));
  EXPECT_EQ(Objects("default/t/_delta_log/00000000000000000010.checkpoint").size(), 1u);
}

// A checkpoint costs O(files): a table of many files gets one every 20, 40, ... commits instead
// of every 10, so that the checkpoint work per commit stays bounded (table/context.cc,
// CheckpointStride). Small tables keep the interval.
TEST_F(TableTest, CheckpointsComeLessOftenOnceTheTableHoldsManyFiles) {
  ContractOptions options;
  options.series_key = std::vector<std::string>{"sensor"};
  options.chunk = "hour";
  options.properties["timelake.backgroundCompaction"] = "false";  // only appends commit
  ASSERT_OK_AND_ASSIGN(auto wide, lake_->CreateTable("wide", schema_, options));
  std::vector<std::pair<int, int>> hours;  // 600 hours: 600 chunks, a file each
  for (int day = 1; day <= 25; ++day) {
    for (int hour = 0; hour < 24; ++hour) hours.emplace_back(day, hour);
  }
  ASSERT_OK_AND_ASSIGN(auto first, AppendAt(wide.get(), hours));
  ASSERT_EQ(first.files, 600);
  for (int i = 0; i < 19; ++i) ASSERT_OK(AppendAt(wide.get(), {{1, 0}}).status());
  ASSERT_EQ(wide->version(), 20);
  ASSERT_OK(wide->WaitForUpkeep());
  EXPECT_TRUE(Objects("default/wide/_delta_log/00000000000000000010.checkpoint").empty());
  EXPECT_EQ(Objects("default/wide/_delta_log/00000000000000000020.checkpoint").size(), 1u);
  ASSERT_OK_AND_ASSIGN(auto reopened, lake_->OpenTable("wide"));
  ASSERT_OK_AND_ASSIGN(auto info, reopened->Info());
  EXPECT_EQ(info.files, 619);
  EXPECT_EQ(info.manifests, 1);
}

TEST_F(TableTest, TableReopensFromItsCheckpoint) {
  for (int i = 0; i < 11; ++i) ASSERT_OK(AppendAt(table_.get(), {{1, i}}).status());
  ASSERT_OK(table_->WaitForUpkeep());  // the checkpoint at 10 is written in the background
  for (int v = 0; v <= 10; ++v) {
    ASSERT_OK(store_->Delete("default/t/_delta_log/" + CommitFileName(v)));
  }
  ASSERT_OK_AND_ASSIGN(auto info, OpenHandle()->Info());
  EXPECT_EQ(info.rows, 11);
  EXPECT_EQ(info.files, 11);
}

TEST_F(TableTest, InfoCountsRowsFilesSnapshotsAndManifests) {
  ASSERT_OK(AppendAt(table_.get(), {{1, 0}, {1, 1}, {2, 0}}).status());
  ASSERT_OK(AppendAt(table_.get(), {{3, 0}}).status());
  ASSERT_OK_AND_ASSIGN(auto info, table_->Info());
  EXPECT_EQ(info.rows, 4);
  EXPECT_EQ(info.files, 3);
  EXPECT_GT(info.bytes, 0);
  EXPECT_EQ(info.snapshots, 3);  // versions 0, 1, 2
  EXPECT_EQ(info.manifests, 3);  // three commit files, no checkpoint
  EXPECT_EQ(info.contract.time_column, "ts");
}

// --- scan ------------------------------------------------------------------------------------

std::map<std::string, std::vector<bool>> DedupByChunk(const ScanPlan& plan) {
  std::map<std::string, std::vector<bool>> out;
  for (const auto& f : plan.files) out[f.chunk].push_back(f.dedup);
  return out;
}

class ScanTest : public TableTest {
 protected:
  void SetUp() override {}
  void CreateWithDedup(const char* dedup) {
    ContractOptions options;
    options.dedup = dedup;
    table_ = Create(options);
  }
};

TEST_F(ScanTest, OverlappingFilesOfAChunkAreMarkedForDedup) {
  CreateWithDedup("last");
  ASSERT_OK(AppendAt(table_.get(), {{1, 1}, {1, 3}}).status());
  ASSERT_OK(AppendAt(table_.get(), {{1, 2}}).status());  // inside [1h, 3h]
  ASSERT_OK(AppendAt(table_.get(), {{2, 0}}).status());  // alone in its chunk
  ASSERT_OK_AND_ASSIGN(auto plan, table_->Scan());
  auto marks = DedupByChunk(plan);
  EXPECT_EQ(marks["2025-01-01"], (std::vector<bool>{true, true}));
  EXPECT_EQ(marks["2025-01-02"], (std::vector<bool>{false}));
}

TEST_F(ScanTest, FilesSharingOnlyAnEndpointOverlap) {
  CreateWithDedup("first");
  ASSERT_OK(AppendAt(table_.get(), {{1, 1}, {1, 2}}).status());
  ASSERT_OK(AppendAt(table_.get(), {{1, 2}, {1, 4}}).status());
  ASSERT_OK_AND_ASSIGN(auto plan, table_->Scan());
  EXPECT_EQ(DedupByChunk(plan)["2025-01-01"], (std::vector<bool>{true, true}));
}

TEST_F(ScanTest, DisjointFilesOfAChunkNeedNoDedup) {
  CreateWithDedup("last");
  ASSERT_OK(AppendAt(table_.get(), {{1, 1}, {1, 2}}).status());
  ASSERT_OK(AppendAt(table_.get(), {{1, 3}, {1, 4}}).status());
  ASSERT_OK_AND_ASSIGN(auto plan, table_->Scan());
  EXPECT_EQ(DedupByChunk(plan)["2025-01-01"], (std::vector<bool>{false, false}));
}

TEST_F(ScanTest, TableWithoutDedupNeverMarksFiles) {
  CreateWithDedup("none");
  ASSERT_OK(AppendAt(table_.get(), {{1, 1}, {1, 3}}).status());
  ASSERT_OK(AppendAt(table_.get(), {{1, 2}}).status());
  ASSERT_OK_AND_ASSIGN(auto plan, table_->Scan());
  EXPECT_EQ(DedupByChunk(plan)["2025-01-01"], (std::vector<bool>{false, false}));
}

// Time travel: the plan of an older version lists that version's files, with its dedup marks.
TEST_F(ScanTest, AnOlderVersionIsPlannedFromItsOwnSnapshot) {
  CreateWithDedup("last");
  ASSERT_OK(AppendAt(table_.get(), {{1, 1}, {1, 3}}).status());  // version 1
  ASSERT_OK(AppendAt(table_.get(), {{1, 2}}).status());          // version 2: overlaps
  ASSERT_OK(AppendAt(table_.get(), {{2, 0}}).status());          // version 3
  ASSERT_OK_AND_ASSIGN(auto v1, table_->ScanAsOf(1, std::nullopt));
  EXPECT_EQ(v1.version, 1);
  EXPECT_EQ(DedupByChunk(v1)["2025-01-01"], (std::vector<bool>{false}));
  ASSERT_OK_AND_ASSIGN(auto v2, table_->ScanAsOf(2, std::nullopt));
  EXPECT_EQ(DedupByChunk(v2)["2025-01-01"], (std::vector<bool>{true, true}));
  EXPECT_EQ(v2.files.size(), 2u);
  ASSERT_OK_AND_ASSIGN(auto v0, table_->ScanAsOf(0, std::nullopt));
  EXPECT_TRUE(v0.files.empty());
  // The latest version through time travel is the latest plan.
  ASSERT_OK_AND_ASSIGN(auto v3, table_->ScanAsOf(3, std::nullopt));
  EXPECT_EQ(v3.files.size(), 3u);
}

TEST_F(ScanTest, AVersionNotWrittenYetIsAKeyErrorNamingTheReadableOnes) {
  CreateWithDedup("last");
  ASSERT_OK(AppendAt(table_.get(), {{1, 1}}).status());
  auto missing = table_->ScanAsOf(7, std::nullopt);
  ASSERT_TRUE(missing.status().IsKeyError()) << missing.status().ToString();
  EXPECT_NE(missing.status().message().find("versions 0 to 1 can be read"), std::string::npos)
      << missing.status().message();
  EXPECT_NE(missing.status().message().find("table 'default.t'"), std::string::npos)
      << missing.status().message();
  EXPECT_TRUE(table_->ScanAsOf(-1, std::nullopt).status().IsInvalid());
}

TEST_F(ScanTest, ATimestampSelectsTheNewestVersionCommittedByThen) {
  CreateWithDedup("last");
  ASSERT_OK(AppendAt(table_.get(), {{1, 1}}).status());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const int64_t between = NowMillis();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_OK(AppendAt(table_.get(), {{1, 2}}).status());
  ASSERT_OK_AND_ASSIGN(auto then, table_->ScanAsOf(std::nullopt, between));
  EXPECT_EQ(then.version, 1);
  ASSERT_OK_AND_ASSIGN(auto now, table_->ScanAsOf(std::nullopt, NowMillis() + 1000));
  EXPECT_EQ(now.version, 2);
  auto before = table_->ScanAsOf(std::nullopt, 0);
  ASSERT_TRUE(before.status().IsKeyError());
  EXPECT_NE(before.status().message().find("the oldest that can be read (version 0)"), std::string::npos)
      << before.status().message();
}

TEST_F(ScanTest, PlanDescribesEachFile) {
  CreateWithDedup("none");
  ASSERT_OK(AppendAt(table_.get(), {{1, 1}, {1, 3}}).status());
  ASSERT_OK(AppendAt(table_.get(), {{2, 0}}).status());
  ASSERT_OK_AND_ASSIGN(auto plan, table_->Scan());
  EXPECT_EQ(plan.version, 2);
  EXPECT_TRUE(plan.declared->Equals(*schema_));
  ASSERT_EQ(plan.files.size(), 2u);
  std::map<std::string, ScanFile> by_chunk;
  for (const auto& f : plan.files) by_chunk[f.chunk] = f;
  EXPECT_EQ(by_chunk["2025-01-01"].seq, 1);
  EXPECT_EQ(by_chunk["2025-01-01"].rows, 2);
  EXPECT_EQ(by_chunk["2025-01-02"].seq, 2);
  EXPECT_EQ(by_chunk["2025-01-02"].rows, 1);
  EXPECT_EQ(by_chunk["2025-01-02"].path.rfind("memory://lake/default/t/data/2025-01-02/", 0), 0u)
      << by_chunk["2025-01-02"].path;
}

}  // namespace
}  // namespace timelake::testing

namespace timelake::testing {
namespace {

// Another process compacts a chunk and vacuums its inputs while this handle is rewriting the
// same chunk from an older snapshot: the inputs vanish under it. That is a lost race (the work
// is done), not damage: maintain() skips the group instead of failing with "object not found"
// (which the multi-process model test hit now and then).
TEST_F(TableTest, CompactionOvertakenByAnotherHandleThatVacuumedItsInputsIsNoError) {
  ContractOptions options;
  options.series_key = std::vector<std::string>{"sensor"};
  options.properties = {{"delta.deletedFileRetentionDuration", "interval 0 seconds"},
                        {"timelake.retentionDurationCheck", "false"}};
  ASSERT_OK_AND_ASSIGN(auto a, lake_->CreateTable("u", schema_, options));
  for (int hour = 0; hour < 3; ++hour) ASSERT_OK(AppendAt(a.get(), {{1, hour}}).status());
  ASSERT_OK_AND_ASSIGN(auto b, lake_->OpenTable("u"));
  auto fired = std::make_shared<bool>(false);
  auto other = std::make_shared<arrow::Result<MaintainResult>>(arrow::Status::Invalid("not run"));
  store_->SetFaultHook([=](const std::string& op, const std::string& path) {
    if (op == "open_input" && !*fired && path.rfind("default/u/data/", 0) == 0) {
      *fired = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      *other = b->Maintain({});  // compacts the chunk and deletes the three inputs
    }
    return arrow::Status::OK();
  });
  ASSERT_OK_AND_ASSIGN(auto mine, a->Maintain({}));
  store_->SetFaultHook(nullptr);
  ASSERT_TRUE(*fired);
  ASSERT_OK(other->status());
  EXPECT_EQ((*other)->partitions_compacted, 1);
  EXPECT_EQ(mine.partitions_compacted, 0);  // overtaken: nothing left to do
  ASSERT_OK_AND_ASSIGN(auto plan, a->Scan());
  ASSERT_EQ(plan.files.size(), 1u);
  EXPECT_EQ(plan.files[0].rows, 3);
}

// An append reads the log's head commit twice (the refresh, and the check after its put that
// takes a stray back after a drop), not three times: the refresh just confirmed the head, so
// the check before the put is skipped. On an object store each read is a request.
TEST_F(TableTest, AnAppendReadsTheHeadCommitTwice) {
  ContractOptions options;
  options.series_key = std::vector<std::string>{"sensor"};
  ASSERT_OK_AND_ASSIGN(auto t, lake_->CreateTable("h", schema_, options));
  ASSERT_OK(AppendAt(t.get(), {{1, 0}}).status());
  const int64_t head = t->version();
  auto reads = std::make_shared<std::map<std::string, int>>();
  store_->SetFaultHook([=](const std::string& op, const std::string& path) {
    if (op == "get" && path.find("/_delta_log/") != std::string::npos) ++(*reads)[path];
    return arrow::Status::OK();
  });
  ASSERT_OK(AppendAt(t.get(), {{1, 1}}).status());
  store_->SetFaultHook(nullptr);
  char name[32];
  std::snprintf(name, sizeof(name), "%020lld.json", static_cast<long long>(head));
  EXPECT_EQ((*reads)[std::string("default/h/_delta_log/") + name], 2);
}

}  // namespace
}  // namespace timelake::testing
