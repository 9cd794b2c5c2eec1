// Commit files: every action survives SerializeCommit → ParseCommit, the JSON follows the Delta
// protocol (commitInfo first, unknown actions and fields ignored), and file names map to versions.
#include "timelake/log/actions.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace timelake::testing {
namespace {

Commit RoundTrip(const Commit& commit) {
  return ParseCommit(SerializeCommit(commit), "roundtrip.json").ValueOrDie();
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    out.push_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

Commit EveryKind() {
  Commit c;
  c.commit_info = CommitInfo{};
  c.commit_info->operation = "WRITE";
  c.protocol = Protocol{};
  c.metadata = Metadata{};
  c.txns.push_back({"app", 1, 2});
  c.adds.push_back({});
  c.adds[0].path = "data/a.parquet";
  c.removes.push_back({});
  c.removes[0].path = "data/b.parquet";
  return c;
}

TEST(ActionsTest, CommitInfoIsTheFirstLine) {
  const auto lines = Lines(SerializeCommit(EveryKind()));
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_EQ(lines[0].rfind("{\"commitInfo\":", 0), 0u) << lines[0];
}

TEST(ActionsTest, EveryLineEndsInNewline) {
  const std::string text = SerializeCommit(EveryKind());
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  for (const auto& line : Lines(text)) EXPECT_EQ(line.find('\n'), std::string::npos);
}

TEST(ActionsTest, CommitInfoRoundTrips) {
  Commit c;
  CommitInfo info;
  info.timestamp = 1735787045678;
  info.operation = "WRITE";
  info.operation_parameters = {{"mode", "Append"}};
  info.read_version = 41;
  info.isolation_level = "WriteSerializable";
  info.is_blind_append = true;
  info.engine_info = "timelake/0.1.0";
  info.txn_id = "6f1c";
  c.commit_info = info;
  const Commit back = RoundTrip(c);
  ASSERT_TRUE(back.commit_info);
  EXPECT_EQ(back.commit_info->timestamp, 1735787045678);
  EXPECT_EQ(back.commit_info->operation, "WRITE");
  EXPECT_EQ(back.commit_info->operation_parameters, info.operation_parameters);
  EXPECT_EQ(back.commit_info->read_version, 41);
  EXPECT_EQ(back.commit_info->isolation_level, "WriteSerializable");
  EXPECT_TRUE(back.commit_info->is_blind_append);
  EXPECT_EQ(back.commit_info->engine_info, "timelake/0.1.0");
  EXPECT_EQ(back.commit_info->txn_id, "6f1c");
}

TEST(ActionsTest, CommitInfoMetricsAreWrittenAsStrings) {
  Commit c;
  c.commit_info = CommitInfo{};
  c.commit_info->metrics = {{"numFiles", 3}, {"numOutputRows", 1000}};
  const std::string text = SerializeCommit(c);
  EXPECT_NE(text.find("\"operationMetrics\":{\"numFiles\":\"3\",\"numOutputRows\":\"1000\"}"),
            std::string::npos)
      << text;
}

TEST(ActionsTest, CommitInfoMetricsRoundTrip) {
  Commit c;
  c.commit_info = CommitInfo{};
  c.commit_info->metrics = {{"numFiles", 3}, {"numOutputRows", 1000}};
  const Commit back = RoundTrip(c);
  ASSERT_TRUE(back.commit_info);
  EXPECT_EQ(back.commit_info->metrics, c.commit_info->metrics);
}

TEST(ActionsTest, ProtocolWithFeaturesRoundTrips) {
  Commit c;
  Protocol p;
  p.min_reader_version = 3;
  p.min_writer_version = 7;
  p.reader_features = std::vector<std::string>{"timestampNtz"};
  p.writer_features = std::vector<std::string>{"appendOnly", "timestampNtz"};
  c.protocol = p;
  const Commit back = RoundTrip(c);
  ASSERT_TRUE(back.protocol);
  EXPECT_EQ(back.protocol->min_reader_version, 3);
  EXPECT_EQ(back.protocol->min_writer_version, 7);
  EXPECT_EQ(back.protocol->reader_features, p.reader_features);
  EXPECT_EQ(back.protocol->writer_features, p.writer_features);
}

TEST(ActionsTest, ProtocolWithoutFeaturesHasNoFeatureLists) {
  Commit c;
  c.protocol = Protocol{};
  const Commit back = RoundTrip(c);
  ASSERT_TRUE(back.protocol);
  EXPECT_EQ(back.protocol->min_reader_version, 1);
  EXPECT_EQ(back.protocol->min_writer_version, 2);
  EXPECT_FALSE(back.protocol->reader_features);
  EXPECT_FALSE(back.protocol->writer_features);
}

TEST(ActionsTest, MetadataWithConfigurationRoundTrips) {
  Commit c;
  Metadata m;
  m.id = "0b6a1c2e-5d1f-4c38-9a7e-3f2d1c0b9a8e";
  m.name = "readings";
  m.description = "sensor readings";
  m.format_options = {{"compression", "zstd"}};
  m.schema_string = R"({"type":"struct","fields":[]})";
  m.partition_columns = {"day"};
  m.configuration = {{"delta.checkpointInterval", "10"}, {"timelake.timeColumn", "ts"}};
  m.created_time = 1700000000000;
  c.metadata = m;
  const Commit back = RoundTrip(c);
  ASSERT_TRUE(back.metadata);
  EXPECT_EQ(back.metadata->id, m.id);
  EXPECT_EQ(back.metadata->name, m.name);
  EXPECT_EQ(back.metadata->description, m.description);
  EXPECT_EQ(back.metadata->format_provider, "parquet");
  EXPECT_EQ(back.metadata->format_options, m.format_options);
  EXPECT_EQ(back.metadata->schema_string, m.schema_string);
  EXPECT_EQ(back.metadata->partition_columns, m.partition_columns);
  EXPECT_EQ(back.metadata->configuration, m.configuration);
  EXPECT_EQ(back.metadata->created_time, m.created_time);
}

TEST(ActionsTest, TxnRoundTrips) {
  Commit c;
  c.txns.push_back({"timelake:batch-1", 0, 1700000000123});
  c.txns.push_back({"spark-stream", 17, std::nullopt});
  const Commit back = RoundTrip(c);
  ASSERT_EQ(back.txns.size(), 2u);
  EXPECT_EQ(back.txns[0].app_id, "timelake:batch-1");
  EXPECT_EQ(back.txns[0].version, 0);
  EXPECT_EQ(back.txns[0].last_updated, 1700000000123);
  EXPECT_EQ(back.txns[1].app_id, "spark-stream");
  EXPECT_EQ(back.txns[1].version, 17);
  EXPECT_FALSE(back.txns[1].last_updated);
}

TEST(ActionsTest, AddWithStatsTagsAndNullPartitionValueRoundTrips) {
  Commit c;
  AddFile a;
  a.path = "data/2025-01-02/part-%20x.parquet";
  a.partition_values = {{"region", "eu"}, {"zone", std::nullopt}};
  a.size = 4096;
  a.modification_time = 1735787045678;
  a.data_change = false;
  a.stats = R"({"numRecords":3,"minValues":{"v":"a\"b"}})";
  a.tags = {{"timelake.seq", "4"}, {"timelake.chunk", "2025-01-02"}};
  c.adds.push_back(a);
  const Commit back = RoundTrip(c);
  ASSERT_EQ(back.adds.size(), 1u);
  const AddFile& b = back.adds[0];
  EXPECT_EQ(b.path, a.path);
  EXPECT_EQ(b.partition_values, a.partition_values);
  EXPECT_FALSE(b.partition_values.at("zone").has_value());
  EXPECT_EQ(b.size, 4096);
  EXPECT_EQ(b.modification_time, 1735787045678);
  EXPECT_FALSE(b.data_change);
  EXPECT_EQ(b.stats, a.stats);
  EXPECT_EQ(b.tags, a.tags);
}

