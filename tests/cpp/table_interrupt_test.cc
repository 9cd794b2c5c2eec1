// A handle's operations under callbacks and interruption: an operation called from inside the
// input stream of an append on the same handle fails instead of deadlocking, and appends and
// maintenance stop when their InterruptCheck says so, committing nothing half-done and deleting
// what they wrote but did not commit.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <thread>

#include <arrow/api.h>
#include <gtest/gtest.h>

#include "lake_fixture.h"
#include "test_util.h"
#include "timelake/ingest/ingestor.h"
#include "timelake/lake.h"
#include "timelake/store/memory_store.h"
#include "timelake/table/table.h"

namespace timelake::testing {
namespace {

using arrow::field;

// Runs `body`, failing the whole test binary if it does not return within `limit` (a deadlock
// cannot be recovered from otherwise).
void WithinSeconds(int limit, std::function<void()> body) {
  auto done = std::async(std::launch::async, std::move(body));
  if (done.wait_for(std::chrono::seconds(limit)) != std::future_status::ready) {
    std::fprintf(stderr, "FATAL: did not return within %d s (deadlock?)\n", limit);
    std::fflush(stderr);
    std::_Exit(1);
  }
  done.get();
}

// A reader over fixed batches that calls `before_batch(i)` before handing out batch i.
class CallbackReader : public arrow::RecordBatchReader {
 public:
  CallbackReader(std::shared_ptr<arrow::Schema> schema,
                 std::vector<std::shared_ptr<arrow::RecordBatch>> batches,
                 std::function<void(size_t)> before_batch)
      : schema_(std::move(schema)),
        batches_(std::move(batches)),
        before_(std::move(before_batch)) {}
  std::shared_ptr<arrow::Schema> schema() const override { return schema_; }
  arrow::Status ReadNext(std::shared_ptr<arrow::RecordBatch>* batch) override {
    if (next_ >= batches_.size()) {
      *batch = nullptr;
      return arrow::Status::OK();
    }
    before_(next_);
    *batch = batches_[next_++];
    return arrow::Status::OK();
  }

 private:
  std::shared_ptr<arrow::Schema> schema_;
  std::vector<std::shared_ptr<arrow::RecordBatch>> batches_;
  std::function<void(size_t)> before_;
  size_t next_ = 0;
};

// An InterruptCheck that says stop on its `n`-th call (counting from 1), and counts calls.
struct StopOnCall {
  explicit StopOnCall(int n) : n(n) {}
  int n;
  std::shared_ptr<std::atomic<int>> calls = std::make_shared<std::atomic<int>>(0);
  InterruptCheck check() const {
    return [calls = calls, n = n]() -> arrow::Status {
      return ++*calls >= n ? arrow::Status::Cancelled("interrupted") : arrow::Status::OK();
    };
  }
};

class TableInterruptTest : public LakeFixture {
 protected:
  void SetUp() override { CreateTable(); }

  // One row on each of `days` of January 2025 for sensor "a".
  std::shared_ptr<arrow::RecordBatch> Rows(std::vector<int> days, int hour = 0) {
    std::string ts = "[", sensors = "[", values = "[";
    for (size_t i = 0; i < days.size(); ++i) {
      const char* sep = i ? "," : "";
      ts += sep + std::to_string(Micros(2025, 1, days[i], hour));
      sensors += std::string(sep) + "\"a\"";
      values += sep + std::to_string(i);
    }
    return Batch(schema_, {ts + "]", sensors + "]", values + "]"});
  }

