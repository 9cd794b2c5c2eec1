// Compaction rewrites a group in time slices of bounded memory (RewriteGroup): whatever the
// budget, the rows written are those one arrangement of the whole group gives, deduplicated
// exactly, and the outputs are disjoint in time.
#include "timelake/maintain/compaction.h"

#include <functional>
#include <limits>
#include <set>
#include <tuple>

#include <arrow/api.h>
#include <arrow/compute/api.h>
#include <gtest/gtest.h>

#include "lake_fixture.h"
#include "test_util.h"
#include "timelake/ingest/arrange.h"
#include "timelake/ingest/ingestor.h"
#include "timelake/log/delta_log.h"
#include "timelake/log/file_tags.h"
#include "timelake/log/schema.h"
#include "timelake/store/parquet_object.h"

namespace timelake::testing {
namespace {

using Row = std::tuple<int64_t, std::string, double>;  // (ts, sensor, value)

class CompactionTest : public LakeFixture {
 protected:
  // Appends `hours` hours of 2025-01-01 (from `first_hour`) for sensors s0..s{sensors-1}, one
  // row per sensor per minute, with value = `value`.
  void Append(Table* table, int first_hour, int hours, int sensors, double value) {
    std::vector<Row> rows;
    for (int h = first_hour; h < first_hour + hours; ++h) {
      for (int m = 0; m < 60; ++m) {
        for (int s = 0; s < sensors; ++s) rows.emplace_back(Micros(2025, 1, 1, h, m), "s" + std::to_string(s), value);
      }
    }
    AppendRows(table, rows);
  }

  // Appends `rows` as one batch, with no background pass (the tests compact).
  void AppendRows(Table* table, const std::vector<Row>& rows) {
    std::string ts = "[", names = "[", values = "[";
    for (size_t i = 0; i < rows.size(); ++i) {
      const char* sep = i ? "," : "";
      const auto& [time, sensor, value] = rows[i];
      ts += sep + std::to_string(time);
      names += std::string(sep) + "\"" + sensor + "\"";
      values += sep + std::to_string(value);
    }
    auto reader = Reader(schema_, {Batch(schema_, {ts + "]", names + "]", values + "]"})});
    AppendOptions options;
    options.maintain = false;
    ASSERT_OK(table->Append(reader.get(), options).status());
  }

  std::shared_ptr<Table> Create(const std::string& name, const std::string& dedup) {
    ContractOptions options;
    options.series_key = std::vector<std::string>{"sensor"};
    options.dedup = dedup;
    return lake_->CreateTable(name, schema_, options).ValueOrDie();
  }

  // The single compaction group of table `name`, with the table's schemas and contract.
  struct Planned {
    Snapshot snapshot;
    Contract contract;
    std::shared_ptr<arrow::Schema> declared, storage;
    std::vector<CompactionGroup> groups;
  };
  Planned Plan(const std::string& name) {
    Planned p;
    p.snapshot = DeltaLog(store_, "default/" + name).Load().ValueOrDie();
    p.contract = ContractFromConfiguration(p.snapshot.metadata.configuration).ValueOrDie();
    p.declared = schema_;
    p.storage = StorageSchemaOf(*schema_).ValueOrDie();
    p.groups = PlanCompaction(p.snapshot, p.contract, CompactionOptions{});
    return p;
  }

  // Each file's rows are in the table's order: by sensor, then time.
  void ExpectSortedFiles(const std::string& name, const std::vector<WrittenFile>& files) {
    for (const auto& f : files) {
      auto table = ReadParquetTable(store_.get(), "default/" + name + "/" + f.path).ValueOrDie();
      table = table->CombineChunks().ValueOrDie();
      auto ts = std::static_pointer_cast<arrow::TimestampArray>(table->GetColumnByName("ts")->chunk(0));
      auto sensor = table->GetColumnByName("sensor")->chunk(0);
      std::pair<std::string, int64_t> last;
      for (int64_t i = 0; i < table->num_rows(); ++i) {
        std::pair<std::string, int64_t> row{sensor->GetScalar(i).ValueOrDie()->ToString(), ts->Value(i)};
        if (i > 0) ASSERT_LE(last, row) << f.path << " row " << i;
        last = row;
      }
    }
  }

