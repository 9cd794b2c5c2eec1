// Ingestor: user batches in, one Parquet file per chunk out, in the store, before any commit.
#include "timelake/ingest/ingestor.h"

#include <atomic>
#include <chrono>
#include <new>
#include <thread>
#include <tuple>
#include <cmath>
#include <functional>
#include <limits>

#include <algorithm>
#include <random>
#include <set>
#include <map>

#include <arrow/api.h>
#include <arrow/compute/api.h>

#include <gtest/gtest.h>
#include <parquet/arrow/reader.h>
#include <parquet/column_page.h>
#include <parquet/column_reader.h>
#include <parquet/file_reader.h>
#include <rapidjson/document.h>

#include "test_util.h"
#include "timelake/ingest/arrange.h"
#include "timelake/log/file_tags.h"
#include "timelake/log/schema.h"
#include "timelake/store/memory_store.h"
#include "timelake/util/parallel.h"

namespace timelake::testing {
namespace {

using arrow::field;

const auto kUtcMicros = arrow::timestamp(arrow::TimeUnit::MICRO, "UTC");

class IngestorTest : public ::testing::Test {
 protected:
  IngestorTest() {
    contract_.time_column = "ts";
    contract_.series_key = {"sensor"};
    contract_.chunk = ChunkWidth::kDay;
  }

  Ingestor Make(IngestOptions options = {}) {
    return Ingestor(store_, "ns/t", contract_, declared_, storage_, options);
  }

  std::string Ts(int day, int hour) { return std::to_string(Micros(2025, 1, day, hour)); }

  // Rows over two days, out of order; the arranged order is by (chunk, sensor, ts).
  std::shared_ptr<arrow::RecordBatch> TwoDays() {
    return Batch(declared_,
                 {"[" + Ts(2, 5) + "," + Ts(1, 3) + "," + Ts(1, 1) + "," + Ts(2, 1) + "]",
                  R"(["b", "a", "b", "a"])", "[1.0, 2.0, 3.0, 4.0]"});
  }

  std::shared_ptr<arrow::Table> ReadBack(const std::string& path) {
    auto input = store_->OpenInput(path).ValueOrDie();
    auto reader = parquet::arrow::OpenFile(input, arrow::default_memory_pool()).ValueOrDie();
    return reader->ReadTable().ValueOrDie();
  }

  // One batch of the declared columns, built by these builders, through a new ingestor.
  arrow::Result<std::vector<WrittenFile>> IngestColumns(arrow::TimestampBuilder& times,
                                                        arrow::StringBuilder& sensors,
                                                        arrow::DoubleBuilder& values) {
    const int64_t rows = times.length();
    ARROW_ASSIGN_OR_RAISE(auto t, times.Finish());
    ARROW_ASSIGN_OR_RAISE(auto s, sensors.Finish());
    ARROW_ASSIGN_OR_RAISE(auto v, values.Finish());
    Ingestor ingestor = Make();
    auto reader = Reader(declared_, {arrow::RecordBatch::Make(declared_, rows, {t, s, v})});
    ARROW_RETURN_NOT_OK(ingestor.Consume(reader.get()));
    return ingestor.Finish();
  }

  std::vector<std::string> DataObjects() {
    std::vector<std::string> out;
    for (const auto& meta : store_->List("ns/t/data/").ValueOrDie()) out.push_back(meta.path);
    return out;
  }

