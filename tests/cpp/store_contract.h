// The ObjectStore contract as a type-parameterised test suite.
//
// Every store must pass it: a test file instantiates it with a factory type that has
// `std::shared_ptr<ObjectStore> Make()` (called once per test, on a fresh, empty store):
//
//   INSTANTIATE_TYPED_TEST_SUITE_P(Local, ObjectStoreContract, LocalStoreFactory);
//
// It is instantiated over LocalStore, MemoryStore, ForwardingStore(MemoryStore) and
// FaultStore(LocalStore) with no faults armed; a new store adds its own instantiation.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.h"
#include "timelake/store/object_store.h"

namespace timelake::testing {

/// Adds one to the decimal number the object at `path` holds: reads its tag, then its bytes, then
/// puts the successor if the tag still matches, and retries until that succeeds.
inline arrow::Status IncrementByCompareAndSwap(ObjectStore* store, const std::string& path) {
  for (;;) {
    // The tag before the bytes: if the object changes in between, the put fails and retries.
    ARROW_ASSIGN_OR_RAISE(auto meta, store->Head(path));
    ARROW_ASSIGN_OR_RAISE(auto data, store->Get(path));
    const int value = std::stoi(data->ToString());
    ARROW_ASSIGN_OR_RAISE(bool swapped,
                          store->PutIfMatch(path, Buf(std::to_string(value + 1)), meta.etag));
    if (swapped) return arrow::Status::OK();
  }
}

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

  std::vector<std::string> ListPathsAfter(const std::string& prefix, const std::string& after) {
    std::vector<std::string> out;
    auto listing = store_->ListAfter(prefix, after);
    EXPECT_TRUE(listing.ok()) << listing.status().ToString();
    if (listing.ok()) {
      for (const auto& meta : *listing) out.push_back(meta.path);
    }
    return out;
  }

  std::string EtagOf(const std::string& path) {
    auto meta = store_->Head(path);
    EXPECT_TRUE(meta.ok()) << path << ": " << meta.status().ToString();
    return meta.ok() ? meta->etag : std::string();
  }

