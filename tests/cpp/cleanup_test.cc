// Vacuum keeps what readers and writers still running may need: removed and never-committed data
// files younger than the deleted-file retention, which is never under 7 days unless a table
// explicitly turns the safety check off.
#include "timelake/maintain/cleanup.h"

#include <gtest/gtest.h>

#include "test_util.h"
#include "timelake/log/delta_log.h"
#include "timelake/store/memory_store.h"

namespace timelake::testing {
namespace {

constexpr int64_t kDayMs = 86'400'000;

class VacuumTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK(store_->Put("t/data/live.parquet", Buf("x")));
    ASSERT_OK(store_->Put("t/data/removed.parquet", Buf("x")));
    ASSERT_OK(store_->Put("t/data/uncommitted.parquet", Buf("x")));
    snapshot_.files["data/live.parquet"] = AddFile{};
    RemoveFile removed;
    removed.path = "data/removed.parquet";
    removed.deletion_timestamp = NowMillis();
    snapshot_.recent_tombstones[removed.path] = removed;
  }

  // Vacuums as if `days` had passed since the files were written and removed.
  std::vector<std::string> SurvivorsAfter(double days) {
    auto result = Vacuum(store_.get(), "t", snapshot_, NowMillis() + static_cast<int64_t>(days * kDayMs));
    EXPECT_OK(result.status());
    std::vector<std::string> out;
    for (const auto& meta : store_->List("t/data/").ValueOrDie()) out.push_back(meta.path);
    return out;
  }

  const std::vector<std::string> kAll = {"t/data/live.parquet", "t/data/removed.parquet",
                                         "t/data/uncommitted.parquet"};
  std::shared_ptr<MemoryStore> store_ = std::make_shared<MemoryStore>();
  Snapshot snapshot_;
};

TEST_F(VacuumTest, KeepsEverythingWithinTheDefaultSevenDays) {
  EXPECT_EQ(SurvivorsAfter(6.9), kAll);
  EXPECT_EQ(SurvivorsAfter(7.1), std::vector<std::string>{"t/data/live.parquet"});
}

TEST_F(VacuumTest, AShortRetentionIsRaisedToSevenDays) {
  // A table created before create_table refused such values, or by another engine.
  snapshot_.metadata.configuration["delta.deletedFileRetentionDuration"] = "interval 0 seconds";
  EXPECT_EQ(SurvivorsAfter(1), kAll);
}

TEST_F(VacuumTest, AShortRetentionAppliesWhenTheCheckIsOff) {
  snapshot_.metadata.configuration["delta.deletedFileRetentionDuration"] = "interval 1 hour";
  snapshot_.metadata.configuration["timelake.retentionDurationCheck"] = "false";
  EXPECT_EQ(SurvivorsAfter(0.01), kAll);
  EXPECT_EQ(SurvivorsAfter(0.1), std::vector<std::string>{"t/data/live.parquet"});
}

TEST_F(VacuumTest, ALongerRetentionIsHonoured) {
  snapshot_.metadata.configuration["delta.deletedFileRetentionDuration"] = "interval 30 days";
  EXPECT_EQ(SurvivorsAfter(29), kAll);
  EXPECT_EQ(SurvivorsAfter(31), std::vector<std::string>{"t/data/live.parquet"});
}

TEST_F(VacuumTest, ComparesTheLogsEncodedPathsWithStorePaths) {
  // The log URI-encodes paths; the store lists them decoded.
  ASSERT_OK(store_->Put("t/data/with space.parquet", Buf("x")));
  ASSERT_OK(store_->Put("t/data/gone now.parquet", Buf("x")));
  snapshot_.files["data/with%20space.parquet"] = AddFile{};
  RemoveFile removed;
  removed.path = "data/gone%20now.parquet";
  removed.deletion_timestamp = NowMillis() + 5 * kDayMs;  // younger than the retention at day 8
  snapshot_.recent_tombstones[removed.path] = removed;
  const auto survivors = SurvivorsAfter(8);
  EXPECT_EQ(survivors, (std::vector<std::string>{"t/data/gone now.parquet", "t/data/live.parquet",
                                                 "t/data/with space.parquet"}));
}