  std::shared_ptr<MemoryStore> store_ = std::make_shared<MemoryStore>();
  Contract contract_;
  std::shared_ptr<arrow::Schema> declared_ = arrow::schema(
      {field("ts", kUtcMicros, false), field("sensor", arrow::utf8()),
       field("value", arrow::float64())});
  std::shared_ptr<arrow::Schema> storage_ = StorageSchemaOf(*declared_).ValueOrDie();
};

// A small append of a group commit is arranged once: BufferedRowsAfterDedup's arrangement is the
// one its rows are written in, by the append's own ingestor or by the group's (Add) when the group
// is that one append. Whenever the rows change after it (more input, a second append added), the
// rows are arranged again: a stale arrangement would write some rows twice or not at all.
TEST_F(IngestorTest, ASmallAppendIsArrangedOnceAndRowsAddedSinceAreArrangedAgain) {
  contract_.dedup = DedupPolicy::kLast;
  // Two copies of (a, day 1 hour 1): one row after dedup.
  auto batch = [&](double v) {
    return Batch(declared_, {"[" + Ts(1, 1) + "," + Ts(1, 1) + "," + Ts(2, 1) + "]", R"(["a", "a", "b"])",
                             "[" + std::to_string(v) + ", " + std::to_string(v + 1) + ", 7.0]"});
  };
  auto staged = [&](double v) {
    auto ingestor = std::make_unique<Ingestor>(Make());
    auto reader = Reader(declared_, {batch(v)});
    EXPECT_OK(ingestor->Consume(reader.get()));
    EXPECT_TRUE(ingestor->FinishOrKeep(100).ValueOrDie());
    EXPECT_EQ(ingestor->BufferedRowsAfterDedup().ValueOrDie(), 2);
    return ingestor;
  };
  auto rows_of = [&](const std::vector<WrittenFile>& files) {
    int64_t rows = 0;
    for (const auto& f : files) rows += ReadBack("ns/t/" + f.path)->num_rows();
    return rows;
  };
  {
    SCOPED_TRACE("a group of one");
    auto member = staged(1);
    const int64_t calls = ArrangeCallsForTesting();
    auto group = member->Sibling();
    ASSERT_OK(group->Add(*member));
    ASSERT_OK_AND_ASSIGN(auto files, group->Finish());
    EXPECT_EQ(ArrangeCallsForTesting(), calls) << "arranged again";
    EXPECT_EQ(rows_of(files), 2);
  }
  {
    SCOPED_TRACE("the append's own ingestor");
    auto member = staged(1);
    const int64_t calls = ArrangeCallsForTesting();
    ASSERT_OK_AND_ASSIGN(auto files, member->Finish());
    EXPECT_EQ(ArrangeCallsForTesting(), calls) << "arranged again";
    EXPECT_EQ(rows_of(files), 2);
  }
  {
    SCOPED_TRACE("a group of two");
    auto first = staged(1);
    auto second = staged(10);
    const int64_t calls = ArrangeCallsForTesting();
    auto group = first->Sibling();
    ASSERT_OK(group->Add(*first));
    ASSERT_OK(group->Add(*second));
    ASSERT_OK_AND_ASSIGN(auto files, group->Finish());
    EXPECT_EQ(ArrangeCallsForTesting(), calls + 1);
    ASSERT_EQ(rows_of(files), 2);  // the second append's copies win
    std::set<double> values;
    for (const auto& f : files) {
      auto t = ReadBack("ns/t/" + f.path)->CombineChunks().ValueOrDie();
      const auto& v = static_cast<const arrow::DoubleArray&>(*t->GetColumnByName("value")->chunk(0));
      for (int64_t i = 0; i < v.length(); ++i) values.insert(v.Value(i));
    }
    EXPECT_EQ(values, (std::set<double>{11.0, 7.0}));
  }
  {
    SCOPED_TRACE("input after the count");
    auto member = staged(1);
    auto more = Reader(declared_, {Batch(declared_, {"[" + Ts(1, 2) + "]", R"(["c"])", "[5.0]"})});
    ASSERT_OK(member->Consume(more.get()));
    ASSERT_OK_AND_ASSIGN(auto files, member->Finish());
    EXPECT_EQ(rows_of(files), 3);
  }
}

TEST_F(IngestorTest, RowsInRisingTimeOrderAreCountedWithoutArrangingThem) {
  contract_.dedup = DedupPolicy::kLast;
  auto staged = [&](std::vector<std::shared_ptr<arrow::RecordBatch>> batches, int64_t expect_rows,
                    int64_t expect_arranges) {
    auto ingestor = std::make_unique<Ingestor>(Make());
    auto reader = Reader(declared_, std::move(batches));
    EXPECT_OK(ingestor->Consume(reader.get()));
    EXPECT_TRUE(ingestor->FinishOrKeep(100).ValueOrDie());
    const int64_t calls = ArrangeCallsForTesting();
    EXPECT_EQ(ingestor->BufferedRowsAfterDedup().ValueOrDie(), expect_rows);
    EXPECT_EQ(ArrangeCallsForTesting(), calls + expect_arranges);
    return ingestor;
  };
  auto rows_of = [&](const std::vector<WrittenFile>& files) {
    std::map<std::string, double> rows;  // "key@time" -> value
    for (const auto& f : files) {
      auto t = ReadBack("ns/t/" + f.path)->CombineChunks().ValueOrDie();
      const auto& ts = static_cast<const arrow::TimestampArray&>(*t->GetColumnByName("ts")->chunk(0));
      const auto& key = static_cast<const arrow::StringArray&>(*t->GetColumnByName("sensor")->chunk(0));
      const auto& v = static_cast<const arrow::DoubleArray&>(*t->GetColumnByName("value")->chunk(0));
      for (int64_t i = 0; i < t->num_rows(); ++i) {
        EXPECT_TRUE(rows.emplace(key.GetString(i) + "@" + std::to_string(ts.Value(i)), v.Value(i)).second);
      }
    }
    return rows;
  };
  const auto rising = Batch(declared_, {"[" + Ts(1, 1) + "," + Ts(1, 2) + "," + Ts(1, 3) + "]",
                                        R"(["a", "b", "a"])", "[1.0, 2.0, 3.0]"});
  // Its first row repeats the second row of `rising` (another append): the group keeps this one.
  const auto later = Batch(declared_, {"[" + Ts(1, 2) + "," + Ts(1, 4) + "]", R"(["b", "c"])", "[20.0, 4.0]"});
  {
    SCOPED_TRACE("one append, then its flush");
    auto member = staged({rising}, 3, 0);
    const int64_t calls = ArrangeCallsForTesting();
    ASSERT_OK_AND_ASSIGN(auto files, member->Finish());
    EXPECT_EQ(ArrangeCallsForTesting(), calls + 1);
    EXPECT_EQ(rows_of(files).size(), 3u);
  }
  {
    SCOPED_TRACE("a group of two: deduplicated across its appends");
    auto first = staged({rising}, 3, 0);
    auto second = staged({later}, 2, 0);
    auto group = first->Sibling();
    ASSERT_OK(group->Add(*first));
    ASSERT_OK(group->Add(*second));
    ASSERT_OK_AND_ASSIGN(auto files, group->Finish());
    const auto rows = rows_of(files);
    EXPECT_EQ(rows.size(), 4u);
    EXPECT_EQ(rows.at("b@" + Ts(1, 2)), 20.0);
  }
  {
    SCOPED_TRACE("batches of one append whose times rise within each but not across them");
    auto member = staged({later, rising}, 4, 1);  // b@hour 2 twice: one row
    ASSERT_OK_AND_ASSIGN(auto files, member->Finish());
    EXPECT_EQ(rows_of(files).at("b@" + Ts(1, 2)), 2.0);  // the later row of the append wins
  }
  {
    SCOPED_TRACE("times not in order, none repeated");
    auto shuffled = Batch(declared_, {"[" + Ts(1, 3) + "," + Ts(1, 1) + "]", R"(["a", "a"])", "[1.0, 2.0]"});
    staged({shuffled}, 2, 1);
  }
}

TEST_F(IngestorTest, WritesOneFilePerChunkUnderItsFolder) {
  Ingestor ingestor = Make();
  auto reader = Reader(declared_, {TwoDays()});
  ASSERT_OK(ingestor.Consume(reader.get()));
  ASSERT_OK_AND_ASSIGN(auto files, ingestor.Finish());
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0].chunk, "2025-01-01");
  EXPECT_EQ(files[1].chunk, "2025-01-02");
  for (const auto& f : files) {
    EXPECT_EQ(f.path.rfind("data/" + f.chunk + "/part-", 0), 0u) << f.path;
    EXPECT_EQ(f.path.substr(f.path.size() - 8), ".parquet");
  }
  EXPECT_EQ(DataObjects().size(), 2u);
  EXPECT_EQ(ingestor.rows_in(), 4);
}

