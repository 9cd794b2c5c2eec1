// FaultStore: the ObjectStore contract with no faults armed, and each way it injects faults:
// failures without side effects, lost replies, landed puts reported as refused, crashes that
// drop unfinished output streams, seeded random faults.
#include "timelake/store/fault_store.h"

#include <filesystem>

#include <gtest/gtest.h>

#include "store_contract.h"
#include "temp_dir.h"
#include "test_util.h"
#include "timelake/store/local_store.h"
#include "timelake/store/memory_store.h"

namespace timelake::testing {
namespace {

struct FaultLocalFactory {
  TempDir dir;
  std::shared_ptr<ObjectStore> Make() {
    return std::make_shared<FaultStore>(LocalStore::Make(dir.path()).ValueOrDie());
  }
};

INSTANTIATE_TYPED_TEST_SUITE_P(FaultOverLocal, ObjectStoreContract, FaultLocalFactory);

std::string Joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& line : lines) out += line + "\n";
  return out;
}

class FaultStoreTest : public ::testing::Test {
 protected:
  std::shared_ptr<MemoryStore> memory_ = std::make_shared<MemoryStore>("target");
  std::shared_ptr<FaultStore> store_ = std::make_shared<FaultStore>(memory_);
};

TEST_F(FaultStoreTest, CountsEveryOperation) {
  EXPECT_EQ(store_->operations(), 0);
  ASSERT_OK(store_->Put("a", Buf("x")));
  ASSERT_OK(store_->Get("a").status());
  ASSERT_OK(store_->Head("a").status());
  ASSERT_OK(store_->List("").status());
  ASSERT_OK(store_->Delete("a"));
  EXPECT_EQ(store_->operations(), 5);
  EXPECT_EQ(store_->RootUrl(), "memory://target");  // not an operation
  EXPECT_EQ(store_->operations(), 5);
}

TEST_F(FaultStoreTest, PutDerivedIsAPutToFaults) {
  store_->InjectAt(1, FaultKind::kFail);
  ASSERT_OK(store_->PutDerived("a", Buf("x")));
  auto failed = store_->PutDerived("b", Buf("y"));
  EXPECT_TRUE(FailsWith(failed, arrow::StatusCode::IOError, "failure of operation #1 put b"));
  EXPECT_TRUE(IsMissing(memory_->Head("b")));
  EXPECT_EQ(store_->operations(), 2);
}

TEST_F(FaultStoreTest, PutIfAbsentVisibleIsAPutIfAbsentToFaults) {
  store_->InjectWhen(FaultKind::kLandButRefuse,
                     [](const StoreOperation& op) { return op.name == "put_if_absent"; });
  int calls = 0;
  ASSERT_OK_AND_ASSIGN(bool won, store_->PutIfAbsentVisible("log/1.json", Buf("x"), [&] { ++calls; }));
  EXPECT_FALSE(won);  // landed, reported refused
  EXPECT_EQ(calls, 1);
  EXPECT_OK(memory_->Head("log/1.json").status());
}

TEST_F(FaultStoreTest, WritesOnlyCountingSkipsReads) {
  store_->SetCounting(FaultStore::Counting::kWritesOnly);
  store_->InjectAt(1, FaultKind::kFail);
  ASSERT_OK(store_->Put("a", Buf("x")));  // write #0
  ASSERT_OK(store_->Get("a").status());
  ASSERT_OK(store_->List("").status());
  EXPECT_FALSE(store_->Put("b", Buf("y")).ok());  // write #1
  EXPECT_EQ(store_->operations(), 2);
  EXPECT_TRUE(IsMissing(memory_->Head("b")));
}

TEST_F(FaultStoreTest, FailedOperationHasNoSideEffects) {
  store_->InjectAt(1, FaultKind::kFail);
  ASSERT_OK(store_->Put("a", Buf("x")));
  auto failed = store_->Put("b", Buf("y"));
  EXPECT_TRUE(FailsWith(failed, arrow::StatusCode::IOError, "failure of operation #1 put b"));
  EXPECT_TRUE(IsMissing(memory_->Head("b")));
  EXPECT_OK(store_->Put("b", Buf("y")));  // the fault was for #1 only
}

