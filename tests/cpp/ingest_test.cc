// Ingest, before anything is written: aligning user batches to the storage schema, and arranging
// rows into sorted, deduplicated chunk runs.
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <set>
#include <tuple>

#include <arrow/api.h>
#include <arrow/compute/api.h>

#include <gtest/gtest.h>

#include "test_util.h"
#include "timelake/contract.h"
#include "timelake/ingest/align.h"
#include "timelake/ingest/arrange.h"
#include "timelake/log/schema.h"
#include "timelake/rows/sorted_rows.h"

namespace timelake::testing {
namespace {

namespace cp = arrow::compute;

using arrow::field;

const auto kUtcMicros = arrow::timestamp(arrow::TimeUnit::MICRO, "UTC");
const auto kUtcNanos = arrow::timestamp(arrow::TimeUnit::NANO, "UTC");

// --- BatchAligner ---------------------------------------------------------------------------

class AlignTest : public ::testing::Test {
 protected:
  void Declare(arrow::FieldVector fields) {
    declared_ = arrow::schema(std::move(fields));
    storage_ = StorageSchemaOf(*declared_).ValueOrDie();
  }
  arrow::Result<std::shared_ptr<arrow::RecordBatch>> Align(
      const std::shared_ptr<arrow::RecordBatch>& in) {
    ARROW_ASSIGN_OR_RAISE(auto aligner,
                          BatchAligner::Make(declared_, storage_, *in->schema(), "ts"));
    return aligner.Align(*in);
  }