TEST_F(IngestorTest, FilesReadBackAsTheArrangedInputRows) {
  Ingestor ingestor = Make();
  auto reader = Reader(declared_, {TwoDays()});
  ASSERT_OK(ingestor.Consume(reader.get()));
  ASSERT_OK_AND_ASSIGN(auto files, ingestor.Finish());
  ASSERT_EQ(files.size(), 2u);
  auto day1 = ReadBack("ns/t/" + files[0].path);
  auto day2 = ReadBack("ns/t/" + files[1].path);
  auto expected1 =
      TableOf(storage_, {"[" + Ts(1, 3) + "," + Ts(1, 1) + "]", R"(["a", "b"])", "[2.0, 3.0]"});
  auto expected2 =
      TableOf(storage_, {"[" + Ts(2, 1) + "," + Ts(2, 5) + "]", R"(["a", "b"])", "[4.0, 1.0]"});
  EXPECT_TRUE(day1->Equals(*expected1)) << day1->ToString();
  EXPECT_TRUE(day2->Equals(*expected2)) << day2->ToString();
}

// Three days of a million rows and more on two cores: a day is cut in two files by series, so
// both cores write to the end. Every file still lies in one chunk, sorted by (series, time), the
// two files of a day hold disjoint series, and every row is written once.
TEST_F(IngestorTest, ChunksThatDoNotDivideAmongTheCoresAreCutBySeries) {
  constexpr int64_t kPerDay = 1'100'000;
  constexpr int kSeries = 64;
  arrow::TimestampBuilder times(kUtcMicros, arrow::default_memory_pool());
  arrow::StringBuilder sensors;
  arrow::DoubleBuilder values;
  for (int day = 1; day <= 3; ++day) {
    for (int64_t i = 0; i < kPerDay; ++i) {
      ASSERT_OK(times.Append(Micros(2025, 1, day) + i * 50'000));
      ASSERT_OK(sensors.Append("s" + std::to_string(i % kSeries)));
      ASSERT_OK(values.Append(static_cast<double>(i)));
    }
  }
  ASSERT_OK_AND_ASSIGN(auto files, IngestColumns(times, sensors, values));
  const int cores = CpuParallelism();
  if (cores == 2) EXPECT_EQ(files.size(), 4u);
  if (cores == 1) EXPECT_EQ(files.size(), 3u);
  int64_t rows = 0;
  std::map<std::string, std::set<std::string>> series_of_chunk;
  for (const auto& f : files) {
    auto table = ReadBack("ns/t/" + f.path)->CombineChunks().ValueOrDie();
    rows += table->num_rows();
    EXPECT_EQ(f.rows, table->num_rows());
    auto ts = std::static_pointer_cast<arrow::TimestampArray>(table->GetColumnByName("ts")->chunk(0));
    auto key = arrow::compute::Cast(table->GetColumnByName("sensor"), arrow::utf8())
                   .ValueOrDie().chunked_array()->chunk(0);
    const auto& names = static_cast<const arrow::StringArray&>(*key);
    std::set<std::string> here;
    for (int64_t i = 0; i < table->num_rows(); ++i) {
      EXPECT_EQ(ChunkLabel(ChunkWidth::kDay, ChunkOrdinal(ChunkWidth::kDay, ts->Value(i))), f.chunk);
      here.insert(names.GetString(i));
      if (i > 0) {
        const bool same = names.GetView(i) == names.GetView(i - 1);
        ASSERT_TRUE(names.GetView(i - 1) < names.GetView(i) || (same && ts->Value(i - 1) < ts->Value(i)))
            << f.path << " not sorted at " << i;
      }
    }
    for (const auto& s : here) {
      EXPECT_TRUE(series_of_chunk[f.chunk].insert(s).second) << s << " in two files of " << f.chunk;
    }
  }
  EXPECT_EQ(rows, 3 * kPerDay);
  for (const auto& [chunk, series] : series_of_chunk) EXPECT_EQ(series.size(), size_t{kSeries}) << chunk;
}

// Values reach Parquet's column writers in batches of a page (write_batch_size), which must not
// change the pages: each holds at most kRowsPerPage rows (max_rows_per_page), and together they
// hold every row of their row group.
TEST_F(IngestorTest, DataPagesHoldAtMostAPagesRowsEach) {
  constexpr int64_t kRows = 300'000;  // two row groups (256k rows at most each)
  arrow::TimestampBuilder times(kUtcMicros, arrow::default_memory_pool());
  arrow::StringBuilder sensors;
  arrow::DoubleBuilder values;
  for (int64_t i = 0; i < kRows; ++i) {
    ASSERT_OK(times.Append(Micros(2025, 1, 1) + i * 1000));
    ASSERT_OK(sensors.Append("s" + std::to_string(i % 7)));
    ASSERT_OK(values.Append(static_cast<double>(i) / 3));
  }
  ASSERT_OK_AND_ASSIGN(auto files, IngestColumns(times, sensors, values));
  ASSERT_EQ(files.size(), 1u);
  ASSERT_OK_AND_ASSIGN(auto input, store_->OpenInput("ns/t/" + files[0].path));
  auto file = parquet::ParquetFileReader::Open(input);
  ASSERT_EQ(file->metadata()->num_row_groups(), 2);
  for (int rg = 0; rg < file->metadata()->num_row_groups(); ++rg) {
    const int64_t group_rows = file->metadata()->RowGroup(rg)->num_rows();
    for (int c = 0; c < file->metadata()->num_columns(); ++c) {
      auto pages = file->RowGroup(rg)->GetColumnPageReader(c);
      int64_t rows = 0;
      int data_pages = 0;
      while (auto page = pages->NextPage()) {
        if (page->type() == parquet::PageType::DICTIONARY_PAGE) continue;
        ASSERT_EQ(page->type(), parquet::PageType::DATA_PAGE);
        const auto& data = static_cast<const parquet::DataPageV1&>(*page);
        EXPECT_LE(data.num_values(), kRowsPerPage) << "row group " << rg << ", column " << c;
        rows += data.num_values();
        ++data_pages;
      }
      EXPECT_EQ(rows, group_rows) << "row group " << rg << ", column " << c;
      EXPECT_EQ(data_pages, (group_rows + kRowsPerPage - 1) / kRowsPerPage) << "row group " << rg << ", column " << c;
    }
  }
}

// Full-precision measurements do not compress: their column chunks are stored uncompressed.
// Rounded or repeating readings do, and stay Snappy; so do the time and key columns. Either way
// every value reads back. Both ways of writing a file are covered: whole (small runs) and a
// row group at a time (runs longer than two row groups).
TEST_F(IngestorTest, FloatColumnsAreCompressedOnlyWhereSnappyShrinksThem) {
  for (const bool noisy : {true, false}) {
    for (const int64_t row_group_rows : {int64_t{4096}, int64_t{1} << 20}) {
      SCOPED_TRACE(std::string(noisy ? "noisy" : "rounded") + " values, row groups of " +
                   std::to_string(row_group_rows));
      constexpr int64_t kRows = 30'000;
      std::mt19937_64 random(7);
      std::normal_distribution<double> noise(25.0, 5.0);
      arrow::TimestampBuilder times(kUtcMicros, arrow::default_memory_pool());
      arrow::StringBuilder sensors;
      arrow::DoubleBuilder values;
      double sum = 0;
      for (int64_t i = 0; i < kRows; ++i) {
        ASSERT_OK(times.Append(Micros(2025, 1, 1) + i * 1000));
        ASSERT_OK(sensors.Append("s" + std::to_string(i % 5)));
        const double v = noisy ? noise(random) : static_cast<double>(i % 40) / 2;
        sum += v;
        ASSERT_OK(values.Append(v));
      }
      const int64_t t_rows = times.length();
      ASSERT_OK_AND_ASSIGN(auto t, times.Finish());
      ASSERT_OK_AND_ASSIGN(auto k, sensors.Finish());
      ASSERT_OK_AND_ASSIGN(auto v, values.Finish());
      IngestOptions options;
      options.row_group_rows = row_group_rows;
      Ingestor ingestor = Make(options);
      auto reader = Reader(declared_, {arrow::RecordBatch::Make(declared_, t_rows, {t, k, v})});
      ASSERT_OK(ingestor.Consume(reader.get()));
      ASSERT_OK_AND_ASSIGN(auto files, ingestor.Finish());
      ASSERT_EQ(files.size(), 1u);
      ASSERT_OK_AND_ASSIGN(auto input, store_->OpenInput("ns/t/" + files[0].path));
      auto file = parquet::ParquetFileReader::Open(input);
      const auto& meta = *file->metadata();
      EXPECT_EQ(meta.num_row_groups(), row_group_rows < kRows ? 8 : 1);
      for (int rg = 0; rg < meta.num_row_groups(); ++rg) {
        for (int c = 0; c < meta.num_columns(); ++c) {
          const auto chunk = meta.RowGroup(rg)->ColumnChunk(c);
          const bool plain = noisy && chunk->path_in_schema()->ToDotString() == "value";
          EXPECT_EQ(chunk->compression(),
                    plain ? parquet::Compression::UNCOMPRESSED : parquet::Compression::SNAPPY)
              << "row group " << rg << ", column " << chunk->path_in_schema()->ToDotString();
        }
      }
      auto back = ReadBack("ns/t/" + files[0].path);
      ASSERT_EQ(back->num_rows(), kRows);
      ASSERT_OK_AND_ASSIGN(auto total, arrow::compute::Sum(back->GetColumnByName("value")));
      EXPECT_NEAR(total.scalar_as<arrow::DoubleScalar>().value, sum, 1e-6 * std::abs(sum));
    }
  }
}

// The probe reads the values buffer as it is, null slots and NaN included: a column of nulls, of
// NaN and infinities, or of one value among nulls is written and read back exactly, whichever
// way it is stored.
TEST_F(IngestorTest, FloatColumnsOfNullsNanAndInfinitiesReadBackExactly) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<std::function<void(arrow::DoubleBuilder&, int64_t)>> columns = {
      [](arrow::DoubleBuilder& b, int64_t) { ASSERT_OK(b.AppendNull()); },
      [&](arrow::DoubleBuilder& b, int64_t i) {
        ASSERT_OK(b.Append(i % 3 == 0 ? nan : i % 3 == 1 ? inf : -inf));
      },
      [](arrow::DoubleBuilder& b, int64_t i) {
        ASSERT_OK(i % 2 ? b.AppendNull() : b.Append(-0.0));
      },
  };
  for (size_t which = 0; which < columns.size(); ++which) {
    SCOPED_TRACE("column " + std::to_string(which));
    store_ = std::make_shared<MemoryStore>();
    constexpr int64_t kRows = 20'000;
    arrow::TimestampBuilder times(kUtcMicros, arrow::default_memory_pool());
    arrow::StringBuilder sensors;
    arrow::DoubleBuilder values;
    for (int64_t i = 0; i < kRows; ++i) {
      ASSERT_OK(times.Append(Micros(2025, 1, 1) + i * 1000));
      ASSERT_OK(sensors.Append("s"));
      columns[which](values, i);
    }
    ASSERT_OK_AND_ASSIGN(auto expected, values.Finish());
    ASSERT_OK_AND_ASSIGN(auto t, times.Finish());
    ASSERT_OK_AND_ASSIGN(auto k, sensors.Finish());
    Ingestor ingestor = Make();
    auto reader = Reader(declared_, {arrow::RecordBatch::Make(declared_, kRows, {t, k, expected})});
    ASSERT_OK(ingestor.Consume(reader.get()));
    ASSERT_OK_AND_ASSIGN(auto files, ingestor.Finish());
    ASSERT_EQ(files.size(), 1u);
    // One series, times in order: the file keeps the input's order.
    auto back = ReadBack("ns/t/" + files[0].path)->CombineChunks().ValueOrDie();
    const auto& got = static_cast<const arrow::DoubleArray&>(*back->GetColumnByName("value")->chunk(0));
    const auto& want = static_cast<const arrow::DoubleArray&>(*expected);
    ASSERT_EQ(got.length(), want.length());
    for (int64_t i = 0; i < kRows; ++i) {
      ASSERT_EQ(got.IsNull(i), want.IsNull(i)) << "row " << i;
      if (want.IsNull(i)) continue;
      const double a = got.Value(i), b = want.Value(i);
      ASSERT_TRUE((std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b)))
          << "row " << i << ": " << a << " != " << b;
    }
  }
}