TEST(ActionsTest, RemoveRoundTrips) {
  Commit c;
  RemoveFile r;
  r.path = "data/old.parquet";
  r.deletion_timestamp = 1735787045678;
  r.data_change = false;
  r.extended_file_metadata = true;
  r.partition_values = {{"p", std::nullopt}};
  r.size = 777;
  c.removes.push_back(r);
  const Commit back = RoundTrip(c);
  ASSERT_EQ(back.removes.size(), 1u);
  const RemoveFile& b = back.removes[0];
  EXPECT_EQ(b.path, r.path);
  EXPECT_EQ(b.deletion_timestamp, r.deletion_timestamp);
  EXPECT_FALSE(b.data_change);
  EXPECT_TRUE(b.extended_file_metadata);
  EXPECT_EQ(b.partition_values, r.partition_values);
  EXPECT_EQ(b.size, 777);
}

TEST(ActionsTest, ACommitFileWithoutActionsIsCorruption) {
  // A torn write leaves an empty file; taking it for an empty commit would lose its rows.
  for (const char* text : {"", "\n", "  \r\n\t\n"}) {
    EXPECT_TRUE(FailsWith(ParseCommit(text, "t/_delta_log/00000000000000000004.json"),
                          arrow::StatusCode::IOError, "t/_delta_log/00000000000000000004.json"))
        << "'" << text << "'";
  }
  EXPECT_TRUE(FailsWith(ParseCommit(SerializeCommit(Commit{}), "x.json"),
                        arrow::StatusCode::IOError, "no action"));
}

