// The selection reader (scan/selection_reader.h) against a brute-force reading of the same files:
// random files (sorted or not, with and without a page index, pages and row groups of random
// sizes, nulls), random filters, deletion vectors and dedup marks; the rows must be exactly those
// a full read keeps, in the same order. Plus: it reads few pages of a sorted file, and it refuses
// (NotImplemented) what it does not handle instead of answering wrongly. The scan of aggregates
// over every series (scan/bucket_scan.h) is checked against the selection's own aggregates of
// the same rows.

#include "timelake/scan/selection_reader.h"
#include "timelake/scan/bucket_scan.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include <arrow/api.h>
#include <arrow/io/file.h>
#include <gtest/gtest.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/writer.h>
#include <parquet/properties.h>

#include "temp_dir.h"

namespace timelake::testing {
namespace {

std::shared_ptr<arrow::Schema> Schema() {
  return arrow::schema({arrow::field("time", arrow::timestamp(arrow::TimeUnit::MICRO, "UTC"), false),
                        arrow::field("device", arrow::utf8()), arrow::field("unit", arrow::int32()),
                        arrow::field("value", arrow::float64()), arrow::field("ok", arrow::boolean()),
                        arrow::field("note", arrow::utf8())});
}

struct Row {
  int64_t time;
  std::string device;
  int32_t unit;
  std::optional<double> value;
  bool ok;
  std::optional<std::string> note;
};

std::shared_ptr<arrow::Table> ToTable(const std::vector<Row>& rows) {
  arrow::TimestampBuilder time(arrow::timestamp(arrow::TimeUnit::MICRO, "UTC"), arrow::default_memory_pool());
  arrow::StringBuilder device, note;
  arrow::Int32Builder unit;
  arrow::DoubleBuilder value;
  arrow::BooleanBuilder ok;
  for (const Row& r : rows) {
    EXPECT_TRUE(time.Append(r.time).ok());
    EXPECT_TRUE(device.Append(r.device).ok());
    EXPECT_TRUE(unit.Append(r.unit).ok());
    EXPECT_TRUE((r.value ? value.Append(*r.value) : value.AppendNull()).ok());
    EXPECT_TRUE(ok.Append(r.ok).ok());
    EXPECT_TRUE((r.note ? note.Append(*r.note) : note.AppendNull()).ok());
  }
  std::vector<std::shared_ptr<arrow::Array>> arrays(6);
  EXPECT_TRUE(time.Finish(&arrays[0]).ok());
  EXPECT_TRUE(device.Finish(&arrays[1]).ok());
  EXPECT_TRUE(unit.Finish(&arrays[2]).ok());
  EXPECT_TRUE(value.Finish(&arrays[3]).ok());
  EXPECT_TRUE(ok.Finish(&arrays[4]).ok());
  EXPECT_TRUE(note.Finish(&arrays[5]).ok());
  return arrow::Table::Make(Schema(), arrays);
}

void Write(const std::string& path, const std::vector<Row>& rows, int64_t rows_per_page, int64_t group_rows,
           bool page_index, int64_t dictionary_bytes = 1 << 20) {
  parquet::WriterProperties::Builder props;
  // A small dictionary limit makes the writer fall back to plain pages in mid-chunk.
  props.max_rows_per_page(rows_per_page)->write_batch_size(std::min<int64_t>(rows_per_page, 1024));
  props.dictionary_pagesize_limit(dictionary_bytes);
  props.enable_page_checksum();
  if (page_index) props.enable_write_page_index();
  auto out = arrow::io::FileOutputStream::Open(path).ValueOrDie();
  ASSERT_TRUE(parquet::arrow::WriteTable(*ToTable(rows), arrow::default_memory_pool(), out, group_rows,
                                         props.build())
                  .ok());
  ASSERT_TRUE(out->Close().ok());
}

ScanPlan PlanOf(std::vector<ScanFile> files, ScanFilter filter, std::vector<std::string> key, bool newest_first) {
  ScanPlan plan;
  plan.files = std::move(files);
  plan.filter = std::move(filter);
  plan.contract.time_column = "time";
  plan.contract.series_key = key;
  plan.declared = plan.file_schema = plan.storage = Schema();
  plan.dedup_order.keys = key;
  plan.dedup_order.keys.push_back("time");
  plan.dedup_order.newest_first = newest_first;
  return plan;
}

// What the selection must return: every row of every file, filtered, deletion vectors applied,
// deduplicated among the marked files, in file and row order.
std::vector<Row> Expected(const std::vector<std::vector<Row>>& files, const ScanPlan& plan) {
  struct Kept {
    size_t file;
    size_t row;
  };
  std::vector<Kept> kept;
  for (size_t f = 0; f < files.size(); ++f) {
    const auto& deleted = plan.files[f].deleted_rows;
    for (size_t r = 0; r < files[f].size(); ++r) {
      const Row& row = files[f][r];
      if (plan.filter.min_time && row.time < *plan.filter.min_time) continue;
      if (plan.filter.max_time && row.time > *plan.filter.max_time) continue;
      bool match = true;
      for (const auto& [column, value] : plan.filter.key_equals) {
        if (column == "device") match = match && row.device == std::get<std::string>(value);
        if (column == "unit") match = match && row.unit == std::get<int64_t>(value);
      }
      if (!match || std::binary_search(deleted.begin(), deleted.end(), r)) continue;
      kept.push_back({f, r});
    }
  }
  // Among marked files, the winner of each time (the filter fixes the series).
  std::map<int64_t, std::tuple<int64_t, int64_t, int64_t, size_t>> best;  // time -> rank, index in kept
  for (size_t i = 0; i < kept.size(); ++i) {
    const ScanFile& file = plan.files[kept[i].file];
    if (!file.dedup) continue;
    const int64_t time = files[kept[i].file][kept[i].row].time;
    auto rank = std::make_tuple(file.seq, file.order, static_cast<int64_t>(kept[i].row));
    auto it = best.find(time);
    const bool better = it == best.end() ||
                        (plan.dedup_order.newest_first
                             ? rank > std::make_tuple(std::get<0>(it->second), std::get<1>(it->second), std::get<2>(it->second))
                             : rank < std::make_tuple(std::get<0>(it->second), std::get<1>(it->second), std::get<2>(it->second)));
    if (better) best[time] = std::make_tuple(std::get<0>(rank), std::get<1>(rank), std::get<2>(rank), i);
  }
  std::vector<Row> out;
  for (size_t i = 0; i < kept.size(); ++i) {
    const Row& row = files[kept[i].file][kept[i].row];
    if (plan.files[kept[i].file].dedup && std::get<3>(best[row.time]) != i) continue;
    out.push_back(row);
  }
  return out;
}

std::vector<std::string> AllColumns() { return {"time", "device", "unit", "value", "ok", "note"}; }

TEST(SelectionReaderTest, MatchesAFullReadOfRandomFiles) {
  std::mt19937_64 rng(20261206);
  int64_t pages_skipped = 0;
  for (int round = 0; round < 120; ++round) {
    TempDir dir;
    const int file_count = 1 + static_cast<int>(rng() % 3);
    const bool dedup_case = rng() % 3 == 0;
    const bool sorted = rng() % 4 != 0;
    std::vector<std::vector<Row>> files;
    std::vector<ScanFile> scan_files;
    for (int f = 0; f < file_count; ++f) {
      std::vector<Row> rows;
      const int devices = 1 + static_cast<int>(rng() % 6);
      const int per_device = static_cast<int>(rng() % 3000);
      for (int d = 0; d < devices; ++d) {
        for (int i = 0; i < per_device; ++i) {
          // A coarse grid under dedup, so files share (device, time); fine otherwise.
          const int64_t time = dedup_case ? static_cast<int64_t>(rng() % 400) * 1000000
                                          : static_cast<int64_t>(rng() % 100000000);
          std::optional<double> value;
          if (rng() % 10 != 0) value = static_cast<double>(rng() % 1000) / 7.0;
          std::optional<std::string> note;
          if (rng() % 4 == 0) note = "n" + std::to_string(rng() % 50);
          rows.push_back({time, "dev-" + std::to_string(d), d % 3, value, rng() % 2 == 0, note});
        }
      }
      if (sorted) {
        std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
          return std::tie(a.device, a.time) < std::tie(b.device, b.time);
        });
      } else {
        std::shuffle(rows.begin(), rows.end(), rng);
      }
      const int64_t page_rows[] = {7, 100, 1000, 20000};
      const int64_t group_rows[] = {500, 4000, 1000000};
      const std::string path = dir.path() + "/f" + std::to_string(f) + ".parquet";
      Write(path, rows, page_rows[rng() % 4], group_rows[rng() % 3], rng() % 5 != 0, rng() % 3 == 0 ? 64 : 1 << 20);
      ScanFile file;
      file.path = path;
      file.seq = static_cast<int64_t>(rng() % 3);
      file.order = f;
      file.dedup = dedup_case && rng() % 4 != 0;
      for (size_t r = 0; r < rows.size(); ++r) {
        if (rng() % 9 == 0) file.deleted_rows.push_back(r);
      }
      if (rng() % 2 == 0) file.deleted_rows.clear();
      files.push_back(std::move(rows));
      scan_files.push_back(std::move(file));
    }
    ScanFilter filter;
    filter.key_equals["device"] = std::string("dev-") + std::to_string(rng() % 7);
    if (rng() % 2 == 0) filter.key_equals["unit"] = static_cast<int64_t>(rng() % 3);
    if (rng() % 3 != 0) filter.min_time = static_cast<int64_t>(rng() % 100000000);
    if (rng() % 3 != 0) filter.max_time = static_cast<int64_t>(rng() % 100000000);
    const std::vector<std::string> key =
        filter.key_equals.count("unit") ? std::vector<std::string>{"device", "unit"} : std::vector<std::string>{"device"};
    ScanPlan plan = PlanOf(scan_files, filter, key, rng() % 2 == 0);
    SelectionCounters counters;
    auto got = ReadSelection(plan, {}, AllColumns(), {}, &counters);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    const auto expected = ToTable(Expected(files, plan));
    auto combined = (*got)->CombineChunks().ValueOrDie();
    ASSERT_TRUE(combined->Equals(*expected->CombineChunks().ValueOrDie()))
        << "round " << round << ": " << combined->num_rows() << " rows, expected " << expected->num_rows();
    pages_skipped += counters.pages_skipped;

