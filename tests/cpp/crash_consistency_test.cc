// Crash consistency, like LevelDB's fault_injection_test: a fixed workload of appends (with and
// without batch ids, some racing in pairs on one handle so that group commit joins them),
// retention, compaction, log expiry and vacuum from two handles runs over a
// FaultStore that injects one fault at store write number k, for every k in turn and every kind
// of fault (fail, lost reply, a conditional put that landed but reports "exists", a crash before
// or after the write). After the fault the workload goes on (or, after a crash, a new "process"
// starts), and then the invariants must hold:
//  * the table opens, and its log has no gap;
//  * every data file the log references exists;
//  * every acknowledged append is present exactly once, and no append is present twice or in
//    part (an append whose outcome was unknown, retried with its batch id, is present once);
//  * latest() equals the newest row per series of a full scan of the live files;
//  * the table takes new appends and maintenance.
// CTest runs the sweep over store writes (well under a minute). TIMELAKE_CRASH_SOAK=<seconds>
// adds randomized runs after it (several faults per run, other seeds) for that long, and reports
// the counts.
#include <chrono>
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <arrow/api.h>
#include <gtest/gtest.h>

#include "test_util.h"
#include "timelake/lake.h"
#include "timelake/log/data_path.h"
#include "timelake/log/delta_log.h"
#include "timelake/store/fault_store.h"
#include "timelake/store/memory_store.h"
#include "timelake/store/parquet_object.h"
#include "timelake/table/table.h"

namespace timelake::testing {
namespace {

constexpr int kRowsPerAppend = 3;
constexpr int kSensors = 4;

std::shared_ptr<arrow::Schema> Schema() {
  return arrow::schema({arrow::field("ts", arrow::timestamp(arrow::TimeUnit::MICRO, "UTC"), false),
                        arrow::field("sensor", arrow::utf8()), arrow::field("value", arrow::int64())});
}

struct Step {
  enum Kind { kAppend, kMaintain } kind;
  int handle;  // 0 or 1
  bool batch_id = false;
  bool old = false;  // rows years past the retention: retention drops them
  bool pair = false;  // a second append on the same handle from another thread at the same time
};

// The workload of `seed`: mostly appends, with a maintain now and then, from both handles.
std::vector<Step> Workload(uint64_t seed, int steps) {
  std::mt19937_64 rng(seed);
  std::vector<Step> out;
  for (int i = 0; i < steps; ++i) {
    Step s;
    s.handle = static_cast<int>(rng() % 2);
    if (i % 6 == 5) {
      s.kind = Step::kMaintain;
    } else {
      s.kind = Step::kAppend;
      s.batch_id = rng() % 2 == 0;
      s.old = rng() % 5 == 0;
      s.pair = rng() % 4 == 0;
    }
    out.push_back(s);
  }
  return out;
}

struct AppendRecord {
  int id;
  bool batch_id;
  bool old;
  enum Outcome { kAcknowledged, kDuplicate, kFailed } outcome;
};

class CrashRun {
 public:
  CrashRun(uint64_t seed, int steps,
           FaultStore::Counting counting = FaultStore::Counting::kWritesOnly)
      : steps_(Workload(seed, steps)) {
    target_ = std::make_shared<MemoryStore>("crash");
    ContractOptions options;
    options.series_key = std::vector<std::string>{"sensor"};
    options.chunk = "day";
    options.retention = "30d";
    options.dedup = "none";
    options.properties = {{"delta.checkpointInterval", "3"},
                          {"timelake.retentionDurationCheck", "false"},
                          {"delta.deletedFileRetentionDuration", "interval 0 seconds"},
                          {"delta.logRetentionDuration", "interval 0 seconds"}};
    auto created = Lake::OverStore(target_)->CreateTable("t", Schema(), options);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    faults_ = std::make_shared<FaultStore>(target_, seed);
    faults_->SetCounting(counting);
  }