  std::shared_ptr<arrow::Schema> declared_ =
      arrow::schema({field("ts", kUtcMicros, false), field("sensor", arrow::utf8()),
                     field("value", arrow::float64()), field("count", arrow::int64())});
  std::shared_ptr<arrow::Schema> storage_ = StorageSchemaOf(*declared_).ValueOrDie();
};

TEST_F(AlignTest, ReorderedColumnsAreMatchedByName) {
  auto in = Batch(arrow::schema({field("value", arrow::float64()), field("count", arrow::int64()),
                                 field("sensor", arrow::utf8()), field("ts", kUtcMicros)}),
                  {"[1.5, 2.5]", "[7, 8]", R"(["a", "b"])", "[10, 20]"});
  ASSERT_OK_AND_ASSIGN(auto out, Align(in));
  EXPECT_TRUE(out->schema()->Equals(*storage_));
  auto expected = Batch(storage_, {"[10, 20]", R"(["a", "b"])", "[1.5, 2.5]", "[7, 8]"});
  EXPECT_TRUE(out->Equals(*expected)) << out->ToString();
}

TEST_F(AlignTest, Int32IsWidenedIntoAnInt64Column) {
  auto in = Batch(arrow::schema({field("ts", kUtcMicros), field("count", arrow::int32())}),
                  {"[1, 2]", "[3, -4]"});
  ASSERT_OK_AND_ASSIGN(auto out, Align(in));
  EXPECT_TRUE(out->GetColumnByName("count")->Equals(*Json(arrow::int64(), "[3, -4]")));
}

TEST_F(AlignTest, MissingNullableColumnsBecomeNulls) {
  auto in = Batch(arrow::schema({field("ts", kUtcMicros)}), {"[1, 2, 3]"});
  ASSERT_OK_AND_ASSIGN(auto out, Align(in));
  EXPECT_EQ(out->GetColumnByName("sensor")->null_count(), 3);
  EXPECT_EQ(out->GetColumnByName("value")->null_count(), 3);
  EXPECT_TRUE(out->schema()->Equals(*storage_));
}

TEST_F(AlignTest, MissingNonNullableColumnIsInvalidNamingIt) {
  auto input = arrow::schema({field("sensor", arrow::utf8())});
  EXPECT_TRUE(IsInvalid(BatchAligner::Make(declared_, storage_, *input, "ts"), "'ts'"));
}

TEST_F(AlignTest, UnknownColumnIsInvalidNamingIt) {
  auto input = arrow::schema({field("ts", kUtcMicros), field("humidity", arrow::float64())});
  EXPECT_TRUE(IsInvalid(BatchAligner::Make(declared_, storage_, *input, "ts"), "humidity"));
}

TEST_F(AlignTest, ImpossibleConversionIsInvalidNamingTheColumn) {
  auto input =
      arrow::schema({field("ts", kUtcMicros), field("value", arrow::list(arrow::int32()))});
  EXPECT_TRUE(IsInvalid(BatchAligner::Make(declared_, storage_, *input, "ts"), "value"));
}

TEST_F(AlignTest, LossyFloatToIntegerIsInvalidNamingTheColumn) {
  auto in = Batch(arrow::schema({field("ts", kUtcMicros), field("count", arrow::float64())}),
                  {"[1, 2]", "[1.0, 1.5]"});
  EXPECT_TRUE(IsInvalid(Align(in), "count"));
}

TEST_F(AlignTest, WholeFloatsConvertToIntegers) {
  auto in = Batch(arrow::schema({field("ts", kUtcMicros), field("count", arrow::float64())}),
                  {"[1, 2]", "[1.0, 2.0]"});
  ASSERT_OK_AND_ASSIGN(auto out, Align(in));
  EXPECT_TRUE(out->GetColumnByName("count")->Equals(*Json(arrow::int64(), "[1, 2]")));
}

TEST_F(AlignTest, IntegerOverflowIsInvalid) {
  Declare({field("ts", kUtcMicros, false), field("small", arrow::int8())});
  auto in = Batch(arrow::schema({field("ts", kUtcMicros), field("small", arrow::int64())}),
                  {"[1]", "[300]"});
  EXPECT_TRUE(IsInvalid(Align(in), "small"));
}

TEST_F(AlignTest, NullTimeIsInvalid) {
  Declare({field("ts", kUtcMicros), field("v", arrow::int64())});  // nullable, yet still refused
  auto in = Batch(arrow::schema({field("ts", kUtcMicros), field("v", arrow::int64())}),
                  {"[1, null]", "[1, 2]"});
  EXPECT_TRUE(IsInvalid(Align(in), "time column 'ts'"));
}

TEST_F(AlignTest, NullInNonNullableColumnIsInvalid) {
  auto in = Batch(arrow::schema({field("ts", kUtcMicros)}), {"[1, null]"});
  EXPECT_TRUE(IsInvalid(Align(in), "ts"));
}

TEST_F(AlignTest, NanosecondTimeThatIsNotAWholeMicrosecondIsInvalid) {
  Declare({field("ts", kUtcNanos, false)});
  auto in = Batch(arrow::schema({field("ts", kUtcNanos)}), {"[1000000000, 1000000001]"});
  EXPECT_TRUE(IsInvalid(Align(in), "ts"));
}

TEST_F(AlignTest, NanosecondTimeOnWholeMicrosecondsIsStoredInMicroseconds) {
  Declare({field("ts", kUtcNanos, false)});
  auto in = Batch(arrow::schema({field("ts", kUtcNanos)}), {"[1000000000, 2000]"});
  ASSERT_OK_AND_ASSIGN(auto out, Align(in));
  EXPECT_TRUE(out->column(0)->Equals(*Json(kUtcMicros, "[1000000, 2]"))) << out->ToString();
}

TEST_F(AlignTest, NanosecondInputIntoMicrosecondColumnMustBeWholeMicroseconds) {
  auto in = Batch(arrow::schema({field("ts", kUtcNanos)}), {"[1000000001]"});
  EXPECT_TRUE(IsInvalid(Align(in), "ts"));
}

TEST_F(AlignTest, DictionaryColumnAcceptsPlainStrings) {
  Declare({field("ts", kUtcMicros, false),
           field("sensor", arrow::dictionary(arrow::int32(), arrow::utf8()))});
  auto in = Batch(arrow::schema({field("ts", kUtcMicros), field("sensor", arrow::utf8())}),
                  {"[1, 2]", R"(["a", "b"])"});
  ASSERT_OK_AND_ASSIGN(auto out, Align(in));
  EXPECT_TRUE(out->column(1)->Equals(*Json(arrow::utf8(), R"(["a", "b"])")));
}

TEST_F(AlignTest, UnsignedColumnIsStoredWidened) {
  Declare({field("ts", kUtcMicros, false), field("level", arrow::uint8())});
  auto in = Batch(arrow::schema({field("ts", kUtcMicros), field("level", arrow::uint8())}),
                  {"[1, 2]", "[0, 255]"});
  ASSERT_OK_AND_ASSIGN(auto out, Align(in));
  EXPECT_TRUE(out->column(1)->Equals(*Json(arrow::int16(), "[0, 255]")));
}

// `bytes` as an array of string type `type` without checking them, as pyarrow (`.view()`) and
// C stream producers can hand them over.
template <typename Builder>
std::shared_ptr<arrow::Array> Unchecked(const std::shared_ptr<arrow::DataType>& type,
                                        const std::vector<std::string>& bytes) {
  Builder builder;
  for (const auto& b : bytes) EXPECT_OK(builder.Append(b));
  return builder.Finish().ValueOrDie()->View(type).ValueOrDie();
}

const std::vector<std::string> kBadUtf8 = {"fine", "\xff\xfe", "also fine"};

class AlignUtf8Test : public AlignTest {
 protected:
  // Declares `value` with `type` and aligns a batch whose `value` column is `values`.
  arrow::Result<std::shared_ptr<arrow::RecordBatch>> AlignValues(
      const std::shared_ptr<arrow::DataType>& type, const std::shared_ptr<arrow::Array>& values) {
    Declare({field("ts", kUtcMicros, false), field("value", type)});
    auto in_schema = arrow::schema({field("ts", kUtcMicros), field("value", values->type())});
    auto ts = Json(kUtcMicros, "[1, 2, 3]")->Slice(0, values->length());
    return Align(arrow::RecordBatch::Make(in_schema, values->length(), {ts, values}));
  }
};

TEST_F(AlignUtf8Test, InvalidUtf8StringIsInvalidNamingTheColumn) {
  auto out = AlignValues(arrow::utf8(), Unchecked<arrow::BinaryBuilder>(arrow::utf8(), kBadUtf8));
  EXPECT_TRUE(IsInvalid(out, "column 'value' has a string that is not valid UTF-8"));
}

TEST_F(AlignUtf8Test, InvalidUtf8LargeStringIsInvalid) {
  auto values = Unchecked<arrow::LargeBinaryBuilder>(arrow::large_utf8(), kBadUtf8);
  EXPECT_TRUE(IsInvalid(AlignValues(arrow::large_utf8(), values), "UTF-8"));
  EXPECT_TRUE(IsInvalid(AlignValues(arrow::utf8(), values), "UTF-8"));  // cast on the way
}

TEST_F(AlignUtf8Test, InvalidUtf8StringViewIsInvalid) {
  auto values = Unchecked<arrow::BinaryViewBuilder>(arrow::utf8_view(), kBadUtf8);
  EXPECT_TRUE(IsInvalid(AlignValues(arrow::utf8_view(), values), "UTF-8"));
  EXPECT_TRUE(IsInvalid(AlignValues(arrow::utf8(), values), "UTF-8"));
}

TEST_F(AlignUtf8Test, InvalidUtf8InADictionaryIsInvalid) {
  auto type = arrow::dictionary(arrow::int8(), arrow::utf8());
  auto values = arrow::DictionaryArray::FromArrays(
                    type, Json(arrow::int8(), "[0, 1, 0]"),
                    Unchecked<arrow::BinaryBuilder>(arrow::utf8(), {"ok", "\xc3\x28"}))
                    .ValueOrDie();
  EXPECT_TRUE(IsInvalid(AlignValues(type, values), "UTF-8"));
  EXPECT_TRUE(IsInvalid(AlignValues(arrow::utf8(), values), "UTF-8"));
}

TEST_F(AlignUtf8Test, InvalidUtf8InsideAStructIsInvalidNamingTheColumn) {
  auto strings = Unchecked<arrow::BinaryBuilder>(arrow::utf8(), kBadUtf8);
  auto values = arrow::StructArray::Make({strings}, {field("label", arrow::utf8())}).ValueOrDie();
  EXPECT_TRUE(IsInvalid(AlignValues(values->type(), values), "column 'value'"));
}

TEST_F(AlignUtf8Test, InvalidUtf8InsideAListIsInvalid) {
  auto strings = Unchecked<arrow::BinaryBuilder>(arrow::utf8(), kBadUtf8);
  auto values = arrow::ListArray::FromArrays(*Json(arrow::int32(), "[0, 1, 2, 3]"), *strings)
                    .ValueOrDie();
  EXPECT_TRUE(IsInvalid(AlignValues(values->type(), values), "UTF-8"));
}

TEST_F(AlignUtf8Test, ValidUtf8IsKept) {
  auto values = Unchecked<arrow::BinaryBuilder>(arrow::utf8(), {"caf\xc3\xa9", "", "\xe2\x82\xac"});
  ASSERT_OK_AND_ASSIGN(auto out, AlignValues(arrow::utf8(), values));
  EXPECT_TRUE(out->column(1)->Equals(*values));
}

TEST_F(AlignTest, MalformedOffsetsAreInvalidNamingTheColumn) {
  auto good = Json(arrow::utf8(), R"(["a", "b"])");
  auto data = good->data()->Copy();
  auto offsets = std::make_shared<arrow::Buffer>(
      reinterpret_cast<const uint8_t*>("\0\0\0\0\x09\0\0\0\x01\0\0\0"), 12);
  data->buffers[1] = offsets;  // decreasing and out of range
  auto bad = arrow::MakeArray(data);
  auto in = arrow::RecordBatch::Make(
      arrow::schema({field("ts", kUtcMicros), field("sensor", arrow::utf8())}), 2,
      {Json(kUtcMicros, "[1, 2]"), bad});
  EXPECT_TRUE(IsInvalid(Align(in), "column 'sensor' holds malformed Arrow data"));
}

// A long string column is checked in slices on all cores: a fault in any slice, on the boundary
// between two, or in what only the whole array shows (a null count that lies) is still found.
TEST_F(AlignTest, LongStringColumnsAreCheckedWholeWhateverSliceTheFaultIsIn) {
  constexpr int64_t n = 2'500'000;
  arrow::StringBuilder builder;
  ASSERT_OK(builder.Reserve(n));
  ASSERT_OK(builder.ReserveData(2 * n));
  for (int64_t i = 0; i < n; ++i) builder.UnsafeAppend("ab", 2);
  ASSERT_OK_AND_ASSIGN(auto good, builder.Finish());
  arrow::TimestampBuilder times(kUtcMicros, arrow::default_memory_pool());
  ASSERT_OK(times.Reserve(n));
  for (int64_t i = 0; i < n; ++i) times.UnsafeAppend(i);
  ASSERT_OK_AND_ASSIGN(auto ts, times.Finish());
  auto schema = arrow::schema({field("ts", kUtcMicros), field("sensor", arrow::utf8())});
  auto align = [&](const std::shared_ptr<arrow::Array>& sensor) {
    return Align(arrow::RecordBatch::Make(schema, n, {ts, sensor}));
  };
  ASSERT_OK_AND_ASSIGN(auto out, align(good));
  EXPECT_TRUE(out->column(1)->Equals(*good));
  // A copy of `good` whose buffer `index` is changed by `edit`.
  auto damaged = [&](int index, const std::function<void(uint8_t*)>& edit) {
    auto data = good->data()->Copy();
    auto copy = arrow::AllocateBuffer(data->buffers[index]->size()).ValueOrDie();
    std::memcpy(copy->mutable_data(), data->buffers[index]->data(), data->buffers[index]->size());
    edit(copy->mutable_data());
    data->buffers[index] = std::move(copy);
    return arrow::MakeArray(data);
  };
  for (int64_t row : {int64_t{5}, int64_t{1'250'000}, int64_t{2'000'000}, n - 1}) {
    auto bad_text = damaged(2, [&](uint8_t* bytes) { bytes[2 * row] = 0xff; });
    EXPECT_TRUE(IsInvalid(align(bad_text), "column 'sensor' has a string that is not valid UTF-8"))
        << row;
    auto bad_offsets = damaged(1, [&](uint8_t* bytes) {
      reinterpret_cast<int32_t*>(bytes)[row] = 7;  // out of order
    });
    EXPECT_TRUE(IsInvalid(align(bad_offsets), "column 'sensor' holds malformed Arrow data"))
        << row;
  }
  // A null count of 3 over a bitmap that says one row is null (a slice of it knows no count).
  auto data = good->data()->Copy();
  auto bitmap = arrow::AllocateEmptyBitmap(n).ValueOrDie();
  std::memset(bitmap->mutable_data(), 0xff, bitmap->size());
  arrow::bit_util::ClearBit(bitmap->mutable_data(), 1'800'000);
  data->buffers[0] = std::move(bitmap);
  data->null_count = 3;
  EXPECT_TRUE(IsInvalid(align(arrow::MakeArray(data)), "column 'sensor' holds malformed Arrow data"));
  data->null_count = 0;
  EXPECT_TRUE(IsInvalid(align(arrow::MakeArray(data)), "column 'sensor' holds malformed Arrow data"));
}

// An ASCII string column skips the UTF-8 check (its bytes are checked for the high bit only):
// a byte with the high bit anywhere in the values, in either string type, at a block boundary
// or in the last bytes, still sends it through the full check; bytes outside a slice's values do
// not count; valid non-ASCII text is kept.
TEST_F(AlignTest, TheAsciiShortcutOfTheUtf8CheckMissesNoByte) {
  constexpr int64_t n = 2'100'000;  // several slices, 4 bytes a value
  auto schema_of = [](const std::shared_ptr<arrow::DataType>& type) {
    return arrow::schema({field("ts", kUtcMicros), field("sensor", type)});
  };
  arrow::TimestampBuilder times(kUtcMicros, arrow::default_memory_pool());
  ASSERT_OK(times.Reserve(n));
  for (int64_t i = 0; i < n; ++i) times.UnsafeAppend(i);
  ASSERT_OK_AND_ASSIGN(auto ts, times.Finish());
  for (bool large : {false, true}) {
    SCOPED_TRACE(large ? "large_string" : "string");
    const auto type = large ? arrow::large_utf8() : arrow::utf8();
    Declare({field("ts", kUtcMicros, false), field("sensor", type)});
    auto build = [&](const std::vector<std::string>& three) -> std::shared_ptr<arrow::Array> {
      std::unique_ptr<arrow::ArrayBuilder> builder;
      EXPECT_OK(arrow::MakeBuilder(arrow::default_memory_pool(),
                                   large ? arrow::large_binary() : arrow::binary(), &builder));
      for (int64_t i = 0; i < n; ++i) {
        if (large) {
          EXPECT_OK(static_cast<arrow::LargeBinaryBuilder&>(*builder).Append(three[i % 3]));
        } else {
          EXPECT_OK(static_cast<arrow::BinaryBuilder&>(*builder).Append(three[i % 3]));
        }
      }
      return builder->Finish().ValueOrDie()->View(type).ValueOrDie();
    };
    auto good = build({"dev1", "dev2", "dev3"});
    ASSERT_OK(Align(arrow::RecordBatch::Make(schema_of(type), n, {ts, good})).status());
    // One bad byte at a 4,096-byte block boundary, just after one, and in the last bytes.
    for (int64_t at : {int64_t{4096}, int64_t{4097 * 100}, 4 * n - 1, 4 * n - 7}) {
      auto data = good->data()->Copy();
      auto copy = arrow::AllocateBuffer(data->buffers[2]->size()).ValueOrDie();
      std::memcpy(copy->mutable_data(), data->buffers[2]->data(), data->buffers[2]->size());
      copy->mutable_data()[at] = 0xff;
      data->buffers[2] = std::move(copy);
      auto bad = arrow::MakeArray(data);
      EXPECT_TRUE(IsInvalid(Align(arrow::RecordBatch::Make(schema_of(type), n, {ts, bad})),
                            "column 'sensor' has a string that is not valid UTF-8"))
          << "byte " << at;
    }
    // Valid UTF-8 that is not ASCII: kept.
    auto accented = build({"caf\xc3\xa9", "\xe2\x82\xac!", "dev3"});
    ASSERT_OK_AND_ASSIGN(auto out,
                         Align(arrow::RecordBatch::Make(schema_of(type), n, {ts, accented})));
    ASSERT_OK_AND_ASSIGN(auto stored, arrow::compute::Cast(*accented, out->column(1)->type()));
    EXPECT_TRUE(out->column(1)->Equals(*stored));
  }
  // A slice of values whose buffer holds invalid bytes outside the slice: those are no value's.
  Declare({field("ts", kUtcMicros, false), field("sensor", arrow::utf8())});
  auto whole = Unchecked<arrow::BinaryBuilder>(arrow::utf8(), {"\xff\xfe", "ok", "fine", "\xc3"});
  auto inner = whole->Slice(1, 2);
  ASSERT_OK_AND_ASSIGN(auto out,
                       Align(arrow::RecordBatch::Make(schema_of(arrow::utf8()), 2,
                                                      {Json(kUtcMicros, "[1, 2]"), inner})));
  EXPECT_TRUE(out->column(1)->Equals(*inner));
}

TEST_F(AlignTest, NestedDictionaryTakesMoreDistinctValuesThanItsIndexType) {
  // A list of int8-indexed dictionary strings is stored as a list of strings: one batch may bring
  // any number of distinct values.
  Declare({field("ts", kUtcMicros, false),
           field("tags", arrow::list(arrow::dictionary(arrow::int8(), arrow::utf8())))});
  arrow::StringBuilder strings;
  for (int i = 0; i < 300; ++i) ASSERT_OK(strings.Append("tag" + std::to_string(i)));
  auto values = strings.Finish().ValueOrDie();
  auto tags =
      arrow::ListArray::FromArrays(*Json(arrow::int32(), "[0, 300]"), *values).ValueOrDie();
  auto in = arrow::RecordBatch::Make(
      arrow::schema({field("ts", kUtcMicros), field("tags", tags->type())}), 1,
      {Json(kUtcMicros, "[1]"), tags});
  ASSERT_OK_AND_ASSIGN(auto out, Align(in));
  EXPECT_TRUE(out->column(1)->type()->Equals(*arrow::list(arrow::utf8())));
  EXPECT_EQ(std::static_pointer_cast<arrow::ListArray>(out->column(1))->value_length(0), 300);
}

TEST_F(AlignTest, DictionaryBatchesWithDifferentDictionariesAreStoredDecoded) {
  // Each batch may carry its own dictionary; together they exceed what int8 indices can address.
  Declare({field("ts", kUtcMicros, false),
           field("sensor", arrow::dictionary(arrow::int8(), arrow::utf8()))});
  auto type = arrow::dictionary(arrow::int8(), arrow::utf8());
  for (int b = 0; b < 3; ++b) {
    arrow::StringBuilder names;
    for (int i = 0; i < 100; ++i) ASSERT_OK(names.Append("s" + std::to_string(b * 100 + i)));
    arrow::Int8Builder indices;
    for (int i = 0; i < 100; ++i) ASSERT_OK(indices.Append(static_cast<int8_t>(i)));
    auto dict = arrow::DictionaryArray::FromArrays(type, indices.Finish().ValueOrDie(),
                                                   names.Finish().ValueOrDie())
                    .ValueOrDie();
    auto ts = arrow::MakeArrayFromScalar(arrow::TimestampScalar(1, kUtcMicros), 100).ValueOrDie();
    auto in = arrow::RecordBatch::Make(
        arrow::schema({field("ts", kUtcMicros), field("sensor", type)}), 100, {ts, dict});
    ASSERT_OK_AND_ASSIGN(auto out, Align(in));
    EXPECT_TRUE(out->column(1)->type()->Equals(*arrow::utf8()));
    EXPECT_EQ(std::static_pointer_cast<arrow::StringArray>(out->column(1))->GetString(99),
              "s" + std::to_string(b * 100 + 99));
  }
}

// --- Arrange --------------------------------------------------------------------------------

const auto kRows = arrow::schema(
    {field("ts", kUtcMicros), field("sensor", arrow::utf8()), field("value", arrow::int64())});

Contract DayContract(DedupPolicy dedup = DedupPolicy::kNone) {
  Contract c;
  c.time_column = "ts";
  c.series_key = {"sensor"};
  c.chunk = ChunkWidth::kDay;
  c.dedup = dedup;
  return c;
}

std::string Day(int d, int hour = 0) { return std::to_string(Micros(2025, 1, d, hour)); }

std::vector<int64_t> Ints(const std::shared_ptr<arrow::Table>& t, const std::string& name) {
  auto column = t->GetColumnByName(name);
  std::vector<int64_t> out;
  for (const auto& chunk : column->chunks()) {
    const auto& a = static_cast<const arrow::Int64Array&>(*chunk);
    for (int64_t i = 0; i < a.length(); ++i) out.push_back(a.Value(i));
  }
  return out;
}

// A column's values as text; a dictionary-encoded key (which Arrange may return) is decoded.
std::vector<std::string> Strings(const std::shared_ptr<arrow::Table>& t, const std::string& name) {
  auto column = arrow::compute::Cast(t->GetColumnByName(name), arrow::utf8()).ValueOrDie();
  std::vector<std::string> out;
  for (const auto& chunk : column.chunked_array()->chunks()) {
    const auto& a = static_cast<const arrow::StringArray&>(*chunk);
    for (int64_t i = 0; i < a.length(); ++i) out.push_back(a.IsNull(i) ? "<null>" : a.GetString(i));
  }
  return out;
}

TEST(ArrangeTest, RowsSpanningThreeDaysFormThreeRunsInChunkOrder) {
  auto t = TableOf(kRows, {"[" + Day(3) + "," + Day(1) + "," + Day(2) + "," + Day(1, 5) + "," +
                               Day(3, 1) + "]",
                           R"(["a","a","a","a","a"])", "[1, 2, 3, 4, 5]"});
  ASSERT_OK_AND_ASSIGN(auto arranged, Arrange(t, DayContract()));
  ASSERT_OK_AND_ASSIGN(auto rows, arranged.All());
  ASSERT_EQ(arranged.runs.size(), 3u);
  const int64_t first_day = ChunkOrdinal(ChunkWidth::kDay, Micros(2025, 1, 1));
  int64_t expected_offset = 0;
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(arranged.runs[i].ordinal, first_day + static_cast<int64_t>(i));
    EXPECT_EQ(arranged.runs[i].offset, expected_offset);
    expected_offset += arranged.runs[i].length;
  }
  EXPECT_EQ(expected_offset, 5);
  EXPECT_EQ(Ints(rows, "value"), (std::vector<int64_t>{2, 4, 3, 1, 5}));
}

// Rows that jump between chunks, land on a chunk's first and last microsecond, and lie before
// 1970, for every chunk width and both arrangements (one key column, and two): each run holds
// exactly the rows of its chunk.
TEST(ArrangeTest, EveryRowLandsInItsOwnChunkWhateverTheOrderOfArrival) {
  const int64_t feb = Micros(2025, 2, 1);
  const std::vector<int64_t> times = {
      feb - 1,      feb,  Micros(2025, 1, 15), Micros(2025, 3, 1) - 1, Micros(2025, 3, 1),
      feb + 1,      -1,   0,                   Micros(1969, 12, 1),    Micros(1969, 11, 30, 23),
      feb - 1,      feb,  Micros(2025, 2, 1, 1) - 1, Micros(2025, 2, 1, 1), Micros(2025, 1, 31, 23)};
  std::string ts = "[", keys = "[", values = "[";
  for (size_t i = 0; i < times.size(); ++i) {
    const char* sep = i ? "," : "";
    ts += sep + std::to_string(times[i]);
    keys += std::string(sep) + "\"s" + std::to_string(i % 3) + "\"";
    values += sep + std::to_string(i);
  }
  auto t = TableOf(kRows, {ts + "]", keys + "]", values + "]"});
  for (ChunkWidth width : {ChunkWidth::kHour, ChunkWidth::kDay, ChunkWidth::kMonth}) {
    for (bool two_keys : {false, true}) {
      Contract contract = DayContract();
      contract.chunk = width;
      if (two_keys) contract.series_key = {"sensor", "value"};  // the generic arrangement
      ASSERT_OK_AND_ASSIGN(auto arranged, Arrange(t, contract));
      std::set<int64_t> want_chunks;
      for (int64_t time : times) want_chunks.insert(ChunkOrdinal(width, time));
      ASSERT_EQ(arranged.runs.size(), want_chunks.size());
      int64_t covered = 0;
      for (const auto& run : arranged.runs) {
        ASSERT_OK_AND_ASSIGN(auto rows, arranged.Rows(run));
        for (int64_t row : Ints(rows, "value")) {
          EXPECT_EQ(ChunkOrdinal(width, times[static_cast<size_t>(row)]), run.ordinal)
              << "row " << row << ", width " << static_cast<int>(width);
        }
        covered += run.length;
      }
      EXPECT_EQ(covered, static_cast<int64_t>(times.size()));
    }
  }
}

TEST(ArrangeTest, RowsAreSortedBySeriesKeyThenTimeWithinARun) {
  auto t = TableOf(kRows,
                   {"[" + Day(1, 3) + "," + Day(1, 1) + "," + Day(1, 2) + "," + Day(1, 0) + "]",
                    R"(["b","b","a","a"])", "[1, 2, 3, 4]"});
  ASSERT_OK_AND_ASSIGN(auto arranged, Arrange(t, DayContract()));
  ASSERT_OK_AND_ASSIGN(auto rows, arranged.All());
  ASSERT_EQ(arranged.runs.size(), 1u);
  EXPECT_EQ(Ints(rows, "value"), (std::vector<int64_t>{4, 3, 2, 1}));
  EXPECT_EQ(Strings(rows, "sensor"), (std::vector<std::string>{"a", "a", "b", "b"}));
}

TEST(ArrangeTest, EqualKeyAndTimeKeepArrivalOrderWithoutDedup) {
  auto t = TableOf(kRows, {"[" + Day(1) + "," + Day(1) + "," + Day(1) + "]", R"(["a","a","a"])",
                           "[1, 2, 3]"});
  ASSERT_OK_AND_ASSIGN(auto arranged, Arrange(t, DayContract()));
  ASSERT_OK_AND_ASSIGN(auto rows, arranged.All());
  EXPECT_EQ(Ints(rows, "value"), (std::vector<int64_t>{1, 2, 3}));
}

TEST(ArrangeTest, DedupLastKeepsTheLastArrival) {
  auto t = TableOf(kRows, {"[" + Day(1) + "," + Day(2) + "," + Day(1) + "," + Day(1) + "]",
                           R"(["a","a","a","a"])", "[1, 2, 3, 4]"});
  ASSERT_OK_AND_ASSIGN(auto arranged, Arrange(t, DayContract(DedupPolicy::kLast)));
  ASSERT_OK_AND_ASSIGN(auto rows, arranged.All());
  EXPECT_EQ(Ints(rows, "value"), (std::vector<int64_t>{4, 2}));
  ASSERT_EQ(arranged.runs.size(), 2u);
  EXPECT_EQ(arranged.runs[1].offset, 1);
}

TEST(ArrangeTest, DedupFirstKeepsTheFirstArrival) {
  auto t = TableOf(kRows, {"[" + Day(1) + "," + Day(2) + "," + Day(1) + "," + Day(1) + "]",
                           R"(["a","a","a","a"])", "[1, 2, 3, 4]"});
  ASSERT_OK_AND_ASSIGN(auto arranged, Arrange(t, DayContract(DedupPolicy::kFirst)));
  ASSERT_OK_AND_ASSIGN(auto rows, arranged.All());
  EXPECT_EQ(Ints(rows, "value"), (std::vector<int64_t>{1, 2}));
}

TEST(ArrangeTest, DedupKeepsRowsThatDifferInKeyOrTime) {
  auto t = TableOf(kRows, {"[" + Day(1) + "," + Day(1) + "," + Day(1, 1) + "]", R"(["a","b","a"])",
                           "[1, 2, 3]"});
  ASSERT_OK_AND_ASSIGN(auto arranged, Arrange(t, DayContract(DedupPolicy::kLast)));
  ASSERT_OK_AND_ASSIGN(auto rows, arranged.All());
  EXPECT_EQ(rows->num_rows(), 3);
}

TEST(ArrangeTest, NullSeriesKeysAreEqualToEachOther) {
  auto t = TableOf(kRows, {"[" + Day(1) + "," + Day(1) + "," + Day(1) + "]", R"([null, "a", null])",
                           "[1, 2, 3]"});
  ASSERT_OK_AND_ASSIGN(auto arranged, Arrange(t, DayContract(DedupPolicy::kLast)));
  ASSERT_OK_AND_ASSIGN(auto rows, arranged.All());
  ASSERT_EQ(rows->num_rows(), 2);
  auto values = Ints(rows, "value");
  std::sort(values.begin(), values.end());
  EXPECT_EQ(values, (std::vector<int64_t>{2, 3}));
}

TEST(ArrangeTest, ColumnsKeepTheirNamesAndValueTypes) {
  auto t = TableOf(kRows, {"[" + Day(1) + "," + Day(2) + "]", R"(["b", null])", "[1, 2]"});
  ASSERT_OK_AND_ASSIGN(auto arranged, Arrange(t, DayContract()));
  ASSERT_OK_AND_ASSIGN(auto rows, arranged.All());
  ASSERT_EQ(rows->num_columns(), 3);
  for (int i = 0; i < 3; ++i) {
    auto type = rows->field(i)->type();
    if (type->id() == arrow::Type::DICTIONARY) {
      type = static_cast<const arrow::DictionaryType&>(*type).value_type();
    }
    EXPECT_EQ(rows->field(i)->name(), kRows->field(i)->name());
    EXPECT_TRUE(type->Equals(kRows->field(i)->type())) << type->ToString();
  }
  EXPECT_EQ(Strings(rows, "sensor"), (std::vector<std::string>{"b", "<null>"}));
}

TEST(ArrangeTest, PlainTableIsOneRunInInputOrder) {
  Contract plain;
  auto t = TableOf(kRows, {"[3, 1, 2]", R"(["c","a","b"])", "[1, 2, 3]"});
  ASSERT_OK_AND_ASSIGN(auto arranged, Arrange(t, plain));
  ASSERT_OK_AND_ASSIGN(auto rows, arranged.All());
  ASSERT_EQ(arranged.runs.size(), 1u);
  EXPECT_EQ(arranged.runs[0].length, 3);
  EXPECT_EQ(Ints(rows, "value"), (std::vector<int64_t>{1, 2, 3}));
}

// Inputs of millions of rows are bucketed in slices on several threads, with per-slice key
// dictionaries unified afterwards: the result must be what one stable sort by (day, key, time)
// and a dedup pass give, rows out of time order, null keys and duplicates included.
TEST(ArrangeTest, LargeInputSortedInSlicesEqualsAStableSort) {
  const int64_t n = 2'200'000;  // two slices' worth
  std::mt19937_64 rng(7);
  arrow::TimestampBuilder times(arrow::timestamp(arrow::TimeUnit::MICRO, "UTC"),
                                arrow::default_memory_pool());
  arrow::StringBuilder keys;
  arrow::Int64Builder values;
  const int64_t day0 = Micros(2025, 1, 1);
  for (int64_t i = 0; i < n; ++i) {
    // Mostly arrival order over three days, some rows late, some times repeated.
    int64_t time = day0 + i * 100'000 + static_cast<int64_t>(rng() % 5) * 1'000'000;
    if (rng() % 50 == 0) time -= 3'600'000'000LL;
    ASSERT_OK(times.Append(time));
    const uint64_t k = rng() % 700;
    if (k == 0) {
      ASSERT_OK(keys.AppendNull());
    } else {
      ASSERT_OK(keys.Append("s" + std::to_string(k % 503)));
    }
    ASSERT_OK(values.Append(i));
  }
  std::shared_ptr<arrow::Array> time_array, key_array, value_array;
  ASSERT_OK(times.Finish(&time_array));
  ASSERT_OK(keys.Finish(&key_array));
  ASSERT_OK(values.Finish(&value_array));
  auto input = arrow::Table::Make(kRows, {time_array, key_array, value_array});

  // The reference: a stable sort by (day, key with nulls last, time) of row numbers.
  const auto& ts = static_cast<const arrow::TimestampArray&>(*time_array);
  const auto& ks = static_cast<const arrow::StringArray&>(*key_array);
  std::vector<int64_t> days(n);
  for (int64_t i = 0; i < n; ++i) days[i] = ChunkOrdinal(ChunkWidth::kDay, ts.Value(i));
  auto key_of = [&](int64_t i) { return ks.IsNull(i) ? std::string_view("\xff") : ks.GetView(i); };
  std::vector<int64_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    if (days[a] != days[b]) return days[a] < days[b];
    const bool na = ks.IsNull(a), nb = ks.IsNull(b);
    if (na != nb) return nb;
    if (!na && ks.GetView(a) != ks.GetView(b)) return ks.GetView(a) < ks.GetView(b);
    return ts.Value(a) < ts.Value(b);
  });
  // Row positions are 32-bit below 2^31 rows, 64-bit above: both widths, forced.
  const DedupPolicy policies[] = {DedupPolicy::kNone, DedupPolicy::kLast, DedupPolicy::kFirst};
  for (int variant = 0; variant < 6; ++variant) {
    const bool wide = variant >= 3;
    const DedupPolicy policy = policies[variant % 3];
    SCOPED_TRACE(wide ? "64-bit positions" : "32-bit positions");
    ForceWideArrangePositionsForTesting(wide);
    auto arranged_or = Arrange(input, DayContract(policy));
    ForceWideArrangePositionsForTesting(false);
    ASSERT_OK_AND_ASSIGN(auto arranged, std::move(arranged_or));
    ASSERT_NE(arranged.perm, nullptr);
    EXPECT_EQ(arranged.perm->type_id(), wide ? arrow::Type::INT64 : arrow::Type::INT32);
    ASSERT_OK_AND_ASSIGN(auto rows, arranged.All());
    std::vector<int64_t> want;
    for (size_t k = 0; k < order.size(); ++k) {
      auto same = [&](size_t x, size_t y) {
        return ts.Value(order[x]) == ts.Value(order[y]) && key_of(order[x]) == key_of(order[y]);
      };
      if (policy == DedupPolicy::kLast && k + 1 < order.size() && same(k, k + 1)) continue;
      if (policy == DedupPolicy::kFirst && k > 0 && same(k, k - 1)) continue;
      want.push_back(order[k]);
    }
    ASSERT_EQ(Ints(rows, "value"), want) << "policy " << static_cast<int>(policy);
    // Runs: one per day, in order, covering every row; newest: the last row of each series.
    int64_t covered = 0;
    for (const auto& run : arranged.runs) {
      EXPECT_EQ(run.offset, covered);
      ASSERT_OK_AND_ASSIGN(auto run_rows, arranged.Rows(run));
      auto run_keys = Strings(run_rows, "sensor");
      std::vector<int64_t> newest;
      for (int64_t k = 0; k < run.length; ++k) {
        if (k + 1 == run.length || run_keys[k] != run_keys[k + 1]) newest.push_back(k);
      }
      EXPECT_EQ(run.newest, newest);
      covered += run.length;
    }
    EXPECT_EQ(covered, static_cast<int64_t>(want.size()));
  }
}

