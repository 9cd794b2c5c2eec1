// Vacuum keeps what readers and writers still running may need: removed and never-committed data
// files younger than the deleted-file retention, which is never under 7 days unless a table
// explicitly turns the safety check off.
#include "timelake/maintain/cleanup.h"

#include <gtest/gtest.h>

#include "test_util.h"
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
    snapshot_.tombstones[removed.path] = removed;
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

}  // namespace
}  // namespace timelake::testing
