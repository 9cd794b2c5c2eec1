// The scan planner: pruning by time range and series key from tags and stats, the read-time
// dedup marks (decided before pruning), filter validation and data file paths.
#include "timelake/scan/scan_planner.h"

#include <algorithm>
#include <random>
#include <set>

#include <arrow/api.h>
#include <arrow/compute/api.h>
#include <gtest/gtest.h>

#include "lake_fixture.h"
#include "test_util.h"
#include "timelake/log/file_tags.h"
#include "timelake/log/schema.h"
#include "timelake/store/memory_store.h"
#include "timelake/store/parquet_object.h"

namespace timelake::testing {
namespace {

// --- Over hand-made snapshots: exactly what the log says, no data files needed ---------------

class PlanScanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    contract_.time_column = "ts";
    contract_.series_key = {"sensor"};
    contract_.chunk = ChunkWidth::kDay;
    contract_.dedup = DedupPolicy::kLast;
  }

  // A file of timelake's: tags for chunk 2025-01-01, time range and key range.
  void AddTagged(const std::string& path, int64_t min_time, int64_t max_time,
                 const std::string& min_key, const std::string& max_key, int64_t seq = 1) {
    AddFile add;
    add.path = path;
    add.tags = {{kSeqTag, std::to_string(seq)},
                {kChunkTag, "2025-01-01"},
                {kMinTimeTag, std::to_string(min_time)},
                {kMaxTimeTag, std::to_string(max_time)},
                {kMinKeyTag, min_key},
                {kMaxKeyTag, max_key}};
    snapshot_.files[path] = add;
  }

  // A file of another engine: stats only (or nothing).
  void AddForeign(const std::string& path, std::optional<std::string> stats) {
    AddFile add;
    add.path = path;
    add.stats = std::move(stats);
    snapshot_.files[path] = add;
  }

  arrow::Result<ScanPlan> Plan(const ScanFilter& filter) {
    return PlanScan({store_.get(), "default/t", &snapshot_, &contract_, schema_, schema_}, filter);
  }

  // Paths of the plan's files relative to the table folder, sorted.
  std::vector<std::string> Kept(const ScanFilter& filter) {
    auto plan = Plan(filter).ValueOrDie();
    std::vector<std::string> out;
    for (const auto& f : plan.files) out.push_back(f.path.substr(kRoot.size()));
    std::sort(out.begin(), out.end());
    return out;
  }

  static ScanFilter Time(std::optional<int64_t> min, std::optional<int64_t> max) {
    ScanFilter filter;
    filter.min_time = min;
    filter.max_time = max;
    return filter;
  }
  static ScanFilter Key(const std::string& column, ScanKeyValue value) {
    ScanFilter filter;
    filter.key_equals[column] = std::move(value);
    return filter;
  }

  const std::string kRoot = "memory://lake/default/t/";
  std::shared_ptr<MemoryStore> store_ = std::make_shared<MemoryStore>("lake");
  std::shared_ptr<arrow::Schema> schema_ = arrow::schema(
      {arrow::field("ts", arrow::timestamp(arrow::TimeUnit::MICRO, "UTC"), false),
       arrow::field("sensor", arrow::utf8()), arrow::field("value", arrow::float64())});
  Contract contract_;
  Snapshot snapshot_;
};

TEST_F(PlanScanTest, TimeBoundsAreInclusiveAtBothEnds) {
  AddTagged("a.parquet", 100, 200, "s", "s");
  EXPECT_EQ(Kept(Time(200, std::nullopt)), (std::vector<std::string>{"a.parquet"}));
  EXPECT_EQ(Kept(Time(std::nullopt, 100)), (std::vector<std::string>{"a.parquet"}));
  EXPECT_EQ(Kept(Time(150, 150)), (std::vector<std::string>{"a.parquet"}));
  EXPECT_TRUE(Kept(Time(201, std::nullopt)).empty());
  EXPECT_TRUE(Kept(Time(std::nullopt, 99)).empty());
}