// String and binary keys are hashed by timelake's own dictionary (short keys compared as two
// words, longer ones byte by byte), per slice, then renumbered into one dictionary. Keys that
// differ only in their middle bytes, in a zero byte, or in length; empty keys; thousands of
// distinct keys; keys the second slice meets first, or only it has: each key must stay itself,
// and the rows come out as a stable sort by (day, key bytes, time) gives them.
TEST(ArrangeTest, EveryKindOfStringKeyIsGroupedByItsExactBytes) {
  std::vector<std::string> distinct = {"", "a", "b", "ab", "ba", "abc", "acc", "abd",
                                       std::string("a\0b", 3), std::string("a\0c", 3),
                                       std::string("ab\0", 3), "abcd", "abce", "abcde", "abcdf",
                                       "abXde", "abcdefg", "abcdefh", "abcdefgh", "abcdefgi",
                                       "abcdefghi", "Xbcdefghi", "abcdXfghi"};
  for (int len = 17; len <= 40; ++len) {
    // The same first and last eight bytes; one byte in the middle differs.
    for (char middle : {'m', 'n'}) {
      std::string k = "AAAAAAAA" + std::string(static_cast<size_t>(len - 16), '-') + "ZZZZZZZZ";
      k[8 + static_cast<size_t>(len - 16) / 2] = middle;
      distinct.push_back(k);
    }
  }
  for (int i = 0; i < 3000; ++i) distinct.push_back("series/" + std::to_string(i * 7919 % 100003));
  const int64_t n = 2'200'000;
  const int64_t half = n / 2;
  std::mt19937_64 rng(11);
  const int64_t day0 = Micros(2025, 1, 1);
  std::vector<int64_t> times(n);
  std::vector<std::optional<std::string>> keys(n);
  for (int64_t i = 0; i < n; ++i) {
    times[i] = day0 + static_cast<int64_t>(rng() % (3 * 86'400'000'000ULL));
    if (rng() % 1000 == 0) continue;  // a null key
    // The first half meets the first 2,000 keys in order; the second half meets all of them in
    // reverse order, so its dictionary numbers them differently and holds keys the first lacks.
    const size_t k = i < half ? static_cast<size_t>(i) % 2000
                              : distinct.size() - 1 - static_cast<size_t>(i) % distinct.size();
    keys[i] = distinct[k];
  }
  for (auto type : {arrow::utf8(), arrow::large_utf8(), arrow::binary(), arrow::large_binary()}) {
    SCOPED_TRACE(type->ToString());
    std::unique_ptr<arrow::ArrayBuilder> key_builder;
    ASSERT_OK(arrow::MakeBuilder(arrow::default_memory_pool(), type, &key_builder));
    arrow::TimestampBuilder time_builder(kUtcMicros, arrow::default_memory_pool());
    arrow::Int64Builder value_builder;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_OK(time_builder.Append(times[i]));
      ASSERT_OK(value_builder.Append(i));
      if (!keys[i]) {
        ASSERT_OK(key_builder->AppendNull());
        continue;
      }
      switch (type->id()) {
        case arrow::Type::STRING:
          ASSERT_OK(static_cast<arrow::StringBuilder&>(*key_builder).Append(*keys[i]));
          break;
        case arrow::Type::LARGE_STRING:
          ASSERT_OK(static_cast<arrow::LargeStringBuilder&>(*key_builder).Append(*keys[i]));
          break;
        case arrow::Type::BINARY:
          ASSERT_OK(static_cast<arrow::BinaryBuilder&>(*key_builder).Append(*keys[i]));
          break;
        default:
          ASSERT_OK(static_cast<arrow::LargeBinaryBuilder&>(*key_builder).Append(*keys[i]));
      }
    }
    std::shared_ptr<arrow::Array> time_array, key_array, value_array;
    ASSERT_OK(time_builder.Finish(&time_array));
    ASSERT_OK(key_builder->Finish(&key_array));
    ASSERT_OK(value_builder.Finish(&value_array));
    auto schema =
        arrow::schema({field("ts", kUtcMicros), field("sensor", type), field("value", arrow::int64())});
    auto input = arrow::Table::Make(schema, {time_array, key_array, value_array});
    ASSERT_OK_AND_ASSIGN(auto arranged, Arrange(input, DayContract()));
    ASSERT_NE(arranged.perm, nullptr) << "the counting sort, not the generic one";
    ASSERT_OK_AND_ASSIGN(auto rows, arranged.All());

    std::vector<int64_t> order(n);
    for (int64_t i = 0; i < n; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      const int64_t da = ChunkOrdinal(ChunkWidth::kDay, times[a]);
      const int64_t db = ChunkOrdinal(ChunkWidth::kDay, times[b]);
      if (da != db) return da < db;
      if (keys[a].has_value() != keys[b].has_value()) return keys[a].has_value();  // nulls last
      if (keys[a] && *keys[a] != *keys[b]) return *keys[a] < *keys[b];
      return times[a] < times[b];
    });
    ASSERT_EQ(Ints(rows, "value"), order);
    // Each row kept its own key, byte for byte.
    ASSERT_OK_AND_ASSIGN(auto decoded,
                         arrow::compute::Cast(rows->GetColumnByName("sensor"), arrow::large_binary()));
    int64_t at = 0;
    for (const auto& chunk : decoded.chunked_array()->chunks()) {
      const auto& a = static_cast<const arrow::LargeBinaryArray&>(*chunk);
      for (int64_t i = 0; i < a.length(); ++i, ++at) {
        const auto& want = keys[order[at]];
        ASSERT_EQ(a.IsNull(i), !want.has_value()) << "row " << at;
        if (want) ASSERT_EQ(a.GetView(i), *want) << "row " << at;
      }
    }
  }
}

