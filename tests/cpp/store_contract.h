// The ObjectStore contract as a type-parameterised test suite.
//
// Every store must pass it: a test file instantiates it with a factory type that has
// `std::shared_ptr<ObjectStore> Make()` (called once per test, on a fresh, empty store):
//
//   INSTANTIATE_TYPED_TEST_SUITE_P(Local, ObjectStoreContract, LocalStoreFactory);
#pragma once

#include <atomic>
#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.h"
#include "timelake/store/object_store.h"

namespace timelake::testing {

template <typename Factory>
class ObjectStoreContract : public ::testing::Test {
 protected:
  void SetUp() override { store_ = factory_.Make(); }

  std::vector<std::string> ListPaths(const std::string& prefix) {
    std::vector<std::string> out;
    auto listing = store_->List(prefix);
    EXPECT_TRUE(listing.ok()) << listing.status().ToString();
    if (listing.ok()) {
      for (const auto& meta : *listing) out.push_back(meta.path);
    }
    return out;
  }

  std::string GetString(const std::string& path) {
    auto data = store_->Get(path);
    EXPECT_TRUE(data.ok()) << path << ": " << data.status().ToString();
    return data.ok() ? Str(*data) : std::string("<missing>");
  }

  Factory factory_;
  std::shared_ptr<ObjectStore> store_;
};

TYPED_TEST_SUITE_P(ObjectStoreContract);

TYPED_TEST_P(ObjectStoreContract, GetReturnsWhatPutStored) {
  ASSERT_OK(this->store_->Put("a/b/c.bin", Buf("hello")));
  EXPECT_EQ(this->GetString("a/b/c.bin"), "hello");
}

TYPED_TEST_P(ObjectStoreContract, PutReplacesExistingObject) {
  ASSERT_OK(this->store_->Put("x", Buf("old contents")));
  ASSERT_OK(this->store_->Put("x", Buf("new")));
  EXPECT_EQ(this->GetString("x"), "new");
}

TYPED_TEST_P(ObjectStoreContract, GetRangeReturnsTheRequestedBytes) {
  ASSERT_OK(this->store_->Put("r", Buf("0123456789")));
  ASSERT_OK_AND_ASSIGN(auto middle, this->store_->GetRange("r", 3, 4));
  EXPECT_EQ(Str(middle), "3456");
}

TYPED_TEST_P(ObjectStoreContract, GetRangePastTheEndIsShortened) {
  ASSERT_OK(this->store_->Put("r", Buf("0123456789")));
  ASSERT_OK_AND_ASSIGN(auto tail, this->store_->GetRange("r", 8, 100));
  EXPECT_EQ(Str(tail), "89");
}

TYPED_TEST_P(ObjectStoreContract, HeadReportsPathAndSize) {
  ASSERT_OK(this->store_->Put("d/obj", Buf("12345")));
  ASSERT_OK_AND_ASSIGN(auto meta, this->store_->Head("d/obj"));
  EXPECT_EQ(meta.path, "d/obj");
  EXPECT_EQ(meta.size, 5);
  EXPECT_GT(meta.modified_ms, 0);
}

TYPED_TEST_P(ObjectStoreContract, GetOfMissingObjectIsNotFound) {
  EXPECT_TRUE(IsMissing(this->store_->Get("no/such/object")));
}

TYPED_TEST_P(ObjectStoreContract, HeadOfMissingObjectIsNotFound) {
  EXPECT_TRUE(IsMissing(this->store_->Head("no/such/object")));
}

TYPED_TEST_P(ObjectStoreContract, GetOfAFolderIsNotFound) {
  ASSERT_OK(this->store_->Put("folder/inside", Buf("x")));
  EXPECT_TRUE(IsMissing(this->store_->Get("folder")));
}

TYPED_TEST_P(ObjectStoreContract, ListIsSortedByPath) {
  for (const char* p : {"l/c", "l/a/2", "l/b", "l/a/1", "l/a10"}) {
    ASSERT_OK(this->store_->Put(p, Buf(p)));
  }
  EXPECT_EQ(this->ListPaths("l/"),
            (std::vector<std::string>{"l/a/1", "l/a/2", "l/a10", "l/b", "l/c"}));
}

TYPED_TEST_P(ObjectStoreContract, ListReturnsOnlyPathsWithThePrefix) {
  for (const char* p : {"a/1", "a/2", "ab/3", "b/4"}) ASSERT_OK(this->store_->Put(p, Buf("x")));
  EXPECT_EQ(this->ListPaths("a/"), (std::vector<std::string>{"a/1", "a/2"}));
  EXPECT_EQ(this->ListPaths("a"), (std::vector<std::string>{"a/1", "a/2", "ab/3"}));
}

TYPED_TEST_P(ObjectStoreContract, ListReportsSizes) {
  ASSERT_OK(this->store_->Put("s/one", Buf("1")));
  ASSERT_OK(this->store_->Put("s/three", Buf("333")));
  ASSERT_OK_AND_ASSIGN(auto listing, this->store_->List("s/"));
  ASSERT_EQ(listing.size(), 2u);
  EXPECT_EQ(listing[0].size, 1);
  EXPECT_EQ(listing[1].size, 3);
}

TYPED_TEST_P(ObjectStoreContract, ListOfMissingPrefixIsEmpty) {
  ASSERT_OK(this->store_->Put("present/x", Buf("x")));
  EXPECT_TRUE(this->ListPaths("absent/").empty());
}

TYPED_TEST_P(ObjectStoreContract, ListChildrenNamesImmediateFoldersOnly) {
  for (const char* p : {"x/a/1", "x/a/2", "x/b/c/3", "x/file", "y/z"}) {
    ASSERT_OK(this->store_->Put(p, Buf("x")));
  }
  ASSERT_OK_AND_ASSIGN(auto children, this->store_->ListChildren("x/"));
  EXPECT_EQ(children, (std::vector<std::string>{"a", "b"}));
  ASSERT_OK_AND_ASSIGN(auto top, this->store_->ListChildren(""));
  EXPECT_EQ(top, (std::vector<std::string>{"x", "y"}));
}

TYPED_TEST_P(ObjectStoreContract, DeleteRemovesTheObject) {
  ASSERT_OK(this->store_->Put("gone", Buf("x")));
  ASSERT_OK(this->store_->Put("kept", Buf("y")));
  ASSERT_OK(this->store_->Delete("gone"));
  EXPECT_TRUE(IsMissing(this->store_->Get("gone")));
  EXPECT_EQ(this->GetString("kept"), "y");
}

TYPED_TEST_P(ObjectStoreContract, DeleteOfMissingObjectSucceeds) {
  EXPECT_OK(this->store_->Delete("never/was"));
}

TYPED_TEST_P(ObjectStoreContract, DeletePrefixRemovesOnlyThatFolder) {
  for (const char* p : {"t/a/1", "t/a/b/2", "t/ab/3", "t/b"}) {
    ASSERT_OK(this->store_->Put(p, Buf("x")));
  }
  ASSERT_OK(this->store_->DeletePrefix("t/a/"));
  EXPECT_EQ(this->ListPaths("t/"), (std::vector<std::string>{"t/ab/3", "t/b"}));
}

TYPED_TEST_P(ObjectStoreContract, PutIfAbsentCreatesAMissingObject) {
  ASSERT_OK_AND_ASSIGN(bool created, this->store_->PutIfAbsent("log/0.json", Buf("first")));
  EXPECT_TRUE(created);
  EXPECT_EQ(this->GetString("log/0.json"), "first");
}

TYPED_TEST_P(ObjectStoreContract, PutIfAbsentOnExistingObjectReturnsFalseAndKeepsContent) {
  ASSERT_OK(this->store_->Put("log/0.json", Buf("first")));
  ASSERT_OK_AND_ASSIGN(bool created, this->store_->PutIfAbsent("log/0.json", Buf("second")));
  EXPECT_FALSE(created);
  EXPECT_EQ(this->GetString("log/0.json"), "first");
}

TYPED_TEST_P(ObjectStoreContract, PutIfAbsentRaceHasExactlyOneWinner) {
  constexpr int kThreads = 16;
  constexpr int kRounds = 50;
  for (int round = 0; round < kRounds; ++round) {
    const std::string path = "race/" + std::to_string(round) + ".json";
    std::latch start(kThreads);
    std::vector<int> won(kThreads, 0);
    std::atomic<int> errors{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        const auto body = Buf("writer " + std::to_string(t) + " of round " + std::to_string(round));
        start.arrive_and_wait();
        auto result = this->store_->PutIfAbsent(path, body);
        if (!result.ok()) {
          errors.fetch_add(1);
        } else {
          won[t] = *result ? 1 : 0;
        }
      });
    }
    for (auto& th : threads) th.join();
    ASSERT_EQ(errors.load(), 0) << "round " << round;
    int winners = 0, winner = -1;
    for (int t = 0; t < kThreads; ++t) {
      if (won[t]) {
        ++winners;
        winner = t;
      }
    }
    ASSERT_EQ(winners, 1) << "round " << round;
    EXPECT_EQ(this->GetString(path),
              "writer " + std::to_string(winner) + " of round " + std::to_string(round));
  }
}