    // Ordered by time (stable: rows of one time keep file order), and cut.
    std::vector<Row> sorted_rows = Expected(files, plan);
    const bool descending = rng() % 2 == 0;
    std::stable_sort(sorted_rows.begin(), sorted_rows.end(), [descending](const Row& a, const Row& b) {
      return descending ? a.time > b.time : a.time < b.time;
    });
    SelectionShape shape;
    shape.order = descending ? SelectionShape::Order::kTimeDescending : SelectionShape::Order::kTimeAscending;
    if (rng() % 2 == 0) {
      shape.limit = static_cast<int64_t>(rng() % 40);
      if (sorted_rows.size() > static_cast<size_t>(*shape.limit)) sorted_rows.resize(*shape.limit);
    }
    auto ordered = ReadSelection(plan, {}, AllColumns(), shape);
    ASSERT_TRUE(ordered.ok()) << ordered.status().ToString();
    ASSERT_TRUE((*ordered)->CombineChunks().ValueOrDie()->Equals(*ToTable(sorted_rows)->CombineChunks().ValueOrDie()))
        << "round " << round << " ordered";
  }
  EXPECT_GT(pages_skipped, 0);  // the page index was used somewhere
}

TEST(SelectionReaderTest, AggregatesAsDuckDBComputesThem) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto table = [](std::vector<std::optional<double>> values) {
    std::vector<Row> rows;
    for (size_t i = 0; i < values.size(); ++i) rows.push_back({int64_t(i), "d", int32_t(i) - 2, values[i], true, std::nullopt});
    return ToTable(rows);
  };
  auto one = [](const std::shared_ptr<arrow::Table>& rows, const std::string& function, const std::string& column) {
    auto got = AggregateSelection(*rows, {{function, column, "x"}});
    EXPECT_TRUE(got.ok()) << got.status().ToString();
    return (*got)->column(0)->GetScalar(0).ValueOrDie();
  };
  auto values = table({1.5, std::nullopt, 4.0, -2.0});
  EXPECT_EQ(one(values, "count", "")->ToString(), "4");
  EXPECT_EQ(one(values, "count", "value")->ToString(), "3");
  EXPECT_EQ(one(values, "sum", "value")->ToString(), "3.5");
  EXPECT_DOUBLE_EQ(std::static_pointer_cast<arrow::DoubleScalar>(one(values, "avg", "value"))->value, 3.5 / 3);
  EXPECT_EQ(one(values, "min", "value")->ToString(), "-2");
  EXPECT_EQ(one(values, "max", "value")->ToString(), "4");
  EXPECT_EQ(one(values, "min", "unit")->ToString(), "-2");  // int32 stays int32
  EXPECT_EQ(one(values, "min", "unit")->type->id(), arrow::Type::INT32);
  EXPECT_DOUBLE_EQ(std::static_pointer_cast<arrow::DoubleScalar>(one(values, "avg", "unit"))->value, -0.5);
  EXPECT_EQ(one(values, "max", "time")->type->id(), arrow::Type::TIMESTAMP);
  // NaN is above every number: max is NaN, min ignores it unless nothing else is there.
  auto with_nan = table({1.0, nan, -3.0});
  EXPECT_TRUE(std::isnan(std::static_pointer_cast<arrow::DoubleScalar>(one(with_nan, "max", "value"))->value));
  EXPECT_EQ(one(with_nan, "min", "value")->ToString(), "-3");
  EXPECT_TRUE(std::isnan(std::static_pointer_cast<arrow::DoubleScalar>(one(table({nan}), "min", "value"))->value));
  EXPECT_TRUE(std::isnan(std::static_pointer_cast<arrow::DoubleScalar>(one(with_nan, "avg", "value"))->value));
  // Over no value: NULL, count 0.
  auto none = table({std::nullopt});
  EXPECT_FALSE(one(none, "sum", "value")->is_valid);
  EXPECT_FALSE(one(none, "avg", "value")->is_valid);
  EXPECT_FALSE(one(none, "max", "value")->is_valid);
  EXPECT_EQ(one(none, "count", "value")->ToString(), "0");
  EXPECT_EQ(one(table({}), "count", "")->ToString(), "0");
  // Not handled: strings, sums of integers (DuckDB gives HUGEINT).
  EXPECT_TRUE(AggregateSelection(*values, {{"max", "note", "x"}}).status().IsNotImplemented());
  EXPECT_TRUE(AggregateSelection(*values, {{"sum", "unit", "x"}}).status().IsNotImplemented());
}