  std::vector<std::string> DataFiles() { return Objects("default/t/data/"); }
  size_t LiveFiles() {
    return lake_->OpenTable("t").ValueOrDie()->Scan().ValueOrDie().files.size();
  }
  int64_t LatestVersion() { return lake_->OpenTable("t").ValueOrDie()->version(); }

};

TEST_F(TableInterruptTest, HandleCalledFromItsOwnAppendStreamFailsInsteadOfDeadlocking) {
  arrow::Status info, nested_append, maintain, refresh, latest, scan;
  int64_t version = -1;
  CallbackReader reader(schema_, {Rows({1}), Rows({2})}, [&](size_t i) {
    if (i != 1) return;
    info = table_->Info().status();
    auto inner = Reader(schema_, {Rows({3})});
    nested_append = table_->Append(inner.get(), {}).status();
    maintain = table_->Maintain({}).status();
    refresh = table_->Refresh();
    latest = table_->Latest().status();
    scan = table_->Scan().status();
    version = table_->version();
  });
  WithinSeconds(120, [&] {
    ASSERT_OK_AND_ASSIGN(auto result, table_->Append(&reader, {}));
    EXPECT_EQ(result.rows, 2);  // the outer append is not disturbed
  });
  const std::string busy = "table handle 'default.t' is busy with append() on this thread";
  EXPECT_TRUE(FailsWith(info, arrow::StatusCode::ExecutionError, busy + ": info()"));
  EXPECT_TRUE(FailsWith(nested_append, arrow::StatusCode::ExecutionError, busy + ": append()"));
  EXPECT_TRUE(FailsWith(maintain, arrow::StatusCode::ExecutionError, busy));
  EXPECT_TRUE(FailsWith(refresh, arrow::StatusCode::ExecutionError, busy));
  EXPECT_TRUE(FailsWith(latest, arrow::StatusCode::ExecutionError, busy));
  EXPECT_TRUE(FailsWith(scan, arrow::StatusCode::ExecutionError, busy));
  EXPECT_TRUE(FailsWith(info, arrow::StatusCode::ExecutionError, "lake.table('default.t')"));
  EXPECT_EQ(version, 0);  // a plain read answers from inside the stream
  EXPECT_EQ(LatestVersion(), 1);
}

TEST_F(TableInterruptTest, SecondHandleWorksFromInsideTheAppendStream) {
  auto second = lake_->OpenTable("t").ValueOrDie();
  arrow::Status nested;
  CallbackReader reader(schema_, {Rows({1})}, [&](size_t) {
    auto inner = Reader(schema_, {Rows({3})});
    nested = second->Append(inner.get(), {}).status();
  });
  WithinSeconds(120, [&] { ASSERT_OK(table_->Append(&reader, {}).status()); });
  EXPECT_OK(nested);
  EXPECT_EQ(LatestVersion(), 2);
}

TEST_F(TableInterruptTest, AnotherThreadIsServedDuringAnAppendInsteadOfFailing) {
  // While an append reads its input (its files are written without the handle's lock, so that
  // appends of several threads overlap), another thread's info() runs, neither refused nor
  // blocked, and sees the table before the append: never half of it.
  std::thread waiter;
  std::atomic<bool> waiter_done{false};
  arrow::Result<TableInfo> seen = arrow::Status::UnknownError("not run");
  CallbackReader reader(schema_, {Rows({1}), Rows({2})}, [&](size_t i) {
    if (i != 0) return;
    waiter = std::thread([&] {
      seen = table_->Info();
      waiter_done = true;
    });
    for (int k = 0; k < 2000 && !waiter_done; ++k) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_TRUE(waiter_done) << "info() on another thread waited for the append's input";
  });
  WithinSeconds(120, [&] {
    ASSERT_OK(table_->Append(&reader, {}).status());
    waiter.join();
  });
  ASSERT_OK(seen.status());
  EXPECT_EQ(seen->rows, 0);
  ASSERT_OK_AND_ASSIGN(auto after, table_->Info());
  EXPECT_EQ(after.rows, 2);
}

TEST_F(TableInterruptTest, AppendPlannedDuringAGroupCommitNeverUsesADuplicatesEmptyPlan) {
  // Regression: an append answered as a duplicate while planning published an empty plan; an
  // append that started while a group commit was in flight then wrote with it (a crash). The
  // sequence: A plans and reads its input; meanwhile B, a duplicate, is answered; A commits
  // (slowly); C starts during A's commit.
  auto first = Reader(schema_, {Rows({1})});
  AppendOptions with_x;
  with_x.batch_id = "x";
  ASSERT_OK(table_->Append(first.get(), with_x).status());
  arrow::Result<AppendResult> b = arrow::Status::UnknownError("not run");
  CallbackReader a_input(schema_, {Rows({2})}, [&](size_t) {
    std::thread([&] {
      auto again = Reader(schema_, {Rows({3})});
      b = table_->Append(again.get(), with_x);
    }).join();
  });
  std::atomic<bool> committing{false};
  store_->SetFaultHook([&](const std::string& op, const std::string& path) {
    if (op == "put_if_absent" && path.find("_delta_log/") != std::string::npos && !committing.exchange(true)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
    return arrow::Status::OK();
  });
  arrow::Result<AppendResult> a = arrow::Status::UnknownError("not run");
  std::thread writer([&] { a = table_->Append(&a_input, {}); });
  while (!committing) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto c_input = Reader(schema_, {Rows({4})});
  auto c = table_->Append(c_input.get(), {});
  writer.join();
  store_->SetFaultHook(nullptr);
  ASSERT_OK(a.status());
  ASSERT_OK(b.status());
  ASSERT_OK(c.status());
  EXPECT_TRUE(b->duplicate);
  EXPECT_EQ(c->rows, 1);
  ASSERT_OK_AND_ASSIGN(auto info, lake_->OpenTable("t").ValueOrDie()->Info());
  EXPECT_EQ(info.rows, 3);
}

TEST_F(TableInterruptTest, InterruptedAppendCommitsNothingAndLeavesNoFiles) {
  // Checks: one before each of the 3 batches, one at the end of the input, one before the
  // commit (after the files are written). Stopping at any of them commits nothing.
  for (int stop_at = 1; stop_at <= 5; ++stop_at) {
    StopOnCall stop(stop_at);
    AppendOptions options;
    options.interrupt = stop.check();
    auto reader = Reader(schema_, {Rows({1}), Rows({2}), Rows({3})});
    EXPECT_TRUE(FailsWith(table_->Append(reader.get(), options), arrow::StatusCode::Cancelled))
        << "stop at check " << stop_at;
    EXPECT_EQ(*stop.calls, stop_at);
    EXPECT_EQ(LatestVersion(), 0) << "stop at check " << stop_at;
    EXPECT_TRUE(DataFiles().empty()) << "stop at check " << stop_at;
  }
  StopOnCall never(6);
  AppendOptions options;
  options.interrupt = never.check();
  auto reader = Reader(schema_, {Rows({1}), Rows({2}), Rows({3})});
  ASSERT_OK_AND_ASSIGN(auto result, table_->Append(reader.get(), options));
  EXPECT_EQ(*never.calls, 5);
  EXPECT_EQ(result.version, 1);
}

TEST_F(TableInterruptTest, InterruptedIngestDeletesTheFilesItFlushed) {
  StopOnCall stop(3);
  IngestOptions options;
  options.buffer_bytes = 1;  // every batch is written as soon as it arrives
  options.interrupt = stop.check();
  Contract contract;
  contract.time_column = "ts";
  contract.series_key = {"sensor"};
  contract.chunk = ChunkWidth::kDay;
  Ingestor ingestor(store_, "default/t", contract, schema_, schema_, options);
  auto reader = Reader(schema_, {Rows({1}), Rows({2}), Rows({3})});
  EXPECT_TRUE(FailsWith(ingestor.Consume(reader.get()), arrow::StatusCode::Cancelled));
  EXPECT_EQ(DataFiles().size(), 2u);  // two batches were flushed before the third check
  ingestor.Abort();
  EXPECT_TRUE(DataFiles().empty());
}

TEST_F(TableInterruptTest, InterruptedMaintainKeepsCommittedGroupsAndDeletesTheUnfinishedOne) {
  // Six chunks (days) of two small files each: six compaction groups.
  for (int hour : {0, 1}) {
    auto reader = Reader(schema_, {Rows({1, 2, 3, 4, 5, 6}, hour)});
    ASSERT_OK(table_->Append(reader.get(), {}).status());
  }
  ASSERT_EQ(DataFiles().size(), 12u);
  // Checks: at the start, after retention, before each wave of groups rewritten in parallel
  // (as many as there are cores) and before each group's commit. The fifth comes after the
  // first group's commit and before the second's (or, on one core, before the second group's
  // rewrite): whatever the wave, the second group's rewritten files are not committed and must
  // be deleted.
  StopOnCall stop(5);
  MaintainOptions options;
  options.interrupt = stop.check();
  EXPECT_TRUE(FailsWith(table_->Maintain(options), arrow::StatusCode::Cancelled));
  EXPECT_EQ(LatestVersion(), 3);  // the first group's commit stands
  EXPECT_EQ(LiveFiles(), 11u);
  EXPECT_EQ(DataFiles().size(), 13u) << "the second group's uncommitted output was not deleted";
  ASSERT_OK_AND_ASSIGN(auto rest, table_->Maintain({}));
  EXPECT_EQ(rest.partitions_compacted, 5);
  EXPECT_EQ(LiveFiles(), 6u);
}

TEST_F(TableInterruptTest, InterruptedMaintainBeforeAnyWorkChangesNothing) {
  for (int hour : {0, 1}) {
    auto reader = Reader(schema_, {Rows({1, 2}, hour)});
    ASSERT_OK(table_->Append(reader.get(), {}).status());
  }
  StopOnCall stop(1);
  MaintainOptions options;
  options.interrupt = stop.check();
  EXPECT_TRUE(FailsWith(table_->Maintain(options), arrow::StatusCode::Cancelled));
  EXPECT_EQ(LatestVersion(), 2);
  EXPECT_EQ(DataFiles().size(), 4u);
}

}  // namespace
}  // namespace timelake::testing
