// MemoryStore: the ObjectStore contract, and the fault hook that fails an operation without
// side effects (the way every other test injects storage failures).
#include "timelake/store/memory_store.h"

#include <gtest/gtest.h>

#include "store_contract.h"
#include "test_util.h"

namespace timelake::testing {
namespace {

struct MemoryStoreFactory {
  std::shared_ptr<ObjectStore> Make() { return std::make_shared<MemoryStore>("contract"); }
};

INSTANTIATE_TYPED_TEST_SUITE_P(Memory, ObjectStoreContract, MemoryStoreFactory);

// A hook that fails every call of `op` with an injected I/O error.
MemoryStore::FaultHook FailOp(const std::string& op) {
  return [op](const std::string& called, const std::string& path) {
    if (called == op) return arrow::Status::IOError("injected failure of ", op, " ", path);
    return arrow::Status::OK();
  };
}

class MemoryStoreTest : public ::testing::Test {
 protected:
  std::shared_ptr<MemoryStore> store_ = std::make_shared<MemoryStore>("faults");
};

TEST_F(MemoryStoreTest, RootUrlNamesTheStore) {
  EXPECT_EQ(store_->RootUrl(), "memory://faults");
  EXPECT_EQ(store_->ExternalPath("ns/t/x"), "memory://faults/ns/t/x");
}

TEST_F(MemoryStoreTest, FaultHookSeesEveryOperationWithItsPath) {
  std::vector<std::string> calls;
  store_->SetFaultHook([&](const std::string& op, const std::string& path) {
    calls.push_back(op + " " + path);
    return arrow::Status::OK();
  });
  ASSERT_OK(store_->Put("p", Buf("x")));
  ASSERT_OK(store_->PutIfAbsent("q", Buf("y")).status());
  ASSERT_OK(store_->Get("p").status());
  ASSERT_OK(store_->Head("p").status());
  ASSERT_OK(store_->List("").status());
  ASSERT_OK(store_->Delete("p"));
  EXPECT_EQ(calls, (std::vector<std::string>{"put p", "put_if_absent q", "get p", "head p",
                                             "list ", "delete p"}));
}

TEST_F(MemoryStoreTest, FailedOperationReturnsTheHookStatus) {
  ASSERT_OK(store_->Put("p", Buf("x")));
  store_->SetFaultHook(FailOp("get"));
  auto got = store_->Get("p");
  EXPECT_TRUE(FailsWith(got, arrow::StatusCode::IOError, "injected failure of get p"));
  EXPECT_FALSE(IsNotFound(got.status()));
}

TEST_F(MemoryStoreTest, FailedPutWritesNothing) {
  store_->SetFaultHook(FailOp("put"));
  EXPECT_FALSE(store_->Put("p", Buf("x")).ok());
  store_->SetFaultHook(nullptr);
  EXPECT_TRUE(IsMissing(store_->Get("p")));
}

TEST_F(MemoryStoreTest, FailedPutKeepsThePreviousObject) {
  ASSERT_OK(store_->Put("p", Buf("old")));
  store_->SetFaultHook(FailOp("put"));
  EXPECT_FALSE(store_->Put("p", Buf("new")).ok());
  store_->SetFaultHook(nullptr);
  ASSERT_OK_AND_ASSIGN(auto data, store_->Get("p"));
  EXPECT_EQ(Str(data), "old");
}

TEST_F(MemoryStoreTest, FailedPutIfAbsentLeavesThePathFree) {
  store_->SetFaultHook(FailOp("put_if_absent"));
  EXPECT_FALSE(store_->PutIfAbsent("log/0.json", Buf("a")).ok());
  store_->SetFaultHook(nullptr);
  ASSERT_OK_AND_ASSIGN(bool created, store_->PutIfAbsent("log/0.json", Buf("b")));
  EXPECT_TRUE(created);
}

TEST_F(MemoryStoreTest, FailedDeleteKeepsTheObject) {
  ASSERT_OK(store_->Put("p", Buf("x")));
  store_->SetFaultHook(FailOp("delete"));
  EXPECT_FALSE(store_->Delete("p").ok());
  store_->SetFaultHook(nullptr);
  EXPECT_OK(store_->Head("p").status());
}

TEST_F(MemoryStoreTest, FailedDeletePrefixKeepsEveryObject) {
  ASSERT_OK(store_->Put("t/a", Buf("x")));
  ASSERT_OK(store_->Put("t/b", Buf("y")));
  store_->SetFaultHook(FailOp("delete"));
  EXPECT_FALSE(store_->DeletePrefix("t/").ok());
  store_->SetFaultHook(nullptr);
  ASSERT_OK_AND_ASSIGN(auto listing, store_->List("t/"));
  EXPECT_EQ(listing.size(), 2u);
}

TEST_F(MemoryStoreTest, FailedListFailsListChildrenToo) {
  ASSERT_OK(store_->Put("ns/t/x", Buf("x")));
  store_->SetFaultHook(FailOp("list"));
  EXPECT_FALSE(store_->List("ns/").ok());
  EXPECT_FALSE(store_->ListChildren("ns/").ok());
}

TEST_F(MemoryStoreTest, FailedOpenOutputCreatesNoStream) {
  store_->SetFaultHook(FailOp("open_output"));
  EXPECT_FALSE(store_->OpenOutput("data/x").ok());
  store_->SetFaultHook(nullptr);
  EXPECT_TRUE(IsMissing(store_->Head("data/x")));
}

TEST_F(MemoryStoreTest, OutputStreamWhoseCloseFailsPublishesNothing) {
  ASSERT_OK_AND_ASSIGN(auto out, store_->OpenOutput("data/x"));
  ASSERT_OK(out->Write("bytes", 5));
  store_->SetFaultHook(FailOp("put"));
  EXPECT_FALSE(out->Close().ok());
  store_->SetFaultHook(nullptr);
  EXPECT_TRUE(IsMissing(store_->Head("data/x")));
}

TEST_F(MemoryStoreTest, FailedOpenInputOpensNothing) {
  ASSERT_OK(store_->Put("p", Buf("x")));
  store_->SetFaultHook(FailOp("open_input"));
  EXPECT_TRUE(FailsWith(store_->OpenInput("p"), arrow::StatusCode::IOError, "injected"));
}

TEST_F(MemoryStoreTest, HookCanFailOnePathOnly) {
  store_->SetFaultHook([](const std::string&, const std::string& path) {
    return path == "bad" ? arrow::Status::IOError("bad path") : arrow::Status::OK();
  });
  EXPECT_OK(store_->Put("good", Buf("x")));
  EXPECT_FALSE(store_->Put("bad", Buf("x")).ok());
}

TEST_F(MemoryStoreTest, ClearingTheHookRestoresService) {
  store_->SetFaultHook(FailOp("put"));
  ASSERT_FALSE(store_->Put("p", Buf("x")).ok());
  store_->SetFaultHook(nullptr);
  EXPECT_OK(store_->Put("p", Buf("x")));
}

}  // namespace
}  // namespace timelake::testing