TEST_F(IngestorTest, WrittenFilesDescribeThemselves) {
  Ingestor ingestor = Make();
  auto reader = Reader(declared_, {TwoDays()});
  ASSERT_OK(ingestor.Consume(reader.get()));
  ASSERT_OK_AND_ASSIGN(auto files, ingestor.Finish());
  ASSERT_EQ(files.size(), 2u);
  const WrittenFile& f = files[0];
  EXPECT_EQ(f.rows, 2);
  EXPECT_EQ(f.min_time, Micros(2025, 1, 1, 1));
  EXPECT_EQ(f.max_time, Micros(2025, 1, 1, 3));
  EXPECT_EQ(f.order, 0);
  EXPECT_EQ(files[1].order, 1);
  ASSERT_OK_AND_ASSIGN(auto meta, store_->Head("ns/t/" + f.path));
  EXPECT_EQ(f.size, meta.size);
  rapidjson::Document stats;
  stats.Parse(f.stats.c_str());
  ASSERT_FALSE(stats.HasParseError()) << f.stats;
  EXPECT_EQ(stats["numRecords"].GetInt64(), 2);
  EXPECT_EQ(std::string(stats["minValues"]["sensor"].GetString()), "a");
}

TEST_F(IngestorTest, AbortDeletesEveryWrittenFile) {
  Ingestor ingestor = Make();
  auto reader = Reader(declared_, {TwoDays()});
  ASSERT_OK(ingestor.Consume(reader.get()));
  ASSERT_OK_AND_ASSIGN(auto files, ingestor.Finish());
  ASSERT_EQ(DataObjects().size(), 2u);
  ingestor.Abort();
  EXPECT_TRUE(DataObjects().empty());
}