  std::multiset<Row> RowsOf(const std::string& name, const std::vector<WrittenFile>& files) {
    std::multiset<Row> out;
    for (const auto& f : files) {
      auto table = ReadParquetTable(store_.get(), "default/" + name + "/" + f.path).ValueOrDie();
      table = table->CombineChunks().ValueOrDie();
      auto ts = std::static_pointer_cast<arrow::TimestampArray>(table->GetColumnByName("ts")->chunk(0));
      auto sensor = table->GetColumnByName("sensor")->chunk(0);
      auto value = std::static_pointer_cast<arrow::DoubleArray>(table->GetColumnByName("value")->chunk(0));
      for (int64_t i = 0; i < table->num_rows(); ++i) {
        out.insert({ts->Value(i), sensor->GetScalar(i).ValueOrDie()->ToString(), value->Value(i)});
      }
    }
    return out;
  }
};

TEST_F(CompactionTest, SlicedRewriteEqualsOneArrangementOfTheWholeGroupForEveryPolicy) {
  for (const std::string dedup : {"none", "last", "first"}) {
    SCOPED_TRACE(dedup);
    const std::string name = "t_" + dedup;
    auto table = Create(name, dedup);
    // Overlapping appends: hours 0-5 twice (values 1, then 2), hours 3-8 (3), hour 8 alone (4).
    Append(table.get(), 0, 6, 4, 1);
    Append(table.get(), 0, 6, 4, 2);
    Append(table.get(), 3, 6, 4, 3);
    Append(table.get(), 8, 1, 4, 4);
    auto plan = Plan(name);
    ASSERT_EQ(plan.groups.size(), 1u);
    ASSERT_EQ(plan.groups[0].inputs.size(), 4u);

    const int64_t merges = ArrangeMergesForTesting();
    ASSERT_OK_AND_ASSIGN(auto whole, RewriteGroup(store_, "default/" + name, plan.contract, plan.declared,
                                                  plan.storage, plan.groups[0]));
    // The inputs are sorted data files: merged, not sorted again.
    EXPECT_EQ(ArrangeMergesForTesting(), merges + 1);
    ExpectSortedFiles(name, whole.outputs);
    ASSERT_EQ(whole.outputs.size(), 1u) << "the group fits the default budget";
    EXPECT_FALSE(whole.full[0]);
    // A budget of a few KiB cuts the group into many slices; files decoded several at a time
    // or streamed one by one give the same.
    ASSERT_OK_AND_ASSIGN(auto sliced, RewriteGroup(store_, "default/" + name, plan.contract, plan.declared,
                                                   plan.storage, plan.groups[0], RewriteOptions{4096}));
    EXPECT_GT(sliced.outputs.size(), 8u);
    ASSERT_OK_AND_ASSIGN(auto streamed, RewriteGroup(store_, "default/" + name, plan.contract, plan.declared,
                                                     plan.storage, plan.groups[0], RewriteOptions{4096, 0}));
    EXPECT_EQ(streamed.outputs.size(), sliced.outputs.size());
    EXPECT_EQ(RowsOf(name, streamed.outputs), RowsOf(name, whole.outputs));
    EXPECT_EQ(sliced.rows_in, whole.rows_in);
    EXPECT_EQ(sliced.rows_out, whole.rows_out);
    EXPECT_EQ(RowsOf(name, sliced.outputs), RowsOf(name, whole.outputs));
    ExpectSortedFiles(name, sliced.outputs);
    const int64_t expected_rows = dedup == "none" ? (6 + 6 + 6 + 1) * 60 * 4 : 9 * 60 * 4;
    EXPECT_EQ(sliced.rows_out, expected_rows);
    // Outputs in time order, disjoint: no file overlaps another (no read-time dedup needed).
    for (size_t i = 1; i < sliced.outputs.size(); ++i) {
      EXPECT_LT(sliced.outputs[i - 1].max_time, sliced.outputs[i].min_time) << i;
    }
    ASSERT_EQ(sliced.full.size(), sliced.outputs.size());
    EXPECT_TRUE(sliced.full[0]);
    if (dedup != "none") {
      // The winners: hours 0-2 from the second append for last (2), the first for first (1).
      const double early = dedup == "last" ? 2 : 1;
      const double late = dedup == "last" ? 4 : 3;
      for (const auto& [ts, sensor, value] : RowsOf(name, sliced.outputs)) {
        if (ts < Micros(2025, 1, 1, 3)) EXPECT_EQ(value, early);
        if (ts >= Micros(2025, 1, 1, 8)) EXPECT_EQ(value, late);
      }
    }
  }
}

// A string series key is read dictionary-encoded, and every batch of a row group refers to the
// row group's whole dictionary. Counted once per batch, the dictionary of many distinct keys made
// every slice look over budget: slices were cut down to single instants, each rereading every
// input (a review's 1M keys over an hour did not finish in 200 s). Counted once, the group is
// read in one slice.
TEST_F(CompactionTest, ManyDistinctKeysDoNotCutTheGroupIntoSlicesOfInstants) {
  auto table = Create("t", "last");
  constexpr int kKeys = 200'000;
  for (double v : {1.0, 2.0}) {
    std::vector<Row> rows;
    rows.reserve(kKeys);
    for (int k = 0; k < kKeys; ++k) {
      rows.emplace_back(Micros(2025, 1, 1) + (k % 3600) * 1'000'000LL,
                        "device-with-a-long-name-" + std::to_string(k), v);
    }
    AppendRows(table.get(), rows);
  }
  auto plan = Plan("t");
  ASSERT_EQ(plan.groups.size(), 1u);
  // Decoded, the group is ~9 MB of times, values and key indices and ~2 x 8 MB of dictionary;
  // counted per 64k-row batch, the dictionaries alone were ~50 MB.
  ASSERT_OK_AND_ASSIGN(auto out, RewriteGroup(store_, "default/t", plan.contract, plan.declared,
                                              plan.storage, plan.groups[0], RewriteOptions{40LL << 20}));
  EXPECT_EQ(out.slices_read, 1);
  EXPECT_EQ(out.outputs.size(), 1u);
  EXPECT_EQ(out.rows_in, 2 * kKeys);
  EXPECT_EQ(out.rows_out, kKeys);
}

TEST_F(CompactionTest, AnOutputThatFilledTheBudgetIsNotSmallUnlessItOverlaps) {
  auto table = Create("t", "none");
  Append(table.get(), 0, 1, 2, 1);
  Append(table.get(), 1, 1, 2, 1);
  Append(table.get(), 2, 1, 2, 1);
  auto plan = Plan("t");
  ASSERT_EQ(plan.groups.size(), 1u);
  // Mark two of the three files as full outputs: one small file is left, not worth a group.
  int marked = 0;
  for (auto& [path, add] : plan.snapshot.files) {
    if (marked++ < 2) add.tags[kFullTag] = "true";
  }
  EXPECT_TRUE(PlanCompaction(plan.snapshot, plan.contract, CompactionOptions{}).empty());
  // In a dedup table a full file that overlaps another is still taken: its rows may collide.
  auto dedup = Create("d", "last");
  Append(dedup.get(), 0, 2, 2, 1);
  Append(dedup.get(), 1, 2, 2, 2);
  auto d = Plan("d");
  for (auto& [path, add] : d.snapshot.files) add.tags[kFullTag] = "true";
  auto groups = PlanCompaction(d.snapshot, d.contract, CompactionOptions{});
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].inputs.size(), 2u);
}

