// The time-series contract: validation against the schema, its configuration form, chunk
// arithmetic in UTC (before 1970 too), and the duration and timestamp text it relies on.
#include "timelake/contract.h"

#include <arrow/api.h>
#include <gtest/gtest.h>

#include "test_util.h"
#include "timelake/util/time.h"

namespace timelake::testing {
namespace {

using arrow::field;

std::shared_ptr<arrow::Schema> Readings() {
  return arrow::schema({field("ts", arrow::timestamp(arrow::TimeUnit::MICRO, "UTC")),
                        field("sensor", arrow::utf8()), field("site", arrow::int32()),
                        field("value", arrow::float64())});
}

std::shared_ptr<arrow::Schema> Plain() {
  return arrow::schema({field("id", arrow::int64()), field("name", arrow::utf8())});
}

ContractOptions WithKey(std::vector<std::string> key) {
  ContractOptions o;
  o.series_key = std::move(key);
  return o;
}

TEST(MakeContractTest, SingleTimestampColumnIsTheTimeColumn) {
  ASSERT_OK_AND_ASSIGN(auto c, MakeContract(*Readings(), {}));
  EXPECT_EQ(c.time_column, "ts");
  EXPECT_TRUE(c.is_time_series());
}

TEST(MakeContractTest, DefaultsAreDayChunksNoDedupKeepForever) {
  ASSERT_OK_AND_ASSIGN(auto c, MakeContract(*Readings(), {}));
  EXPECT_EQ(c.chunk, ChunkWidth::kDay);
  EXPECT_EQ(c.dedup, DedupPolicy::kNone);
  EXPECT_TRUE(c.series_key.empty());
  EXPECT_EQ(c.retention_us, 0);
}

TEST(MakeContractTest, SchemaWithoutTimestampIsAPlainTable) {
  ASSERT_OK_AND_ASSIGN(auto c, MakeContract(*Plain(), {}));
  EXPECT_FALSE(c.is_time_series());
  EXPECT_EQ(c.chunk, ChunkWidth::kNone);
}

TEST(MakeContractTest, SeveralTimestampsWithoutTimeColumnIsInvalid) {
  auto schema = arrow::schema({field("created", arrow::timestamp(arrow::TimeUnit::MICRO)),
                               field("updated", arrow::timestamp(arrow::TimeUnit::MICRO))});
  EXPECT_TRUE(IsInvalid(MakeContract(*schema, {}), "created, updated"));
}

TEST(MakeContractTest, TimeColumnPicksOneOfSeveralTimestamps) {
  auto schema = arrow::schema({field("created", arrow::timestamp(arrow::TimeUnit::MICRO)),
                               field("updated", arrow::timestamp(arrow::TimeUnit::MICRO))});
  ContractOptions o;
  o.time_column = "updated";
  ASSERT_OK_AND_ASSIGN(auto c, MakeContract(*schema, o));
  EXPECT_EQ(c.time_column, "updated");
}

TEST(MakeContractTest, TimeColumnMissingOrNotATimestampIsInvalid) {
  ContractOptions missing;
  missing.time_column = "when";
  EXPECT_TRUE(IsInvalid(MakeContract(*Readings(), missing), "when"));
  ContractOptions wrong_type;
  wrong_type.time_column = "value";
  EXPECT_TRUE(IsInvalid(MakeContract(*Readings(), wrong_type), "value"));
}

TEST(MakeContractTest, PlainTableWithChunkRetentionOrDedupIsInvalid) {
  ContractOptions chunk, retention, dedup;
  chunk.chunk = "day";
  retention.retention = "30d";
  dedup.dedup = "last";
  EXPECT_TRUE(IsInvalid(MakeContract(*Plain(), chunk), "chunk"));
  EXPECT_TRUE(IsInvalid(MakeContract(*Plain(), retention), "retention"));
  EXPECT_TRUE(IsInvalid(MakeContract(*Plain(), dedup), "dedup"));
}

TEST(MakeContractTest, BadChunkDedupOrRetentionTextIsInvalid) {
  ContractOptions chunk, dedup, retention;
  chunk.chunk = "week";
  dedup.dedup = "latest";
  retention.retention = "forever";
  EXPECT_TRUE(IsInvalid(MakeContract(*Readings(), chunk), "week"));
  EXPECT_TRUE(IsInvalid(MakeContract(*Readings(), dedup), "latest"));
  EXPECT_TRUE(IsInvalid(MakeContract(*Readings(), retention), "forever"));
}

TEST(MakeContractTest, ChunkDedupAndRetentionAreParsed) {
  ContractOptions o;
  o.chunk = "hour";
  o.dedup = "first";
  o.retention = "2w";
  o.series_key = std::vector<std::string>{"sensor", "site"};
  ASSERT_OK_AND_ASSIGN(auto c, MakeContract(*Readings(), o));
  EXPECT_EQ(c.chunk, ChunkWidth::kHour);
  EXPECT_EQ(c.dedup, DedupPolicy::kFirst);
  EXPECT_EQ(c.retention, "2w");
  EXPECT_EQ(c.retention_us, 14 * kMicrosPerDay);
  EXPECT_EQ(c.series_key, (std::vector<std::string>{"sensor", "site"}));
}

TEST(MakeContractTest, SeriesKeyWithMissingColumnIsInvalid) {
  EXPECT_TRUE(IsInvalid(MakeContract(*Readings(), WithKey({"device"})), "device"));
}

TEST(MakeContractTest, SeriesKeyWithFloatColumnIsInvalid) {
  EXPECT_TRUE(IsInvalid(MakeContract(*Readings(), WithKey({"value"})), "value"));
}

TEST(MakeContractTest, SeriesKeyNamingAColumnTwiceIsInvalid) {
  EXPECT_TRUE(IsInvalid(MakeContract(*Readings(), WithKey({"sensor", "sensor"})), "twice"));
}

TEST(MakeContractTest, SeriesKeyContainingTheTimeColumnIsInvalid) {
  EXPECT_TRUE(IsInvalid(MakeContract(*Readings(), WithKey({"sensor", "ts"})), "time column"));
}

TEST(MakeContractTest, ColumnNamesEqualIgnoringCaseAreInvalid) {
  auto schema = arrow::schema({field("Value", arrow::int64()), field("value", arrow::int64())});
  EXPECT_TRUE(IsInvalid(MakeContract(*schema, {}), "value"));
}

TEST(MakeContractTest, UnknownTimelakePropertyIsInvalid) {
  ContractOptions o;
  o.properties = {{"timelake.chunk", "hour"}};
  EXPECT_TRUE(IsInvalid(MakeContract(*Readings(), o), "timelake.chunk"));
}

TEST(ValidatePropertiesTest, CheckpointIntervalMustBeAPositiveInteger) {
  EXPECT_TRUE(IsInvalid(ValidateProperties({{"delta.checkpointInterval", "ten"}}),
                        "delta.checkpointInterval"));
  EXPECT_TRUE(IsInvalid(ValidateProperties({{"delta.checkpointInterval", "0"}})));
  EXPECT_TRUE(IsInvalid(ValidateProperties({{"delta.checkpointInterval", "10x"}})));
  EXPECT_OK(ValidateProperties({{"delta.checkpointInterval", "25"}}));
}

TEST(ValidatePropertiesTest, KnownTimelakeKeysNeedValidValues) {
  EXPECT_OK(ValidateProperties({{"timelake.autoMaintain", "false"}}));
  EXPECT_OK(ValidateProperties({{"timelake.targetFileSize", "134217728"}}));
  EXPECT_TRUE(IsInvalid(ValidateProperties({{"timelake.autoMaintain", "yes"}}), "yes"));
  EXPECT_TRUE(IsInvalid(ValidateProperties({{"timelake.targetFileSize", "-1"}}), "-1"));
}

TEST(ValidatePropertiesTest, DurationPropertiesMustBeDeltaIntervals) {
  for (const char* key : {"delta.deletedFileRetentionDuration", "delta.logRetentionDuration",
                          "delta.setTransactionRetentionDuration"}) {
    for (const char* bad : {"7 days", "interval 7", "interval seven days", "interval 1 month",
                            "interval -1 days", "INTERVAL 7 DAYS", "interval 7 days 2 hours", "",
                            "interval 7 fortnights", "7d"}) {
      auto st = ValidateProperties({{key, bad}, {"timelake.retentionDurationCheck", "false"}});
      EXPECT_TRUE(IsInvalid(st, key)) << key << " = '" << bad << "'";
      EXPECT_TRUE(IsInvalid(st, "interval <n> <unit>")) << key << " = '" << bad << "'";
    }
    EXPECT_OK(ValidateProperties({{key, "interval 30 days"}}));
    EXPECT_OK(ValidateProperties({{key, "interval 2 weeks"}}));
  }
}

TEST(ValidatePropertiesTest, DeletedFileRetentionUnderSevenDaysIsRefused) {
  for (const char* short_one : {"interval 0 seconds", "interval 6 days", "interval 167 hours"}) {
    auto st = ValidateProperties({{"delta.deletedFileRetentionDuration", short_one}});
    EXPECT_TRUE(IsInvalid(st, "7 days")) << short_one;
    EXPECT_TRUE(IsInvalid(st, "timelake.retentionDurationCheck")) << short_one;
  }
  EXPECT_OK(ValidateProperties({{"delta.deletedFileRetentionDuration", "interval 168 hours"}}));
  EXPECT_OK(ValidateProperties({{"delta.deletedFileRetentionDuration", "interval 1 week"}}));
  EXPECT_OK(ValidateProperties({{"delta.deletedFileRetentionDuration", "interval 7 days"},
                                {"timelake.retentionDurationCheck", "true"}}));
}

TEST(ValidatePropertiesTest, TheRetentionCheckCanBeTurnedOffExplicitly) {
  EXPECT_OK(ValidateProperties({{"delta.deletedFileRetentionDuration", "interval 0 seconds"},
                                {"timelake.retentionDurationCheck", "false"}}));
  EXPECT_TRUE(IsInvalid(ValidateProperties({{"timelake.retentionDurationCheck", "off"}}),
                        "timelake.retentionDurationCheck"));
}

TEST(ValidatePropertiesTest, PropertiesSwitchingOnUnimplementedFeaturesAreRefused) {
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"delta.columnMapping.mode", "name"},
           {"delta.enableChangeDataFeed", "true"},
           {"delta.enableDeletionVectors", "true"},
           {"delta.checkpointPolicy", "v2"},
           {"delta.feature.deletionVectors", "supported"},
           {"delta.constraints.positive", "value > 0"},
           {"delta.minWriterVersion", "7"}}) {
    EXPECT_TRUE(IsInvalid(ValidateProperties({{key, value}}), key)) << key;
  }
  EXPECT_OK(ValidateProperties({{"delta.columnMapping.mode", "none"},
                                {"delta.enableChangeDataFeed", "false"},
                                {"delta.checkpointPolicy", "classic"}}));
}