TEST_F(IngestorTest, SmallBufferFlushesAsBatchesArrive) {
  IngestOptions options;
  options.buffer_bytes = 1;
  Ingestor ingestor = Make(options);
  auto one_day = [&](const std::string& v) {
    return Batch(declared_, {"[" + Ts(1, 1) + "]", R"(["a"])", "[" + v + "]"});
  };
  auto reader = Reader(declared_, {one_day("1.0"), one_day("2.0"), one_day("3.0")});
  ASSERT_OK(ingestor.Consume(reader.get()));
  EXPECT_EQ(DataObjects().size(), 3u);  // written before Finish
  ASSERT_OK_AND_ASSIGN(auto files, ingestor.Finish());
  EXPECT_EQ(files.size(), 3u);
}

TEST_F(IngestorTest, InputThatDoesNotFitIsInvalidAndWritesNothing) {
  Ingestor ingestor = Make();
  auto bad = arrow::schema({field("ts", kUtcMicros), field("colour", arrow::utf8())});
  auto reader = Reader(bad, {Batch(bad, {"[1]", R"(["red"])"})});
  EXPECT_TRUE(IsInvalid(ingestor.Consume(reader.get()), "colour"));
  EXPECT_TRUE(DataObjects().empty());
}

TEST_F(IngestorTest, EmptyInputWritesNoFiles) {
  Ingestor ingestor = Make();
  auto reader = Reader(declared_, {});
  ASSERT_OK(ingestor.Consume(reader.get()));
  ASSERT_OK_AND_ASSIGN(auto files, ingestor.Finish());
  EXPECT_TRUE(files.empty());
}