// The second slice meets the first slice's keys in the same order and then one more: its ids
// are already the unified ones (no renumbering pass). The key column is a slice of a longer
// array (a non-zero offset), with nulls.
TEST(ArrangeTest, SlicesThatNumberKeysAlikeAndAnOffsetKeyColumnArrangeLikeAStableSort) {
  const int64_t n = 2'200'000;
  const int64_t skip = 3;  // rows before the slice
  arrow::TimestampBuilder times(kUtcMicros, arrow::default_memory_pool());
  arrow::StringBuilder keys;
  arrow::Int64Builder values;
  std::vector<std::optional<std::string>> key_of(n);
  std::vector<int64_t> time_of(n);
  const int64_t day0 = Micros(2025, 1, 1);
  for (int64_t i = -skip; i < n; ++i) {
    const int64_t time = day0 + (i * 37 % 1'000'000) * 200'000;  // about two days, out of order
    std::optional<std::string> key;
    // First half (the first slice): b, a, b, a, ... from row 1; second half: b, a, c, b, a, c,
    // ... so the second slice numbers b and a as the first did. Rows before the slice: a key of
    // their own.
    if (i < 0) {
      key = "outside";
    } else if (i % 101 != 0) {
      key = std::string(1, i < n / 2 ? "ab"[i % 2] : "bac"[(i - n / 2) % 3]);
    }
    ASSERT_OK(times.Append(time));
    ASSERT_OK(values.Append(i));
    ASSERT_OK(key ? keys.Append(*key) : keys.AppendNull());
    if (i >= 0) {
      key_of[i] = key;
      time_of[i] = time;
    }
  }
  auto whole = arrow::Table::Make(
      kRows, {times.Finish().ValueOrDie(), keys.Finish().ValueOrDie(), values.Finish().ValueOrDie()});
  auto input = whole->Slice(skip);
  ASSERT_OK_AND_ASSIGN(auto arranged, Arrange(input, DayContract()));
  ASSERT_NE(arranged.perm, nullptr);
  ASSERT_OK_AND_ASSIGN(auto rows, arranged.All());
  std::vector<int64_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const int64_t da = ChunkOrdinal(ChunkWidth::kDay, time_of[a]);
    const int64_t db = ChunkOrdinal(ChunkWidth::kDay, time_of[b]);
    if (da != db) return da < db;
    if (key_of[a].has_value() != key_of[b].has_value()) return key_of[a].has_value();
    if (key_of[a] && *key_of[a] != *key_of[b]) return *key_of[a] < *key_of[b];
    return time_of[a] < time_of[b];
  });
  ASSERT_EQ(Ints(rows, "value"), order);
  const auto sensors = Strings(rows, "sensor");
  for (int64_t k = 0; k < n; ++k) {
    ASSERT_EQ(sensors[k], key_of[order[k]] ? *key_of[order[k]] : "<null>") << "row " << k;
  }
}