TEST(SelectionReaderTest, TimeBucketsCountFromDuckDBsOrigin) {
  // Buckets start at 2000-01-03 00:00 UTC plus whole widths, before that date too.
  const int64_t origin = 946857600000000;
  const int64_t hour = int64_t{3600} * 1000000;
  std::vector<Row> rows;
  const std::vector<int64_t> times = {origin - 1, origin, origin + hour - 1, origin + 5 * hour + 7, -1, 0};
  for (size_t i = 0; i < times.size(); ++i) rows.push_back({times[i], "d", 1, 1.0 * i, true, std::nullopt});
  auto table = ToTable(rows);
  const int64_t width = 7 * hour;  // does not divide a day: the origin matters
  SelectionAggregate bucket{"time_bucket", "time", "b", width, origin};
  auto got = AggregateSelection(*table, {bucket, {"count", "", "c"}, {"max", "value", "m"}});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  std::map<int64_t, std::pair<int64_t, double>> expected;  // bucket -> count, max
  for (size_t i = 0; i < times.size(); ++i) {
    const int64_t offset = times[i] - origin;
    const int64_t start = origin + (offset >= 0 ? offset / width : -((-offset + width - 1) / width)) * width;
    auto& e = expected[start];
    e.first += 1;
    e.second = std::max(e.second, 1.0 * i);
  }
  auto combined = (*got)->CombineChunks().ValueOrDie();
  ASSERT_EQ(combined->num_rows(), static_cast<int64_t>(expected.size()));
  int64_t r = 0;
  for (const auto& [start, e] : expected) {
    EXPECT_EQ(std::static_pointer_cast<arrow::TimestampScalar>(combined->column(0)->GetScalar(r).ValueOrDie())->value, start);
    EXPECT_EQ(std::static_pointer_cast<arrow::Int64Scalar>(combined->column(1)->GetScalar(r).ValueOrDie())->value, e.first);
    EXPECT_EQ(std::static_pointer_cast<arrow::DoubleScalar>(combined->column(2)->GetScalar(r).ValueOrDie())->value, e.second);
    ++r;
  }
  // Descending, cut to two.
  auto last = AggregateSelection(*table, {bucket, {"count", "", "c"}}, true, 2);
  ASSERT_TRUE(last.ok());
  ASSERT_EQ((*last)->num_rows(), 2);
  EXPECT_EQ(std::static_pointer_cast<arrow::TimestampScalar>((*last)->column(0)->GetScalar(0).ValueOrDie())->value,
            expected.rbegin()->first);
}

