// Opening a table costs the commits since its last checkpoint, not the length of its log: the
// loader reads `_last_checkpoint` and lists only from the version it names. A hint that is
// missing, stale or pointing at damage falls back to the full listing.
#include <atomic>
#include <string>

#include <gtest/gtest.h>

#include "test_util.h"
#include "timelake/log/delta_log.h"
#include "timelake/store/memory_store.h"

namespace timelake::testing {
namespace {

/// Counts the log objects read and the listings made.
class CountingStore : public MemoryStore {
 public:
  arrow::Result<std::shared_ptr<arrow::Buffer>> Get(const std::string& path) override {
    if (path.find("/_delta_log/") != std::string::npos) ++log_reads;
    return MemoryStore::Get(path);
  }
  arrow::Result<std::vector<ObjectMeta>> ListAfter(const std::string& prefix,
                                                   const std::string& start_after) override {
    ++lists;
    if (!start_after.empty()) ++lists_from_key;
    return MemoryStore::ListAfter(prefix, start_after);
  }
  void Reset() { log_reads = lists = lists_from_key = 0; }
  std::atomic<int> log_reads{0};
  std::atomic<int> lists{0};           // listings of any kind
  std::atomic<int> lists_from_key{0};  // listings that start after a key
};

class LogOpenTest : public ::testing::Test {
 protected:
  void SetUp() override { store_->Reset(); }

  // Commits 0..last: a table creation, then one add per commit.
  void WriteLog(int64_t last) {
    Commit zero;
    zero.commit_info = CommitInfo{};
    zero.commit_info->operation = "CREATE TABLE";
    zero.protocol = Protocol{};
    zero.metadata = Metadata{};
    zero.metadata->id = "table-id";
    zero.metadata->schema_string = R"({"type":"struct","fields":[]})";
    ASSERT_OK(log_.TryCommit(0, SerializeCommit(zero)));
    for (int64_t v = 1; v <= last; ++v) AddCommit(v);
  }
  void AddCommit(int64_t v) {
    Commit c;
    AddFile add;
    add.path = "part-" + std::to_string(v) + ".parquet";
    add.size = 10;
    c.adds = {add};
    ASSERT_OK_AND_ASSIGN(bool won, log_.TryCommit(v, SerializeCommit(c)));
    ASSERT_TRUE(won);
  }
  void Checkpoint() {
    ASSERT_OK_AND_ASSIGN(auto snapshot, log_.Load());
    ASSERT_OK(log_.Checkpoint(snapshot));
  }