TEST(ValidatePropertiesTest, AppendOnlyIsABoolean) {
  EXPECT_TRUE(IsInvalid(ValidateProperties({{"delta.appendOnly", "yes"}}), "delta.appendOnly"));
}

TEST(MakeContractTest, AppendOnlyConflictsWithWhatRemovesRows) {
  ContractOptions o;
  o.properties = {{"delta.appendOnly", "true"}};
  EXPECT_OK(MakeContract(*Readings(), o));
  o.retention = "90d";
  EXPECT_TRUE(IsInvalid(MakeContract(*Readings(), o), "retention"));
  o.retention.reset();
  o.dedup = "last";
  EXPECT_TRUE(IsInvalid(MakeContract(*Readings(), o), "dedup"));
}

TEST(ParseDeltaIntervalTest, AcceptsTheFormEveryEngineReads) {
  EXPECT_EQ(ParseDeltaInterval("interval 7 days").ValueOrDie(), 7 * 86'400'000LL);
  EXPECT_EQ(ParseDeltaInterval("interval 1 day").ValueOrDie(), 86'400'000LL);
  EXPECT_EQ(ParseDeltaInterval("interval 2 weeks").ValueOrDie(), 14 * 86'400'000LL);
  EXPECT_EQ(ParseDeltaInterval("interval 36 hours").ValueOrDie(), 36 * 3'600'000LL);
  EXPECT_EQ(ParseDeltaInterval("interval 90 minutes").ValueOrDie(), 90 * 60'000LL);
  EXPECT_EQ(ParseDeltaInterval("interval 0 seconds").ValueOrDie(), 0);
  EXPECT_EQ(ParseDeltaInterval("interval 1500 milliseconds").ValueOrDie(), 1500);
  EXPECT_EQ(ParseDeltaInterval("interval 2500 microseconds").ValueOrDie(), 2);
  EXPECT_EQ(ParseDeltaInterval("  interval   7  days ").ValueOrDie(), 7 * 86'400'000LL);
}

TEST(ParseDeltaIntervalTest, RejectsOverflowAndNanoseconds) {
  EXPECT_TRUE(IsInvalid(ParseDeltaInterval("interval 99999999999999999 weeks")));
  EXPECT_TRUE(IsInvalid(ParseDeltaInterval("interval 5 nanoseconds")));  // Spark cannot read it
}

TEST(ValidatePropertiesTest, OtherKeysPassThrough) {
  EXPECT_OK(ValidateProperties({{"delta.appendOnly", "true"}, {"owner", "ops"}}));
}

TEST(ContractConfigurationTest, RoundTripsThroughConfiguration) {
  ContractOptions o;
  o.chunk = "month";
  o.dedup = "last";
  o.retention = "90d";
  o.series_key = std::vector<std::string>{"site", "sensor"};
  ASSERT_OK_AND_ASSIGN(auto c, MakeContract(*Readings(), o));
  const auto config = ContractConfiguration(c);
  EXPECT_EQ(config.at("timelake.timeColumn"), "ts");
  EXPECT_EQ(config.at("timelake.seriesKey"), R"(["site","sensor"])");
  ASSERT_OK_AND_ASSIGN(auto back, ContractFromConfiguration(config));
  EXPECT_EQ(back.time_column, c.time_column);
  EXPECT_EQ(back.series_key, c.series_key);
  EXPECT_EQ(back.chunk, c.chunk);
  EXPECT_EQ(back.retention, c.retention);
  EXPECT_EQ(back.retention_us, c.retention_us);
  EXPECT_EQ(back.dedup, c.dedup);
}

TEST(ContractConfigurationTest, PlainTableHasNoConfiguration) {
  EXPECT_TRUE(ContractConfiguration(Contract{}).empty());
}

TEST(ContractConfigurationTest, ForeignTableWithoutTimelakeKeysIsPlain) {
  ASSERT_OK_AND_ASSIGN(auto c, ContractFromConfiguration({{"delta.appendOnly", "true"}}));
  EXPECT_FALSE(c.is_time_series());
}

TEST(ContractConfigurationTest, CorruptSeriesKeyIsAnError) {
  EXPECT_FALSE(
      ContractFromConfiguration({{"timelake.timeColumn", "ts"}, {"timelake.seriesKey", "[oops"}})
          .ok());
}

// --- chunks ---------------------------------------------------------------------------------

TEST(ChunkTest, DayOrdinalCountsDaysSinceEpoch) {
  EXPECT_EQ(ChunkOrdinal(ChunkWidth::kDay, 0), 0);
  EXPECT_EQ(ChunkOrdinal(ChunkWidth::kDay, Micros(2025, 1, 2, 23, 59, 59, 999999)), 20090);
  EXPECT_EQ(ChunkLabel(ChunkWidth::kDay, 20090), "2025-01-02");
}

TEST(ChunkTest, InstantsBefore1970FallInTheEarlierChunk) {
  EXPECT_EQ(ChunkOrdinal(ChunkWidth::kHour, -1), -1);
  EXPECT_EQ(ChunkOrdinal(ChunkWidth::kDay, -1), -1);
  EXPECT_EQ(ChunkOrdinal(ChunkWidth::kMonth, -1), -1);
  EXPECT_EQ(ChunkLabel(ChunkWidth::kHour, -1), "1969-12-31T23");
  EXPECT_EQ(ChunkLabel(ChunkWidth::kDay, -1), "1969-12-31");
  EXPECT_EQ(ChunkLabel(ChunkWidth::kMonth, -1), "1969-12");
}

TEST(ChunkTest, HourLabelsCarryTheHour) {
  const int64_t t = Micros(2025, 1, 2, 3, 4, 5);
  EXPECT_EQ(ChunkLabel(ChunkWidth::kHour, ChunkOrdinal(ChunkWidth::kHour, t)), "2025-01-02T03");
}

TEST(ChunkTest, LastMicrosecondOfLeapFebruaryIsInFebruary) {
  const int64_t t = Micros(2024, 2, 29, 23, 59, 59, 999999);
  const int64_t month = ChunkOrdinal(ChunkWidth::kMonth, t);
  EXPECT_EQ(month, (2024 - 1970) * 12 + 1);
  EXPECT_EQ(ChunkLabel(ChunkWidth::kMonth, month), "2024-02");
  EXPECT_EQ(ChunkStart(ChunkWidth::kMonth, month), Micros(2024, 2, 1));
  EXPECT_EQ(ChunkEnd(ChunkWidth::kMonth, month), Micros(2024, 3, 1));
  EXPECT_EQ(ChunkLabel(ChunkWidth::kMonth, ChunkOrdinal(ChunkWidth::kMonth, t + 1)), "2024-03");
}

TEST(ChunkTest, MonthsBefore1970StartOnTheFirst) {
  const int64_t t = Micros(1969, 3, 15, 12);
  const int64_t month = ChunkOrdinal(ChunkWidth::kMonth, t);
  EXPECT_EQ(month, -10);
  EXPECT_EQ(ChunkLabel(ChunkWidth::kMonth, month), "1969-03");
  EXPECT_EQ(ChunkStart(ChunkWidth::kMonth, month), Micros(1969, 3, 1));
  EXPECT_EQ(ChunkEnd(ChunkWidth::kMonth, month), Micros(1969, 4, 1));
}

TEST(ChunkTest, EveryInstantLiesWithinItsChunk) {
  const int64_t instants[] = {Micros(1900, 1, 1),       Micros(1969, 12, 31, 23, 59, 59, 999999),
                              -1,  0,  1,               Micros(2000, 2, 29, 12),
                              Micros(2023, 12, 31, 23, 59, 59, 999999),
                              Micros(2100, 3, 1),       Micros(1600, 2, 29, 1, 2, 3, 4)};
  for (ChunkWidth w : {ChunkWidth::kHour, ChunkWidth::kDay, ChunkWidth::kMonth}) {
    for (int64_t t : instants) {
      const int64_t o = ChunkOrdinal(w, t);
      EXPECT_LE(ChunkStart(w, o), t) << ChunkWidthName(w) << " " << t;
      EXPECT_LT(t, ChunkEnd(w, o)) << ChunkWidthName(w) << " " << t;
      EXPECT_EQ(ChunkEnd(w, o), ChunkStart(w, o + 1));
    }
  }
}

TEST(ChunkTest, PlainTablesHaveOneUnboundedChunk) {
  EXPECT_EQ(ChunkOrdinal(ChunkWidth::kNone, Micros(2025, 1, 1)), 0);
  EXPECT_EQ(ChunkEnd(ChunkWidth::kNone, 0), INT64_MAX);
  EXPECT_EQ(ChunkLabel(ChunkWidth::kNone, 0), "");
}

TEST(ChunkTest, NamesOfWidthsAndPolicies) {
  EXPECT_EQ(ChunkWidthName(ChunkWidth::kHour), "hour");
  EXPECT_EQ(ChunkWidthName(ChunkWidth::kMonth), "month");
  EXPECT_EQ(DedupPolicyName(DedupPolicy::kNone), "none");
  EXPECT_EQ(DedupPolicyName(DedupPolicy::kLast), "last");
}

// --- durations and timestamps ---------------------------------------------------------------

TEST(ParseDurationTest, AcceptsWholeNumbersWithAUnit) {
  EXPECT_EQ(ParseDuration("90d").ValueOrDie(), 90 * kMicrosPerDay);
  EXPECT_EQ(ParseDuration("36h").ValueOrDie(), 36 * kMicrosPerHour);
  EXPECT_EQ(ParseDuration("15m").ValueOrDie(), 15 * 60 * kMicrosPerSecond);
  EXPECT_EQ(ParseDuration("2w").ValueOrDie(), 14 * kMicrosPerDay);
  EXPECT_EQ(ParseDuration("30s").ValueOrDie(), 30 * kMicrosPerSecond);
}

TEST(ParseDurationTest, RejectsEverythingElseNamingTheText) {
  for (const char* bad : {"", "d", "0d", "-1d", "10x", "1.5h", " 5d", "5 d", "5D", "+5d"}) {
    EXPECT_TRUE(IsInvalid(ParseDuration(bad), std::string("'") + bad + "'")) << "'" << bad << "'";
  }
}

TEST(ParseDurationTest, RejectsOverflow) {
  EXPECT_TRUE(IsInvalid(ParseDuration("99999999999999w")));
}

TEST(FormatIsoMillisTest, FormatsUtcWithMilliseconds) {
  EXPECT_EQ(FormatIsoMillis(0), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(FormatIsoMillis(1735787045678000), "2025-01-02T03:04:05.678Z");
}

TEST(FormatIsoMillisTest, TruncatesMicrosecondsTowardThePast) {
  EXPECT_EQ(FormatIsoMillis(1735787045678999), "2025-01-02T03:04:05.678Z");
  EXPECT_EQ(FormatIsoMillis(-1), "1969-12-31T23:59:59.999Z");
}

TEST(ParseIsoMicrosTest, ReadsWhatFormatIsoMillisWrites) {
  for (int64_t micros : {int64_t{0}, int64_t{1735787045678000}, int64_t{-1000}}) {
    EXPECT_EQ(ParseIsoMicros(FormatIsoMillis(micros)), micros);
  }
}

TEST(ParseIsoMicrosTest, ReadsOffsetsFractionsAndNaiveText) {
  EXPECT_EQ(ParseIsoMicros("2025-01-02T03:04:05"), 1735787045000000);
  EXPECT_EQ(ParseIsoMicros("2025-01-02T03:04:05.1234567Z"), 1735787045123456);  // cut to micros
  EXPECT_EQ(ParseIsoMicros("2025-01-02T05:04:05.678+02:00"), 1735787045678000);
  EXPECT_EQ(ParseIsoMicros("2025-01-02T01:04:05.678-02:00"), 1735787045678000);
}

TEST(ParseIsoMicrosTest, RejectsAnythingElse) {
  for (const char* text : {"", "2025-01-02", "2025-01-02 03:04:05", "2025-13-02T03:04:05Z",
                           "2025-01-02T03:04:05.Z", "2025-01-02T03:04:05Zjunk", "20250102T030405Z"}) {
    EXPECT_FALSE(ParseIsoMicros(text).has_value()) << text;
  }
}

TEST(DeltaIntervalTest, ParsesDeltaIntervalText) {
  EXPECT_EQ(DeltaIntervalMillis("interval 7 days", 0), 7 * 86'400'000LL);
  EXPECT_EQ(DeltaIntervalMillis("1 hour", 0), 3'600'000);
  EXPECT_EQ(DeltaIntervalMillis("INTERVAL 2 WEEKS", 0), 14 * 86'400'000LL);
  EXPECT_EQ(DeltaIntervalMillis("", 42), 42);
  EXPECT_EQ(DeltaIntervalMillis("soon", 42), 42);
}

}  // namespace
}  // namespace timelake::testing