  // `rounds` rounds in each of which `threads` threads start together and each call `put` once
  // with the round's path (what `prepare(round)` returns, called before they start) and a body of
  // its own: exactly one must get `true`, and the path must hold its body.
  void ExpectOneWinnerPerRound(
      int threads, int rounds, const std::function<std::string(int round)>& prepare,
      const std::function<arrow::Result<bool>(const std::string& path,
                                              const std::shared_ptr<arrow::Buffer>& body)>& put) {
    for (int round = 0; round < rounds; ++round) {
      const std::string path = prepare(round);
      auto body_of = [&](int t) {
        return "writer " + std::to_string(t) + " of round " + std::to_string(round);
      };
      std::latch start(threads);
      std::vector<int> won(threads, 0);
      std::atomic<int> errors{0};
      std::vector<std::thread> workers;
      for (int t = 0; t < threads; ++t) {
        workers.emplace_back([&, t] {
          const auto body = Buf(body_of(t));
          start.arrive_and_wait();
          auto result = put(path, body);
          if (!result.ok()) {
            errors.fetch_add(1);
          } else {
            won[t] = *result ? 1 : 0;
          }
        });
      }
      for (auto& worker : workers) worker.join();
      ASSERT_EQ(errors.load(), 0) << "round " << round;
      const auto winners = std::count(won.begin(), won.end(), 1);
      ASSERT_EQ(winners, 1) << "round " << round;
      const int winner = static_cast<int>(std::find(won.begin(), won.end(), 1) - won.begin());
      EXPECT_EQ(this->GetString(path), body_of(winner)) << "round " << round;
    }
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
  this->ExpectOneWinnerPerRound(
      16, 50, [](int round) { return "race/" + std::to_string(round) + ".json"; },
      [this](const std::string& path, const std::shared_ptr<arrow::Buffer>& body) {
        return this->store_->PutIfAbsent(path, body);
      });
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

// Small writes may be gathered before they reach the object (Parquet writes a field at a time);
// interleaved with large ones, every byte lands in order and Tell counts the ones written.
TYPED_TEST_P(ObjectStoreContract, OutputStreamKeepsTheOrderOfSmallAndLargeWrites) {
  ASSERT_OK_AND_ASSIGN(auto out, this->store_->OpenOutput("data/mixed"));
  std::string expected;
  for (int round = 0; round < 6; ++round) {
    for (int k = 0; k < 50; ++k) {
      const std::string small = std::to_string(round) + ":" + std::to_string(k) + ",";
      ASSERT_OK(out->Write(small.data(), static_cast<int64_t>(small.size())));
      expected += small;
    }
    const std::string large((round + 1) * 40000, static_cast<char>('a' + round));
    ASSERT_OK(out->Write(large.data(), static_cast<int64_t>(large.size())));
    expected += large;
    ASSERT_OK_AND_ASSIGN(int64_t position, out->Tell());
    ASSERT_EQ(position, static_cast<int64_t>(expected.size()));
  }
  ASSERT_OK(out->Close());
  EXPECT_TRUE(this->GetString("data/mixed") == expected) << "the object's bytes differ";
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

// --- entity tags -------------------------------------------------------------------------------

TYPED_TEST_P(ObjectStoreContract, HeadReportsAnEntityTag) {
  ASSERT_OK(this->store_->Put("e", Buf("x")));
  EXPECT_FALSE(this->EtagOf("e").empty());
}

TYPED_TEST_P(ObjectStoreContract, EntityTagChangesWithEveryReplacement) {
  // Same size, different bytes. (Identical bytes may keep the tag: S3's is their MD5.)
  ASSERT_OK(this->store_->Put("e", Buf("abcd")));
  const std::string first = this->EtagOf("e");
  ASSERT_OK(this->store_->Put("e", Buf("abce")));
  const std::string second = this->EtagOf("e");
  ASSERT_OK_AND_ASSIGN(auto out, this->store_->OpenOutput("e"));
  ASSERT_OK(out->Write("abcf", 4));
  ASSERT_OK(out->Close());
  const std::string third = this->EtagOf("e");
  EXPECT_NE(first, second);
  EXPECT_NE(second, third);
  EXPECT_NE(first, third);
}

TYPED_TEST_P(ObjectStoreContract, EntityTagStaysWhileTheObjectIsUnchanged) {
  ASSERT_OK(this->store_->Put("e", Buf("x")));
  const std::string tag = this->EtagOf("e");
  ASSERT_OK(this->store_->Get("e").status());
  ASSERT_OK(this->store_->Put("other", Buf("y")));
  EXPECT_EQ(this->EtagOf("e"), tag);
}

TYPED_TEST_P(ObjectStoreContract, ListReportsTheEntityTagsHeadReports) {
  ASSERT_OK(this->store_->Put("s/a", Buf("1")));
  ASSERT_OK(this->store_->Put("s/b", Buf("22")));
  ASSERT_OK_AND_ASSIGN(auto listing, this->store_->List("s/"));
  ASSERT_EQ(listing.size(), 2u);
  EXPECT_EQ(listing[0].etag, this->EtagOf("s/a"));
  EXPECT_EQ(listing[1].etag, this->EtagOf("s/b"));
}

// --- listing after a key, page by page --------------------------------------------------------

TYPED_TEST_P(ObjectStoreContract, ListAfterReturnsOnlyPathsAfterTheKey) {
  for (const char* p : {"log/00.json", "log/01.json", "log/02.json", "log/03.json"}) {
    ASSERT_OK(this->store_->Put(p, Buf(p)));
  }
  EXPECT_EQ(this->ListPathsAfter("log/", "log/01.json"),
            (std::vector<std::string>{"log/02.json", "log/03.json"}));
  // The key need not be an object.
  EXPECT_EQ(this->ListPathsAfter("log/", "log/015"),
            (std::vector<std::string>{"log/02.json", "log/03.json"}));
  EXPECT_EQ(this->ListPathsAfter("log/", ""), this->ListPaths("log/"));
}

TYPED_TEST_P(ObjectStoreContract, ListAfterAcrossFoldersIsInPathOrder) {
  for (const char* p : {"l/a/1", "l/a/2", "l/a-b", "l/a10", "l/b/c/3", "l/b/d", "l/c"}) {
    ASSERT_OK(this->store_->Put(p, Buf(p)));
  }
  EXPECT_EQ(this->ListPathsAfter("l/", "l/a/1"),
            (std::vector<std::string>{"l/a/2", "l/a10", "l/b/c/3", "l/b/d", "l/c"}));
  EXPECT_EQ(this->ListPathsAfter("l/", "l/a-b"),
            (std::vector<std::string>{"l/a/1", "l/a/2", "l/a10", "l/b/c/3", "l/b/d", "l/c"}));
  EXPECT_EQ(this->ListPathsAfter("l/b", "l/b/c"),
            (std::vector<std::string>{"l/b/c/3", "l/b/d"}));
  EXPECT_EQ(this->ListPathsAfter("l/b/", "l/b/c/3"), (std::vector<std::string>{"l/b/d"}));
}

TYPED_TEST_P(ObjectStoreContract, ListAfterANameThatIsAPrefixOfTheKey) {
  // Names before the key are passed over, except a folder whose name starts the key's.
  for (const char* p : {"m/aa", "m/ab/x", "m/abc/y", "m/abd", "m/b"}) {
    ASSERT_OK(this->store_->Put(p, Buf(p)));
  }
  EXPECT_EQ(this->ListPathsAfter("m/", "m/abc"),
            (std::vector<std::string>{"m/abc/y", "m/abd", "m/b"}));
  EXPECT_EQ(this->ListPathsAfter("m/", "m/ab"),
            (std::vector<std::string>{"m/ab/x", "m/abc/y", "m/abd", "m/b"}));
  EXPECT_EQ(this->ListPathsAfter("m/", "m/ab/"),
            (std::vector<std::string>{"m/ab/x", "m/abc/y", "m/abd", "m/b"}));
  EXPECT_EQ(this->ListPathsAfter("m/", "m/abz"), (std::vector<std::string>{"m/b"}));
}

TYPED_TEST_P(ObjectStoreContract, ListAfterAKeyBeforeThePrefixListsItAll) {
  for (const char* p : {"a/1", "b/1", "b/2", "c/1"}) ASSERT_OK(this->store_->Put(p, Buf(p)));
  EXPECT_EQ(this->ListPathsAfter("b/", "a/9"), (std::vector<std::string>{"b/1", "b/2"}));
  EXPECT_TRUE(this->ListPathsAfter("b/", "b/2").empty());
  EXPECT_TRUE(this->ListPathsAfter("b/", "c").empty());
}

TYPED_TEST_P(ObjectStoreContract, ListPagesHoldAtMostMaxKeysAndContinue) {
  std::vector<std::string> all;
  for (int i = 0; i < 23; ++i) {
    char name[32];
    std::snprintf(name, sizeof(name), "p/%03d", i);
    all.push_back(name);
    ASSERT_OK(this->store_->Put(name, Buf(name)));
  }
  ASSERT_OK(this->store_->Put("q/outside", Buf("x")));
  ListPageRequest request{"p/", "p/004", "", 5};
  std::vector<std::string> seen;
  int pages = 0;
  for (;;) {
    ASSERT_OK_AND_ASSIGN(auto page, this->store_->ListPage(request));
    ASSERT_LE(page.objects.size(), 5u);
    for (const auto& meta : page.objects) seen.push_back(meta.path);
    ++pages;
    ASSERT_LT(pages, 100) << "the listing never ends";
    if (page.continuation.empty()) break;
    request.continuation = page.continuation;
  }
  EXPECT_EQ(seen, std::vector<std::string>(all.begin() + 5, all.end()));
  EXPECT_GE(pages, 4);
}

TYPED_TEST_P(ObjectStoreContract, ListPageOfAnEmptyPrefixIsTheLastPage) {
  ASSERT_OK_AND_ASSIGN(auto page, this->store_->ListPage({"nothing/", "", "", 10}));
  EXPECT_TRUE(page.objects.empty());
  EXPECT_TRUE(page.continuation.empty());
}

// --- put-if-match ------------------------------------------------------------------------------

TYPED_TEST_P(ObjectStoreContract, PutIfMatchReplacesWhenTheTagMatches) {
  ASSERT_OK(this->store_->Put("base", Buf("v1")));
  ASSERT_OK_AND_ASSIGN(bool replaced,
                       this->store_->PutIfMatch("base", Buf("v2"), this->EtagOf("base")));
  EXPECT_TRUE(replaced);
  EXPECT_EQ(this->GetString("base"), "v2");
}

TYPED_TEST_P(ObjectStoreContract, PutIfMatchWithAStaleTagReturnsFalseAndKeepsContent) {
  ASSERT_OK(this->store_->Put("base", Buf("v1")));
  const std::string stale = this->EtagOf("base");
  ASSERT_OK(this->store_->Put("base", Buf("v2")));
  ASSERT_OK_AND_ASSIGN(bool replaced, this->store_->PutIfMatch("base", Buf("v3"), stale));
  EXPECT_FALSE(replaced);
  EXPECT_EQ(this->GetString("base"), "v2");
}

TYPED_TEST_P(ObjectStoreContract, PutIfMatchOfAMissingObjectReturnsFalseAndCreatesNothing) {
  ASSERT_OK(this->store_->Put("base", Buf("v1")));
  const std::string tag = this->EtagOf("base");
  ASSERT_OK(this->store_->Delete("base"));
  ASSERT_OK_AND_ASSIGN(bool replaced, this->store_->PutIfMatch("base", Buf("v2"), tag));
  EXPECT_FALSE(replaced);
  EXPECT_TRUE(IsMissing(this->store_->Head("base")));
  ASSERT_OK_AND_ASSIGN(bool elsewhere, this->store_->PutIfMatch("new/dir/x", Buf("v"), tag));
  EXPECT_FALSE(elsewhere);
  EXPECT_TRUE(this->ListPaths("new/").empty());
}

TYPED_TEST_P(ObjectStoreContract, PutIfMatchWithoutATagIsInvalid) {
  ASSERT_OK(this->store_->Put("base", Buf("v1")));
  EXPECT_TRUE(IsInvalid(this->store_->PutIfMatch("base", Buf("v2"), ""), "base"));
  EXPECT_EQ(this->GetString("base"), "v1");
}

TYPED_TEST_P(ObjectStoreContract, PutIfMatchRaceHasExactlyOneWinner) {
  ASSERT_OK(this->store_->Put("cas", Buf("start")));
  std::string tag;  // the tag every writer of a round read
  this->ExpectOneWinnerPerRound(
      8, 20,
      [&](int) {
        tag = this->EtagOf("cas");
        return std::string("cas");
      },
      [&](const std::string& path, const std::shared_ptr<arrow::Buffer>& body) {
        return this->store_->PutIfMatch(path, body, tag);
      });
}

TYPED_TEST_P(ObjectStoreContract, PutIfMatchLosesNoUpdateUnderContention) {
  // Every thread increments a counter by read, compare-and-swap, retry: with a real
  // compare-and-swap no increment is lost.
  constexpr int kThreads = 4;
  constexpr int kIncrements = 25;
  ASSERT_OK(this->store_->Put("counter", Buf("0")));
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kIncrements; ++i) {
        if (!IncrementByCompareAndSwap(this->store_.get(), "counter").ok()) errors.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_EQ(errors.load(), 0);
  EXPECT_EQ(this->GetString("counter"), std::to_string(kThreads * kIncrements));
}

// --- output streams: abort, part size ---------------------------------------------------------

TYPED_TEST_P(ObjectStoreContract, AbortedOutputStreamLeavesNothing) {
  ASSERT_OK_AND_ASSIGN(auto out, this->store_->OpenOutput("data/part-3.parquet"));
  ASSERT_OK(out->Write("partial", 7));
  ASSERT_OK(out->Abort());
  EXPECT_TRUE(out->closed());
  EXPECT_TRUE(IsMissing(this->store_->Head("data/part-3.parquet")));
  EXPECT_TRUE(this->ListPaths("").empty());
  EXPECT_OK(out->Close());  // closed already: does nothing
  EXPECT_TRUE(IsMissing(this->store_->Head("data/part-3.parquet")));
}

TYPED_TEST_P(ObjectStoreContract, AbortedOutputStreamKeepsThePreviousObject) {
  ASSERT_OK(this->store_->Put("data/x", Buf("old")));
  ASSERT_OK_AND_ASSIGN(auto out, this->store_->OpenOutput("data/x"));
  ASSERT_OK(out->Write("new", 3));
  ASSERT_OK(out->Abort());
  EXPECT_EQ(this->GetString("data/x"), "old");
}

TYPED_TEST_P(ObjectStoreContract, WriteAfterAbortFails) {
  ASSERT_OK_AND_ASSIGN(auto out, this->store_->OpenOutput("data/x"));
  ASSERT_OK(out->Abort());
  EXPECT_FALSE(out->Write("late", 4).ok());
  EXPECT_TRUE(IsMissing(this->store_->Head("data/x")));
}

TYPED_TEST_P(ObjectStoreContract, OutputStreamDroppedUnclosedLeavesNothing) {
  {
    ASSERT_OK_AND_ASSIGN(auto out, this->store_->OpenOutput("data/x"));
    ASSERT_OK(out->Write("orphan", 6));
  }
  EXPECT_TRUE(IsMissing(this->store_->Head("data/x")));
  EXPECT_TRUE(this->ListPaths("").empty());
}

TYPED_TEST_P(ObjectStoreContract, OutputStreamWritesObjectsLargerThanAPart) {
  OutputOptions options;
  options.part_size = OutputOptions::kMinPartSize;
  const int64_t size = 2 * options.part_size + 12345;
  std::string chunk(64 * 1024, '\0');
  ASSERT_OK_AND_ASSIGN(auto out, this->store_->OpenOutput("big", options));
  for (int64_t written = 0; written < size;) {
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(chunk.size()), size - written);
    for (int64_t i = 0; i < n; ++i) chunk[i] = static_cast<char>((written + i) % 251);
    ASSERT_OK(out->Write(chunk.data(), n));
    written += n;
  }
  ASSERT_OK(out->Close());
  ASSERT_OK_AND_ASSIGN(auto meta, this->store_->Head("big"));
  EXPECT_EQ(meta.size, size);
  ASSERT_OK_AND_ASSIGN(auto tail, this->store_->GetRange("big", size - 3, 3));
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(static_cast<uint8_t>(tail->data()[i]), (size - 3 + i) % 251);
  }
}

TYPED_TEST_P(ObjectStoreContract, OpenOutputRejectsAPartSizeOutOfRange) {
  OutputOptions options;
  options.part_size = 1024;
  EXPECT_TRUE(IsInvalid(this->store_->OpenOutput("x", options), "1024"));
  EXPECT_TRUE(IsMissing(this->store_->Head("x")));
}

// --- bulk delete --------------------------------------------------------------------------------

TYPED_TEST_P(ObjectStoreContract, DeleteManyRemovesEveryNamedObject) {
  for (const char* p : {"v/a", "v/b", "v/c/d", "w/e", "keep"}) {
    ASSERT_OK(this->store_->Put(p, Buf(p)));
  }
  ASSERT_OK(this->store_->DeleteMany({"v/a", "v/c/d", "w/e", "v/never", "nowhere/at/all"}));
  EXPECT_EQ(this->ListPaths(""), (std::vector<std::string>{"keep", "v/b"}));
}

TYPED_TEST_P(ObjectStoreContract, DeleteManyOfNothingSucceeds) {
  ASSERT_OK(this->store_->Put("keep", Buf("x")));
  EXPECT_OK(this->store_->DeleteMany({}));
  EXPECT_EQ(this->ListPaths(""), (std::vector<std::string>{"keep"}));
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
                            OutputStreamKeepsTheOrderOfSmallAndLargeWrites,
                            OutputStreamObjectIsInvisibleBeforeClose, OpenInputReadsAtAnyOffset,
                            HeadReportsAnEntityTag, EntityTagChangesWithEveryReplacement,
                            EntityTagStaysWhileTheObjectIsUnchanged,
                            ListReportsTheEntityTagsHeadReports,
                            ListAfterReturnsOnlyPathsAfterTheKey,
                            ListAfterAcrossFoldersIsInPathOrder,
                            ListAfterANameThatIsAPrefixOfTheKey,
                            ListAfterAKeyBeforeThePrefixListsItAll,
                            ListPagesHoldAtMostMaxKeysAndContinue,
                            ListPageOfAnEmptyPrefixIsTheLastPage,
                            PutIfMatchReplacesWhenTheTagMatches,
                            PutIfMatchWithAStaleTagReturnsFalseAndKeepsContent,
                            PutIfMatchOfAMissingObjectReturnsFalseAndCreatesNothing,
                            PutIfMatchWithoutATagIsInvalid, PutIfMatchRaceHasExactlyOneWinner,
                            PutIfMatchLosesNoUpdateUnderContention,
                            AbortedOutputStreamLeavesNothing,
                            AbortedOutputStreamKeepsThePreviousObject, WriteAfterAbortFails,
                            OutputStreamDroppedUnclosedLeavesNothing,
                            OutputStreamWritesObjectsLargerThanAPart,
                            OpenOutputRejectsAPartSizeOutOfRange,
                            DeleteManyRemovesEveryNamedObject, DeleteManyOfNothingSucceeds);

}  // namespace timelake::testing
