// S3Store against a real S3 server (moto, started by scripts/test.sh, which exports its URL in
// TIMELAKE_TEST_S3_ENDPOINT): the ObjectStore contract, multipart uploads, and S3's replies.
// Without the variable these tests fail, saying how to run them; TIMELAKE_TEST_S3_ENDPOINT=none
// skips them explicitly.
#include "timelake/store/s3/s3_store.h"

#include <cstdlib>

#include <gtest/gtest.h>

#include "store_contract.h"
#include "test_util.h"
#include "timelake/util/ids.h"
#include "timelake/util/status.h"
#include "timelake/util/time.h"

namespace timelake::testing {
namespace {

const char* kBucket = "timelake-cpp-tests";

// The test server's options, or nullopt (after failing or skipping the test) without one.
std::optional<StorageOptions> ServerOptions() {
  const char* endpoint = std::getenv("TIMELAKE_TEST_S3_ENDPOINT");
  if (!endpoint || !*endpoint) {
    ADD_FAILURE() << "TIMELAKE_TEST_S3_ENDPOINT is not set: run the tests with scripts/test.sh, "
                     "which starts an S3 server (moto), or set it to none to skip S3 tests";
    return std::nullopt;
  }
  if (std::string(endpoint) == "none") {
    return std::nullopt;
  }
  return StorageOptions{{"aws_endpoint", endpoint},
                        {"aws_access_key_id", "testing"},
                        {"aws_secret_access_key", "testing"},
                        {"aws_region", "us-east-1"},
                        {"aws_allow_http", "true"}};
}

// A store over a fresh folder of the test bucket.
std::shared_ptr<ObjectStore> FreshStore(const StorageOptions& options) {
  const std::string bucket_url = std::string("s3://") + kBucket;
  auto created = CreateS3Bucket(bucket_url, options);
  EXPECT_TRUE(created.ok()) << created.ToString();
  auto store = OpenStore(bucket_url + "/" + NewUuid(), options);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? *store : nullptr;
}

struct S3StoreFactory {
  std::shared_ptr<ObjectStore> Make() {
    auto options = ServerOptions();
    if (!options) {
      [] { GTEST_SKIP() << "TIMELAKE_TEST_S3_ENDPOINT=none"; }();
      return nullptr;
    }
    return FreshStore(*options);
  }
};

INSTANTIATE_TYPED_TEST_SUITE_P(S3, ObjectStoreContract, S3StoreFactory);

class S3StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_ = ServerOptions();
    if (!options_) GTEST_SKIP() << "TIMELAKE_TEST_S3_ENDPOINT=none";
    store_ = FreshStore(*options_);
    ASSERT_NE(store_, nullptr);
  }
  std::optional<StorageOptions> options_;
  std::shared_ptr<ObjectStore> store_;
};

std::string Pattern(int64_t size) {
  std::string out(static_cast<size_t>(size), '\0');
  for (int64_t i = 0; i < size; ++i) out[static_cast<size_t>(i)] = static_cast<char>('a' + (i * 7) % 26);
  return out;
}

TEST_F(S3StoreTest, LargeOutputGoesUpInPartsAndReadsBackWhole) {
  OutputOptions options;
  options.part_size = OutputOptions::kMinPartSize;
  const std::string data = Pattern(3 * options.part_size + 12345);
  ASSERT_OK_AND_ASSIGN(auto out, store_->OpenOutput("big/file.bin", options));
  for (size_t at = 0; at < data.size(); at += 1000003) {
    ASSERT_OK(out->Write(data.data() + at, std::min<size_t>(1000003, data.size() - at)));
  }
  // Nothing is visible before Close.
  EXPECT_TRUE(IsNotFound(store_->Head("big/file.bin").status()));
  ASSERT_OK(out->Close());
  ASSERT_OK_AND_ASSIGN(auto meta, store_->Head("big/file.bin"));
  EXPECT_EQ(meta.size, static_cast<int64_t>(data.size()));
  EXPECT_NE(meta.etag.find("-4"), std::string::npos) << meta.etag;  // four parts
  ASSERT_OK_AND_ASSIGN(auto back, store_->Get("big/file.bin"));
  EXPECT_TRUE(back->ToString() == data);
  ASSERT_OK_AND_ASSIGN(auto input, store_->OpenInput("big/file.bin"));
  ASSERT_OK_AND_ASSIGN(int64_t size, input->GetSize());
  EXPECT_EQ(size, static_cast<int64_t>(data.size()));
  ASSERT_OK_AND_ASSIGN(auto tail, input->ReadAt(size - 10, 100));
  EXPECT_EQ(tail->ToString(), data.substr(data.size() - 10));
}

TEST_F(S3StoreTest, AbortedMultipartUploadLeavesNothing) {
  OutputOptions options;
  options.part_size = OutputOptions::kMinPartSize;
  const std::string data = Pattern(2 * options.part_size + 1);
  {
    ASSERT_OK_AND_ASSIGN(auto out, store_->OpenOutput("aborted.bin", options));
    ASSERT_OK(out->Write(data.data(), static_cast<int64_t>(data.size())));
    ASSERT_OK(out->Abort());
    EXPECT_FALSE(out->Write(data.data(), 1).ok());
  }
  {
    // Destroyed without Close: aborts too.
    ASSERT_OK_AND_ASSIGN(auto out, store_->OpenOutput("dropped.bin", options));
    ASSERT_OK(out->Write(data.data(), static_cast<int64_t>(data.size())));
  }
  EXPECT_TRUE(IsNotFound(store_->Head("aborted.bin").status()));
  EXPECT_TRUE(IsNotFound(store_->Head("dropped.bin").status()));
}