  FaultStore& faults() { return *faults_; }

  /// Runs the workload through the fault store; stops at a crash (the process is gone).
  void Run() {
    auto lake = Lake::OverStore(faults_);
    std::shared_ptr<Table> handles[2];
    for (auto& h : handles) {
      auto opened = lake->OpenTable("t");
      if (!opened.ok()) return;  // a fault while opening: this process can do nothing
      h = *opened;
    }
    for (size_t i = 0; i < steps_.size() && !faults_->crashed(); ++i) {
      const Step& s = steps_[i];
      Table* t = handles[s.handle].get();
      if (s.kind == Step::kMaintain) {
        (void)t->Maintain(MaintainOptions{});
        continue;
      }
      // A pair is two appends racing on one handle: group commit may put them in one commit.
      std::vector<AppendRecord> batch;
      for (int k = 0; k < (s.pair ? 2 : 1); ++k) {
        batch.push_back({static_cast<int>(records_.size()) + k, s.batch_id, s.old,
                         AppendRecord::kFailed});
      }
      auto append = [&](AppendRecord* record) {
        AppendOptions options;
        if (record->batch_id) options.batch_id = "b" + std::to_string(record->id);
        auto result = t->Append(Rows(*record).get(), options);
        if (result.ok()) {
          record->outcome =
              result->duplicate ? AppendRecord::kDuplicate : AppendRecord::kAcknowledged;
        }
      };
      std::thread other;
      if (s.pair) other = std::thread(append, &batch[1]);
      append(&batch[0]);
      if (other.joinable()) other.join();
      for (const auto& r : batch) records_.push_back(r);
    }
  }

  /// A new process after the fault: every failed append with a batch id is retried with it (what
  /// the error tells users to do), then the invariants are checked.
  void RecoverAndCheck(const std::string& context) {
    if (faults_->crashed()) faults_->Revive();
    auto lake = Lake::OverStore(target_);  // the new process sees the durable state directly
    auto opened = lake->OpenTable("t");
    ASSERT_TRUE(opened.ok()) << context << "the table no longer opens: " << opened.status().ToString();
    std::shared_ptr<Table> table = *opened;
    for (auto& r : records_) {
      if (r.outcome != AppendRecord::kFailed || !r.batch_id) continue;
      AppendOptions options;
      options.batch_id = "b" + std::to_string(r.id);
      auto retried = table->Append(Rows(r).get(), options);
      ASSERT_TRUE(retried.ok()) << context << "retry of append " << r.id << ": "
                                << retried.status().ToString();
      r.outcome = AppendRecord::kAcknowledged;  // now it is (a duplicate means the first landed)
    }
    CheckLogHasNoGap(context);
    auto rows = FullScan(context);
    // Every append is present whole or not at all, and never twice; acknowledged recent ones are
    // present (old ones may have been dropped by retention).
    for (const auto& r : records_) {
      const int64_t n = rows.count(r.id) ? rows[r.id] : 0;
      const bool must = r.outcome == AppendRecord::kAcknowledged && !r.old;
      if (must) {
        EXPECT_EQ(n, kRowsPerAppend) << context << "acknowledged append " << r.id;
      } else {
        EXPECT_TRUE(n == 0 || n == kRowsPerAppend) << context << "append " << r.id << " has "
                                                   << n << " rows";
      }
    }
    CheckLatest(table.get(), context);
    // The table goes on.
    AppendRecord next{static_cast<int>(records_.size()), false, false, AppendRecord::kFailed};
    ASSERT_OK(table->Append(Rows(next).get(), {}).status());
    ASSERT_OK(table->Maintain(MaintainOptions{}).status());
  }