TEST_F(FaultStoreTest, FailedReadIsAnErrorThatIsNotNotFound) {
  ASSERT_OK(memory_->Put("a", Buf("x")));
  store_->InjectAt(0, FaultKind::kFail);
  auto got = store_->Get("a");
  EXPECT_TRUE(FailsWith(got, arrow::StatusCode::IOError, "get a"));
  EXPECT_FALSE(IsNotFound(got.status()));
}

TEST_F(FaultStoreTest, LostReplyLandsButReportsAnError) {
  store_->InjectAt(0, FaultKind::kLoseReply);
  EXPECT_TRUE(FailsWith(store_->Put("a", Buf("landed")), arrow::StatusCode::IOError,
                        "lost reply of operation #0 put a"));
  ASSERT_OK_AND_ASSIGN(auto data, memory_->Get("a"));
  EXPECT_EQ(Str(data), "landed");
}

TEST_F(FaultStoreTest, LostReplyOfAPutIfAbsentLeavesTheObjectWritten) {
  store_->InjectAt(0, FaultKind::kLoseReply);
  EXPECT_FALSE(store_->PutIfAbsent("log/1.json", Buf("mine")).ok());
  // A retry now meets its own object: `false`, which the caller must check by content.
  ASSERT_OK_AND_ASSIGN(bool created, store_->PutIfAbsent("log/1.json", Buf("mine")));
  EXPECT_FALSE(created);
  ASSERT_OK_AND_ASSIGN(auto data, store_->Get("log/1.json"));
  EXPECT_EQ(Str(data), "mine");
}

TEST_F(FaultStoreTest, LandButRefuseReportsALandedPutIfAbsentAsFalse) {
  store_->InjectAt(0, FaultKind::kLandButRefuse);
  ASSERT_OK_AND_ASSIGN(bool created, store_->PutIfAbsent("log/1.json", Buf("mine")));
  EXPECT_FALSE(created);
  ASSERT_OK_AND_ASSIGN(auto data, memory_->Get("log/1.json"));
  EXPECT_EQ(Str(data), "mine");
  EXPECT_NE(Joined(store_->injected()).find("landed, reported false"), std::string::npos)
      << Joined(store_->injected());
}

TEST_F(FaultStoreTest, LandButRefuseReportsALandedPutIfMatchAsFalse) {
  ASSERT_OK(memory_->Put("base", Buf("v1")));
  ASSERT_OK_AND_ASSIGN(auto meta, memory_->Head("base"));
  store_->InjectAt(0, FaultKind::kLandButRefuse);
  ASSERT_OK_AND_ASSIGN(bool replaced, store_->PutIfMatch("base", Buf("v2"), meta.etag));
  EXPECT_FALSE(replaced);
  ASSERT_OK_AND_ASSIGN(auto data, memory_->Get("base"));
  EXPECT_EQ(Str(data), "v2");
}

TEST_F(FaultStoreTest, LandButRefuseOfAPutThatDidNotLandIsALostReply) {
  ASSERT_OK(memory_->Put("log/1.json", Buf("theirs")));
  store_->InjectAt(0, FaultKind::kLandButRefuse);
  EXPECT_TRUE(FailsWith(store_->PutIfAbsent("log/1.json", Buf("mine")), arrow::StatusCode::IOError,
                        "lost reply"));
  ASSERT_OK_AND_ASSIGN(auto data, memory_->Get("log/1.json"));
  EXPECT_EQ(Str(data), "theirs");
}

TEST_F(FaultStoreTest, LandButRefuseOfAPlainPutIsALostReply) {
  store_->InjectAt(0, FaultKind::kLandButRefuse);
  EXPECT_TRUE(FailsWith(store_->Put("a", Buf("x")), arrow::StatusCode::IOError, "lost reply"));
  EXPECT_OK(memory_->Head("a").status());
}