TEST(ActionsTest, ALineWithoutAnActionIsCorruption) {
  const std::string add = R"({"add":{"path":"a.parquet","size":1}})";
  for (const std::string line : {"{}", R"({"add":null})", R"({"add":5})"}) {
    EXPECT_TRUE(FailsWith(ParseCommit(add + "\n" + line + "\n", "00000000000000000002.json"),
                          arrow::StatusCode::IOError, "00000000000000000002.json line 2"))
        << line;
  }
}

TEST(ActionsTest, CommitInfoAloneIsAValidCommit) {
  Commit c;
  c.commit_info = CommitInfo{};
  c.commit_info->operation = "OPTIMIZE";
  const Commit back = RoundTrip(c);
  ASSERT_TRUE(back.commit_info);
  EXPECT_EQ(back.commit_info->operation, "OPTIMIZE");
  EXPECT_TRUE(back.txns.empty() && back.adds.empty() && back.removes.empty());
}

TEST(ActionsTest, ACommitOfOnlyUnknownActionsIsValid) {
  ASSERT_OK(ParseCommit(R"({"domainMetadata":{"domain":"d","configuration":"{}"}})" "\n", "x.json"));
}

TEST(ActionsTest, CheckpointFileNameIsTheZeroPaddedVersion) {
  EXPECT_EQ(CheckpointFileName(10), "00000000000000000010.checkpoint.parquet");
  EXPECT_EQ(CheckpointVersionOf(CheckpointFileName(12345)), 12345);
}

TEST(ActionsTest, UnknownActionsAreIgnored) {
  const std::string text =
      R"({"domainMetadata":{"domain":"d","configuration":"{}","removed":false}})"
      "\n"
      R"({"cdc":{"path":"_change_data/x.parquet","size":1,"dataChange":false}})"
      "\n"
      R"({"add":{"path":"a.parquet","partitionValues":{},"size":5,"modificationTime":1,)"
      R"("dataChange":true}})"
      "\n";
  ASSERT_OK_AND_ASSIGN(auto commit, ParseCommit(text, "00000000000000000003.json"));
  ASSERT_EQ(commit.adds.size(), 1u);
  EXPECT_EQ(commit.adds[0].path, "a.parquet");
  EXPECT_EQ(commit.adds[0].size, 5);
}