 private:
  // Append `r`: kRowsPerAppend rows, values = its id, distinct times.
  std::shared_ptr<arrow::RecordBatchReader> Rows(const AppendRecord& r) const {
    const int64_t base = r.old ? Micros(2020, 3, 1) : NowMicros() - 86'400'000'000LL;
    std::string ts = "[", sensors = "[", values = "[";
    for (int i = 0; i < kRowsPerAppend; ++i) {
      const std::string sep = i ? "," : "";
      ts += sep + std::to_string(base + (r.id * kRowsPerAppend + i) * 1'000'000LL);
      sensors += sep + "\"s" + std::to_string((r.id + i) % kSensors) + "\"";
      values += sep + std::to_string(r.id);
    }
    return Reader(Schema(), {Batch(Schema(), {ts + "]", sensors + "]", values + "]"})});
  }

  void CheckLogHasNoGap(const std::string& context) {
    std::set<int64_t> versions;
    auto listing = target_->List("default/t/_delta_log/");
    ASSERT_OK(listing.status());
    for (const auto& meta : *listing) {
      auto name = meta.path.substr(meta.path.rfind('/') + 1);
      if (auto v = CommitVersionOf(name)) versions.insert(*v);
    }
    ASSERT_FALSE(versions.empty()) << context;
    EXPECT_EQ(static_cast<int64_t>(versions.size()), *versions.rbegin() - *versions.begin() + 1)
        << context << "the log has a gap";
  }

  // Rows per append id in the live files; also remembers the newest row per sensor.
  std::map<int64_t, int64_t> FullScan(const std::string& context) {
    std::map<int64_t, int64_t> rows;
    newest_.clear();
    auto snapshot = DeltaLog(target_, "default/t").Load();
    EXPECT_TRUE(snapshot.ok()) << context << snapshot.status().ToString();
    if (!snapshot.ok()) return rows;
    for (const auto& [path, add] : snapshot->files) {
      auto table = ReadParquetTable(target_.get(), DataFileStorePath("default/t", path).ValueOrDie());
      EXPECT_TRUE(table.ok()) << context << "a referenced data file is unreadable or missing: "
                              << table.status().ToString();
      if (!table.ok()) continue;
      auto flat = (*table)->CombineChunks().ValueOrDie();
      auto ts = std::static_pointer_cast<arrow::TimestampArray>(flat->GetColumnByName("ts")->chunk(0));
      auto sensor = std::static_pointer_cast<arrow::StringArray>(flat->GetColumnByName("sensor")->chunk(0));
      auto value = std::static_pointer_cast<arrow::Int64Array>(flat->GetColumnByName("value")->chunk(0));
      for (int64_t i = 0; i < flat->num_rows(); ++i) {
        ++rows[value->Value(i)];
        auto& best = newest_[sensor->GetString(i)];
        if (ts->Value(i) >= best.first) best = {ts->Value(i), value->Value(i)};
      }
    }
    return rows;
  }

  void CheckLatest(Table* table, const std::string& context) {
    auto latest = table->Latest();
    ASSERT_TRUE(latest.ok()) << context << latest.status().ToString();
    auto flat = (*latest)->CombineChunks().ValueOrDie();
    std::map<std::string, int64_t> got, want;
    if (flat->num_rows() > 0) {
      auto sensor = std::static_pointer_cast<arrow::StringArray>(flat->GetColumnByName("sensor")->chunk(0));
      auto value = std::static_pointer_cast<arrow::Int64Array>(flat->GetColumnByName("value")->chunk(0));
      for (int64_t i = 0; i < flat->num_rows(); ++i) got[sensor->GetString(i)] = value->Value(i);
    }
    for (const auto& [sensor, best] : newest_) want[sensor] = best.second;
    EXPECT_EQ(got, want) << context << "latest() disagrees with a full scan";
  }