TEST_F(IngestorTest, PlainTableFilesGoDirectlyUnderData) {
  contract_ = Contract{};
  Ingestor ingestor = Make();
  auto reader = Reader(declared_, {TwoDays()});
  ASSERT_OK(ingestor.Consume(reader.get()));
  ASSERT_OK_AND_ASSIGN(auto files, ingestor.Finish());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].chunk, "");
  EXPECT_EQ(files[0].path.find('/', 5), std::string::npos) << files[0].path;
  EXPECT_EQ(files[0].rows, 4);
}

TEST_F(IngestorTest, FailedWriteFailsFinishAndAbortCleansUp) {
  std::atomic<int> data_puts{0};  // files of different chunks are written by parallel threads
  store_->SetFaultHook([&](const std::string& op, const std::string& path) {
    if (op == "put" && path.find("/data/") != std::string::npos && ++data_puts == 2) {
      return arrow::Status::IOError("injected write failure");
    }
    return arrow::Status::OK();
  });
  Ingestor ingestor = Make();
  auto reader = Reader(declared_, {TwoDays()});
  ASSERT_OK(ingestor.Consume(reader.get()));
  EXPECT_TRUE(FailsWith(ingestor.Finish(), arrow::StatusCode::IOError, "injected"));
  ingestor.Abort();
  store_->SetFaultHook(nullptr);
  EXPECT_TRUE(DataObjects().empty());
}