TEST(ActionsTest, UnknownFieldsAreIgnored) {
  const std::string text =
      R"({"add":{"path":"a.parquet","partitionValues":{},"size":5,"modificationTime":1,)"
      R"("dataChange":true,"deletionVector":{"storageType":"u"},"baseRowId":4,)"
      R"("clusteringProvider":"x"}})"
      "\n";
  ASSERT_OK_AND_ASSIGN(auto commit, ParseCommit(text, "x.json"));
  ASSERT_EQ(commit.adds.size(), 1u);
  EXPECT_EQ(commit.adds[0].size, 5);
}

TEST(ActionsTest, BlankLinesAndCarriageReturnsAreTolerated) {
  const std::string text =
      "\r\n" R"({"txn":{"appId":"a","version":3}})" "\r\n\n";
  ASSERT_OK_AND_ASSIGN(auto commit, ParseCommit(text, "x.json"));
  ASSERT_EQ(commit.txns.size(), 1u);
  EXPECT_EQ(commit.txns[0].version, 3);
}

TEST(ActionsTest, MalformedJsonIsIOErrorNamingTheFile) {
  const std::string text = R"({"add":{"path":"a.parquet")" "\n";
  auto parsed = ParseCommit(text, "t/_delta_log/00000000000000000007.json");
  EXPECT_TRUE(FailsWith(parsed, arrow::StatusCode::IOError,
                        "t/_delta_log/00000000000000000007.json"));
}

TEST(ActionsTest, NonObjectLineIsIOError) {
  auto parsed = ParseCommit("[1,2,3]\n", "00000000000000000001.json");
  EXPECT_TRUE(FailsWith(parsed, arrow::StatusCode::IOError, "00000000000000000001.json"));
}

TEST(ActionsTest, CommitFileNameIsTwentyDigitsAndJson) {
  EXPECT_EQ(CommitFileName(0), "00000000000000000000.json");
  EXPECT_EQ(CommitFileName(123), "00000000000000000123.json");
}

TEST(ActionsTest, CommitVersionOfInvertsCommitFileName) {
  for (int64_t v : {0LL, 1LL, 10LL, 9999999LL, 12345678901234LL}) {
    EXPECT_EQ(CommitVersionOf(CommitFileName(v)), v);
  }
}

TEST(ActionsTest, CommitVersionOfRejectsOtherFiles) {
  EXPECT_FALSE(CommitVersionOf("_last_checkpoint"));
  EXPECT_FALSE(CommitVersionOf("00000000000000000010.checkpoint.parquet"));
  EXPECT_FALSE(CommitVersionOf("0000000000000000010.json"));    // 19 digits
  EXPECT_FALSE(CommitVersionOf("000000000000000000010.json"));  // 21 digits
  EXPECT_FALSE(CommitVersionOf("00000000000000000010.json.tmp"));
  EXPECT_FALSE(CommitVersionOf("0000000000000000001x.json"));
  EXPECT_FALSE(CommitVersionOf("00000000000000000010.crc"));
}

TEST(ActionsTest, CommitVersionOfRejectsSignedNames) {
  EXPECT_FALSE(CommitVersionOf("-0000000000000000001.json"));
}

TEST(ActionsTest, CheckpointVersionOfReadsClassicCheckpoints) {
  EXPECT_EQ(CheckpointVersionOf("00000000000000000010.checkpoint.parquet"), 10);
  EXPECT_FALSE(CheckpointVersionOf("00000000000000000010.json"));
  EXPECT_FALSE(
      CheckpointVersionOf("00000000000000000010.checkpoint.0000000001.0000000002.parquet"));
}

}  // namespace
}  // namespace timelake::testing