  std::vector<Step> steps_;
  std::vector<AppendRecord> records_;
  std::map<std::string, std::pair<int64_t, int64_t>> newest_;  // sensor -> (time, value)
  std::shared_ptr<MemoryStore> target_;
  std::shared_ptr<FaultStore> faults_;
};

std::string Describe(const FaultStore& faults, uint64_t seed) {
  std::string out = "seed " + std::to_string(seed) + ", injected:";
  for (const auto& line : faults.injected()) out += "\n  " + line;
  return out + "\n";
}

constexpr int kSteps = 18;

// Randomized runs (other seeds, random faults plus a crash or a lying put) for `seconds`.
void Soak(int seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  int runs = 0, crashes = 0;
  int64_t faults = 0;
  for (uint64_t seed = 2; std::chrono::steady_clock::now() < until; ++seed) {
    CrashRun run(seed, kSteps * 2);
    run.faults().InjectRandomly(0.02);
    std::mt19937_64 rng(seed);
    run.faults().InjectAt(static_cast<int64_t>(rng() % 400), rng() % 2 ? FaultKind::kCrash
                                                                       : FaultKind::kLandButRefuse);
    run.Run();
    crashes += run.faults().crashed();
    faults += static_cast<int64_t>(run.faults().injected().size());
    run.RecoverAndCheck(Describe(run.faults(), seed));
    ++runs;
    if (::testing::Test::HasFailure()) FAIL() << "soak failed at seed " << seed;
  }
  std::printf("[ soak    ] %d runs, %lld faults injected, %d crashes\n", runs,
              static_cast<long long>(faults), crashes);
}

TEST(CrashConsistencyTest, EveryFaultAtEveryStoreWriteLeavesAConsistentTable) {
  // How many writes the workload makes without faults: the points to sweep.
  int64_t writes = 0;
  {
    CrashRun clean(1, kSteps);
    clean.Run();
    writes = clean.faults().operations();
    clean.RecoverAndCheck("without faults: ");
  }
  ASSERT_GT(writes, 50);
  const FaultKind kinds[] = {FaultKind::kFail, FaultKind::kLoseReply, FaultKind::kLandButRefuse,
                             FaultKind::kCrash, FaultKind::kCrashAfter};
  int runs = 0;
  for (int64_t k = 0; k < writes; ++k) {
    for (FaultKind kind : kinds) {
      CrashRun run(1, kSteps);
      run.faults().InjectAt(k, kind);
      run.Run();
      run.RecoverAndCheck(Describe(run.faults(), 1));
      ++runs;
      if (::testing::Test::HasFailure()) {
        FAIL() << "stopped at the first failing fault point (write " << k << ", "
               << FaultKindName(kind) << ")";
      }
    }
  }
  std::printf("[ crash   ] %d fault points (%lld writes x %zu kinds)\n", runs,
              static_cast<long long>(writes), sizeof(kinds) / sizeof(kinds[0]));
  if (const char* soak = std::getenv("TIMELAKE_CRASH_SOAK")) Soak(std::atoi(soak));
}

TEST(CrashConsistencyTest, AFailedOrLostReadAtEveryStoreOperationLeavesAConsistentTable) {
  // Reads matter too: a commit that cannot read back what its put left, a rebase that cannot read
  // the winners, an index that cannot read its records. Every operation (reads and writes) of a
  // shorter workload fails in turn; losing a reply is failing for a read.
  constexpr int kShortSteps = 12;
  int64_t operations = 0;
  {
    CrashRun clean(3, kShortSteps, FaultStore::Counting::kAllOperations);
    clean.Run();
    operations = clean.faults().operations();
  }
  ASSERT_GT(operations, 100);
  for (int64_t k = 0; k < operations; ++k) {
    CrashRun run(3, kShortSteps, FaultStore::Counting::kAllOperations);
    run.faults().InjectAt(k, FaultKind::kFail);
    run.Run();
    run.RecoverAndCheck(Describe(run.faults(), 3));
    if (::testing::Test::HasFailure()) FAIL() << "stopped at operation " << k;
  }
  std::printf("[ crash   ] %lld operations failed in turn\n", static_cast<long long>(operations));
}

}  // namespace
}  // namespace timelake::testing