TEST(SelectionReaderTest, ValueConditionsFollowDuckDBsNullAndNaNRules) {
  TempDir dir;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<std::optional<double>> values = {1.0, nan, std::nullopt, 5.0, -0.0};
  std::vector<Row> rows;
  for (size_t i = 0; i < values.size(); ++i) rows.push_back({int64_t(i), "d", int32_t(i) - 1, values[i], true, std::nullopt});
  const std::string path = dir.path() + "/f.parquet";
  Write(path, rows, 100, 100, true);
  ScanFile file;
  file.path = path;
  ScanFilter filter;
  filter.key_equals["device"] = std::string("d");
  auto times_where = [&](std::vector<ValueCondition> where) {
    SelectionShape shape;
    shape.where = std::move(where);
    auto got = ReadSelection(PlanOf({file}, filter, {"device"}, false), {}, {"time", "value", "unit"}, shape);
    EXPECT_TRUE(got.ok()) << got.status().ToString();
    std::vector<int64_t> out;
    auto column = (*got)->CombineChunks().ValueOrDie()->column(0)->chunk(0);
    for (int64_t i = 0; i < column->length(); ++i) out.push_back(std::static_pointer_cast<arrow::TimestampArray>(column)->Value(i));
    return out;
  };
  EXPECT_EQ(times_where({{"value", ">", 2.0}}), (std::vector<int64_t>{1, 3}));      // NaN is above every number
  EXPECT_EQ(times_where({{"value", "<", 2.0}}), (std::vector<int64_t>{0, 4}));      // NULL never passes
  EXPECT_EQ(times_where({{"value", "=", 0.0}}), (std::vector<int64_t>{4}));         // -0.0 = 0.0
  EXPECT_EQ(times_where({{"value", "<>", 5.0}}), (std::vector<int64_t>{0, 1, 4}));
  EXPECT_EQ(times_where({{"value", ">=", nan}}), (std::vector<int64_t>{1}));        // NaN equals itself
  ValueCondition unit{"unit", ">=", 0, 1, true};
  EXPECT_EQ(times_where({unit}), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(times_where({unit, {"value", ">", 2.0}}), (std::vector<int64_t>{3}));
}

TEST(SelectionReaderTest, ReadsOnlyThePagesOfOneSeries) {
  TempDir dir;
  std::vector<Row> rows;
  for (int d = 0; d < 100; ++d) {
    for (int i = 0; i < 1000; ++i) rows.push_back({int64_t{i} * 1000000, "dev-" + std::to_string(100 + d), d, 1.0 * i, true, std::nullopt});
  }
  const std::string path = dir.path() + "/sorted.parquet";
  Write(path, rows, 2000, 1000000, true);
  ScanFile file;
  file.path = path;
  ScanFilter filter;
  filter.key_equals["device"] = std::string("dev-150");
  filter.min_time = 100 * 1000000;
  filter.max_time = 199 * 1000000;
  SelectionCounters counters;
  auto got = ReadSelection(PlanOf({file}, filter, {"device"}, false), {}, {"value"}, {}, &counters);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ((*got)->num_rows(), 100);
  // 50 pages per column: the series' rows lie in one page of each of the three columns read.
  EXPECT_LE(counters.pages, 6);
  EXPECT_GE(counters.pages_skipped, 140);
}

TEST(SelectionReaderTest, RefusesWhatItDoesNotHandle) {
  TempDir dir;
  const std::string path = dir.path() + "/f.parquet";
  Write(path, {{1, "a", 1, 1.0, true, std::nullopt}}, 100, 100, true);
  ScanFile file;
  file.path = path;
  ScanFilter filter;
  filter.key_equals["device"] = std::string("a");
  auto refused = [&](ScanPlan plan) {
    auto got = ReadSelection(plan, {}, {"value"});
    return !got.ok() && got.status().IsNotImplemented();
  };
  ScanPlan plain = PlanOf({file}, filter, {"device"}, false);
  plain.contract.time_column.clear();
  EXPECT_TRUE(refused(plain));
  ScanPlan mapped = PlanOf({file}, filter, {"device"}, false);
  mapped.physical_names["value"] = "col-1";
  EXPECT_TRUE(refused(mapped));
  ScanPlan evolved = PlanOf({file}, filter, {"device"}, false);
  evolved.evolved = true;
  EXPECT_TRUE(refused(evolved));
  ScanPlan restored = PlanOf({file}, filter, {"device"}, false);
  restored.restored = {"value"};
  EXPECT_TRUE(refused(restored));
  // Dedup over more than one series: the filter does not fix the whole key.
  ScanPlan wide = PlanOf({file}, filter, {"device", "unit"}, false);
  wide.files[0].dedup = true;
  EXPECT_TRUE(refused(wide));
  // A column stored in another type than the plan says.
  ScanPlan other = PlanOf({file}, filter, {"device"}, false);
  other.storage = arrow::schema({arrow::field("time", arrow::timestamp(arrow::TimeUnit::MICRO, "UTC")),
                                 arrow::field("device", arrow::utf8()), arrow::field("value", arrow::int64())});
  EXPECT_TRUE(refused(other));
  // A remote path (not a local copy).
  ScanPlan remote = PlanOf({file}, filter, {"device"}, false);
  remote.files[0].path = "s3://bucket/f.parquet";
  EXPECT_TRUE(refused(remote));
}

TEST(SelectionReaderTest, ADamagedPageIsAnErrorNotWrongRows) {
  TempDir dir;
  std::vector<Row> rows;
  for (int i = 0; i < 5000; ++i) rows.push_back({int64_t{i}, "dev", 1, 0.5 * i, true, std::nullopt});
  const std::string path = dir.path() + "/f.parquet";
  Write(path, rows, 1000, 100000, true);
  // Flip a byte in the middle of the value column's data (its pages carry CRCs).
  auto reader = parquet::ParquetFileReader::OpenFile(path);
  const auto chunk = reader->metadata()->RowGroup(0)->ColumnChunk(3);
  const int64_t at = chunk->data_page_offset() + chunk->total_compressed_size() / 2;
  reader.reset();
  FILE* f = std::fopen(path.c_str(), "r+b");
  ASSERT_NE(f, nullptr);
  std::fseek(f, at, SEEK_SET);
  const int byte = std::fgetc(f);
  std::fseek(f, at, SEEK_SET);
  std::fputc(byte ^ 0x5a, f);
  std::fclose(f);
  ScanFile file;
  file.path = path;
  ScanFilter filter;
  filter.key_equals["device"] = std::string("dev");
  auto got = ReadSelection(PlanOf({file}, filter, {"device"}, false), {}, {"value"});
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(got.status().IsIOError()) << got.status().ToString();
}

// -- aggregates over every series (scan/bucket_scan.h) -------------------------------------------

// Equal tables, floating-point values to 1e-9 relative (sums are added in another order), NaN
// equal to NaN.
void ExpectSameAggregates(const arrow::Table& got, const arrow::Table& expected, const std::string& what) {
  ASSERT_TRUE(got.schema()->Equals(*expected.schema())) << what << ": " << got.schema()->ToString() << " vs "
                                                        << expected.schema()->ToString();
  ASSERT_EQ(got.num_rows(), expected.num_rows()) << what;
  for (int c = 0; c < got.num_columns(); ++c) {
    for (int64_t r = 0; r < got.num_rows(); ++r) {
      auto a = got.column(c)->GetScalar(r).ValueOrDie();
      auto b = expected.column(c)->GetScalar(r).ValueOrDie();
      if (a->type->id() == arrow::Type::DOUBLE && a->is_valid && b->is_valid) {
        const double x = std::static_pointer_cast<arrow::DoubleScalar>(a)->value;
        const double y = std::static_pointer_cast<arrow::DoubleScalar>(b)->value;
        if (std::isnan(x) || std::isnan(y)) {
          EXPECT_TRUE(std::isnan(x) && std::isnan(y)) << what << " column " << c << " row " << r;
        } else {
          EXPECT_NEAR(x, y, 1e-9 * std::max(1.0, std::abs(y))) << what << " column " << c << " row " << r;
        }
      } else {
        EXPECT_TRUE(a->Equals(*b)) << what << " column " << c << " row " << r << ": " << a->ToString() << " vs "
                                   << b->ToString();
      }
    }
  }
}

TEST(BucketScanTest, EqualsTheSelectionsAggregatesOverRandomFiles) {
  std::mt19937_64 rng(20261207);
  const std::vector<SelectionAggregate> all = {
      {"count", "", "rows"},       {"count", "value", "cv"},  {"count", "note", "cn"}, {"count", "ok", "co"},
      {"sum", "value", "s"},       {"avg", "value", "a"},     {"avg", "unit", "au"},   {"min", "value", "lo"},
      {"max", "value", "hi"},      {"min", "unit", "ulo"},    {"max", "unit", "uhi"},  {"min", "time", "first"},
      {"max", "time", "last"},
  };
  const int64_t widths[] = {1, 1000, 7777, 1000000, 60000000, 86400000000};
  for (int round = 0; round < 100; ++round) {
    TempDir dir;
    const int file_count = 1 + static_cast<int>(rng() % 4);
    std::vector<ScanFile> scan_files;
    for (int f = 0; f < file_count; ++f) {
      std::vector<Row> rows;
      const int devices = 1 + static_cast<int>(rng() % 6);
      const int per_device = static_cast<int>(rng() % 3000);
      const int64_t span = rng() % 2 == 0 ? 100000000 : 5000;
      for (int d = 0; d < devices; ++d) {
        for (int i = 0; i < per_device; ++i) {
          const int64_t time = static_cast<int64_t>(rng() % span) - (rng() % 5 == 0 ? span / 2 : 0);
          std::optional<double> value;
          const uint64_t kind = rng() % 20;
          if (kind == 0) {
            value = std::numeric_limits<double>::quiet_NaN();
          } else if (kind == 1) {
            value = -0.0;
          } else if (kind > 3) {
            value = static_cast<double>(rng() % 100000) / 7.0 - 5000;
          }
          std::optional<std::string> note;
          if (rng() % 4 == 0) note = "n" + std::to_string(rng() % 50);
          rows.push_back({time, "dev-" + std::to_string(d), static_cast<int32_t>(rng() % 2000) - 1000, value,
                          rng() % 2 == 0, note});
        }
      }
      if (rng() % 4 != 0) {
        std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
          return std::tie(a.device, a.time) < std::tie(b.device, b.time);
        });
      }
      const int64_t page_rows[] = {7, 100, 1000, 20000};
      const int64_t group_rows[] = {500, 4000, 1000000};
      const std::string path = dir.path() + "/f" + std::to_string(f) + ".parquet";
      Write(path, rows, page_rows[rng() % 4], group_rows[rng() % 3], rng() % 5 != 0);
      ScanFile file;
      file.path = path;
      file.order = f;
      if (rng() % 2 == 0) {
        for (size_t r = 0; r < rows.size(); ++r) {
          if (rng() % 7 == 0) file.deleted_rows.push_back(r);
        }
      }
      scan_files.push_back(std::move(file));
    }
    ScanFilter filter;
    if (rng() % 2 == 0) filter.min_time = static_cast<int64_t>(rng() % 100000000) - 50000000;
    if (rng() % 2 == 0) filter.max_time = static_cast<int64_t>(rng() % 100000000);
    ScanPlan plan = PlanOf(scan_files, filter, {"device"}, false);
    plan.dedup_order = {};

    std::vector<SelectionAggregate> aggregates;
    for (const SelectionAggregate& agg : all) {
      if (rng() % 3 == 0) aggregates.push_back(agg);
    }
    if (aggregates.empty()) aggregates.push_back(all[rng() % all.size()]);
    if (rng() % 3 != 0) {
      const int64_t origin = rng() % 2 == 0 ? 946857600000000 : static_cast<int64_t>(rng() % 1000);
      SelectionAggregate bucket{"time_bucket", "time", "b", widths[rng() % 6], origin};
      aggregates.insert(aggregates.begin() + static_cast<std::ptrdiff_t>(rng() % (aggregates.size() + 1)), bucket);
    }
    const bool descending = rng() % 2 == 0;
    std::optional<int64_t> limit;
    if (rng() % 3 == 0) limit = static_cast<int64_t>(rng() % 30);

    SelectionCounters counters;
    auto got = ScanAggregates(plan, {}, aggregates, descending, limit, &counters);
    ASSERT_TRUE(got.ok()) << "round " << round << ": " << got.status().ToString();
    std::vector<std::string> columns = AllColumns();
    auto rows = ReadSelection(plan, {}, columns);
    ASSERT_TRUE(rows.ok()) << rows.status().ToString();
    auto expected = AggregateSelection(**rows, aggregates, descending, limit);
    ASSERT_TRUE(expected.ok()) << expected.status().ToString();
    ExpectSameAggregates(*(*got)->CombineChunks().ValueOrDie(), *(*expected)->CombineChunks().ValueOrDie(),
                         "round " + std::to_string(round));
    EXPECT_EQ(counters.files, file_count);
  }
}

