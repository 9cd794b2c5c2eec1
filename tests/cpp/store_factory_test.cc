// OpenStore: lake locations to stores, and what it says about schemes and storage_options.
#include "timelake/store/store_factory.h"

#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "temp_dir.h"
#include "test_util.h"
#include "timelake/store/local_store.h"
#include "timelake/store/memory_store.h"

namespace timelake::testing {
namespace {

TEST(StoreFactoryTest, LocalPathOpensALocalStore) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(auto store, OpenStore(dir.path() + "/lake/", {}));
  ASSERT_NE(std::dynamic_pointer_cast<LocalStore>(store), nullptr);
  EXPECT_EQ(store->RootUrl(), "file://" + dir.path() + "/lake");
  EXPECT_TRUE(std::filesystem::is_directory(dir.path() + "/lake"));
}

TEST(StoreFactoryTest, RelativePathIsMadeAbsolute) {
  TempDir dir;
  const auto before = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  auto store = OpenStore("rel/../lake", {});
  std::filesystem::current_path(before);
  ASSERT_OK(store.status());
  EXPECT_EQ((*store)->RootUrl(), "file://" + dir.path() + "/lake");
}

TEST(StoreFactoryTest, FileUrlOpensALocalStore) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(auto store, OpenStore("file://" + dir.path(), {}));
  EXPECT_EQ(store->RootUrl(), "file://" + dir.path());
}

TEST(StoreFactoryTest, FileUrlWithoutAnAbsolutePathIsInvalid) {
  EXPECT_TRUE(IsInvalid(OpenStore("file://relative/lake", {}), "absolute path"));
}

TEST(StoreFactoryTest, EachMemoryUrlIsANewEmptyStore) {
  ASSERT_OK_AND_ASSIGN(auto first, OpenStore("memory://scratch", {}));
  ASSERT_NE(std::dynamic_pointer_cast<MemoryStore>(first), nullptr);
  EXPECT_EQ(first->RootUrl(), "memory://scratch");
  ASSERT_OK(first->Put("x", Buf("1")));
  ASSERT_OK_AND_ASSIGN(auto second, OpenStore("memory://scratch", {}));
  EXPECT_TRUE(IsMissing(second->Head("x")));
}

TEST(StoreFactoryTest, EveryCloudSchemeOpensItsStore) {
  // Opening makes no request: the stores only read their options (credentials come on first use).
  const StorageOptions azure = {{"azure_storage_account_name", "acct"},
                                {"azure_storage_token", "t"}};
  const StorageOptions gcs = {{"google_skip_signature", "true"}};
  const StorageOptions s3 = {{"aws_access_key_id", "k"}, {"aws_secret_access_key", "s"}};
  struct Case {
    std::string url;
    StorageOptions options;
    std::string root;  // the store's RootUrl
  };
  for (const auto& c : std::vector<Case>{
           {"s3://bucket/lake/", s3, "s3://bucket/lake"},
           {"s3a://bucket/lake", s3, "s3://bucket/lake"},
           {"gs://bucket/lake", gcs, "gs://bucket/lake"},
           {"az://container/lake", azure, "az://container/lake"},
           {"azure://container/lake", azure, "azure://container/lake"},
           {"abfss://container@acct.dfs.core.windows.net/lake", azure,
            "abfss://container@acct.dfs.core.windows.net/lake"},
           {"abfs://container@acct.dfs.core.windows.net/lake", azure,
            "abfs://container@acct.dfs.core.windows.net/lake"}}) {
    auto store = OpenStore(c.url, c.options);
    ASSERT_TRUE(store.ok()) << c.url << ": " << store.status().ToString();
    EXPECT_EQ((*store)->RootUrl(), c.root);
  }
  // Each cloud refuses the others' options, naming the key.
  EXPECT_TRUE(IsInvalid(OpenStore("gs://b/l", {{"aws_region", "x"}}), "aws_region"));
  EXPECT_TRUE(IsInvalid(OpenStore("az://c/l", {{"google_base_url", "x"}}), "google_base_url"));
  EXPECT_TRUE(IsInvalid(OpenStore("s3://b/l", {{"azure_storage_token", "x"}}), "azure_storage_token"));
  EXPECT_TRUE(IsInvalid(OpenStore("s3://b/l", {{"service_account", "/sa.json"}}), "service_account"));
  // abfss:// needs the account in the URL.
  EXPECT_TRUE(IsInvalid(OpenStore("abfss://container/lake", azure), "account"));
}

TEST(StoreFactoryTest, UnknownSchemeIsInvalidNamingIt) {
  EXPECT_TRUE(IsInvalid(OpenStore("ftp://host/lake", {}), "unknown scheme 'ftp://'"));
}

