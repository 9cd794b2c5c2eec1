// LocalFiles (store/local_files.h), the seam the group-commit spool's files go through: the same
// rules from LocalStore's files (PosixFiles) and a machine-local MemoryStore's (MemoryFiles).
#include "timelake/store/local_files.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "local_files_fixture.h"
#include "test_util.h"
#include "timelake/util/status.h"

namespace timelake::testing {
namespace {

std::shared_ptr<arrow::Buffer> Bytes(const std::string& s) { return arrow::Buffer::FromString(s); }

class LocalFilesTest : public ::testing::TestWithParam<FilesFactory> {
 protected:
  void SetUp() override { where_->MakeFolder("f"); }
  std::vector<std::string> Names(const std::string& folder = "f") {
    std::vector<std::string> out;
    for (const auto& file : files_->List(folder, LocalFiles::ListDetail::kNames).ValueOrDie()) {
      out.push_back(file.name);
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  // A MemoryStore's folder is where an object is ("f/object"), which its files do not list; on
  // LocalStore nothing else is there either. Kept as a guard for both.
  std::vector<std::string> OnlyTheFilesOf(std::vector<std::string> names) {
    names.erase(std::remove(names.begin(), names.end(), "object"), names.end());
    return names;
  }
  LocalFileInfo Info(const std::string& name) {
    for (const auto& file : files_->List("f", LocalFiles::ListDetail::kAges).ValueOrDie()) {
      if (file.name == name) return file;
    }
    ADD_FAILURE() << "no file " << name;
    return {};
  }
  std::string Text(const std::string& path) { return files_->Read(path).ValueOrDie()->ToString(); }

  std::unique_ptr<FilesUnderTest> where_ = GetParam()();
  std::shared_ptr<LocalFiles> files_ = where_->files();
};

TEST_P(LocalFilesTest, APublishedFileIsReadUnderItsName) {
  ASSERT_OK_AND_ASSIGN(auto held, files_->Publish("f/.s", "f/a", *Bytes("hello"), /*hold=*/false));
  EXPECT_EQ(held, nullptr);
  EXPECT_EQ(Text("f/a"), "hello");
  EXPECT_EQ(OnlyTheFilesOf(Names()), std::vector<std::string>{"a"}) << "the scratch name is gone";
  EXPECT_TRUE(IsNotFound(files_->Read("f/.s").status()));
}

TEST_P(LocalFilesTest, ClaimAndWithdrawOfOneFileHaveOneWinner) {
  for (int round = 0; round < 200; ++round) {
    ASSERT_OK(files_->Publish("f/.s", "f/req", *Bytes("r"), false).status());
    std::atomic<int> ready{0};
    arrow::Result<bool> claimed = false, withdrawn = false;
    auto go = [&ready] {
      ++ready;
      while (ready.load() < 2) {
      }
    };
    std::thread claimer([&] {
      go();
      claimed = files_->Claim("f/req", "f/claimed");
    });
    std::thread withdrawer([&] {
      go();
      withdrawn = files_->Withdraw("f/req");
    });
    claimer.join();
    withdrawer.join();
    ASSERT_OK(claimed.status());
    ASSERT_OK(withdrawn.status());
    ASSERT_NE(*claimed, *withdrawn) << "round " << round << ": exactly one of them wins";
    EXPECT_EQ(OnlyTheFilesOf(Names()), *claimed ? std::vector<std::string>{"claimed"}
                                                : std::vector<std::string>{});
    ASSERT_OK(files_->Withdraw("f/claimed").status());
  }
}

TEST_P(LocalFilesTest, OfClaimsRacingForOneFileOneWins) {
  for (int round = 0; round < 100; ++round) {
    ASSERT_OK(files_->Publish("f/.s", "f/req", *Bytes("r"), false).status());
    std::atomic<int> ready{0}, won{0};
    std::vector<std::thread> leaders;
    for (int i = 0; i < 4; ++i) {
      leaders.emplace_back([&, i] {
        ++ready;
        while (ready.load() < 4) {
        }
        auto claimed = files_->Claim("f/req", "f/claimed-" + std::to_string(i));
        if (claimed.ok() && *claimed) ++won;
      });
    }
    for (auto& t : leaders) t.join();
    ASSERT_EQ(won.load(), 1) << "round " << round;
    for (const auto& name : OnlyTheFilesOf(Names())) {
      ASSERT_OK(files_->Withdraw("f/" + name).status());
    }
  }
}

TEST_P(LocalFilesTest, AMissingFileIsNeitherClaimedNorWithdrawn) {
  ASSERT_OK_AND_ASSIGN(bool claimed, files_->Claim("f/none", "f/other"));
  EXPECT_FALSE(claimed);
  ASSERT_OK_AND_ASSIGN(bool withdrawn, files_->Withdraw("f/none"));
  EXPECT_FALSE(withdrawn);
  EXPECT_TRUE(IsNotFound(files_->Read("f/none").status()));
  EXPECT_TRUE(IsNotFound(files_->IsHeld("f/none").status()));
  EXPECT_TRUE(OnlyTheFilesOf(Names()).empty());
}

TEST_P(LocalFilesTest, ALivenessIsSeenByAProbeWhereverTheFileMovesAndEndsWithItsHolder) {
  ASSERT_OK_AND_ASSIGN(auto alive, files_->Publish("f/.s", "f/req", *Bytes("r"), /*hold=*/true));
  ASSERT_NE(alive, nullptr);
  ASSERT_OK_AND_ASSIGN(bool held, files_->IsHeld("f/req"));
  EXPECT_TRUE(held);
  ASSERT_OK_AND_ASSIGN(held, files_->IsHeld("f/req"));  // a probe takes nothing away
  EXPECT_TRUE(held);
  ASSERT_OK_AND_ASSIGN(bool claimed, files_->Claim("f/req", "f/claimed"));
  ASSERT_TRUE(claimed);
  ASSERT_OK_AND_ASSIGN(held, files_->IsHeld("f/claimed"));
  EXPECT_TRUE(held) << "the lock is the file's, not the name's";
  // Written in place by another (a leader's answer): still the holder's file.
  ASSERT_OK(files_->Publish("f/claimed", "f/answer", *Bytes("answer"), /*hold=*/false).status());
  ASSERT_OK_AND_ASSIGN(held, files_->IsHeld("f/answer"));
  EXPECT_TRUE(held);
  alive.reset();
  ASSERT_OK_AND_ASSIGN(held, files_->IsHeld("f/answer"));
  EXPECT_FALSE(held) << "the holder is gone";
}

TEST_P(LocalFilesTest, AFilePublishedWithoutHoldIsNotHeld) {
  ASSERT_OK(files_->Publish("f/.s", "f/a", *Bytes("a"), /*hold=*/false).status());
  ASSERT_OK_AND_ASSIGN(bool held, files_->IsHeld("f/a"));
  EXPECT_FALSE(held);
}

TEST_P(LocalFilesTest, APublishReusesTheScratchFileInPlaceCutToLength) {
  ASSERT_OK(files_->Publish("f/.s", "f/a", *Bytes("a long first request"), false).status());
  const uint64_t identity = Info("a").identity;
  ASSERT_OK_AND_ASSIGN(bool back, files_->Claim("f/a", "f/.s"));
  ASSERT_TRUE(back);
  ASSERT_OK(files_->Publish("f/.s", "f/b", *Bytes("short"), false).status());
  EXPECT_EQ(Text("f/b"), "short") << "the old bytes are cut off";
  EXPECT_EQ(Info("b").identity, identity) << "a new file was made";
  ASSERT_OK(files_->Publish("f/.t", "f/c", *Bytes("other"), false).status());
  EXPECT_NE(Info("c").identity, identity) << "two files, one identity";
  EXPECT_EQ(OnlyTheFilesOf(Names()), (std::vector<std::string>{"b", "c"}));
}

TEST_P(LocalFilesTest, APublishReplacesWhatItsNameHeld) {
  ASSERT_OK(files_->Publish("f/.s", "f/a", *Bytes("old"), false).status());
  ASSERT_OK(files_->Publish("f/.t", "f/a", *Bytes("new"), false).status());
  EXPECT_EQ(Text("f/a"), "new");
  EXPECT_EQ(OnlyTheFilesOf(Names()), std::vector<std::string>{"a"});
}

TEST_P(LocalFilesTest, AgesCountFromTheLastWrite) {
  ASSERT_OK(files_->Publish("f/.s", "f/a", *Bytes("a"), false).status());
  ASSERT_OK(files_->Publish("f/.t", "f/b", *Bytes("b"), false).status());
  where_->AgeFile("f/a", 120'000);
  EXPECT_GE(Info("a").age_ms, 119'000);
  EXPECT_LT(Info("b").age_ms, 60'000) << "aged with the other";
  // Renamed, it keeps its age; written again, it is new.
  ASSERT_OK_AND_ASSIGN(bool moved, files_->Claim("f/a", "f/.s"));
  ASSERT_TRUE(moved);
  ASSERT_OK(files_->Publish("f/.s", "f/a", *Bytes("again"), false).status());
  EXPECT_LT(Info("a").age_ms, 60'000);
}

TEST_P(LocalFilesTest, AListingHoldsTheFilesOfItsFolderOnly) {
  where_->MakeFolder("f/sub");
  ASSERT_OK(files_->Publish("f/.s", "f/a", *Bytes("a"), false).status());
  ASSERT_OK(files_->Publish("f/sub/.s", "f/sub/b", *Bytes("b"), false).status());
  EXPECT_EQ(OnlyTheFilesOf(Names("f")), std::vector<std::string>{"a"});
  EXPECT_EQ(OnlyTheFilesOf(Names("f/sub")), std::vector<std::string>{"b"});
  EXPECT_TRUE(Names("f/none").empty());
}

TEST_P(LocalFilesTest, NothingIsMadeInAMissingFolder) {
  EXPECT_FALSE(files_->Publish("gone/t/.s", "gone/t/a", *Bytes("a"), false).ok());
  EXPECT_FALSE(files_->Publish("gone/t/.s", "gone/t/a", *Bytes("a"), true).ok());
  EXPECT_TRUE(Names("gone/t").empty());
  EXPECT_TRUE(Names("gone").empty());
  EXPECT_TRUE(IsNotFound(files_->Read("gone/t/a").status()));
}

INSTANTIATE_TEST_SUITE_P(Files, LocalFilesTest,
                         ::testing::Values(&PosixFilesForTest, &MemoryFilesForTest), FilesName);

}  // namespace
}  // namespace timelake::testing