TEST(BucketScanTest, SkipsRowGroupsOutsideTheTimeRange) {
  TempDir dir;
  std::vector<Row> rows;
  for (int i = 0; i < 10000; ++i) rows.push_back({int64_t{i} * 1000, "dev", 1, 1.0 * i, true, std::nullopt});
  const std::string path = dir.path() + "/f.parquet";
  Write(path, rows, 1000, 1000, true);  // ten row groups of one second each
  ScanFile file;
  file.path = path;
  ScanFilter filter;
  filter.min_time = 2500000;
  filter.max_time = 3499999;
  SelectionCounters counters;
  auto got = ScanAggregates(PlanOf({file}, filter, {"device"}, false), {},
                            {{"count", "", "c"}, {"sum", "value", "s"}}, false, std::nullopt, &counters);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(counters.row_groups, 2);
  EXPECT_EQ((*got)->column(0)->GetScalar(0).ValueOrDie()->ToString(), "1000");
  EXPECT_EQ((*got)->column(1)->GetScalar(0).ValueOrDie()->ToString(), std::to_string((2500 + 3499) * 1000 / 2));
}

TEST(BucketScanTest, RefusesWhatItDoesNotHandle) {
  TempDir dir;
  const std::string path = dir.path() + "/f.parquet";
  Write(path, {{1, "a", 1, 1.0, true, std::string("x")}}, 100, 100, true);
  ScanFile file;
  file.path = path;
  auto refused = [&](const ScanPlan& plan, std::vector<SelectionAggregate> aggregates) {
    auto got = ScanAggregates(plan, {}, aggregates);
    return !got.ok() && got.status().IsNotImplemented();
  };
  const std::vector<SelectionAggregate> avg = {{"avg", "value", "a"}};
  EXPECT_FALSE(refused(PlanOf({file}, {}, {"device"}, false), avg));
  // A key condition: the selection reader's (it reads that series' pages only).
  ScanFilter keyed;
  keyed.key_equals["device"] = std::string("a");
  EXPECT_TRUE(refused(PlanOf({file}, keyed, {"device"}, false), avg));
  // Read-time dedup over several series.
  ScanPlan dedup = PlanOf({file}, {}, {"device"}, false);
  dedup.files[0].dedup = true;
  EXPECT_TRUE(refused(dedup, avg));
  // Aggregates it does not compute as DuckDB does: strings, sums of integers.
  EXPECT_TRUE(refused(PlanOf({file}, {}, {"device"}, false), {{"max", "note", "m"}}));
  EXPECT_TRUE(refused(PlanOf({file}, {}, {"device"}, false), {{"sum", "unit", "s"}}));
  // A bucket of another column than the time column.
  EXPECT_TRUE(refused(PlanOf({file}, {}, {"device"}, false), {{"time_bucket", "unit", "b", 10, 0}}));
  // Column mapping, a remote path.
  ScanPlan mapped = PlanOf({file}, {}, {"device"}, false);
  mapped.physical_names["value"] = "col-1";
  EXPECT_TRUE(refused(mapped, avg));
  ScanPlan remote = PlanOf({file}, {}, {"device"}, false);
  remote.files[0].path = "s3://bucket/f.parquet";
  EXPECT_TRUE(refused(remote, avg));
  // Times at the ends of the int64 range, in buckets (DuckDB reads them as infinities).
  const std::string far = dir.path() + "/far.parquet";
  Write(far, {{std::numeric_limits<int64_t>::max(), "a", 1, 1.0, true, std::nullopt}}, 100, 100, true);
  ScanFile far_file;
  far_file.path = far;
  EXPECT_TRUE(refused(PlanOf({far_file}, {}, {"device"}, false), {{"time_bucket", "time", "b", 1000000, 0}, {"count", "", "c"}}));
  EXPECT_FALSE(refused(PlanOf({far_file}, {}, {"device"}, false), {{"group", "device", "d"}, {"count", "", "c"}}));
}

