// FileStatsJson: the Delta `stats` of a data file, as other readers will use them for skipping.
#include "timelake/ingest/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <arrow/api.h>
#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include "test_util.h"

namespace timelake::testing {
namespace {

using arrow::field;

const auto kUtcMicros = arrow::timestamp(arrow::TimeUnit::MICRO, "UTC");

// Stats of a one-column table.
rapidjson::Document StatsOf(const std::shared_ptr<arrow::DataType>& type, const std::string& json,
                            std::string* text_out = nullptr) {
  auto table = TableOf(arrow::schema({field("c", type)}), {json});
  std::string text = FileStatsJson(*table).ValueOrDie();
  if (text_out) *text_out = text;
  rapidjson::Document doc;
  doc.Parse(text.c_str());
  EXPECT_FALSE(doc.HasParseError()) << text;
  return doc;
}

std::string MinText(const rapidjson::Document& d) { return d["minValues"]["c"].GetString(); }
std::string MaxText(const rapidjson::Document& d) { return d["maxValues"]["c"].GetString(); }

TEST(FileStatsTest, NumRecordsCountsRows) {
  auto doc = StatsOf(arrow::int64(), "[1, 2, null]");
  EXPECT_EQ(doc["numRecords"].GetInt64(), 3);
}

TEST(FileStatsTest, IntegersHaveMinAndMax) {
  auto doc = StatsOf(arrow::int32(), "[5, -3, null, 12]");
  EXPECT_EQ(doc["minValues"]["c"].GetInt(), -3);
  EXPECT_EQ(doc["maxValues"]["c"].GetInt(), 12);
}

// A gathered file's series key is dictionary-encoded over the whole input's values: only the
// entries its rows use count, whatever the index width; null rows count as nulls.
TEST(FileStatsTest, DictionaryColumnsTakeMinAndMaxOfTheEntriesTheRowsUse) {
  for (const auto& index_type : {arrow::int8(), arrow::uint16(), arrow::int32(), arrow::int64()}) {
    auto dictionary = Json(arrow::utf8(), R"(["a", "m", "q", "z"])");
    auto indices = Json(index_type, "[2, 1, null, 1, 2]");
    auto type = arrow::dictionary(index_type, arrow::utf8());
    auto column = arrow::DictionaryArray::FromArrays(type, indices, dictionary).ValueOrDie();
    auto table = arrow::Table::Make(arrow::schema({field("c", type)}), {column});
    ASSERT_OK_AND_ASSIGN(auto text, FileStatsJson(*table));
    rapidjson::Document doc;
    doc.Parse(text.c_str());
    ASSERT_FALSE(doc.HasParseError()) << text;
    EXPECT_EQ(MinText(doc), "m") << index_type->ToString();
    EXPECT_EQ(MaxText(doc), "q") << index_type->ToString();
    EXPECT_EQ(doc["nullCount"]["c"].GetInt64(), 1);
  }
}

// Float min/max run in lanes over the values: whatever lane or tail holds the extremes, and with
// NaN anywhere, the answer is the sequential one.
TEST(FileStatsTest, FloatMinAndMaxAreExactWhereverTheExtremesLie) {
  for (int n : {2, 7, 8, 9, 17, 1003}) {
    for (int at_min = 0; at_min < n; at_min += std::max(1, n / 5)) {
      const int at_max = (at_min + (n + 1) / 2) % n;  // never at_min for n >= 2
      std::string json = "[";
      for (int i = 0; i < n; ++i) {
        std::string v = i % 3 == 1 ? "NaN" : std::to_string(i % 4);
        if (i == at_min) v = "-5.5";
        if (i == at_max) v = "7.25";
        json += (i ? "," : "") + v;
      }
      auto doc = StatsOf(arrow::float64(), json + "]");
      EXPECT_EQ(doc["minValues"]["c"].GetDouble(), -5.5) << n << " " << at_min;
      EXPECT_EQ(doc["maxValues"]["c"].GetDouble(), 7.25) << n << " " << at_max;
    }
  }
}

TEST(FileStatsTest, NullCountIsPerColumn) {
  auto table = TableOf(arrow::schema({field("a", arrow::int64()), field("b", arrow::utf8())}),
                       {"[1, null, null]", R"(["x", "y", null])"});
  ASSERT_OK_AND_ASSIGN(auto text, FileStatsJson(*table));
  rapidjson::Document doc;
  doc.Parse(text.c_str());
  EXPECT_EQ(doc["nullCount"]["a"].GetInt64(), 2);
  EXPECT_EQ(doc["nullCount"]["b"].GetInt64(), 1);
}

TEST(FileStatsTest, AllNullColumnHasNullCountButNoMinOrMax) {
  auto doc = StatsOf(arrow::int64(), "[null, null]");
  EXPECT_FALSE(doc["minValues"].HasMember("c"));
  EXPECT_FALSE(doc["maxValues"].HasMember("c"));
  EXPECT_EQ(doc["nullCount"]["c"].GetInt64(), 2);
}

TEST(FileStatsTest, TimestampMinIsFlooredToTheMillisecond) {
  const int64_t t = 1735787045678999;  // 2025-01-02T03:04:05.678999
  auto doc = StatsOf(kUtcMicros, "[" + std::to_string(t) + "]");
  EXPECT_EQ(MinText(doc), "2025-01-02T03:04:05.678Z");
}

TEST(FileStatsTest, TimestampMaxIsCeiledToTheMillisecond) {
  const int64_t t = 1735787045678001;  // 2025-01-02T03:04:05.678001
  auto doc = StatsOf(kUtcMicros, "[" + std::to_string(t) + "]");
  EXPECT_EQ(MaxText(doc), "2025-01-02T03:04:05.679Z");
}

TEST(FileStatsTest, WholeMillisecondTimestampsAreExact) {
  auto doc = StatsOf(kUtcMicros, "[1735787045678000, 1735787045679000]");
  EXPECT_EQ(MinText(doc), "2025-01-02T03:04:05.678Z");
  EXPECT_EQ(MaxText(doc), "2025-01-02T03:04:05.679Z");
}

TEST(FileStatsTest, TimestampsBefore1970RoundOutward) {
  auto doc = StatsOf(kUtcMicros, "[-1500, -500]");
  EXPECT_EQ(MinText(doc), "1969-12-31T23:59:59.998Z");
  EXPECT_EQ(MaxText(doc), "1970-01-01T00:00:00.000Z");
}

TEST(FileStatsTest, TheLastMicrosecondOfYear9999HasTheProtocolsTruncatedMax) {
  const int64_t last = Micros(9999, 12, 31, 23, 59, 59, 999999);
  std::string text;
  auto doc = StatsOf(kUtcMicros, "[" + std::to_string(last) + "]", &text);
  EXPECT_EQ(MinText(doc), "9999-12-31T23:59:59.999Z");
  // Ceiled it would be year 10000, which Spark and delta-rs cannot parse. Truncated is what the
  // protocol specifies; readers add 1 ms to a max before comparing.
  EXPECT_EQ(MaxText(doc), "9999-12-31T23:59:59.999Z");
  EXPECT_EQ(text.find("10000"), std::string::npos) << text;
}

TEST(FileStatsTest, MaxesJustBelowTheLastMillisecondAreStillCeiled) {
  auto doc = StatsOf(kUtcMicros, "[" + std::to_string(Micros(9999, 12, 31, 23, 59, 59, 998001)) + "]");
  EXPECT_EQ(MaxText(doc), "9999-12-31T23:59:59.999Z");
}

TEST(FileStatsTest, TheLastMillisecondOfYear9999IsAnExactMax) {
  auto doc = StatsOf(kUtcMicros, "[" + std::to_string(Micros(9999, 12, 31, 23, 59, 59, 999000)) + "]");
  EXPECT_EQ(MaxText(doc), "9999-12-31T23:59:59.999Z");
}

TEST(FileStatsTest, InstantsOutsideYears1To9999HaveNoMinOrMax) {
  const int64_t before_year_1 = Micros(0, 6, 1);
  const int64_t after_9999 = Micros(10000, 1, 2);
  auto doc = StatsOf(kUtcMicros, "[" + std::to_string(before_year_1) + ", " +
                                     std::to_string(after_9999) + "]");
  EXPECT_FALSE(doc["minValues"].HasMember("c"));
  EXPECT_FALSE(doc["maxValues"].HasMember("c"));
  auto first = StatsOf(kUtcMicros, "[" + std::to_string(Micros(1, 1, 1)) + "]");
  EXPECT_EQ(MinText(first), "0001-01-01T00:00:00.000Z");
}

TEST(FileStatsTest, DatesOutsideYears1To9999HaveNoMinOrMax) {
  const auto day = [](int64_t y, int m, int d) { return std::to_string(DaysFromCivil(y, m, d)); };
  auto doc = StatsOf(arrow::date32(), "[" + day(9999, 12, 31) + ", " + day(10000, 1, 1) + "]");
  EXPECT_FALSE(doc["maxValues"].HasMember("c"));
  auto ok = StatsOf(arrow::date32(), "[" + day(9999, 12, 31) + "]");
  EXPECT_EQ(MaxText(ok), "9999-12-31");
}

TEST(StatStringTest, CutsLikeTheStringStats) {
  EXPECT_EQ(StatString("short", true), "short");
  EXPECT_EQ(StatString(std::string(40, 'k'), false), std::string(32, 'k'));
  EXPECT_EQ(StatString(std::string(40, 'k'), true), std::string(32, 'k') + "\xF4\x8F\xBF\xBF");
  EXPECT_EQ(StatString(std::string(32, 'k'), true), std::string(32, 'k'));  // nothing cut
}

TEST(StatStringTest, AMaxWithNoShortUpperBoundIsKeptWhole) {
  // Past the cut the value goes on with U+10FFFF and more: prefix + U+10FFFF is below it.
  const std::string value = std::string(32, 'k') + "\xF4\x8F\xBF\xBF" + "x";
  EXPECT_EQ(StatString(value, true), value);
  EXPECT_EQ(StatString(value, false), std::string(32, 'k'));
  // Exactly prefix + U+10FFFF: the cut max equals the value, a bound.
  const std::string exact = std::string(32, 'k') + "\xF4\x8F\xBF\xBF";
  EXPECT_EQ(StatString(exact, true), exact);
}

TEST(FileStatsTest, NaiveTimestampsHaveNoZone) {
  auto doc = StatsOf(arrow::timestamp(arrow::TimeUnit::MICRO), "[1735787045678000]");
  EXPECT_EQ(MinText(doc), "2025-01-02T03:04:05.678");
}

TEST(FileStatsTest, DatesAreIsoDays) {
  auto doc = StatsOf(arrow::date32(), "[20090, -1]");
  EXPECT_EQ(MinText(doc), "1969-12-31");
  EXPECT_EQ(MaxText(doc), "2025-01-02");
}

TEST(FileStatsTest, ShortStringsAreKeptWhole) {
  auto doc = StatsOf(arrow::utf8(), R"(["pear", "apple", "zucchini"])");
  EXPECT_EQ(MinText(doc), "apple");
  EXPECT_EQ(MaxText(doc), "zucchini");
}

TEST(FileStatsTest, LongStringsAreCutTo32CharactersAndTheMaxStillBoundsThem) {
  const std::string low(40, 'a'), high(40, 'z');
  auto doc = StatsOf(arrow::utf8(), "[\"" + low + "\", \"" + high + "\"]");
  EXPECT_EQ(MinText(doc), std::string(32, 'a'));
  EXPECT_EQ(MaxText(doc), std::string(32, 'z') + "\xF4\x8F\xBF\xBF");  // U+10FFFF
}

TEST(FileStatsTest, StringsAreCutAtCharactersNotBytes) {
  std::string s;
  for (int i = 0; i < 40; ++i) s += "\xC3\xA9";  // é, two bytes each
  auto doc = StatsOf(arrow::utf8(), "[\"" + s + "\"]");
  EXPECT_EQ(MinText(doc), s.substr(0, 64));
}

TEST(FileStatsTest, NaNIsNeverWritten) {
  std::string text;
  auto doc = StatsOf(arrow::float64(), "[NaN, NaN]", &text);
  EXPECT_FALSE(doc["minValues"].HasMember("c"));
  EXPECT_FALSE(doc["maxValues"].HasMember("c"));
  EXPECT_EQ(text.find("NaN"), std::string::npos) << text;
}

TEST(FileStatsTest, NaNBesideNumbersDoesNotHideTheirRange) {
  std::string text;
  auto doc = StatsOf(arrow::float64(), "[1.5, NaN, -2.25]", &text);
  EXPECT_EQ(text.find("NaN"), std::string::npos) << text;
  EXPECT_DOUBLE_EQ(doc["minValues"]["c"].GetDouble(), -2.25);
  EXPECT_DOUBLE_EQ(doc["maxValues"]["c"].GetDouble(), 1.5);
}

TEST(FileStatsTest, InfinitiesAreNotWritten) {
  std::string text;
  auto doc = StatsOf(arrow::float64(), "[Inf, 1.0]", &text);
  EXPECT_FALSE(doc["maxValues"].HasMember("c")) << text;
  EXPECT_DOUBLE_EQ(doc["minValues"]["c"].GetDouble(), 1.0);
}

TEST(FileStatsTest, DecimalsAreNumbersAtTheirScale) {
  std::string text;
  auto doc = StatsOf(arrow::decimal128(10, 2), R"(["12.50", "-3.07"])", &text);
  EXPECT_NE(text.find(R"("minValues":{"c":-3.07})"), std::string::npos) << text;
  EXPECT_NE(text.find(R"("maxValues":{"c":12.50})"), std::string::npos) << text;
}

TEST(FileStatsTest, StructChildrenAreNested) {
  auto type = arrow::struct_({field("x", arrow::int64()), field("y", arrow::utf8())});
  std::string text;
  auto doc = StatsOf(type, R"([{"x": 3, "y": "b"}, {"x": 1, "y": null}])", &text);
  EXPECT_EQ(doc["minValues"]["c"]["x"].GetInt64(), 1) << text;
  EXPECT_EQ(doc["maxValues"]["c"]["y"].GetString(), std::string("b"));
  EXPECT_EQ(doc["nullCount"]["c"]["y"].GetInt64(), 1);
}

TEST(FileStatsTest, OnlyTheFirstIndexedColumnsGetMinAndMax) {
  auto table = TableOf(arrow::schema({field("a", arrow::int64()), field("b", arrow::int64()),
                                      field("c", arrow::int64())}),
                       {"[1]", "[2]", "[3]"});
  ASSERT_OK_AND_ASSIGN(auto text, FileStatsJson(*table, /*max_indexed_columns=*/2));
  rapidjson::Document doc;
  doc.Parse(text.c_str());
  EXPECT_TRUE(doc["minValues"].HasMember("b"));
  EXPECT_FALSE(doc["minValues"].HasMember("c"));
  EXPECT_FALSE(doc["maxValues"].HasMember("c"));
  EXPECT_TRUE(doc["nullCount"].HasMember("c"));
}

TEST(FileStatsTest, UnindexableTypesOnlyGetNullCounts) {
  auto doc = StatsOf(arrow::list(arrow::int32()), "[[1, 2], null]");
  EXPECT_FALSE(doc["minValues"].HasMember("c"));
  EXPECT_EQ(doc["nullCount"]["c"].GetInt64(), 1);
}

}  // namespace
}  // namespace timelake::testing