TEST(DeletedFileRetentionTest, IsTheConfiguredDurationButNeverUnderSevenDaysWhileChecked) {
  Snapshot s;
  EXPECT_EQ(s.DeletedFileRetentionMs(), 7 * kDayMs);
  s.metadata.configuration["delta.deletedFileRetentionDuration"] = "interval 2 weeks";
  EXPECT_EQ(s.DeletedFileRetentionMs(), 14 * kDayMs);
  s.metadata.configuration["delta.deletedFileRetentionDuration"] = "interval 1 day";
  EXPECT_EQ(s.DeletedFileRetentionMs(), 7 * kDayMs);
  s.metadata.configuration["timelake.retentionDurationCheck"] = "false";
  EXPECT_EQ(s.DeletedFileRetentionMs(), kDayMs);
}

// --- log expiry ------------------------------------------------------------------------------

class ExpireLogTest : public ::testing::Test {
 protected:
  // Commits 0..12 of a table whose log retention is zero, checkpoints at 5 and 10.
  void SetUp() override {
    for (int64_t v = 0; v <= 12; ++v) {
      Commit c;
      c.commit_info = CommitInfo{};
      c.commit_info->operation = "WRITE";
      if (v == 0) {
        c.protocol = Protocol{};
        c.metadata = Metadata{};
        c.metadata->id = "id";
        c.metadata->configuration = {{"delta.logRetentionDuration", "interval 0 seconds"}};
      }
      AddFile a;
      a.path = "data/" + std::to_string(v) + ".parquet";
      c.adds.push_back(a);
      ASSERT_OK(log_.TryCommit(v, SerializeCommit(c)).status());
      ASSERT_OK(log_.Update(&snapshot_));
      if (v == 5 || v == 10) ASSERT_OK(log_.Checkpoint(snapshot_));
    }
  }
  std::vector<int64_t> CommitsLeft() {
    std::vector<int64_t> out;
    for (const auto& meta : store_->List("t/_delta_log/").ValueOrDie()) {
      auto slash = meta.path.rfind('/');
      if (auto v = CommitVersionOf(meta.path.substr(slash + 1))) out.push_back(*v);
    }
    return out;
  }

  std::shared_ptr<MemoryStore> store_ = std::make_shared<MemoryStore>();
  DeltaLog log_{store_, "t"};
  Snapshot snapshot_;
};

TEST_F(ExpireLogTest, KeepsEverythingFromTheNewestCheckpointOn) {
  ASSERT_OK_AND_ASSIGN(auto result, ExpireLog(store_.get(), "t", snapshot_, NowMillis() + 1000));
  EXPECT_EQ(result.oldest_version, 10);
  EXPECT_EQ(CommitsLeft(), (std::vector<int64_t>{10, 11, 12}));
}

TEST_F(ExpireLogTest, NeverMakesADamagedCheckpointTheStartOfTheLog) {
  ASSERT_OK(store_->Put(log_.LogPath(CheckpointFileName(10)), Buf("PAR1 torn")));
  ASSERT_OK_AND_ASSIGN(auto result, ExpireLog(store_.get(), "t", snapshot_, NowMillis() + 1000));
  EXPECT_EQ(result.oldest_version, 5);  // the readable one before it
  EXPECT_EQ(CommitsLeft(), (std::vector<int64_t>{5, 6, 7, 8, 9, 10, 11, 12}));
  ASSERT_OK_AND_ASSIGN(auto loaded, log_.Load());  // still rebuildable
  EXPECT_EQ(loaded.version, 12);
  EXPECT_EQ(loaded.files.size(), 13u);
}

TEST_F(ExpireLogTest, DeletesNothingWhenNoOldCheckpointCanBeRead) {
  ASSERT_OK(store_->Put(log_.LogPath(CheckpointFileName(10)), Buf("")));
  ASSERT_OK(store_->Put(log_.LogPath(CheckpointFileName(5)), Buf("")));
  ASSERT_OK_AND_ASSIGN(auto result, ExpireLog(store_.get(), "t", snapshot_, NowMillis() + 1000));
  EXPECT_EQ(result.objects_deleted, 0);
  EXPECT_EQ(CommitsLeft().size(), 13u);
}

}  // namespace
}  // namespace timelake::testing