  std::shared_ptr<CountingStore> store_ = std::make_shared<CountingStore>();
  DeltaLog log_{store_, "ns/t"};
};

TEST_F(LogOpenTest, OpeningTenThousandCommitsReadsThreeLogObjectsAndListsOnce) {
  WriteLog(9'999);
  Checkpoint();
  store_->Reset();
  DeltaLog fresh(store_, "ns/t");
  ASSERT_OK_AND_ASSIGN(auto snapshot, fresh.Load());
  EXPECT_EQ(snapshot.version, 9'999);
  EXPECT_EQ(snapshot.files.size(), 9'999u);
  EXPECT_NE(snapshot.head_fingerprint, 0u);
  // _last_checkpoint, the checkpoint, and the head commit (its fingerprint binds the handle).
  EXPECT_LE(store_->log_reads.load(), 3);
  EXPECT_EQ(store_->lists.load(), 1);
  EXPECT_EQ(store_->lists_from_key.load(), 1) << "the listing must start at the checkpoint";
}

TEST_F(LogOpenTest, CommitsAfterTheCheckpointAreReplayedAndOnlyThey) {
  WriteLog(99);
  Checkpoint();
  for (int64_t v = 100; v <= 104; ++v) AddCommit(v);
  store_->Reset();
  ASSERT_OK_AND_ASSIGN(auto snapshot, DeltaLog(store_, "ns/t").Load());
  EXPECT_EQ(snapshot.version, 104);
  EXPECT_EQ(snapshot.files.size(), 104u);
  EXPECT_EQ(snapshot.checkpoint_version, 99);
  EXPECT_EQ(store_->log_reads.load(), 2 + 5);
  EXPECT_EQ(store_->lists.load(), 1);
}

TEST_F(LogOpenTest, TheOldestVersionIsListedOnlyWhenAsked) {
  WriteLog(20);
  Checkpoint();
  DeltaLog fresh(store_, "ns/t");
  ASSERT_OK_AND_ASSIGN(auto snapshot, fresh.Load());
  EXPECT_EQ(snapshot.oldest_version, -1);
  ASSERT_OK_AND_ASSIGN(int64_t oldest, fresh.OldestVersion());
  EXPECT_EQ(oldest, 0);
  // After log expiry removed the commits before the checkpoint, the checkpoint is the oldest.
  for (int64_t v = 0; v < 20; ++v) ASSERT_OK(store_->Delete(log_.LogPath(CommitFileName(v))));
  ASSERT_OK_AND_ASSIGN(oldest, fresh.OldestVersion());
  EXPECT_EQ(oldest, 20);
}

TEST_F(LogOpenTest, AHintNamingAVanishedCheckpointFallsBackToTheFullListing) {
  WriteLog(30);
  Checkpoint();
  ASSERT_OK(store_->Put(log_.LogPath("_last_checkpoint"), Buf(R"({"version":25,"size":1})")));
  ASSERT_OK_AND_ASSIGN(auto snapshot, DeltaLog(store_, "ns/t").Load());
  EXPECT_EQ(snapshot.version, 30);
  EXPECT_EQ(snapshot.checkpoint_version, 30);
  EXPECT_EQ(snapshot.oldest_version, 0);
}

TEST_F(LogOpenTest, AStaleHintStillFindsNewerCheckpointsAndCommits) {
  WriteLog(10);
  Checkpoint();
  const std::string stale = Str(store_->Get(log_.LogPath("_last_checkpoint")).ValueOrDie());
  for (int64_t v = 11; v <= 20; ++v) AddCommit(v);
  Checkpoint();
  for (int64_t v = 21; v <= 22; ++v) AddCommit(v);
  ASSERT_OK(store_->Put(log_.LogPath("_last_checkpoint"), Buf(stale)));  // names 10
  store_->Reset();
  ASSERT_OK_AND_ASSIGN(auto snapshot, DeltaLog(store_, "ns/t").Load());
  EXPECT_EQ(snapshot.version, 22);
  EXPECT_EQ(snapshot.checkpoint_version, 20);
  EXPECT_EQ(snapshot.files.size(), 22u);
  EXPECT_EQ(store_->lists.load(), 1);
}

TEST_F(LogOpenTest, ADamagedHintedCheckpointFallsBackToAnOlderOne) {
  WriteLog(10);
  Checkpoint();
  for (int64_t v = 11; v <= 20; ++v) AddCommit(v);
  Checkpoint();
  ASSERT_OK(store_->Put(log_.LogPath(CheckpointFileName(20)), Buf("PAR1 torn")));
  ASSERT_OK_AND_ASSIGN(auto snapshot, DeltaLog(store_, "ns/t").Load());
  EXPECT_EQ(snapshot.version, 20);
  EXPECT_EQ(snapshot.checkpoint_version, 10);
  EXPECT_EQ(snapshot.files.size(), 20u);
}

TEST_F(LogOpenTest, AGarbledHintIsIgnored) {
  WriteLog(12);
  Checkpoint();
  for (const char* garbage : {"", "{", "[]", R"({"version":"ten"})", R"({"version":-4})",
                              R"({"version":99999999})"}) {
    ASSERT_OK(store_->Put(log_.LogPath("_last_checkpoint"), Buf(garbage)));
    ASSERT_OK_AND_ASSIGN(auto snapshot, DeltaLog(store_, "ns/t").Load());
    EXPECT_EQ(snapshot.version, 12) << garbage;
  }
}

}  // namespace
}  // namespace timelake::testing