// Buckets are sorted on all cores in slices cut between buckets: one bucket holding every row
// (one series, one day) leaves the other slice empty, and dedup shrinks the part before it.
TEST(ArrangeTest, OneSeriesInOneChunkArrangesWholeOnAnyNumberOfCores) {
  const int64_t n = 2'200'000;
  arrow::TimestampBuilder times(arrow::timestamp(arrow::TimeUnit::MICRO, "UTC"),
                                arrow::default_memory_pool());
  arrow::StringBuilder keys;
  arrow::Int64Builder values;
  const int64_t day0 = Micros(2025, 1, 1);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_OK(times.Append(day0 + (n - i) / 2 * 10));  // backwards, every time twice
    ASSERT_OK(keys.Append("only"));
    ASSERT_OK(values.Append(i));
  }
  auto input = arrow::Table::Make(kRows, {times.Finish().ValueOrDie(), keys.Finish().ValueOrDie(),
                                          values.Finish().ValueOrDie()});
  for (DedupPolicy policy : {DedupPolicy::kNone, DedupPolicy::kLast, DedupPolicy::kFirst}) {
    ASSERT_OK_AND_ASSIGN(auto arranged, Arrange(input, DayContract(policy)));
    ASSERT_EQ(arranged.runs.size(), 1u);
    const int64_t kept = policy == DedupPolicy::kNone ? n : n / 2 + 1;
    EXPECT_EQ(arranged.runs[0].length, kept);
    EXPECT_EQ(arranged.runs[0].newest, std::vector<int64_t>{kept - 1});
    ASSERT_OK_AND_ASSIGN(auto rows, arranged.Rows(arranged.runs[0]));
    // The reference: rows by time, arrival order among equal times, then the policy's pick.
    std::vector<int64_t> order(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
    auto time_of = [&](int64_t i) { return (n - i) / 2; };
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return time_of(a) < time_of(b); });
    std::vector<int64_t> want;
    for (size_t k = 0; k < order.size(); ++k) {
      const bool same_next = k + 1 < order.size() && time_of(order[k]) == time_of(order[k + 1]);
      const bool same_prev = k > 0 && time_of(order[k]) == time_of(order[k - 1]);
      if (policy == DedupPolicy::kLast && same_next) continue;
      if (policy == DedupPolicy::kFirst && same_prev) continue;
      want.push_back(order[k]);
    }
    ASSERT_EQ(static_cast<int64_t>(want.size()), kept);
    EXPECT_EQ(Ints(rows, "value"), want);
  }
}

