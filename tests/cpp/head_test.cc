// The table head (table/head.h): what a writer puts decodes to the snapshot and latest() of its
// version; damaged or forged bytes never decode; a handle opened from a head answers as one
// opened from the log, and a head the log contradicts sends the open to the log.
#include "timelake/table/head.h"

#include <arrow/api.h>
#include <arrow/compute/api.h>
#include <gtest/gtest.h>

#include "lake_fixture.h"
#include "test_util.h"
#include "timelake/util/encoding.h"

namespace timelake::testing {
namespace {

constexpr const char* kHead = "default/t/_timelake/head";

class HeadTest : public LakeFixture {
 protected:
  void SetUp() override {
    TableOpenOptions open;
    open.heads = true;  // a MemoryStore gives no reply dates: every open checks the log
    lake_ = Lake::OverStore(store_, open);
    CreateTable();
  }

  int64_t Append(const std::string& rows_json_sensors, const std::string& times, const std::string& values) {
    auto batch = Batch(schema_, {times, rows_json_sensors, values});
    auto reader = Reader(schema_, {batch});
    auto result = table_->Append(reader.get(), {});
    EXPECT_TRUE(result.ok()) << result.status().ToString();
    EXPECT_TRUE(table_->WaitForUpkeep().ok());
    return result.ok() ? result->version : -1;
  }

  void AppendSome() {
    Append(R"(["a", "b"])", "[1000, 2000]", "[1.0, 2.0]");
    Append(R"(["a", "c"])", "[3000, 500]", "[3.0, 5.0]");
    Append(R"(["b"])", "[9000]", "[9.0]");
  }