TEST(BucketScanTest, StopsWhenCancelled) {
  TempDir dir;
  std::vector<Row> rows;
  for (int i = 0; i < 20000; ++i) rows.push_back({int64_t{i}, "dev", 1, 1.0, true, std::nullopt});
  const std::string path = dir.path() + "/f.parquet";
  Write(path, rows, 1000, 5000, true);
  ScanFile file;
  file.path = path;
  const ScanPlan plan = PlanOf({file}, {}, {"device"}, false);
  std::atomic<bool> cancel{true};
  auto got = ScanAggregates(plan, {}, {{"count", "", "c"}}, false, std::nullopt, nullptr, &cancel);
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(got.status().IsCancelled()) << got.status().ToString();
  cancel = false;
  got = ScanAggregates(plan, {}, {{"count", "", "c"}}, false, std::nullopt, nullptr, &cancel);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ((*got)->column(0)->GetScalar(0).ValueOrDie()->ToString(), "20000");
}

TEST(BucketScanTest, GroupsByBucketAndKeyAsABruteForceCount) {
  std::mt19937_64 rng(20261208);
  for (int round = 0; round < 60; ++round) {
    TempDir dir;
    std::vector<std::vector<Row>> files;
    std::vector<ScanFile> scan_files;
    const int file_count = 1 + static_cast<int>(rng() % 3);
    for (int f = 0; f < file_count; ++f) {
      std::vector<Row> rows;
      const int count = static_cast<int>(rng() % 5000);
      for (int i = 0; i < count; ++i) {
        std::optional<double> value;
        if (rng() % 8 != 0) value = static_cast<double>(rng() % 1000) - 500;
        rows.push_back({static_cast<int64_t>(rng() % 10000000), "dev-" + std::to_string(rng() % 9),
                        static_cast<int32_t>(rng() % 5) - 2, value, true, std::nullopt});
      }
      if (rng() % 3 != 0) {
        std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
          return std::tie(a.device, a.time) < std::tie(b.device, b.time);
        });
      }
      const std::string path = dir.path() + "/f" + std::to_string(f) + ".parquet";
      const int64_t page_rows[] = {7, 100, 1000};
      Write(path, rows, page_rows[rng() % 3], rng() % 2 == 0 ? 700 : 100000, true);
      ScanFile file;
      file.path = path;
      if (rng() % 2 == 0) {
        for (size_t r = 0; r < rows.size(); ++r) {
          if (rng() % 5 == 0) file.deleted_rows.push_back(r);
        }
      }
      files.push_back(std::move(rows));
      scan_files.push_back(std::move(file));
    }
    ScanFilter filter;
    if (rng() % 2 == 0) filter.min_time = static_cast<int64_t>(rng() % 5000000);
    ScanPlan plan = PlanOf(scan_files, filter, {"device"}, false);
    plan.dedup_order = {};
    const bool by_unit = rng() % 2 == 0;  // an int32 key, else the text one
    const bool bucketed = rng() % 2 == 0;
    const int64_t width = 1000000;
    std::vector<SelectionAggregate> aggregates = {{"group", by_unit ? "unit" : "device", "k"},
                                                  {"count", "", "c"},
                                                  {"sum", "value", "s"},
                                                  {"max", "value", "m"}};
    if (bucketed) aggregates.insert(aggregates.begin(), {"time_bucket", "time", "b", width, 0});
    const size_t key_column = bucketed ? 1 : 0;
    // Brute force: group -> (rows, sum, max) over the rows the scan admits.
    using Key = std::pair<int64_t, std::string>;
    std::map<Key, std::tuple<int64_t, double, std::optional<double>>> expected;
    for (const Row& row : Expected(files, plan)) {
      const int64_t b = bucketed ? row.time / width * width : 0;
      auto& [count, sum, max] = expected[{b, by_unit ? std::to_string(row.unit) : row.device}];
      ++count;
      if (row.value) {
        sum += *row.value;
        max = max ? std::max(*max, *row.value) : *row.value;
      }
    }
    std::vector<ScanOrder> sort;
    const bool descending = rng() % 2 == 0;
    if (bucketed) sort.push_back({0, false});
    sort.push_back({key_column, descending});
    auto got = ScanAggregates(plan, {}, aggregates, false, std::nullopt, nullptr, nullptr, sort);
    ASSERT_TRUE(got.ok()) << "round " << round << ": " << got.status().ToString();
    auto table = (*got)->CombineChunks().ValueOrDie();
    ASSERT_EQ(table->num_rows(), static_cast<int64_t>(expected.size())) << "round " << round;
    std::optional<Key> before;
    for (int64_t r = 0; r < table->num_rows(); ++r) {
      const int64_t b = bucketed ? std::static_pointer_cast<arrow::TimestampScalar>(
                                       table->column(0)->GetScalar(r).ValueOrDie())->value
                                 : 0;
      const std::string k = table->column(static_cast<int>(key_column))->GetScalar(r).ValueOrDie()->ToString();
      const Key key{b, k};
      auto it = expected.find(key);
      ASSERT_NE(it, expected.end()) << "round " << round << ": group " << b << "/" << k;
      const auto& [count, sum, max] = it->second;
      const size_t c = key_column + 1;
      EXPECT_EQ(std::static_pointer_cast<arrow::Int64Scalar>(table->column(c)->GetScalar(r).ValueOrDie())->value, count);
      auto s = table->column(c + 1)->GetScalar(r).ValueOrDie();
      auto m = table->column(c + 2)->GetScalar(r).ValueOrDie();
      EXPECT_EQ(m->is_valid, max.has_value());
      if (max) {
        EXPECT_DOUBLE_EQ(std::static_pointer_cast<arrow::DoubleScalar>(s)->value, sum);
        EXPECT_EQ(std::static_pointer_cast<arrow::DoubleScalar>(m)->value, *max);
      }
      // Ordered as asked: by bucket, then key (integers as numbers, text as bytes).
      if (before) {
        const auto& [pb, pk] = *before;
        ASSERT_LE(pb, b);
        if (pb == b) {
          const bool ascending_keys = by_unit ? std::stoll(pk) < std::stoll(k) : pk < k;
          EXPECT_EQ(ascending_keys, !descending) << "round " << round << ": " << pk << " then " << k;
        }
      }
      before = key;
    }
  }
}