TYPED_TEST_P(ObjectStoreContract, OutputStreamObjectIsVisibleAfterClose) {
  ASSERT_OK_AND_ASSIGN(auto out, this->store_->OpenOutput("data/part-1.parquet"));
  ASSERT_OK(out->Write("abc", 3));
  ASSERT_OK(out->Write("defg", 4));
  ASSERT_OK_AND_ASSIGN(int64_t position, out->Tell());
  EXPECT_EQ(position, 7);
  ASSERT_OK(out->Close());
  EXPECT_EQ(this->GetString("data/part-1.parquet"), "abcdefg");
}

TYPED_TEST_P(ObjectStoreContract, OutputStreamObjectIsInvisibleBeforeClose) {
  ASSERT_OK_AND_ASSIGN(auto out, this->store_->OpenOutput("data/part-2.parquet"));
  ASSERT_OK(out->Write("partial", 7));
  EXPECT_TRUE(IsMissing(this->store_->Head("data/part-2.parquet")))
      << "a reader can see an object whose stream is still open";
  EXPECT_TRUE(this->ListPaths("data/").empty());
  ASSERT_OK(out->Close());
}

TYPED_TEST_P(ObjectStoreContract, OpenInputReadsAtAnyOffset) {
  ASSERT_OK(this->store_->Put("in", Buf("0123456789")));
  ASSERT_OK_AND_ASSIGN(auto file, this->store_->OpenInput("in"));
  ASSERT_OK_AND_ASSIGN(int64_t size, file->GetSize());
  EXPECT_EQ(size, 10);
  ASSERT_OK_AND_ASSIGN(auto bytes, file->ReadAt(6, 3));
  EXPECT_EQ(Str(bytes), "678");
}

REGISTER_TYPED_TEST_SUITE_P(ObjectStoreContract, GetReturnsWhatPutStored, PutReplacesExistingObject,
                            GetRangeReturnsTheRequestedBytes, GetRangePastTheEndIsShortened,
                            HeadReportsPathAndSize, GetOfMissingObjectIsNotFound,
                            HeadOfMissingObjectIsNotFound, GetOfAFolderIsNotFound,
                            ListIsSortedByPath, ListReturnsOnlyPathsWithThePrefix,
                            ListReportsSizes, ListOfMissingPrefixIsEmpty,
                            ListChildrenNamesImmediateFoldersOnly, DeleteRemovesTheObject,
                            DeleteOfMissingObjectSucceeds, DeletePrefixRemovesOnlyThatFolder,
                            PutIfAbsentCreatesAMissingObject,
                            PutIfAbsentOnExistingObjectReturnsFalseAndKeepsContent,
                            PutIfAbsentRaceHasExactlyOneWinner,
                            OutputStreamObjectIsVisibleAfterClose,
                            OutputStreamObjectIsInvisibleBeforeClose, OpenInputReadsAtAnyOffset);

}  // namespace timelake::testing