TEST(StoreFactoryTest, EmptyLocationOrNulIsInvalid) {
  EXPECT_TRUE(IsInvalid(OpenStore("", {}), "empty"));
  EXPECT_TRUE(IsInvalid(OpenStore(std::string("/tmp/lake\0x", 11), {}), "NUL"));
}

TEST(StoreFactoryTest, UnknownStorageOptionIsInvalidNamingIt) {
  EXPECT_TRUE(IsInvalid(OpenStore("s3://bucket/lake", {{"aws_regoin", "eu"}}), "aws_regoin"));
  EXPECT_TRUE(IsInvalid(OpenStore("memory://x", {{"aws_regoin", "eu"}}), "aws_regoin"));
}

TEST(StoreFactoryTest, S3UrlOpensAnS3Store) {
  // Opening makes no request: the bucket is first reached by the lake's first read.
  const StorageOptions keys = {{"aws_access_key_id", "AKIDEXAMPLE"},
                               {"aws_secret_access_key", "s3cr3t-value"},
                               {"aws_region", "eu-west-1"}};
  for (const char* url : {"s3://bucket/lake", "s3a://bucket/lake/", "s3://bucket//lake"}) {
    auto store = OpenStore(url, keys);
    if (std::string(url).find("//lake") != std::string::npos) {
      EXPECT_TRUE(IsInvalid(store, "empty path segment")) << url;
      continue;
    }
    ASSERT_OK(store.status());
    EXPECT_EQ((*store)->RootUrl(), "s3://bucket/lake");
    EXPECT_EQ((*store)->ExternalPath("ns/t/data/x.parquet"), "s3://bucket/lake/ns/t/data/x.parquet");
  }
  ASSERT_OK_AND_ASSIGN(auto root, OpenStore("s3://bucket", keys));
  EXPECT_EQ(root->RootUrl(), "s3://bucket");
  EXPECT_TRUE(IsInvalid(OpenStore("s3:///lake", keys), "names no bucket"));
}

TEST(StoreFactoryTest, BadS3OptionValuesAreInvalidNamingTheKeyNotTheSecret) {
  StorageOptions keys = {{"aws_access_key_id", "AKIDEXAMPLE"},
                         {"aws_secret_access_key", "s3cr3t-value"}};
  auto with = [&](const std::string& key, const std::string& value) {
    StorageOptions o = keys;
    o[key] = value;
    return OpenStore("s3://bucket/lake", o);
  };
  EXPECT_TRUE(IsInvalid(with("aws_allow_http", "perhaps"), "aws_allow_http"));
  EXPECT_TRUE(IsInvalid(with("timeout", "soon"), "timeout"));
  EXPECT_TRUE(IsInvalid(with("max_retries", "-1"), "max_retries"));
  EXPECT_TRUE(IsInvalid(with("aws_endpoint", "127.0.0.1:9000"), "aws_endpoint"));
  auto dynamo = with("aws_conditional_put", "dynamo");
  EXPECT_TRUE(IsInvalid(dynamo, "aws_conditional_put"));
  EXPECT_NE(dynamo.status().message().find("'etag'"), std::string::npos);
  ASSERT_OK(with("aws_conditional_put", "etag").status());
  ASSERT_OK(with("aws_s3_allow_unsafe_rename", "true").status());  // nothing is renamed anyway
  EXPECT_TRUE(IsInvalid(with("aws_s3_locking_provider", "dynamodb"), "needs no lock"));
  EXPECT_TRUE(IsInvalid(with("delta_dynamo_table_name", "locks"), "delta_dynamo_table_name"));
  auto azure = with("azure_storage_account_key", "s3cr3t-value");
  EXPECT_TRUE(IsInvalid(azure, "azure_storage_account_key"));
  for (const auto& s : {dynamo.status(), azure.status()}) {
    EXPECT_EQ(s.message().find("s3cr3t-value"), std::string::npos) << s.ToString();
  }
}

TEST(StoreFactoryTest, OptionsForALocalOrMemoryLakeAreInvalidWithoutTheirValues) {
  TempDir dir;
  auto local = OpenStore(dir.path(), {{"aws_secret_access_key", "s3cr3t-value"}});
  EXPECT_TRUE(IsInvalid(local, "aws_secret_access_key"));
  EXPECT_EQ(local.status().message().find("s3cr3t-value"), std::string::npos);
  auto memory = OpenStore("memory://x", {{"azure_storage_account_key", "s3cr3t-value"}});
  EXPECT_TRUE(IsInvalid(memory, "azure_storage_account_key"));
  EXPECT_EQ(memory.status().message().find("s3cr3t-value"), std::string::npos);
}

}  // namespace
}  // namespace timelake::testing