TEST(BucketScanTest, ReadsManyFilesAWindowAtATime) {
  TempDir dir;
  std::vector<ScanFile> files;
  double total = 0;
  for (int f = 0; f < 150; ++f) {  // more than one window of open files
    std::vector<Row> rows;
    for (int i = 0; i < 3; ++i) {
      rows.push_back({int64_t{f} * 1000 + i, "dev-" + std::to_string(f % 7), 1, 1.0 * f, true, std::nullopt});
      total += f;
    }
    const std::string path = dir.path() + "/f" + std::to_string(f) + ".parquet";
    Write(path, rows, 100, 100, true);
    ScanFile file;
    file.path = path;
    files.push_back(std::move(file));
  }
  SelectionCounters counters;
  auto got = ScanAggregates(PlanOf(files, {}, {"device"}, false), {}, {{"count", "", "c"}, {"sum", "value", "s"}},
                            false, std::nullopt, &counters);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ((*got)->column(0)->GetScalar(0).ValueOrDie()->ToString(), "450");
  EXPECT_DOUBLE_EQ(std::static_pointer_cast<arrow::DoubleScalar>((*got)->column(1)->GetScalar(0).ValueOrDie())->value,
                   total);
  EXPECT_EQ(counters.files, 150);
  EXPECT_EQ(counters.row_groups, 150);
}

