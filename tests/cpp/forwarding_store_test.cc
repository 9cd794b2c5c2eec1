// ForwardingStore: the ObjectStore contract through a forwarding wrapper, decorators that
// override one call, and the defaults ObjectStore builds on ListPage and Delete.
#include "timelake/store/forwarding_store.h"

#include <gtest/gtest.h>

#include "store_contract.h"
#include "test_util.h"
#include "timelake/store/memory_store.h"

namespace timelake::testing {
namespace {

struct ForwardingMemoryFactory {
  std::shared_ptr<ObjectStore> Make() {
    return std::make_shared<ForwardingStore>(std::make_shared<MemoryStore>("forwarded"));
  }
};

INSTANTIATE_TYPED_TEST_SUITE_P(ForwardingMemory, ObjectStoreContract, ForwardingMemoryFactory);

// A decorator that changes one call: it counts puts.
class PutCounter : public ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  arrow::Status Put(const std::string& path, const std::shared_ptr<arrow::Buffer>& data) override {
    ++puts;
    return ForwardingStore::Put(path, data);
  }
  int puts = 0;
};

// Records which listing and delete calls reach it.
class CallRecorder : public ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  arrow::Result<ObjectPage> ListPage(const ListPageRequest& request) override {
    calls.push_back("ListPage");
    return ForwardingStore::ListPage(request);
  }
  arrow::Result<std::vector<ObjectMeta>> ListAfter(const std::string& prefix,
                                                   const std::string& start_after) override {
    calls.push_back("ListAfter");
    return ForwardingStore::ListAfter(prefix, start_after);
  }
  arrow::Status Delete(const std::string& path) override {
    calls.push_back("Delete");
    return ForwardingStore::Delete(path);
  }
  arrow::Status DeleteMany(const std::vector<std::string>& paths) override {
    calls.push_back("DeleteMany");
    return ForwardingStore::DeleteMany(paths);
  }
  std::vector<std::string> calls;
};

// Serves listings in pages of at most `page_size` objects and lists through ObjectStore's own
// ListAfter and DeleteMany (the defaults a new store inherits).
class SmallPages : public ForwardingStore {
 public:
  SmallPages(std::shared_ptr<ObjectStore> target, int64_t page_size)
      : ForwardingStore(std::move(target)), page_size_(page_size) {}
  arrow::Result<ObjectPage> ListPage(const ListPageRequest& request) override {
    ++pages;
    ListPageRequest smaller = request;
    smaller.max_keys = std::min(request.max_keys, page_size_);
    return ForwardingStore::ListPage(smaller);
  }
  arrow::Result<std::vector<ObjectMeta>> ListAfter(const std::string& prefix,
                                                   const std::string& start_after) override {
    return ObjectStore::ListAfter(prefix, start_after);
  }
  arrow::Status Delete(const std::string& path) override {
    ++deletes;
    return ForwardingStore::Delete(path);
  }
  arrow::Status DeleteMany(const std::vector<std::string>& paths) override {
    return ObjectStore::DeleteMany(paths);
  }
  int pages = 0;
  int deletes = 0;

 private:
  int64_t page_size_;
};

// A broken store whose pages never advance.
class StuckPages : public ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  arrow::Result<ObjectPage> ListPage(const ListPageRequest&) override {
    return ObjectPage{{}, "the same place"};
  }
  arrow::Result<std::vector<ObjectMeta>> ListAfter(const std::string& prefix,
                                                   const std::string& start_after) override {
    return ObjectStore::ListAfter(prefix, start_after);
  }
};

std::vector<std::string> Paths(const std::vector<ObjectMeta>& listing) {
  std::vector<std::string> out;
  for (const auto& meta : listing) out.push_back(meta.path);
  return out;
}