  std::string HeadBytes() { return store_->Get(kHead).ValueOrDie()->ToString(); }
};

TEST_F(HeadTest, WrittenAfterEveryCommitAndDecodesToTheSnapshotAndLatest) {
  AppendSome();
  const std::string bytes = HeadBytes();
  auto head = DecodeHead(bytes, kHead);
  ASSERT_TRUE(head.ok()) << head.status().ToString();
  EXPECT_EQ(head->snapshot.version, table_->version());
  auto from_log = Lake::OverStore(store_)->OpenTable("t").ValueOrDie();
  auto latest = from_log->Latest().ValueOrDie();
  ASSERT_TRUE(head->latest);
  // The head's rows carry the sequence column that latest() drops.
  auto without_seq = head->latest->RemoveColumn(head->latest->num_columns() - 1).ValueOrDie();
  auto sort = [](const std::shared_ptr<arrow::Table>& t) {
    auto indices = arrow::compute::SortIndices(t, arrow::compute::SortOptions(
                                                      {arrow::compute::SortKey("sensor")}))
                       .ValueOrDie();
    return arrow::compute::Take(t, indices).ValueOrDie().table();
  };
  EXPECT_TRUE(sort(without_seq)->Equals(*sort(latest))) << without_seq->ToString();
  EXPECT_EQ(head->latest->num_rows(), 3);
}

TEST_F(HeadTest, EncodeDecodeRoundTripsTheLiveState) {
  AppendSome();
  auto head = DecodeHead(HeadBytes(), kHead).ValueOrDie();
  auto again = EncodeHead(head.snapshot, head.latest, head.commit_etag).ValueOrDie();
  EXPECT_EQ(again, HeadBytes());
  auto decoded = DecodeHead(again, kHead).ValueOrDie();
  EXPECT_EQ(decoded.snapshot.files.size(), head.snapshot.files.size());
  for (const auto& [path, add] : head.snapshot.files) {
    ASSERT_TRUE(decoded.snapshot.files.count(path));
    EXPECT_EQ(decoded.snapshot.files.at(path).stats, add.stats);
    EXPECT_EQ(decoded.snapshot.files.at(path).tags, add.tags);
  }
  EXPECT_EQ(decoded.snapshot.metadata.id, head.snapshot.metadata.id);
  EXPECT_EQ(decoded.snapshot.head_fingerprint, head.snapshot.head_fingerprint);
  EXPECT_EQ(decoded.snapshot.checkpoint_version, head.snapshot.checkpoint_version);
  EXPECT_TRUE(decoded.snapshot.recent_txns.empty());  // no history: writers load it
}

TEST_F(HeadTest, OneListingTellsWhetherTheHeadIsStillTheNewest) {
  AppendSome();
  auto head = DecodeHead(HeadBytes(), kHead).ValueOrDie();
  ASSERT_FALSE(head.commit_etag.empty());  // a store that lists from a name: the commit's tag
  const int64_t version = head.snapshot.version;
  EXPECT_TRUE(HeadStillNewest(*store_, "default/t", version, head.commit_etag));
  // No tag, or another object's tag (the commit rewritten: a dropped table's head): not settled.
  EXPECT_FALSE(HeadStillNewest(*store_, "default/t", version, ""));
  EXPECT_FALSE(HeadStillNewest(*store_, "default/t", version, head.commit_etag + "x"));
  // A commit after it.
  Append(R"(["c"])", "[9500]", "[7.0]");
  EXPECT_FALSE(HeadStillNewest(*store_, "default/t", version, head.commit_etag));
  auto newer = DecodeHead(HeadBytes(), kHead).ValueOrDie();
  EXPECT_EQ(newer.snapshot.version, version + 1);
  EXPECT_TRUE(HeadStillNewest(*store_, "default/t", newer.snapshot.version, newer.commit_etag));
  // A version the log does not hold.
  EXPECT_FALSE(HeadStillNewest(*store_, "default/t", newer.snapshot.version + 5, newer.commit_etag));
}

TEST_F(HeadTest, DamagedBytesNeverDecode) {
  AppendSome();
  const std::string bytes = HeadBytes();
  for (size_t at = 0; at < bytes.size(); at += std::max<size_t>(1, bytes.size() / 97)) {
    std::string bad = bytes;
    bad[at] = static_cast<char>(bad[at] ^ 0x20);
    EXPECT_FALSE(DecodeHead(bad, kHead).ok()) << "flipped byte " << at;
  }
  for (size_t size : {size_t{0}, size_t{7}, bytes.size() / 2, bytes.size() - 1}) {
    EXPECT_FALSE(DecodeHead(bytes.substr(0, size), kHead).ok()) << "cut to " << size;
  }
}

TEST_F(HeadTest, AHeaderNamingAnotherTableNeverDecodes) {
  AppendSome();
  const std::string bytes = HeadBytes();
  auto head = DecodeHead(bytes, kHead).ValueOrDie();
  std::string body = bytes.substr(0, bytes.size() - 64);
  const std::string id = head.snapshot.metadata.id;
  body.replace(body.find(id), id.size(), std::string(id.size(), '0'));
  EXPECT_FALSE(DecodeHead(body + Sha256Hex(body), kHead).ok());
}

TEST_F(HeadTest, AHandleOpenedFromTheHeadAnswersAsTheLog) {
  AppendSome();
  auto from_head = lake_->OpenTable("t").ValueOrDie();
  auto from_log = Lake::OverStore(store_)->OpenTable("t").ValueOrDie();
  EXPECT_EQ(from_head->version(), from_log->version());
  EXPECT_TRUE(from_head->Latest().ValueOrDie()->Equals(*from_log->Latest().ValueOrDie()));
  auto a = from_head->Info().ValueOrDie();
  auto b = from_log->Info().ValueOrDie();
  EXPECT_EQ(a.rows, b.rows);
  EXPECT_EQ(a.files, b.files);
  EXPECT_EQ(a.snapshots, b.snapshots);
  EXPECT_EQ(a.index_series, b.index_series);
}

TEST_F(HeadTest, AHeadBeyondTheLogOpensFromTheLog) {
  AppendSome();
  const int64_t version = table_->version();
  auto head = DecodeHead(HeadBytes(), kHead).ValueOrDie();
  head.snapshot.version = version + 5;
  ASSERT_TRUE(store_->Put(kHead, Buf(EncodeHead(head.snapshot, head.latest).ValueOrDie())).ok());
  auto opened = lake_->OpenTable("t").ValueOrDie();
  EXPECT_EQ(opened->version(), version);
  EXPECT_EQ(opened->Latest().ValueOrDie()->num_rows(), 3);
}

TEST_F(HeadTest, AnOlderHeadNeverReplacesANewerOne) {
  AppendSome();
  auto newer = DecodeHead(HeadBytes(), kHead).ValueOrDie();
  Snapshot older = newer.snapshot;
  older.version -= 1;
  DeltaLog log(store_, "default/t");
  ASSERT_TRUE(WriteHead(*store_, log, older, [](const auto&, const Snapshot&) {
                return arrow::Result<std::shared_ptr<arrow::Table>>(nullptr);
              }).ok());
  EXPECT_EQ(DecodeHead(HeadBytes(), kHead).ValueOrDie().snapshot.version, newer.snapshot.version);
}

}  // namespace
}  // namespace timelake::testing