TEST_F(CompactionTest, ASliceOfOneInstantIsReadWholeWhateverTheBudget) {
  auto table = Create("t", "last");
  // Every row at one instant: no slice can cut it.
  for (double v : {1.0, 2.0}) {
    std::vector<Row> rows;
    for (int s = 0; s < 500; ++s) rows.emplace_back(Micros(2025, 1, 1), "s" + std::to_string(s), v);
    AppendRows(table.get(), rows);
  }
  auto plan = Plan("t");
  ASSERT_EQ(plan.groups.size(), 1u);
  ASSERT_OK_AND_ASSIGN(auto out, RewriteGroup(store_, "default/t", plan.contract, plan.declared,
                                              plan.storage, plan.groups[0], RewriteOptions{1024}));
  ASSERT_EQ(out.outputs.size(), 1u);
  EXPECT_EQ(out.rows_in, 1000);
  EXPECT_EQ(out.rows_out, 500);
  for (const auto& [ts, sensor, value] : RowsOf("t", out.outputs)) EXPECT_EQ(value, 2);
}

TEST_F(CompactionTest, OutputsNeverReachOverAFileLeftOutOfTheGroup) {
  // Small files at hours 0 and 3, a file left out (full) over hours 1-2 between them: merging the
  // two into one file spanning hours 0-3 would overlap it, so the rewrite cuts there.
  for (const std::string dedup : {"none", "last"}) {
    SCOPED_TRACE(dedup);
    const std::string name = "cut_" + dedup;
    auto table = Create(name, dedup);
    Append(table.get(), 0, 1, 2, 1);
    Append(table.get(), 1, 2, 2, 2);
    Append(table.get(), 3, 1, 2, 3);
    auto plan = Plan(name);
    for (auto& [path, add] : plan.snapshot.files) {
      if (TagInt(add, kMinTimeTag, 0) == Micros(2025, 1, 1, 1)) add.tags[kFullTag] = "true";
    }
    auto groups = PlanCompaction(plan.snapshot, plan.contract, CompactionOptions{});
    ASSERT_EQ(groups.size(), 1u);
    ASSERT_EQ(groups[0].inputs.size(), 2u);
    ASSERT_OK_AND_ASSIGN(auto out, RewriteGroup(store_, "default/" + name, plan.contract, plan.declared,
                                                plan.storage, groups[0]));
    ASSERT_EQ(out.outputs.size(), 2u);
    EXPECT_LT(out.outputs[0].max_time, Micros(2025, 1, 1, 1));
    EXPECT_GE(out.outputs[1].min_time, Micros(2025, 1, 1, 3));
    EXPECT_EQ(out.rows_out, 2 * 60 * 2);
  }
}