TEST(ForwardingStoreTest, ADecoratorOverridesOneCallAndForwardsTheRest) {
  auto memory = std::make_shared<MemoryStore>("inner");
  PutCounter counter(memory);
  ASSERT_OK(counter.Put("a", Buf("x")));
  ASSERT_OK(counter.Put("b", Buf("y")));
  ASSERT_OK_AND_ASSIGN(bool created, counter.PutIfAbsent("c", Buf("z")));
  EXPECT_TRUE(created);
  EXPECT_EQ(counter.puts, 2);
  ASSERT_OK_AND_ASSIGN(auto listing, memory->List(""));
  EXPECT_EQ(Paths(listing), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(counter.RootUrl(), "memory://inner");
  EXPECT_EQ(counter.ExternalPath("a"), "memory://inner/a");
  EXPECT_EQ(counter.target(), memory);
}

TEST(ForwardingStoreTest, ForwardsTheTargetsOwnListAfterAndDeleteMany) {
  auto recorder = std::make_shared<CallRecorder>(std::make_shared<MemoryStore>());
  ForwardingStore wrapper(recorder);
  ASSERT_OK(wrapper.Put("a", Buf("x")));
  ASSERT_OK(wrapper.List("").status());
  ASSERT_OK(wrapper.DeleteMany({"a"}));
  EXPECT_EQ(recorder->calls, (std::vector<std::string>{"ListAfter", "DeleteMany"}));
}

TEST(ForwardingStoreTest, ForwardsRenamePrefix) {
  auto memory = std::make_shared<MemoryStore>();
  ForwardingStore wrapper(memory);
  ASSERT_OK(wrapper.Put("from/x", Buf("x")));
  ASSERT_OK(wrapper.RenamePrefix("from/", "to/"));
  EXPECT_OK(memory->Head("to/x").status());
}

TEST(ObjectStoreDefaultsTest, ListAfterFollowsEveryPageInOrder) {
  auto memory = std::make_shared<MemoryStore>();
  std::vector<std::string> expected;
  for (int i = 0; i < 11; ++i) {
    const std::string path = "log/" + std::to_string(100 + i);
    ASSERT_OK(memory->Put(path, Buf("x")));
    if (i > 2) expected.push_back(path);
  }
  ASSERT_OK(memory->Put("other/1", Buf("x")));
  SmallPages paged(memory, 3);
  ASSERT_OK_AND_ASSIGN(auto listing, paged.ListAfter("log/", "log/102"));
  EXPECT_EQ(Paths(listing), expected);
  EXPECT_EQ(paged.pages, 3);  // 8 objects in pages of 3
}

TEST(ObjectStoreDefaultsTest, ListAfterRefusesAStoreWhosePagesDoNotAdvance) {
  StuckPages stuck(std::make_shared<MemoryStore>("stuck"));
  EXPECT_TRUE(FailsWith(stuck.List("log/"), arrow::StatusCode::IOError, "repeated"));
}

TEST(ObjectStoreDefaultsTest, DeleteManyDeletesOneByOne) {
  auto memory = std::make_shared<MemoryStore>();
  ASSERT_OK(memory->Put("a", Buf("x")));
  ASSERT_OK(memory->Put("b", Buf("x")));
  SmallPages store(memory, 10);
  ASSERT_OK(store.DeleteMany({"a", "b", "missing"}));
  EXPECT_EQ(store.deletes, 3);
  ASSERT_OK_AND_ASSIGN(auto listing, memory->List(""));
  EXPECT_TRUE(listing.empty());
}

TEST(ObjectStoreDefaultsTest, RenamePrefixIsNotImplementedUnlessAStoreCanDoIt) {
  class NoRename : public ForwardingStore {
   public:
    using ForwardingStore::ForwardingStore;
    arrow::Status RenamePrefix(const std::string& prefix, const std::string& to) override {
      return ObjectStore::RenamePrefix(prefix, to);
    }
  } store(std::make_shared<MemoryStore>());
  EXPECT_TRUE(FailsWith(store.RenamePrefix("a/", "b/"), arrow::StatusCode::NotImplemented, "a/"));
}

TEST(OutputOptionsTest, PartSizeMustBeWithinTheBounds) {
  OutputOptions options;
  EXPECT_OK(options.Validate());
  options.part_size = OutputOptions::kMinPartSize - 1;
  EXPECT_TRUE(IsInvalid(options.Validate(), std::to_string(options.part_size)));
  options.part_size = OutputOptions::kMaxPartSize + 1;
  EXPECT_TRUE(IsInvalid(options.Validate(), std::to_string(options.part_size)));
  options.part_size = OutputOptions::kMaxPartSize;
  EXPECT_OK(options.Validate());
}

}  // namespace
}  // namespace timelake::testing