// A run's rows, gathered by column kind (plain fixed width, dictionary ids with and without
// nulls, booleans, strings, nulls in values): the rows Arrow's Take gives.
TEST(ArrangeTest, GatheredRowsOfEveryColumnKindMatchArrowsTake) {
  auto schema = arrow::schema({field("ts", kUtcMicros, false), field("sensor", arrow::utf8()),
                               field("i8", arrow::int8()), field("i16", arrow::int16()),
                               field("f32", arrow::float32()), field("f64", arrow::float64()),
                               field("flag", arrow::boolean()), field("label", arrow::utf8()),
                               field("nullable", arrow::int64())});
  auto t = TableOf(schema, {"[" + Day(2, 3) + "," + Day(1, 1) + "," + Day(2, 1) + "," + Day(1, 2) + "]",
                            R"(["b", "a", null, "a"])", "[1, -2, 3, -4]", "[100, -200, 300, -400]",
                            "[1.5, -2.5, 3.5, -4.5]", "[0.25, 0.5, 0.75, 1.0]",
                            "[true, false, true, false]", R"(["w", "x", "y", "z"])",
                            "[7, null, 9, null]"});
  Contract contract = DayContract();
  ASSERT_OK_AND_ASSIGN(auto arranged, Arrange(t, contract));
  ASSERT_OK_AND_ASSIGN(auto rows, arranged.All());
  // Day 1: a@1:00 (row 1), a@2:00 (row 3); day 2: b@3:00 (row 0), null@1:00 (row 2, nulls last).
  auto want = cp::Take(t, Json(arrow::int64(), "[1, 3, 0, 2]")).ValueOrDie().table();
  for (const auto& name : schema->field_names()) {
    auto got = rows->GetColumnByName(name);
    if (got->type()->id() == arrow::Type::DICTIONARY) {
      got = cp::Cast(got, arrow::utf8()).ValueOrDie().chunked_array();
    }
    EXPECT_TRUE(got->Equals(*want->GetColumnByName(name)))
        << name << ": " << got->ToString() << " vs " << want->GetColumnByName(name)->ToString();
  }
}

// Runs cut so that they divide evenly among the cores: the longest cuttable one, at the series
// boundary nearest its middle, keeping offsets, lengths and newest rows consistent.
TEST(ArrangeTest, BalanceRunsCutsTheLongestRunAtASeriesBoundary) {
  auto run = [](int64_t ordinal, int64_t offset, std::vector<int64_t> newest) {
    ChunkRun r;
    r.ordinal = ordinal;
    r.offset = offset;
    r.newest = std::move(newest);
    r.length = r.newest.empty() ? 0 : r.newest.back() + 1;
    return r;
  };
  Arranged a;
  a.runs = {run(10, 0, {3, 9}), run(11, 10, {1, 5, 11, 19}), run(12, 30, {6})};
  a.BalanceRuns(/*workers=*/2, /*min_rows=*/5);
  ASSERT_EQ(a.runs.size(), 4u);
  // Run 11 (20 rows, series ending at 1, 5, 11, 19) is cut after row 11 (12 + 8 rows).
  EXPECT_EQ(a.runs[1].ordinal, 11);
  EXPECT_EQ(a.runs[1].offset, 10);
  EXPECT_EQ(a.runs[1].length, 12);
  EXPECT_EQ(a.runs[1].newest, (std::vector<int64_t>{1, 5, 11}));
  EXPECT_EQ(a.runs[2].ordinal, 11);
  EXPECT_EQ(a.runs[2].offset, 22);
  EXPECT_EQ(a.runs[2].length, 8);
  EXPECT_EQ(a.runs[2].newest, (std::vector<int64_t>{7}));
  EXPECT_EQ(a.runs[3].offset, 30);
  // Already even, one worker, runs too short or of one series: nothing is cut.
  a.BalanceRuns(2, 5);
  EXPECT_EQ(a.runs.size(), 4u);
  Arranged b;
  b.runs = {run(1, 0, {3, 9}), run(2, 10, {1, 5, 11, 19}), run(3, 30, {6})};
  b.BalanceRuns(1, 5);
  EXPECT_EQ(b.runs.size(), 3u);
  b.BalanceRuns(2, 100);
  EXPECT_EQ(b.runs.size(), 3u);
  Arranged c;
  c.runs = {run(1, 0, {99}), run(2, 100, {99}), run(3, 200, {99})};
  c.BalanceRuns(2, 5);
  EXPECT_EQ(c.runs.size(), 3u);
  // Three workers: cuts until the count divides (two runs: one cut of the longest).
  Arranged d;
  d.runs = {run(1, 0, {9, 19, 29, 39}), run(2, 40, {4, 9})};
  d.BalanceRuns(3, 2);
  EXPECT_EQ(d.runs.size(), 3u);
  int64_t covered = 0;
  for (const auto& r : d.runs) {
    EXPECT_EQ(r.offset, covered);
    EXPECT_EQ(r.newest.back() + 1, r.length);
    covered += r.length;
  }
  EXPECT_EQ(covered, 50);
}