// The rows of a data file, rewritten in place as `change` makes them (a file another engine or a
// fault wrote).
void RewriteFile(const std::shared_ptr<ObjectStore>& store, const std::string& path,
                 const std::function<std::shared_ptr<arrow::Table>(std::shared_ptr<arrow::Table>)>& change) {
  auto table = ReadParquetTable(store.get(), path).ValueOrDie()->CombineChunks().ValueOrDie();
  ASSERT_OK(WriteParquetFile(store.get(), path, *change(table), IngestOptions{}).status());
}

TEST_F(CompactionTest, AnInputThatIsNotSortedIsSortedInsteadOfMerged) {
  for (const std::string dedup : {"none", "last"}) {
    SCOPED_TRACE(dedup);
    const std::string name = "unsorted_" + dedup;
    auto table = Create(name, dedup);
    Append(table.get(), 0, 2, 3, 1);
    Append(table.get(), 1, 2, 3, 2);
    auto plan = Plan(name);
    ASSERT_EQ(plan.groups.size(), 1u);
    ASSERT_OK_AND_ASSIGN(auto merged, RewriteGroup(store_, "default/" + name, plan.contract, plan.declared,
                                                   plan.storage, plan.groups[0]));
    // The second file's rows reversed: by sensor and time descending.
    RewriteFile(store_, "default/" + name + "/" + plan.groups[0].inputs[1].path, [](auto t) {
      arrow::Int64Builder reversed;
      for (int64_t i = t->num_rows() - 1; i >= 0; --i) EXPECT_OK(reversed.Append(i));
      auto indices = reversed.Finish().ValueOrDie();
      return arrow::compute::Take(t, indices).ValueOrDie().table();
    });
    const int64_t merges = ArrangeMergesForTesting();
    ASSERT_OK_AND_ASSIGN(auto sorted, RewriteGroup(store_, "default/" + name, plan.contract, plan.declared,
                                                   plan.storage, plan.groups[0]));
    EXPECT_EQ(ArrangeMergesForTesting(), merges) << "the unsorted input was sorted, not merged";
    ExpectSortedFiles(name, sorted.outputs);
    EXPECT_EQ(RowsOf(name, sorted.outputs), RowsOf(name, merged.outputs));
    EXPECT_EQ(sorted.rows_out, dedup == "none" ? 4 * 60 * 3 : 3 * 60 * 3);
  }
}

TEST_F(CompactionTest, AnInputWithARowWithoutATimeStopsTheRewriteNamingIt) {
  auto table = Create("t", "last");
  Append(table.get(), 0, 2, 2, 1);
  Append(table.get(), 1, 2, 2, 2);
  auto plan = Plan("t");
  ASSERT_EQ(plan.groups.size(), 1u);
  const std::string damaged = plan.groups[0].inputs[0].path;
  RewriteFile(store_, "default/t/" + damaged, [](std::shared_ptr<arrow::Table> t) {
    const int c = t->schema()->GetFieldIndex("ts");
    const auto& ts = static_cast<const arrow::TimestampArray&>(*t->column(c)->chunk(0));
    arrow::TimestampBuilder with_null(ts.type(), arrow::default_memory_pool());
    EXPECT_OK(with_null.AppendNull());
    for (int64_t i = 1; i < ts.length(); ++i) EXPECT_OK(with_null.Append(ts.Value(i)));
    auto column = with_null.Finish().ValueOrDie();
    return t->SetColumn(c, t->field(c)->WithNullable(true), std::make_shared<arrow::ChunkedArray>(column))
        .ValueOrDie();
  });
  // Read whole, and in slices (where rows outside a slice are filtered out first).
  for (int64_t budget : {int64_t{256} << 20, int64_t{4096}}) {
    auto out = RewriteGroup(store_, "default/t", plan.contract, plan.declared, plan.storage, plan.groups[0],
                            RewriteOptions{budget});
    ASSERT_TRUE(out.status().IsInvalid()) << out.status();
    EXPECT_NE(out.status().message().find(damaged), std::string::npos) << out.status();
    EXPECT_NE(out.status().message().find("without a time"), std::string::npos) << out.status();
  }
}