TEST_F(PlanScanTest, TimeRangeKeepsOnlyFilesThatReachIt) {
  AddTagged("early.parquet", 0, 99, "s", "s");
  AddTagged("middle.parquet", 100, 199, "s", "s");
  AddTagged("late.parquet", 200, 299, "s", "s");
  EXPECT_EQ(Kept(Time(150, 250)), (std::vector<std::string>{"late.parquet", "middle.parquet"}));
  auto plan = Plan(Time(150, 250)).ValueOrDie();
  EXPECT_EQ(plan.files_pruned, 1);
}

TEST_F(PlanScanTest, AnEmptyRangePrunesEveryFile) {
  AddTagged("a.parquet", 0, 1000, "s", "s");
  AddForeign("bare.parquet", std::nullopt);  // no row of any file lies in an empty range
  EXPECT_TRUE(Kept(Time(600, 500)).empty());
}

TEST_F(PlanScanTest, StringKeyIsPrunedByTheKeyTags) {
  AddTagged("ab.parquet", 0, 10, "a", "b");
  AddTagged("cd.parquet", 0, 10, "c", "d");
  EXPECT_EQ(Kept(Key("sensor", "c")), (std::vector<std::string>{"cd.parquet"}));
  EXPECT_EQ(Kept(Key("sensor", "aa")), (std::vector<std::string>{"ab.parquet"}));  // inside [a, b]
  EXPECT_TRUE(Kept(Key("sensor", "bb")).empty());  // between the files' ranges
  EXPECT_TRUE(Kept(Key("sensor", "e")).empty());
}

TEST_F(PlanScanTest, ACutKeyTagStillBoundsItsKeys) {
  const std::string prefix(32, 'p');
  AddTagged("cut.parquet", 0, 10, prefix, prefix + "\xF4\x8F\xBF\xBF");  // keys prefix…
  EXPECT_EQ(Kept(Key("sensor", prefix + "zzzz")), (std::vector<std::string>{"cut.parquet"}));
  EXPECT_TRUE(Kept(Key("sensor", std::string(32, 'q'))).empty());
}

TEST_F(PlanScanTest, IntegerKeysCompareAsNumbers) {
  schema_ = arrow::schema({arrow::field("ts", arrow::timestamp(arrow::TimeUnit::MICRO, "UTC")),
                           arrow::field("sensor", arrow::int64())});
  AddTagged("low.parquet", 0, 10, "2", "9");
  AddTagged("high.parquet", 0, 10, "10", "99");  // as text "10" < "9"
  EXPECT_EQ(Kept(Key("sensor", int64_t{10})), (std::vector<std::string>{"high.parquet"}));
  EXPECT_EQ(Kept(Key("sensor", int64_t{5})), (std::vector<std::string>{"low.parquet"}));
}

TEST_F(PlanScanTest, TimeAndKeyPruneTogether) {
  AddTagged("a-early.parquet", 0, 99, "a", "a");
  AddTagged("a-late.parquet", 100, 199, "a", "a");
  AddTagged("b-late.parquet", 100, 199, "b", "b");
  ScanFilter filter = Key("sensor", "a");
  filter.min_time = 150;
  EXPECT_EQ(Kept(filter), (std::vector<std::string>{"a-late.parquet"}));
}

TEST_F(PlanScanTest, FilesWithoutTagsOrStatsAreNeverPruned) {
  AddForeign("bare.parquet", std::nullopt);
  AddForeign("broken.parquet", std::string("{not json"));
  AddForeign("counts.parquet", std::string(R"({"numRecords": 3})"));
  ScanFilter filter = Key("sensor", "zzz");
  filter.min_time = 5;
  filter.max_time = 6;
  EXPECT_EQ(Kept(filter),
            (std::vector<std::string>{"bare.parquet", "broken.parquet", "counts.parquet"}));
}