TEST_F(FaultStoreTest, InjectWhenChoosesOperationsByWhatTheyAre) {
  store_->InjectWhen(FaultKind::kLandButRefuse, [](const StoreOperation& op) {
    return op.name == "put_if_absent" && op.path.starts_with("log/");
  });
  ASSERT_OK_AND_ASSIGN(bool other, store_->PutIfAbsent("data/x", Buf("x")));
  EXPECT_TRUE(other);
  ASSERT_OK_AND_ASSIGN(bool first, store_->PutIfAbsent("log/1.json", Buf("x")));
  EXPECT_FALSE(first);  // landed, reported false
  ASSERT_OK_AND_ASSIGN(bool second, store_->PutIfAbsent("log/2.json", Buf("x")));
  EXPECT_TRUE(second);  // armed once only
  EXPECT_OK(memory_->Head("log/1.json").status());
}

TEST_F(FaultStoreTest, InjectWhenFiresTheGivenNumberOfTimes) {
  store_->InjectWhen(
      FaultKind::kFail, [](const StoreOperation& op) { return op.write; }, 2);
  EXPECT_FALSE(store_->Put("a", Buf("x")).ok());
  EXPECT_FALSE(store_->Delete("a").ok());
  EXPECT_OK(store_->Put("a", Buf("x")));
  EXPECT_EQ(store_->injected().size(), 2u) << Joined(store_->injected());
}

TEST_F(FaultStoreTest, CrashFailsThatOperationAndEveryLaterOne) {
  store_->InjectAt(2, FaultKind::kCrash);
  ASSERT_OK(store_->Put("a", Buf("x")));
  ASSERT_OK(store_->Get("a").status());
  EXPECT_TRUE(FailsWith(store_->Put("b", Buf("y")), arrow::StatusCode::IOError, "crash"));
  EXPECT_TRUE(store_->crashed());
  EXPECT_TRUE(FailsWith(store_->Get("a"), arrow::StatusCode::IOError, "down since operation #2"));
  EXPECT_FALSE(store_->List("").ok());
  EXPECT_FALSE(store_->OpenOutput("c").ok());
  EXPECT_TRUE(IsMissing(memory_->Head("b")));
}

TEST_F(FaultStoreTest, CrashAfterLandsTheOperationThenFails) {
  store_->InjectAt(0, FaultKind::kCrashAfter);
  EXPECT_FALSE(store_->PutIfAbsent("log/0.json", Buf("x")).ok());
  EXPECT_TRUE(store_->crashed());
  EXPECT_OK(memory_->Head("log/0.json").status());
}

TEST_F(FaultStoreTest, ReviveServesCallsAgainWithNoFaultsArmed) {
  store_->InjectAt(5, FaultKind::kFail);
  store_->InjectWhen(FaultKind::kFail, [](const StoreOperation&) { return false; });
  store_->Crash();
  EXPECT_FALSE(store_->Put("a", Buf("x")).ok());
  store_->Revive();
  EXPECT_FALSE(store_->crashed());
  for (int i = 0; i < 10; ++i) ASSERT_OK(store_->Put("a", Buf("x")));
}

TEST_F(FaultStoreTest, CloseOfAnOutputStreamIsTheWriteThatPublishes) {
  store_->SetCounting(FaultStore::Counting::kWritesOnly);
  store_->InjectAt(0, FaultKind::kFail);
  ASSERT_OK_AND_ASSIGN(auto out, store_->OpenOutput("data/x"));
  ASSERT_OK(out->Write("bytes", 5));
  EXPECT_EQ(store_->operations(), 0);
  EXPECT_TRUE(FailsWith(out->Close(), arrow::StatusCode::IOError, "close_output data/x"));
  EXPECT_TRUE(IsMissing(memory_->Head("data/x")));
}