// A null in a column declared not nullable (a damaged or foreign file) stops the rewrite with an
// error naming the column and the file, before anything is written.
TEST_F(CompactionTest, AnInputWithANullInANotNullableColumnStopsTheRewriteNamingIt) {
  auto strict = arrow::schema({arrow::field("ts", arrow::timestamp(arrow::TimeUnit::MICRO, "UTC"), false),
                               arrow::field("sensor", arrow::utf8()), arrow::field("value", arrow::float64(), false)});
  ContractOptions options;
  options.series_key = std::vector<std::string>{"sensor"};
  options.dedup = "last";
  auto table = lake_->CreateTable("strict", strict, options).ValueOrDie();
  for (int hour : {0, 1}) {
    auto reader = Reader(strict, {Batch(strict, {"[" + std::to_string(Micros(2025, 1, 1, hour)) + "]",
                                                 R"(["a"])", "[1.0]"})});
    AppendOptions append;
    append.maintain = false;
    ASSERT_OK(table->Append(reader.get(), append).status());
  }
  auto snapshot = DeltaLog(store_, "default/strict").Load().ValueOrDie();
  auto contract = ContractFromConfiguration(snapshot.metadata.configuration).ValueOrDie();
  auto storage = StorageSchemaOf(*strict).ValueOrDie();
  auto groups = PlanCompaction(snapshot, contract, CompactionOptions{});
  ASSERT_EQ(groups.size(), 1u);
  const std::string damaged = groups[0].inputs[1].path;
  RewriteFile(store_, "default/strict/" + damaged, [](std::shared_ptr<arrow::Table> t) {
    const int c = t->schema()->GetFieldIndex("value");
    return t->SetColumn(c, t->field(c)->WithNullable(true),
                        std::make_shared<arrow::ChunkedArray>(Json(arrow::float64(), "[null]")))
        .ValueOrDie();
  });
  auto out = RewriteGroup(store_, "default/strict", contract, strict, storage, groups[0]);
  ASSERT_TRUE(out.status().IsInvalid()) << out.status();
  EXPECT_NE(out.status().message().find(damaged), std::string::npos) << out.status();
  EXPECT_NE(out.status().message().find("'value' is declared not nullable"), std::string::npos) << out.status();
  EXPECT_TRUE(store_->List("default/strict/data/").ValueOrDie().size() == 2u) << "an output was left behind";
}

// Rows at the last representable microsecond: a file whose time range reaches INT64_MAX is read
// in every slice (its range cannot be told), and the group's last slice, which ends there, keeps
// the row at INT64_MAX instead of dropping it as out of every slice.
TEST_F(CompactionTest, ARowAtTheLastMicrosecondSurvivesASlicedRewrite) {
  auto table = Create("end", "last");
  const int64_t end = std::numeric_limits<int64_t>::max();
  for (int file = 0; file < 2; ++file) {
    std::vector<Row> rows;
    for (int i = 0; i < 300; ++i) {
      // file 0 ends at INT64_MAX
      rows.emplace_back(end - 2 * (299 - i) - file, "s" + std::to_string(i % 3), file);
    }
    AppendRows(table.get(), rows);
  }
  auto plan = Plan("end");
  ASSERT_EQ(plan.groups.size(), 1u);
  ASSERT_OK_AND_ASSIGN(auto out, RewriteGroup(store_, "default/end", plan.contract, plan.declared,
                                              plan.storage, plan.groups[0], RewriteOptions{4096}));
  EXPECT_GT(out.outputs.size(), 1u) << "the rewrite was not sliced";
  EXPECT_EQ(out.rows_in, 600);
  EXPECT_EQ(out.rows_out, 600);  // every time differs
  int64_t last = 0;
  for (const auto& [ts, sensor, value] : RowsOf("end", out.outputs)) last = std::max(last, ts);
  EXPECT_EQ(last, end);
}

}  // namespace
}  // namespace timelake::testing