TEST_F(PlanScanTest, StatsPruneFilesOfOtherEngines) {
  AddForeign("jan.parquet", std::string(R"({"numRecords": 2,
      "minValues": {"ts": "2025-01-01T00:00:00.000Z", "sensor": "a"},
      "maxValues": {"ts": "2025-01-31T23:00:00.000Z", "sensor": "m"}})"));
  AddForeign("feb.parquet", std::string(R"({"numRecords": 2,
      "minValues": {"ts": "2025-02-01T00:00:00.000Z", "sensor": "n"},
      "maxValues": {"ts": "2025-02-28T23:00:00.000Z", "sensor": "z"}})"));
  EXPECT_EQ(Kept(Time(Micros(2025, 2, 3), std::nullopt)), (std::vector<std::string>{"feb.parquet"}));
  EXPECT_EQ(Kept(Key("sensor", "b")), (std::vector<std::string>{"jan.parquet"}));
  auto plan = Plan(Key("sensor", "b")).ValueOrDie();
  ASSERT_EQ(plan.files.size(), 1u);
  EXPECT_EQ(plan.files[0].rows, 2);
}

TEST_F(PlanScanTest, AStatsMaxTruncatedToTheMillisecondStillBoundsTheFile) {
  // The protocol truncates the max: the file may hold times up to .123999.
  AddForeign("f.parquet", std::string(R"({"minValues": {"ts": "2025-01-01T00:00:00.000Z"},
      "maxValues": {"ts": "2025-01-01T00:00:00.123Z"}})"));
  EXPECT_EQ(Kept(Time(Micros(2025, 1, 1, 0, 0, 0, 123'999), std::nullopt)).size(), 1u);
  EXPECT_TRUE(Kept(Time(Micros(2025, 1, 1, 0, 0, 0, 124'000), std::nullopt)).empty());
}

TEST_F(PlanScanTest, AStringStatsMaxThatMayBeCutDoesNotBoundTheFile) {
  const std::string cut(32, 'm');  // 32 characters without timelake's raised end: maybe cut
  AddForeign("f.parquet", std::string(R"({"minValues": {"sensor": "a"}, "maxValues": {"sensor": ")") +
                              cut + R"("}})");
  EXPECT_EQ(Kept(Key("sensor", cut + "x")).size(), 1u);
  EXPECT_TRUE(Kept(Key("sensor", "0")).empty());  // the min bounds it still
}

TEST_F(PlanScanTest, MultiColumnKeysArePrunedByStats) {
  contract_.series_key = {"sensor", "site"};
  schema_ = arrow::schema({arrow::field("ts", arrow::timestamp(arrow::TimeUnit::MICRO, "UTC")),
                           arrow::field("sensor", arrow::utf8()), arrow::field("site", arrow::int32())});
  AddForeign("one.parquet",
             std::string(R"({"minValues": {"site": 1}, "maxValues": {"site": 1}})"));
  AddForeign("two.parquet",
             std::string(R"({"minValues": {"site": 2}, "maxValues": {"site": 2}})"));
  EXPECT_EQ(Kept(Key("site", int64_t{2})), (std::vector<std::string>{"two.parquet"}));
}

TEST_F(PlanScanTest, DedupMarksAreDecidedOverEveryFileBeforePruning) {
  // Same hours; a.parquet holds sensors a..c, b.parquet only b: they may share rows of b.
  AddTagged("a.parquet", 0, 100, "a", "c", /*seq=*/1);
  AddTagged("b.parquet", 0, 100, "b", "b", /*seq=*/2);
  auto only_a = Plan(Key("sensor", "a")).ValueOrDie();
  ASSERT_EQ(only_a.files.size(), 1u);
  EXPECT_TRUE(only_a.files[0].dedup);  // cautious: its rows of b have a newer copy elsewhere
  auto both = Plan(Key("sensor", "b")).ValueOrDie();
  ASSERT_EQ(both.files.size(), 2u);
  EXPECT_TRUE(both.files[0].dedup && both.files[1].dedup);
}

TEST_F(PlanScanTest, ThePlanSaysWhichRowOfADuplicateWinsUnderEachPolicy) {
  AddTagged("a.parquet", 0, 100, "a", "c");
  auto last = Plan({}).ValueOrDie();
  EXPECT_EQ(last.dedup_order.keys, (std::vector<std::string>{"sensor", "ts"}));
  EXPECT_TRUE(last.dedup_order.newest_first);
  contract_.dedup = DedupPolicy::kFirst;
  auto first = Plan({}).ValueOrDie();
  EXPECT_EQ(first.dedup_order.keys, (std::vector<std::string>{"sensor", "ts"}));
  EXPECT_FALSE(first.dedup_order.newest_first);
  contract_.dedup = DedupPolicy::kNone;
  EXPECT_TRUE(Plan({}).ValueOrDie().dedup_order.keys.empty());
}

TEST_F(PlanScanTest, ThePlanCarriesTheStorageSchemaAndTheColumnsResultsRestore) {
  auto plan = Plan({}).ValueOrDie();
  EXPECT_TRUE(plan.storage->Equals(*schema_));
  EXPECT_TRUE(plan.restored.empty());  // declared in storage types already
}

TEST_F(PlanScanTest, FilesOfAnotherEnginesPlainTableAreReadByName) {
  AddForeign("other.parquet", std::nullopt);
  EXPECT_FALSE(Plan({}).ValueOrDie().read_by_name);  // a time series: timelake's own layout
  contract_ = Contract{};
  EXPECT_TRUE(Plan({}).ValueOrDie().read_by_name);
  AddTagged("ours.parquet", 0, 1, "a", "a", /*seq=*/3);
  EXPECT_FALSE(Plan({}).ValueOrDie().read_by_name);  // timelake wrote one of them
}

TEST(RestoredColumns, TopLevelColumnsWhoseStorageTypeDiffersComeBackDeclared) {
  const auto declared = arrow::schema({
      arrow::field("u8", arrow::uint8()),
      arrow::field("category", arrow::dictionary(arrow::int8(), arrow::large_utf8())),
      arrow::field("ns", arrow::timestamp(arrow::TimeUnit::NANO, "Europe/Paris")),
      arrow::field("same", arrow::int64()),
      arrow::field("utc", arrow::timestamp(arrow::TimeUnit::MICRO, "UTC")),
      arrow::field("nested", arrow::list(arrow::uint8())),
      arrow::field("wide", arrow::decimal256(20, 2)),
      arrow::field("wide_category", arrow::dictionary(arrow::int8(), arrow::decimal256(20, 2))),
  });
  const auto storage = StorageSchemaOf(*declared).ValueOrDie();
  EXPECT_EQ(RestoredColumns(*declared, *storage), (std::vector<std::string>{"u8", "category", "ns"}));
}

TEST_F(PlanScanTest, FilterOnAColumnOutsideTheSeriesKeyIsInvalid) {
  AddTagged("a.parquet", 0, 1, "a", "a");
  EXPECT_TRUE(IsInvalid(Plan(Key("value", "x")), "value"));
}

TEST_F(PlanScanTest, FilterValueOfTheWrongKindIsInvalid) {
  AddTagged("a.parquet", 0, 1, "a", "a");
  EXPECT_TRUE(IsInvalid(Plan(Key("sensor", int64_t{1})), "sensor"));
}

TEST_F(PlanScanTest, TimeFilterOnAPlainTableIsInvalid) {
  contract_ = Contract{};
  EXPECT_TRUE(IsInvalid(Plan(Time(0, 1)), "no time column"));
}

TEST_F(PlanScanTest, PathsAreDecodedOnce) {
  AddTagged("data/2025-01-01/a%20b%2520c.parquet", 0, 1, "a", "a");
  auto plan = Plan({}).ValueOrDie();
  ASSERT_EQ(plan.files.size(), 1u);
  EXPECT_EQ(plan.files[0].path, kRoot + "data/2025-01-01/a b%20c.parquet");
}

TEST_F(PlanScanTest, APathThatDecodesToBytesThatAreNotUtf8IsAClearError) {
  AddTagged("data/x%FF.parquet", 0, 1, "a", "a");
  EXPECT_TRUE(FailsWith(Plan({}), arrow::StatusCode::NotImplemented, "data/x%FF.parquet"));
}

// --- Over a real table: pruning never drops a file that holds a matching row -----------------

class ScanPruningTest : public LakeFixture {};

TEST_F(ScanPruningTest, RandomFiltersNeverPruneAFileHoldingAMatchingRow) {
  ContractOptions options;
  options.dedup = "last";
  CreateTable(options);
  std::mt19937 rng(20251130);
  const std::vector<std::string> sensors = {"a", "b", "c", "d", "e", "f"};
  const int64_t start = Micros(2025, 1, 1);
  for (int append = 0; append < 12; ++append) {
    std::string ts = "[", keys = "[", values = "[";
    const int rows = 1 + static_cast<int>(rng() % 6);
    const size_t first = rng() % sensors.size();
    const int64_t base = start + static_cast<int64_t>(rng() % 72) * kMicrosPerHour;
    for (int i = 0; i < rows; ++i) {
      const char* sep = i ? "," : "";
      ts += sep + std::to_string(base + static_cast<int64_t>(rng() % 180) * 60 * kMicrosPerSecond);
      keys += std::string(sep) + "\"" + sensors[(first + rng() % 2) % sensors.size()] + "\"";
      values += sep + std::to_string(i);
    }
    auto reader = Reader(schema_, {Batch(schema_, {ts + "]", keys + "]", values + "]"})});
    ASSERT_OK(table_->Append(reader.get(), {}).status());
  }
  // Every file's rows, by the path the plan names.
  ASSERT_OK_AND_ASSIGN(auto all, table_->Scan());
  std::map<std::string, std::shared_ptr<arrow::Table>> rows;
  for (const auto& f : all.files) {
    const std::string store_path = f.path.substr(std::string("memory://lake/").size());
    ASSERT_OK_AND_ASSIGN(auto table, ReadParquetTable(store_.get(), store_path));
    ASSERT_OK_AND_ASSIGN(rows[f.path], table->CombineChunks());
  }
  int64_t pruned = 0;
  for (int round = 0; round < 200; ++round) {
    ScanFilter filter;
    if (rng() % 3) filter.min_time = start + static_cast<int64_t>(rng() % (80 * 60)) * 60 * kMicrosPerSecond;
    if (rng() % 3) filter.max_time = start + static_cast<int64_t>(rng() % (80 * 60)) * 60 * kMicrosPerSecond;
    if (rng() % 2) filter.key_equals["sensor"] = sensors[rng() % sensors.size()];
    ASSERT_OK_AND_ASSIGN(auto plan, table_->Scan(filter));
    std::set<std::string> kept;
    for (const auto& f : plan.files) kept.insert(f.path);
    pruned += plan.files_pruned;
    for (const auto& [path, table] : rows) {
      auto ts = std::static_pointer_cast<arrow::TimestampArray>(
          table->GetColumnByName("ts")->chunk(0));
      auto sensor = std::static_pointer_cast<arrow::StringArray>(
          arrow::compute::Cast(table->GetColumnByName("sensor")->chunk(0), arrow::utf8())
              .ValueOrDie()
              .make_array());
      bool matches = false;
      for (int64_t i = 0; i < table->num_rows() && !matches; ++i) {
        const int64_t t = ts->Value(i);
        auto wanted = filter.key_equals.find("sensor");
        matches = (!filter.min_time || t >= *filter.min_time) &&
                  (!filter.max_time || t <= *filter.max_time) &&
                  (wanted == filter.key_equals.end() ||
                   sensor->GetString(i) == std::get<std::string>(wanted->second));
      }
      if (matches) EXPECT_TRUE(kept.count(path)) << "round " << round << " pruned " << path;
    }
    // Marks never change with the filter: they are decided over every file.
    for (const auto& f : plan.files) {
      auto same = std::find_if(all.files.begin(), all.files.end(),
                               [&](const ScanFile& g) { return g.path == f.path; });
      ASSERT_NE(same, all.files.end());
      EXPECT_EQ(same->dedup, f.dedup);
    }
  }
  EXPECT_GT(pruned, 0);  // the filters did prune
}

}  // namespace
}  // namespace timelake::testing