TEST_F(S3StoreTest, DeleteManyRemovesMoreThanOneBatch) {
  std::vector<std::string> paths;
  for (int i = 0; i < 1005; ++i) paths.push_back("many/" + std::to_string(i));
  // Put them in parallel: 1,005 sequential requests would dominate the test's time.
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = static_cast<size_t>(t); i < paths.size(); i += 8) {
        if (!store_->Put(paths[i], Buf("x")).ok()) failures.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(failures.load(), 0);
  ASSERT_OK_AND_ASSIGN(auto listed, store_->List("many/"));
  EXPECT_EQ(listed.size(), paths.size());  // a listing of more than one page
  paths.push_back("many/never-existed");
  ASSERT_OK(store_->DeleteMany(paths));
  ASSERT_OK_AND_ASSIGN(auto after, store_->List("many/"));
  EXPECT_TRUE(after.empty());
}

TEST_F(S3StoreTest, KeysWithSpecialCharactersRoundTrip) {
  for (const std::string path : {"a b/c+d=e&f", "x/y%20z", "uni/ünï/çødé", "q/?#[]@!$'()*,;"}) {
    ASSERT_OK(store_->Put(path, Buf(path)));
    ASSERT_OK_AND_ASSIGN(auto back, store_->Get(path));
    EXPECT_EQ(back->ToString(), path);
    ASSERT_OK_AND_ASSIGN(auto listed, store_->List(path.substr(0, path.find('/') + 1)));
    ASSERT_EQ(listed.size(), 1u) << path;
    EXPECT_EQ(listed[0].path, path);
  }
}

TEST_F(S3StoreTest, DotSegmentsNameNoObject) {
  // A URL normaliser would turn "a/../b" into "b" (another object, signed for a path never
  // sent): such paths are refused before any request.
  for (const std::string path : {"a/../b", "./a", "a/.", "../escape"}) {
    EXPECT_TRUE(IsInvalid(store_->Put(path, Buf("x")), "'..'")) << path;
    EXPECT_TRUE(IsInvalid(store_->Get(path).status(), "'..'")) << path;
  }
  ASSERT_OK(store_->Put("a/..b/c.", Buf("x")));  // dots inside names are ordinary characters
  ASSERT_OK_AND_ASSIGN(auto back, store_->Get("a/..b/c."));
  EXPECT_EQ(back->ToString(), "x");
}

TEST_F(S3StoreTest, ModificationTimesAreReadFromHeadAndListings) {
  const int64_t before = NowMillis();
  ASSERT_OK(store_->Put("t", Buf("x")));
  const int64_t after = NowMillis();  // (a slow emulator's put may take seconds)
  ASSERT_OK_AND_ASSIGN(auto head, store_->Head("t"));
  ASSERT_OK_AND_ASSIGN(auto listed, store_->List("t"));
  ASSERT_EQ(listed.size(), 1u);
  // Seconds in HTTP dates, milliseconds in listings: both within a few seconds of the put.
  // (Whole seconds in a HEAD's date: up to a second before the put began.)
  EXPECT_GE(head.modified_ms, before - 1000);
  EXPECT_LE(head.modified_ms, after + 1000);
  EXPECT_NEAR(static_cast<double>(listed[0].modified_ms), static_cast<double>(head.modified_ms), 1500.0);
}

TEST_F(S3StoreTest, MissingBucketIsAClearError) {
  ASSERT_OK_AND_ASSIGN(auto store, OpenStore("s3://no-such-bucket-" + NewUuid().substr(0, 8) + "/x",
                                             *options_));
  auto got = store->Get("a");
  ASSERT_FALSE(got.ok());
  EXPECT_FALSE(IsNotFound(got.status()));
  EXPECT_NE(got.status().message().find("does not exist"), std::string::npos) << got.status().ToString();
  auto listed = store->List("");
  ASSERT_FALSE(listed.ok());
  EXPECT_NE(listed.status().message().find("does not exist"), std::string::npos);
}

TEST_F(S3StoreTest, UnreachableServerFailsAfterBoundedRetries) {
  StorageOptions options = *options_;
  options["aws_endpoint"] = "http://127.0.0.1:9";  // discard port: connection refused
  options["max_retries"] = "2";
  options["retry_timeout"] = "60s";  // the retries, not the time, must run out
  ASSERT_OK_AND_ASSIGN(auto store, OpenStore("s3://b/x", options));
  auto put = store->PutIfAbsent("a", Buf("x"));
  ASSERT_FALSE(put.ok());
  EXPECT_NE(put.status().message().find("3 attempts"), std::string::npos) << put.status().ToString();
  // A refused connection never reached a server: the write surely did not happen.
  EXPECT_FALSE(IsOutcomeUnknown(put.status()));
}

TEST_F(S3StoreTest, PlainHttpNeedsAllowHttp) {
  StorageOptions options = *options_;
  options.erase("aws_allow_http");
  ASSERT_OK_AND_ASSIGN(auto store, OpenStore(store_->RootUrl(), options));
  auto got = store->Get("a");
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("allow_http"), std::string::npos) << got.status().ToString();
}

}  // namespace
}  // namespace timelake::testing