TEST_F(FaultStoreTest, LostReplyOfACloseLeavesTheObjectPublished) {
  store_->SetCounting(FaultStore::Counting::kWritesOnly);
  store_->InjectAt(0, FaultKind::kLoseReply);
  ASSERT_OK_AND_ASSIGN(auto out, store_->OpenOutput("data/x"));
  ASSERT_OK(out->Write("bytes", 5));
  EXPECT_FALSE(out->Close().ok());
  ASSERT_OK_AND_ASSIGN(auto data, memory_->Get("data/x"));
  EXPECT_EQ(Str(data), "bytes");
}

TEST_F(FaultStoreTest, DropUnsyncedAbortsOpenStreamsButKeepsServing) {
  ASSERT_OK_AND_ASSIGN(auto open, store_->OpenOutput("data/open"));
  ASSERT_OK(open->Write("unsynced", 8));
  ASSERT_OK_AND_ASSIGN(auto closed, store_->OpenOutput("data/closed"));
  ASSERT_OK(closed->Write("synced", 6));
  ASSERT_OK(closed->Close());
  store_->DropUnsynced();
  EXPECT_TRUE(FailsWith(open->Write("more", 4), arrow::StatusCode::IOError, "dropped"));
  EXPECT_TRUE(FailsWith(open->Close(), arrow::StatusCode::IOError, "dropped"));
  EXPECT_TRUE(IsMissing(memory_->Head("data/open")));
  EXPECT_OK(memory_->Head("data/closed").status());
  EXPECT_OK(store_->Put("after", Buf("x")));
}

TEST_F(FaultStoreTest, AnAbortedStreamIsNotOneACrashDrops) {
  ASSERT_OK_AND_ASSIGN(auto out, store_->OpenOutput("data/x"));
  ASSERT_OK(out->Abort());
  store_->Crash();
  EXPECT_OK(out->Close());  // aborted by its owner before the crash: closed, nothing to report
}

TEST_F(FaultStoreTest, RandomFaultsFollowTheSeed) {
  auto run = [](uint64_t seed) {
    auto store = std::make_shared<FaultStore>(std::make_shared<MemoryStore>(), seed);
    store->InjectRandomly(0.3);
    for (int i = 0; i < 64; ++i) (void)store->Put("k" + std::to_string(i), Buf("x"));
    return store->injected();
  };
  const auto first = run(7);
  EXPECT_FALSE(first.empty());
  EXPECT_LT(first.size(), 64u);
  EXPECT_EQ(run(7), first);
  EXPECT_NE(run(8), first);
}

TEST_F(FaultStoreTest, InjectedLogNamesEachFault) {
  store_->InjectAt(0, FaultKind::kFail);
  store_->InjectAt(1, FaultKind::kLoseReply);
  (void)store_->Put("a", Buf("x"));
  (void)store_->Delete("b");
  EXPECT_EQ(store_->injected(),
            (std::vector<std::string>{"#0 put a: fail (not performed)",
                                      "#1 delete b: lose reply (the call returned OK)"}));
}

// Over a local directory: a crash mid-write leaves no partial object and no temporary file.
TEST(FaultStoreLocalTest, CrashMidWriteLeavesNoTrace) {
  TempDir dir;
  auto store = std::make_shared<FaultStore>(LocalStore::Make(dir.path()).ValueOrDie());
  ASSERT_OK(store->Put("t/_delta_log/0.json", Buf("{}")));
  ASSERT_OK_AND_ASSIGN(auto out, store->OpenOutput("t/data/part-1.parquet"));
  ASSERT_OK(out->Write("half a file", 11));
  store->Crash();
  EXPECT_FALSE(out->Close().ok());
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir.path())) {
    if (entry.is_regular_file()) files.push_back(entry.path().lexically_relative(dir.path()));
  }
  EXPECT_EQ(files, (std::vector<std::string>{"t/_delta_log/0.json"}));
}

}  // namespace
}  // namespace timelake::testing