TEST(ArrangeTest, EmptyTableHasNoRuns) {
  auto t = TableOf(kRows, {"[]", "[]", "[]"});
  ASSERT_OK_AND_ASSIGN(auto arranged, Arrange(t, DayContract()));
  ASSERT_OK_AND_ASSIGN(auto rows, arranged.All());
  EXPECT_TRUE(arranged.runs.empty());
}

// --- Arrange: merging sorted parts ------------------------------------------------------------

// One row of a part: (time, key or nullopt, value). Values are unique: they name the row.
using PartRow = std::tuple<int64_t, std::optional<std::string>, int64_t>;

// Rows of one part sorted as a data file's: by (day, key with nulls last, time), stably.
void SortLikeAFile(std::vector<PartRow>* rows) {
  auto day = [](const PartRow& r) { return ChunkOrdinal(ChunkWidth::kDay, std::get<0>(r)); };
  std::stable_sort(rows->begin(), rows->end(), [&](const PartRow& a, const PartRow& b) {
    if (day(a) != day(b)) return day(a) < day(b);
    const auto& ka = std::get<1>(a);
    const auto& kb = std::get<1>(b);
    if (ka.has_value() != kb.has_value()) return ka.has_value();
    if (ka && *ka != *kb) return *ka < *kb;
    return std::get<0>(a) < std::get<0>(b);
  });
}

// The parts as one table, one chunk per part; the key either plain or dictionary-encoded with a
// dictionary per part (its entries shuffled, one unused, one null that a row may point at), and
// the first part's key cut into two chunks sharing its dictionary, as batches of one row group do.
std::shared_ptr<arrow::Table> TableOfParts(const std::vector<std::vector<PartRow>>& parts, bool dictionary,
                                           std::mt19937_64& rng) {
  arrow::ChunkedArrayVector columns(3);
  arrow::ArrayVector times, keys, values;
  for (size_t p = 0; p < parts.size(); ++p) {
    arrow::TimestampBuilder tb(kUtcMicros, arrow::default_memory_pool());
    arrow::StringBuilder kb;
    arrow::Int64Builder vb;
    for (const auto& [time, key, value] : parts[p]) {
      EXPECT_OK(tb.Append(time));
      EXPECT_OK(key ? kb.Append(*key) : kb.AppendNull());
      EXPECT_OK(vb.Append(value));
    }
    times.push_back(tb.Finish().ValueOrDie());
    values.push_back(vb.Finish().ValueOrDie());
    auto plain = kb.Finish().ValueOrDie();
    if (!dictionary) {
      keys.push_back(plain);
      continue;
    }
    std::vector<std::string> entries;
    for (const auto& row : parts[p]) {
      if (std::get<1>(row)) entries.push_back(*std::get<1>(row));
    }
    std::sort(entries.begin(), entries.end());
    entries.erase(std::unique(entries.begin(), entries.end()), entries.end());
    entries.push_back("unused-" + std::to_string(p));
    std::shuffle(entries.begin(), entries.end(), rng);
    arrow::StringBuilder db;
    for (const auto& e : entries) EXPECT_OK(db.Append(e));
    EXPECT_OK(db.AppendNull());  // entry entries.size(): a null value
    auto dict = db.Finish().ValueOrDie();
    arrow::Int32Builder ib;
    for (const auto& row : parts[p]) {
      const auto& key = std::get<1>(row);
      if (!key) {
        // Half the null keys are null indices, half point at the null entry.
        EXPECT_OK(rng() % 2 ? ib.AppendNull() : ib.Append(static_cast<int32_t>(entries.size())));
        continue;
      }
      EXPECT_OK(ib.Append(static_cast<int32_t>(
          std::find(entries.begin(), entries.end(), *key) - entries.begin())));
    }
    auto indices = ib.Finish().ValueOrDie();
    auto type = arrow::dictionary(arrow::int32(), arrow::utf8());
    if (p == 0 && indices->length() >= 2) {
      const int64_t cut = indices->length() / 2;
      keys.push_back(std::make_shared<arrow::DictionaryArray>(type, indices->Slice(0, cut), dict));
      keys.push_back(std::make_shared<arrow::DictionaryArray>(type, indices->Slice(cut), dict));
    } else {
      keys.push_back(std::make_shared<arrow::DictionaryArray>(type, indices, dict));
    }
  }
  auto schema = arrow::schema({field("ts", kUtcMicros),
                               field("sensor", dictionary ? arrow::dictionary(arrow::int32(), arrow::utf8())
                                                          : arrow::utf8()),
                               field("value", arrow::int64())});
  return arrow::Table::Make(schema, {std::make_shared<arrow::ChunkedArray>(times, kUtcMicros),
                                     std::make_shared<arrow::ChunkedArray>(keys, schema->field(1)->type()),
                                     std::make_shared<arrow::ChunkedArray>(values, arrow::int64())});
}

std::vector<int64_t> LengthsOf(const std::vector<std::vector<PartRow>>& parts) {
  std::vector<int64_t> out;
  for (const auto& part : parts) out.push_back(static_cast<int64_t>(part.size()));
  return out;
}

// `got` holds the rows, runs and newest rows of `want`.
void ExpectSameArrangement(const Arranged& got, const Arranged& want) {
  ASSERT_OK_AND_ASSIGN(auto got_rows, got.All());
  ASSERT_OK_AND_ASSIGN(auto want_rows, want.All());
  EXPECT_EQ(Ints(got_rows, "value"), Ints(want_rows, "value"));
  EXPECT_EQ(Strings(got_rows, "sensor"), Strings(want_rows, "sensor"));
  ASSERT_EQ(got.runs.size(), want.runs.size());
  for (size_t r = 0; r < want.runs.size(); ++r) {
    EXPECT_EQ(got.runs[r].ordinal, want.runs[r].ordinal) << r;
    EXPECT_EQ(got.runs[r].offset, want.runs[r].offset) << r;
    EXPECT_EQ(got.runs[r].length, want.runs[r].length) << r;
    EXPECT_EQ(got.runs[r].newest, want.runs[r].newest) << r;
  }
}

// Parts that are each sorted like a data file are merged (no counting sort) into exactly what
// the counting sort of the same rows gives (a stable sort by day, key, time: the tests above),
// for every dedup policy, both position widths, plain and dictionary-encoded keys, and parts
// that follow each other in time, overlap, come newest first, or repeat rows of earlier parts
// with other values (dedup across parts, arrival order deciding).
TEST(ArrangeTest, SortedPartsAreMergedIntoWhatTheSortGives) {
  std::mt19937_64 rng(29);
  const int64_t day0 = Micros(2025, 1, 1);
  const int64_t hour = 3'600'000'000LL;
  enum Layout { kFollowing, kOverlapping, kNewestFirst, kRepeating };
  for (Layout layout : {kFollowing, kOverlapping, kNewestFirst, kRepeating}) {
    for (DedupPolicy policy : {DedupPolicy::kNone, DedupPolicy::kLast, DedupPolicy::kFirst}) {
      SCOPED_TRACE("layout " + std::to_string(layout) + ", policy " + std::to_string(static_cast<int>(policy)));
      std::vector<std::vector<PartRow>> parts;
      int64_t value = 0;
      const int num_parts = 12;
      for (int p = 0; p < num_parts; ++p) {
        // Each part covers 8 hours; following parts tile 4 days, so some cross midnight.
        int64_t start = day0 + p * 8 * hour;
        if (layout == kOverlapping) start = day0 + static_cast<int64_t>(rng() % 48) * hour;
        if (layout == kNewestFirst) start = day0 + (num_parts - 1 - p) * 8 * hour;
        std::vector<PartRow> rows;
        std::set<std::pair<int64_t, std::string>> taken;  // (time, key) of the part
        const int n = 200 + static_cast<int>(rng() % 400);
        for (int i = 0; i < n; ++i) {
          std::optional<std::string> key;
          if (rng() % 50 != 0) key = rng() % 40 == 0 ? std::string() : "k" + std::to_string(rng() % 37);
          // Whole minutes: rows of one series collide in time now and then.
          const int64_t time = start + static_cast<int64_t>(rng() % (8 * 60)) * 60'000'000LL;
          if (policy != DedupPolicy::kNone && !taken.insert({time, key.value_or("\xff")}).second) continue;
          rows.push_back({time, key, value++});
        }
        if (layout == kRepeating && p > 0) {
          // Rows of the previous part sent again, with new values.
          for (size_t i = 0; i < parts.back().size(); i += 3) {
            auto [time, key, v] = parts.back()[i];
            if (policy != DedupPolicy::kNone && !taken.insert({time, key.value_or("\xff")}).second) continue;
            rows.push_back({time, key, value++});
          }
        }
        SortLikeAFile(&rows);
        parts.push_back(std::move(rows));
      }
      const auto lengths = LengthsOf(parts);
      auto plain = TableOfParts(parts, /*dictionary=*/false, rng);
      auto encoded = TableOfParts(parts, /*dictionary=*/true, rng);
      for (bool wide : {false, true}) {
        SCOPED_TRACE(wide ? "64-bit positions" : "32-bit positions");
        ForceWideArrangePositionsForTesting(wide);
        const int64_t merges = ArrangeMergesForTesting();
        auto sorted = Arrange(plain, DayContract(policy));
        auto merged = Arrange(plain, DayContract(policy), lengths);
        auto merged_encoded = Arrange(encoded, DayContract(policy), lengths);
        ForceWideArrangePositionsForTesting(false);
        EXPECT_EQ(ArrangeMergesForTesting() - merges, 2) << "both were merged, not sorted";
        ASSERT_OK(sorted.status());
        ASSERT_OK(merged.status());
        ASSERT_OK(merged_encoded.status());
        ExpectSameArrangement(*merged, *sorted);
        ExpectSameArrangement(*merged_encoded, *sorted);
      }
    }
  }
}