TEST(BucketScanTest, SkipsPagesOutsideTheTimeRangeOfFilesSortedBySeries) {
  TempDir dir;
  std::vector<Row> rows;
  for (int d = 0; d < 5; ++d) {
    for (int i = 0; i < 2000; ++i) rows.push_back({int64_t{i} * 1000, "dev-" + std::to_string(d), d, 1.0 * i, true, std::nullopt});
  }
  const std::string path = dir.path() + "/f.parquet";
  Write(path, rows, 100, 1000000, true);  // one row group, pages of 100 rows, each device's times in order
  ScanFile file;
  file.path = path;
  ScanFilter filter;
  // i in [499, 700]: the last row of page 4 and the first of page 7 are the bounds themselves.
  filter.min_time = 499000;
  filter.max_time = 700000;
  SelectionCounters counters;
  auto got = ScanAggregates(PlanOf({file}, filter, {"device"}, false), {},
                            {{"group", "device", "d"}, {"count", "", "c"}, {"sum", "value", "s"}}, false, std::nullopt,
                            &counters);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  auto table = (*got)->CombineChunks().ValueOrDie();
  ASSERT_EQ(table->num_rows(), 5);
  for (int64_t r = 0; r < 5; ++r) {
    EXPECT_EQ(table->column(0)->GetScalar(r).ValueOrDie()->ToString(), "dev-" + std::to_string(r));
    EXPECT_EQ(table->column(1)->GetScalar(r).ValueOrDie()->ToString(), "202");
    EXPECT_DOUBLE_EQ(std::static_pointer_cast<arrow::DoubleScalar>(table->column(2)->GetScalar(r).ValueOrDie())->value,
                     (499 + 700) * 101.0);
  }
  EXPECT_GT(counters.pages_skipped, 0);
}

}  // namespace
}  // namespace timelake::testing