// Rows one hour apart in an hourly table: one file per row. A review's append of 60,000 such
// rows started a thread per file to close it, and the stacks of threads not yet joined used up
// the process's memory mappings (std::bad_alloc, then std::terminate, 35,000 files left behind).
std::shared_ptr<arrow::RecordBatch> HourlyRows(const std::shared_ptr<arrow::Schema>& schema, int rows) {
  arrow::TimestampBuilder times(kUtcMicros, arrow::default_memory_pool());
  arrow::StringBuilder sensors;
  arrow::DoubleBuilder values;
  for (int i = 0; i < rows; ++i) {
    EXPECT_TRUE(times.Append(Micros(2025, 1, 1) + i * 3'600'000'000LL).ok());
    EXPECT_TRUE(sensors.Append("s").ok());
    EXPECT_TRUE(values.Append(i).ok());
  }
  return arrow::RecordBatch::Make(schema, rows, {times.Finish().ValueOrDie(), sensors.Finish().ValueOrDie(),
                                                 values.Finish().ValueOrDie()});
}

TEST_F(IngestorTest, AnAppendOfManyChunksClosesABoundedNumberOfFilesAtOnce) {
  contract_.chunk = ChunkWidth::kHour;
  std::atomic<int> closing{0};
  std::atomic<int> most{0};
  store_->SetFaultHook([&](const std::string& op, const std::string& path) {
    if (op == "put" && path.find("/data/") != std::string::npos) {
      const int now = ++closing;
      for (int seen = most.load(); now > seen && !most.compare_exchange_weak(seen, now);) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // a close waits on a device
      --closing;
    }
    return arrow::Status::OK();
  });
  constexpr int kRows = 600;
  Ingestor ingestor = Make();
  auto reader = Reader(declared_, {HourlyRows(declared_, kRows)});
  ASSERT_OK(ingestor.Consume(reader.get()));
  ASSERT_OK_AND_ASSIGN(auto files, ingestor.Finish());
  store_->SetFaultHook(nullptr);
  EXPECT_EQ(files.size(), static_cast<size_t>(kRows));
  EXPECT_EQ(DataObjects().size(), static_cast<size_t>(kRows));
  EXPECT_GE(most.load(), 1);
  EXPECT_LE(most.load(), static_cast<int>(kMaxFilesClosing));
}

// No exception thrown while a file is written or closed (std::bad_alloc, on any thread) may end
// the process or leave the ingestor's files behind: it fails the flush, and Abort cleans up.
TEST_F(IngestorTest, AnExceptionWhileWritingFilesFailsTheFlushAndAbortCleansUp) {
  contract_.chunk = ChunkWidth::kHour;
  // 100 files (closed on threads of their own) failing at the 40th, and a lone file (closed on
  // the writing thread).
  for (auto [op, rows, at] : {std::tuple{"open_output", 100, 40}, std::tuple{"put", 100, 40},
                              std::tuple{"open_output", 1, 1}, std::tuple{"put", 1, 1}}) {
    SCOPED_TRACE(std::string(op) + " of " + std::to_string(rows));
    std::atomic<int> seen{0};
    store_->SetFaultHook([&, op = op, at = at](const std::string& o, const std::string& path) -> arrow::Status {
      if (o == op && path.find("/data/") != std::string::npos && ++seen == at) throw std::bad_alloc();
      return arrow::Status::OK();
    });
    Ingestor ingestor = Make();
    auto reader = Reader(declared_, {HourlyRows(declared_, rows)});
    ASSERT_OK(ingestor.Consume(reader.get()));
    EXPECT_TRUE(FailsWith(ingestor.Finish(), arrow::StatusCode::OutOfMemory, "out of memory"));
    ingestor.Abort();
    store_->SetFaultHook(nullptr);
    EXPECT_TRUE(DataObjects().empty());
  }
}

TEST_F(IngestorTest, SeriesKeyTagsAreCutLikeTheStringStats) {
  const std::string prefix(32, 's');
  auto batch = Batch(declared_, {"[" + Ts(1, 1) + "," + Ts(1, 2) + "]",
                                 "[\"" + prefix + "-alpha\", \"" + prefix + "-omega\"]", "[1.0, 2.0]"});
  Ingestor ingestor = Make();
  auto reader = Reader(declared_, {batch});
  ASSERT_OK(ingestor.Consume(reader.get()));
  ASSERT_OK_AND_ASSIGN(auto files, ingestor.Finish());
  ASSERT_EQ(files.size(), 1u);
  const AddFile add = ToAddAction(files[0], true, 0);
  EXPECT_EQ(add.tags.at(kMinKeyTag), prefix);
  EXPECT_EQ(add.tags.at(kMaxKeyTag), prefix + "\xF4\x8F\xBF\xBF");
  // Still bounds: every key of the file lies within [minKey, maxKey].
  EXPECT_LE(add.tags.at(kMinKeyTag), prefix + "-alpha");
  EXPECT_GE(add.tags.at(kMaxKeyTag), prefix + "-omega");
}

TEST_F(IngestorTest, ShortAndIntegerSeriesKeyTagsAreWhole) {
  Ingestor ingestor = Make();
  auto reader = Reader(declared_, {TwoDays()});
  ASSERT_OK(ingestor.Consume(reader.get()));
  ASSERT_OK_AND_ASSIGN(auto files, ingestor.Finish());
  const AddFile add = ToAddAction(files[0], true, 0);
  EXPECT_EQ(add.tags.at(kMinKeyTag), "a");
  EXPECT_EQ(add.tags.at(kMaxKeyTag), "b");
}

// Wide values are handed to Parquet in smaller batches: its page (1 MiB) and dictionary (1 MiB)
// limits are checked once per batch, so a batch of 20,000 values of 300 bytes would make 6 MB
// pages. Every page stays within its limit plus one batch: at most 128 KiB, or Parquet's
// default batch of 1,024 values where those are wider.
TEST_F(IngestorTest, PagesOfWideOrManyDistinctValuesStayNearTheirByteLimits) {
  constexpr int64_t kLimit = 1 << 20;
  int64_t slack = 0;
  auto check_pages = [&](const std::string& path, int64_t* data_pages, int64_t* max_dictionary) {
    ASSERT_OK_AND_ASSIGN(auto input, store_->OpenInput(path));
    auto file = parquet::ParquetFileReader::Open(input);
    for (int rg = 0; rg < file->metadata()->num_row_groups(); ++rg) {
      auto pages = file->RowGroup(rg)->GetColumnPageReader(0);
      while (auto page = pages->NextPage()) {
        if (page->type() == parquet::PageType::DICTIONARY_PAGE) {
          *max_dictionary = std::max<int64_t>(*max_dictionary, page->size());
          continue;
        }
        ++*data_pages;
        EXPECT_LE(page->size(), kLimit + slack) << path << ", row group " << rg;
      }
    }
  };
  {
    // Unique 300-byte strings, plain table (no sort): 20,000 of them are 6 MB.
    slack = 1024 * (300 + 4) + 4096;  // a default batch of values and offsets, a page header
    arrow::StringBuilder text;
    for (int i = 0; i < 20'000; ++i) {
      std::string v(300, 'a' + static_cast<char>(i % 26));
      std::memcpy(v.data(), &i, sizeof(i));
      ASSERT_OK(text.Append(v));
    }
    auto table =
        arrow::Table::Make(arrow::schema({field("text", arrow::utf8())}), {text.Finish().ValueOrDie()});
    ASSERT_OK(WriteParquetFile(store_.get(), "wide.parquet", *table, {}).status());
    int64_t data_pages = 0, max_dictionary = 0;
    check_pages("wide.parquet", &data_pages, &max_dictionary);
    EXPECT_GE(data_pages, 5);
    EXPECT_LE(max_dictionary, kLimit + slack);
    EXPECT_TRUE(ReadBack("wide.parquet")->Equals(*table));
  }
  {
    // 200,000 distinct integers (dictionary-encoded until the dictionary passes 1 MiB).
    slack = 128 * 1024 + 4096;
    arrow::Int64Builder ids;
    for (int64_t i = 0; i < 200'000; ++i) ASSERT_OK(ids.Append(i * 7919));
    auto table =
        arrow::Table::Make(arrow::schema({field("id", arrow::int64())}), {ids.Finish().ValueOrDie()});
    ASSERT_OK(WriteParquetFile(store_.get(), "ids.parquet", *table, {}).status());
    int64_t data_pages = 0, max_dictionary = 0;
    check_pages("ids.parquet", &data_pages, &max_dictionary);
    EXPECT_GT(max_dictionary, 0);
    EXPECT_LE(max_dictionary, kLimit + slack);
    EXPECT_TRUE(ReadBack("ids.parquet")->Equals(*table));
  }
}

TEST_F(IngestorTest, WriteParquetFileReturnsTheObjectSize) {
  auto table = TableOf(storage_, {"[1, 2]", R"(["a", "b"])", "[1.0, 2.0]"});
  ASSERT_OK_AND_ASSIGN(int64_t size, WriteParquetFile(store_.get(), "x.parquet", *table, {}));
  ASSERT_OK_AND_ASSIGN(auto meta, store_->Head("x.parquet"));
  EXPECT_EQ(size, meta.size);
  EXPECT_TRUE(ReadBack("x.parquet")->Equals(*table));
}

}  // namespace
}  // namespace timelake::testing

namespace timelake::testing {
namespace {

// A run larger than two row groups is gathered and encoded a row group at a time: the file it
// gives holds the same rows, stats, time range, key range and newest rows as one written whole.
TEST_F(IngestorTest, ALargeRunWrittenInPiecesEqualsTheRunWrittenWhole) {
  for (DedupPolicy dedup : {DedupPolicy::kNone, DedupPolicy::kLast, DedupPolicy::kFirst}) {
    contract_.dedup = dedup;
    // 3 days x 24 hours x 7 sensors, sent twice (the second time with other values), shuffled.
    std::vector<int> order;
    for (int i = 0; i < 2 * 3 * 24 * 7; ++i) order.push_back(i);
    std::mt19937 rng(5);
    std::shuffle(order.begin(), order.end(), rng);
    std::string ts = "[", sensors = "[", values = "[";
    for (size_t k = 0; k < order.size(); ++k) {
      const int i = order[k] % (3 * 24 * 7), copy = order[k] / (3 * 24 * 7);
      const char* sep = k ? "," : "";
      ts += sep + Ts(1 + i / (24 * 7), (i / 7) % 24);
      sensors += std::string(sep) + "\"s" + std::to_string(i % 7) + "\"";
      values += sep + std::to_string(copy * 1000 + order[k]);
    }
    auto batch = Batch(declared_, {ts + "]", sensors + "]", values + "]"});
    std::vector<WrittenFile> by_way[2];
    for (int pieces = 0; pieces < 2; ++pieces) {
      IngestOptions options;
      options.row_group_rows = pieces ? 10 : 1 << 20;  // a day's run is 168 or 336 rows
      Ingestor ingestor = Make(options);
      ASSERT_OK(ingestor.Consume(Reader(declared_, {batch}).get()));
      ASSERT_OK_AND_ASSIGN(by_way[pieces], ingestor.Finish());
    }
    ASSERT_EQ(by_way[0].size(), 3u);
    ASSERT_EQ(by_way[1].size(), 3u);
    for (size_t f = 0; f < 3; ++f) {
      const WrittenFile& whole = by_way[0][f];
      const WrittenFile& pieces = by_way[1][f];
      SCOPED_TRACE(whole.chunk);
      EXPECT_EQ(pieces.chunk, whole.chunk);
      EXPECT_EQ(pieces.rows, whole.rows);
      EXPECT_EQ(pieces.min_time, whole.min_time);
      EXPECT_EQ(pieces.max_time, whole.max_time);
      EXPECT_EQ(pieces.min_key, whole.min_key);
      EXPECT_EQ(pieces.max_key, whole.max_key);
      EXPECT_EQ(pieces.stats, whole.stats);
      EXPECT_TRUE(pieces.newest->Equals(*whole.newest)) << pieces.newest->ToString() << whole.newest->ToString();
      auto a = ReadBack("ns/t/" + whole.path), b = ReadBack("ns/t/" + pieces.path);
      EXPECT_TRUE(b->Equals(*a));
      auto meta = parquet::arrow::OpenFile(store_->OpenInput("ns/t/" + pieces.path).ValueOrDie(),
                                           arrow::default_memory_pool()).ValueOrDie();
      EXPECT_GT(meta->num_row_groups(), 2);
    }
  }
}

}  // namespace
}  // namespace timelake::testing