// Parts that are not what a data file holds are sorted as if no parts were given: a part out of
// order (by time within a series, or by key), a part of a dedup table holding two rows of one
// series and time, rows of one day after the next day's. Parts that do not add up to the input
// are an error.
TEST(ArrangeTest, PartsThatAreNotSortedLikeAFileAreSortedInstead) {
  auto part = [](std::vector<PartRow> rows) { return rows; };
  const int64_t t0 = Micros(2025, 1, 1, 6);
  const int64_t minute = 60'000'000LL;
  const PartRow a1{t0, "a", 1}, a2{t0 + minute, "a", 2}, b1{t0, "b", 3}, b2{t0 + minute, "b", 4};
  const PartRow next_day{Micros(2025, 1, 2), "a", 9};
  struct Case {
    const char* what;
    std::vector<PartRow> bad;
    DedupPolicy policy;
  };
  const std::vector<Case> cases = {
      {"time out of order", part({a2, a1, b1, b2}), DedupPolicy::kNone},
      {"key out of order", part({b1, b2, a1, a2}), DedupPolicy::kNone},
      {"day out of order", part({next_day, a1, a2}), DedupPolicy::kNone},
      {"a repeated time in a dedup table", part({a1, PartRow{t0, "a", 5}, b1}), DedupPolicy::kLast},
      {"a repeated time in a dedup table", part({a1, PartRow{t0, "a", 5}, b1}), DedupPolicy::kFirst},
  };
  std::mt19937_64 rng(3);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    const std::vector<std::vector<PartRow>> parts = {part({a1, b2}), c.bad, part({PartRow{t0 + 2 * minute, "a", 7}})};
    auto table = TableOfParts(parts, /*dictionary=*/false, rng);
    const int64_t merges = ArrangeMergesForTesting();
    ASSERT_OK_AND_ASSIGN(auto sorted, Arrange(table, DayContract(c.policy)));
    ASSERT_OK_AND_ASSIGN(auto given, Arrange(table, DayContract(c.policy), LengthsOf(parts)));
    EXPECT_EQ(ArrangeMergesForTesting(), merges) << "no merge";
    ExpectSameArrangement(given, sorted);
  }
  // Repeated times are fine in a table without dedup: both rows stay, in arrival order.
  const std::vector<std::vector<PartRow>> repeats = {part({a1, PartRow{t0, "a", 5}, b1}), part({a2})};
  auto table = TableOfParts(repeats, /*dictionary=*/false, rng);
  const int64_t merges = ArrangeMergesForTesting();
  ASSERT_OK_AND_ASSIGN(auto merged, Arrange(table, DayContract(), LengthsOf(repeats)));
  EXPECT_EQ(ArrangeMergesForTesting(), merges + 1);
  ASSERT_OK_AND_ASSIGN(auto rows, merged.All());
  EXPECT_EQ(Ints(rows, "value"), (std::vector<int64_t>{1, 5, 2, 3}));
  // Parts that do not cover the input.
  auto short_parts = Arrange(table, DayContract(), {3});
  EXPECT_TRUE(short_parts.status().IsInvalid()) << short_parts.status();
}

// A batch read from Parquet carries its row group's whole dictionary: only the entries rows use
// are taken in (hashed, ranked), so a few rows of a file of many series keep the counting sort
// (one bucket per dictionary entry would have outnumbered the rows many times over).
TEST(ArrangeTest, OnlyTheDictionaryEntriesRowsUseAreTakenIn) {
  arrow::StringBuilder entries;
  for (int i = 0; i < 50'000; ++i) ASSERT_OK(entries.Append("k" + std::to_string(i)));
  auto dict = entries.Finish().ValueOrDie();
  auto type = arrow::dictionary(arrow::int32(), arrow::utf8());
  auto key = std::make_shared<arrow::DictionaryArray>(type, Json(arrow::int32(), "[49999, 7, 7, 123]"), dict);
  auto schema = arrow::schema({field("ts", kUtcMicros), field("sensor", type), field("value", arrow::int64())});
  auto table = arrow::Table::Make(
      schema, {Json(kUtcMicros, "[" + Day(1) + "," + Day(1, 2) + "," + Day(1, 1) + "," + Day(1) + "]"), key,
               Json(arrow::int64(), "[1, 2, 3, 4]")});
  ASSERT_OK_AND_ASSIGN(auto arranged, Arrange(table, DayContract()));
  ASSERT_NE(arranged.perm, nullptr) << "the counting sort, not the generic one";
  const auto& arranged_key = static_cast<const arrow::DictionaryArray&>(*arranged.source->column(1)->chunk(0));
  EXPECT_EQ(arranged_key.dictionary()->length(), 3);
  ASSERT_OK_AND_ASSIGN(auto rows, arranged.All());
  EXPECT_EQ(Strings(rows, "sensor"), (std::vector<std::string>{"k123", "k49999", "k7", "k7"}));
  EXPECT_EQ(Ints(rows, "value"), (std::vector<int64_t>{4, 1, 3, 2}));
}

// A dictionary-encoded key whose index points past its dictionary (damaged data) is an error,
// not a read out of bounds.
TEST(ArrangeTest, ADictionaryIndexOutsideItsDictionaryIsInvalid) {
  auto dict = Json(arrow::utf8(), R"(["a","b"])");
  auto indices = Json(arrow::int32(), "[0, 2]");
  auto type = arrow::dictionary(arrow::int32(), arrow::utf8());
  auto key = std::make_shared<arrow::DictionaryArray>(type, indices, dict);
  auto schema = arrow::schema({field("ts", kUtcMicros), field("sensor", type), field("value", arrow::int64())});
  auto table = arrow::Table::Make(
      schema, {Json(kUtcMicros, "[" + Day(1) + "," + Day(1, 1) + "]"), key,
               Json(arrow::int64(), "[1, 2]")});
  auto arranged = Arrange(table, DayContract());
  ASSERT_TRUE(arranged.status().IsInvalid()) << arranged.status();
  EXPECT_NE(arranged.status().message().find("outside its dictionary"), std::string::npos);
}

// --- DedupMask ------------------------------------------------------------------------------

std::string Mask(const std::shared_ptr<arrow::Table>& sorted, DedupPolicy policy) {
  auto mask = DedupMask(*sorted, {"sensor", "ts"}, policy).ValueOrDie();
  std::string out;
  const auto& b = static_cast<const arrow::BooleanArray&>(*mask);
  for (int64_t i = 0; i < b.length(); ++i) out += b.Value(i) ? '1' : '0';
  return out;
}

TEST(DedupMaskTest, LastKeepsTheFinalRowOfEachRun) {
  auto sorted =
      TableOf(kRows, {"[1, 1, 2, 1, 1, 1]", R"(["a","a","a","b","b","b"])", "[0,0,0,0,0,0]"});
  EXPECT_EQ(Mask(sorted, DedupPolicy::kLast), "011001");
}

TEST(DedupMaskTest, FirstKeepsTheFirstRowOfEachRun) {
  auto sorted =
      TableOf(kRows, {"[1, 1, 2, 1, 1, 1]", R"(["a","a","a","b","b","b"])", "[0,0,0,0,0,0]"});
  EXPECT_EQ(Mask(sorted, DedupPolicy::kFirst), "101100");
}

TEST(DedupMaskTest, NullKeysFormOneRun) {
  auto sorted = TableOf(kRows, {"[1, 1, 1]", R"(["a", null, null])", "[0,0,0]"});
  EXPECT_EQ(Mask(sorted, DedupPolicy::kLast), "101");
}

TEST(DedupMaskTest, TinyTablesKeepEverything) {
  EXPECT_EQ(Mask(TableOf(kRows, {"[1]", R"(["a"])", "[0]"}), DedupPolicy::kLast), "1");
  EXPECT_EQ(Mask(TableOf(kRows, {"[]", "[]", "[]"}), DedupPolicy::kFirst), "");
}

}  // namespace
}  // namespace timelake::testing