namespace timelake::testing {
namespace {

// Stats of a file written in parts merge to what the whole file's stats would be, whatever the
// cut points: the streaming writer (Ingestor) relies on it.
std::shared_ptr<arrow::Schema> MergeSchema() {
  auto inner = arrow::struct_({field("a", arrow::int32()), field("b", arrow::utf8())});
  return arrow::schema({field("ts", arrow::timestamp(arrow::TimeUnit::MICRO, "UTC")),
                        field("k", arrow::utf8()), field("v", arrow::float64()),
                        field("n", arrow::int64()), field("d", arrow::decimal128(38, 2)),
                        field("s", inner), field("empty", arrow::int32()),
                        field("day", arrow::date32())});
}

// Every way of cutting `table` into consecutive parts, merged.
std::vector<std::string> MergedCuts(const arrow::Table& table) {
  std::vector<std::string> out;
  const int64_t n = table.num_rows();
  for (int cuts = 0; cuts < (1 << (n - 1)); ++cuts) {
    std::vector<std::string> parts;
    int64_t start = 0;
    for (int64_t i = 1; i <= n; ++i) {
      if (i == n || (cuts >> (i - 1) & 1)) {
        parts.push_back(FileStatsJson(*table.Slice(start, i - start)).ValueOrDie());
        start = i;
      }
    }
    out.push_back(MergeFileStats(*table.schema(), parts).ValueOrDie());
  }
  return out;
}

TEST(MergeFileStatsTest, PartsMergeToTheStatsOfTheWhole) {
  const std::string long_a(40, 'a'), long_z = std::string(35, 'z') + "y";
  auto table = TableOf(MergeSchema(), {
      R"([1700000000123456, 1700000000000000, 1600000000000999, 1000, 1800000000000001, 1650000000000000])",
      "[\"" + long_z + "\", \"m\", null, \"" + long_a + "\", \"b\", \"\"]",
      "[1.5, 3, null, -2.25, 1e300, 1e-7]",
      "[9007199254740993, -9007199254740993, 0, null, 5, 7]",
      R"(["123456789012345678901234567890123.45", "123456789012345678901234567890123.44", null, "-0.01", "0.00", "99.99"])",
      R"([{"a": 1, "b": "x"}, null, {"a": -5, "b": null}, {"a": 7, "b": "y"}, {"a": null, "b": "w"}, {"a": 2, "b": "z"}])",
      "[null, null, null, null, null, null]",
      "[19000, 1, 2932896, 100, 20000, 18000]"});
  const std::string whole = FileStatsJson(*table).ValueOrDie();
  for (const auto& merged : MergedCuts(*table)) EXPECT_EQ(merged, whole);
}

TEST(MergeFileStatsTest, ABoundAPartCouldNotWriteIsLeftOutNeverWrong) {
  // NaN, infinities and instants outside 0001–9999 get no bound in the part holding them; the
  // merge cannot tell whether the whole's bound would be one, so it writes none for that column.
  // Whatever it writes equals the whole's; counts are exact.
  auto table = TableOf(MergeSchema(), {
      R"([1700000000123456, 1700000000000000, 1600000000000999, -62135596800000001, 1800000000000001, 1650000000000000])",
      R"(["a", "b", null, "c", "d", "e"])",
      "[1.5, NaN, null, -2.25, Infinity, 1e-7]",
      "[1, 2, 3, 4, 5, 6]",
      R"(["1.00", "2.00", "3.00", "4.00", "5.00", "6.00"])",
      R"([{"a": 1, "b": "x"}, null, {"a": -5, "b": null}, {"a": 7, "b": "y"}, {"a": null, "b": "w"}, {"a": 2, "b": "z"}])",
      "[null, null, null, null, null, null]",
      "[19000, 1, 2932896, 100, 20000, 18000]"});
  rapidjson::Document whole;
  whole.Parse(FileStatsJson(*table).ValueOrDie().c_str());
  for (const auto& text : MergedCuts(*table)) {
    rapidjson::Document merged;
    merged.Parse(text.c_str());
    EXPECT_EQ(merged["numRecords"], whole["numRecords"]);
    EXPECT_EQ(merged["nullCount"], whole["nullCount"]) << text;
    for (const char* bounds : {"minValues", "maxValues"}) {
      for (const auto& m : merged[bounds].GetObject()) {
        ASSERT_TRUE(whole[bounds].HasMember(m.name)) << text;
        EXPECT_EQ(m.value, whole[bounds][m.name]) << text;
      }
    }
  }
}

TEST(MergeFileStatsTest, NumbersCompareExactlyByTheirText) {
  auto schema = arrow::schema({field("d", arrow::decimal128(38, 0)), field("x", arrow::float64())});
  const std::string a = R"({"numRecords":1,"minValues":{"d":12345678901234567890123456789,"x":1e-7},"maxValues":{"d":12345678901234567890123456789,"x":2.5e3},"nullCount":{"d":0,"x":0}})";
  const std::string b = R"({"numRecords":2,"minValues":{"d":12345678901234567890123456788,"x":-0.5},"maxValues":{"d":12345678901234567890123456790,"x":2499.99},"nullCount":{"d":0,"x":1}})";
  ASSERT_OK_AND_ASSIGN(auto merged, MergeFileStats(*schema, {a, b}));
  EXPECT_EQ(merged, R"({"numRecords":3,"minValues":{"d":12345678901234567890123456788,"x":-0.5},"maxValues":{"d":12345678901234567890123456790,"x":2.5e3},"nullCount":{"d":0,"x":1}})");
}

}  // namespace
}  // namespace timelake::testing
