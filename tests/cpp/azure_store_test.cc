// AzureStore against a real Blob service (Azurite, started by scripts/test.sh, which exports its
// URL in TIMELAKE_TEST_AZURE_ENDPOINT): the ObjectStore contract, blocks, SAS access, and the
// service's replies. Without the variable these tests fail, saying how to run them;
// TIMELAKE_TEST_AZURE_ENDPOINT=none skips them explicitly.
#include "timelake/store/azure/azure_store.h"

#include <cstdlib>
#include <ctime>

#include <gtest/gtest.h>

#include "scripted_server.h"
#include "store_contract.h"
#include "test_util.h"
#include "timelake/util/encoding.h"
#include "timelake/util/ids.h"
#include "timelake/util/parallel.h"
#include "timelake/util/status.h"
#include "timelake/util/time.h"

namespace timelake::testing {
namespace {

const char* kContainer = "timelake-cpp-tests";

// The test server's options, or nullopt (after failing or skipping the test) without one.
std::optional<StorageOptions> ServerOptions() {
  const char* endpoint = std::getenv("TIMELAKE_TEST_AZURE_ENDPOINT");
  if (!endpoint || !*endpoint) {
    ADD_FAILURE() << "TIMELAKE_TEST_AZURE_ENDPOINT is not set: run the tests with scripts/test.sh, "
                     "which starts an Azure Blob server (Azurite), or set it to none to skip them";
    return std::nullopt;
  }
  if (std::string(endpoint) == "none") return std::nullopt;
  return StorageOptions{{"azure_storage_account_name", kAzureEmulatorAccount},
                        {"azure_storage_account_key", kAzureEmulatorKey},
                        {"azure_storage_endpoint", std::string(endpoint) + "/devstoreaccount1"},
                        {"allow_http", "true"}};
}

// A store over a fresh folder of the test container.
std::shared_ptr<ObjectStore> FreshStore(const StorageOptions& options) {
  const std::string container_url = std::string("az://") + kContainer;
  auto created = CreateAzureContainer(container_url, options);
  EXPECT_TRUE(created.ok()) << created.ToString();
  auto store = OpenStore(container_url + "/" + NewUuid(), options);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? *store : nullptr;
}

struct AzureStoreFactory {
  std::shared_ptr<ObjectStore> Make() {
    auto options = ServerOptions();
    if (!options) {
      [] { GTEST_SKIP() << "TIMELAKE_TEST_AZURE_ENDPOINT=none"; }();
      return nullptr;
    }
    return FreshStore(*options);
  }
};

INSTANTIATE_TYPED_TEST_SUITE_P(Azure, ObjectStoreContract, AzureStoreFactory);

class AzureStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_ = ServerOptions();
    if (!options_) GTEST_SKIP() << "TIMELAKE_TEST_AZURE_ENDPOINT=none";
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

TEST_F(AzureStoreTest, LargeOutputGoesUpInBlocksAndReadsBackWhole) {
  OutputOptions options;
  options.part_size = OutputOptions::kMinPartSize;
  const std::string data = Pattern(3 * options.part_size + 12345);
  ASSERT_OK_AND_ASSIGN(auto out, store_->OpenOutput("big/file", options));
  // Odd write sizes, so parts fill across writes.
  for (size_t at = 0; at < data.size(); at += 1'000'003) {
    ASSERT_OK(out->Write(data.data() + at, std::min<size_t>(1'000'003, data.size() - at)));
  }
  ASSERT_TRUE(IsNotFound(store_->Head("big/file").status()));  // nothing visible before Close
  ASSERT_OK(out->Close());
  ASSERT_OK_AND_ASSIGN(auto back, store_->Get("big/file"));
  EXPECT_EQ(back->ToString(), data);
  ASSERT_OK_AND_ASSIGN(auto middle, store_->GetRange("big/file", options.part_size - 5, 10));
  EXPECT_EQ(middle->ToString(), data.substr(static_cast<size_t>(options.part_size - 5), 10));
}

TEST_F(AzureStoreTest, ExactMultipleOfThePartSizeEndsWithAFullBlock) {
  OutputOptions options;
  options.part_size = OutputOptions::kMinPartSize;
  const std::string data = Pattern(2 * options.part_size);
  ASSERT_OK_AND_ASSIGN(auto out, store_->OpenOutput("even", options));
  ASSERT_OK(out->Write(data.data(), static_cast<int64_t>(data.size())));
  ASSERT_OK(out->Close());
  ASSERT_OK_AND_ASSIGN(auto back, store_->Get("even"));
  EXPECT_EQ(back->ToString(), data);
}

TEST_F(AzureStoreTest, AbortedBlockUploadLeavesNothingVisible) {
  OutputOptions options;
  options.part_size = OutputOptions::kMinPartSize;
  const std::string data = Pattern(2 * options.part_size + 1);
  ASSERT_OK_AND_ASSIGN(auto out, store_->OpenOutput("aborted", options));
  ASSERT_OK(out->Write(data.data(), static_cast<int64_t>(data.size())));
  ASSERT_OK(out->Abort());
  EXPECT_TRUE(IsNotFound(store_->Head("aborted").status()));
  ASSERT_OK_AND_ASSIGN(auto listed, store_->List(""));
  EXPECT_TRUE(listed.empty());
  // An existing object is left as it was.
  ASSERT_OK(store_->Put("kept", Buf("old")));
  ASSERT_OK_AND_ASSIGN(auto again, store_->OpenOutput("kept", options));
  ASSERT_OK(again->Write(data.data(), static_cast<int64_t>(data.size())));
  ASSERT_OK(again->Abort());
  ASSERT_OK_AND_ASSIGN(auto kept, store_->Get("kept"));
  EXPECT_EQ(kept->ToString(), "old");
}

TEST_F(AzureStoreTest, DeleteManyRemovesManyInParallel) {
  std::vector<std::string> paths;
  for (int i = 0; i < 120; ++i) paths.push_back("many/" + std::to_string(i));
  ASSERT_OK(RunParallel(paths.size(), 8, [&](size_t i) { return store_->Put(paths[i], Buf("x")); }));
  ASSERT_OK_AND_ASSIGN(auto listed, store_->List("many/"));
  ASSERT_EQ(listed.size(), paths.size());
  paths.push_back("many/never-existed");
  ASSERT_OK(store_->DeleteMany(paths));
  ASSERT_OK_AND_ASSIGN(auto after, store_->List("many/"));
  EXPECT_TRUE(after.empty());
}

TEST_F(AzureStoreTest, ListingPagesThroughMarkers) {
  for (int i = 0; i < 7; ++i) ASSERT_OK(store_->Put("p/" + std::to_string(i), Buf("x")));
  ListPageRequest request;
  request.prefix = "p/";
  request.max_keys = 3;
  std::vector<std::string> seen;
  int pages = 0;
  do {
    ASSERT_OK_AND_ASSIGN(auto page, store_->ListPage(request));
    for (const auto& o : page.objects) seen.push_back(o.path);
    request.continuation = page.continuation;
    ++pages;
  } while (!request.continuation.empty());
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(seen, (std::vector<std::string>{"p/0", "p/1", "p/2", "p/3", "p/4", "p/5", "p/6"}));
  ASSERT_OK_AND_ASSIGN(auto after, store_->ListAfter("p/", "p/4"));
  ASSERT_EQ(after.size(), 2u);
  EXPECT_EQ(after[0].path, "p/5");
}

TEST_F(AzureStoreTest, KeysWithSpecialCharactersRoundTrip) {
  for (const std::string path : {"a b/c+d=e&f", "x/y%20z", "uni/ünï/çødé", "q/?#[]@!$'()*,;"}) {
    ASSERT_OK(store_->Put(path, Buf(path)));
    ASSERT_OK_AND_ASSIGN(auto back, store_->Get(path));
    EXPECT_EQ(back->ToString(), path);
    ASSERT_OK_AND_ASSIGN(auto listed, store_->List(path.substr(0, path.find('/') + 1)));
    ASSERT_EQ(listed.size(), 1u) << path;
    EXPECT_EQ(listed[0].path, path);
  }
}

TEST_F(AzureStoreTest, DotSegmentsNameNoObject) {
  for (const std::string path : {"a/../b", "./a", "a/.", "../escape"}) {
    EXPECT_TRUE(IsInvalid(store_->Put(path, Buf("x")), "'..'")) << path;
    EXPECT_TRUE(IsInvalid(store_->Get(path).status(), "'..'")) << path;
  }
}

TEST_F(AzureStoreTest, RewritingIdenticalBytesChangesTheEtag) {
  ASSERT_OK(store_->Put("e", Buf("same")));
  ASSERT_OK_AND_ASSIGN(auto first, store_->Head("e"));
  ASSERT_OK(store_->Put("e", Buf("same")));
  ASSERT_OK_AND_ASSIGN(auto second, store_->Head("e"));
  EXPECT_NE(first.etag, second.etag);
  // The old tag no longer matches: a compare-and-swap with it fails and writes nothing.
  ASSERT_OK_AND_ASSIGN(bool swapped, store_->PutIfMatch("e", Buf("new"), first.etag));
  EXPECT_FALSE(swapped);
  ASSERT_OK_AND_ASSIGN(auto back, store_->Get("e"));
  EXPECT_EQ(back->ToString(), "same");
}

TEST_F(AzureStoreTest, ModificationTimesAreReadFromHeadAndListings) {
  const int64_t before = NowMillis();
  ASSERT_OK(store_->Put("t", Buf("x")));
  const int64_t after = NowMillis();  // (a slow emulator's put may take seconds)
  ASSERT_OK_AND_ASSIGN(auto head, store_->Head("t"));
  ASSERT_OK_AND_ASSIGN(auto listed, store_->List("t"));
  ASSERT_EQ(listed.size(), 1u);
  // (Whole seconds in a HEAD's date: up to a second before the put began.)
  EXPECT_GE(head.modified_ms, before - 1000);
  EXPECT_LE(head.modified_ms, after + 1000);
  EXPECT_NEAR(static_cast<double>(listed[0].modified_ms), static_cast<double>(head.modified_ms), 1500.0);
  EXPECT_EQ(listed[0].etag, head.etag);
}

TEST_F(AzureStoreTest, MissingContainerIsAClearError) {
  ASSERT_OK_AND_ASSIGN(auto store,
                       OpenStore("az://no-such-container-" + NewUuid().substr(0, 8) + "/x", *options_));
  auto got = store->Get("a");
  ASSERT_FALSE(got.ok());
  EXPECT_FALSE(IsNotFound(got.status()));
  EXPECT_NE(got.status().message().find("does not exist"), std::string::npos) << got.status().ToString();
  auto head = store->Head("a");  // HEAD replies have no body: the error code header tells
  ASSERT_FALSE(head.ok());
  EXPECT_FALSE(IsNotFound(head.status())) << head.status().ToString();
  auto listed = store->List("");
  ASSERT_FALSE(listed.ok());
  EXPECT_NE(listed.status().message().find("does not exist"), std::string::npos);
}

TEST_F(AzureStoreTest, WrongKeyIsAccessDeniedWithoutTheKey) {
  StorageOptions options = *options_;
  const std::string wrong = Base64Encode(std::string(64, 'k'));
  options["azure_storage_account_key"] = wrong;
  ASSERT_OK_AND_ASSIGN(auto store, OpenStore(store_->RootUrl(), options));
  auto got = store->Get("a");
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("access denied"), std::string::npos) << got.status().ToString();
  EXPECT_EQ(got.status().message().find(wrong), std::string::npos);
}

// An account SAS for devstoreaccount1, signed as Azure documents it ("Create an account SAS",
// version 2020-12-06 and later): permissions, services, resource types, start, expiry, IP,
// protocol, version, encryption scope.
std::string AccountSas(const std::string& permissions) {
  auto key = Base64Decode(kAzureEmulatorKey);
  EXPECT_TRUE(key.ok());
  const std::string version = "2021-08-06";
  const std::string start = "2020-01-01T00:00:00Z";
  const std::string expiry = "2099-01-01T00:00:00Z";
  const std::string to_sign = std::string(kAzureEmulatorAccount) + "\n" + permissions + "\nb\nsco\n" +
                              start + "\n" + expiry + "\n\nhttp,https\n" + version + "\n\n";
  const std::string signature = Base64Encode(HmacSha256(*key, to_sign));
  return "sv=" + version + "&ss=b&srt=sco&sp=" + permissions + "&st=" + start + "&se=" + expiry +
         "&spr=http,https&sig=" + UriEncode(signature);
}

TEST_F(AzureStoreTest, SasTokenReadsAndWrites) {
  ASSERT_OK(store_->Put("shared", Buf("by key")));
  StorageOptions options = *options_;
  options.erase("azure_storage_account_key");
  options["azure_storage_sas_token"] = "?" + AccountSas("rwdlc");
  ASSERT_OK_AND_ASSIGN(auto sas, OpenStore(store_->RootUrl(), options));
  ASSERT_OK_AND_ASSIGN(auto back, sas->Get("shared"));
  EXPECT_EQ(back->ToString(), "by key");
  ASSERT_OK_AND_ASSIGN(bool created, sas->PutIfAbsent("by-sas", Buf("y")));
  EXPECT_TRUE(created);
  ASSERT_OK_AND_ASSIGN(auto listed, sas->List(""));
  EXPECT_EQ(listed.size(), 2u);
  // A read-only SAS cannot write, and says so without repeating the signature.
  options["azure_storage_sas_token"] = AccountSas("rl");
  ASSERT_OK_AND_ASSIGN(auto read_only, OpenStore(store_->RootUrl(), options));
  auto put = read_only->Put("nope", Buf("z"));
  ASSERT_FALSE(put.ok());
  EXPECT_EQ(put.message().find("sig="), std::string::npos) << put.ToString();
}

TEST_F(AzureStoreTest, ConnectionStringConfiguresAccountKeyAndEndpoint) {
  const std::string endpoint = options_->at("azure_storage_endpoint");
  StorageOptions options{{"azure_storage_connection_string",
                          std::string("DefaultEndpointsProtocol=http;AccountName=") +
                              kAzureEmulatorAccount + ";AccountKey=" + kAzureEmulatorKey +
                              ";BlobEndpoint=" + endpoint + ";"},
                         {"allow_http", "true"}};
  ASSERT_OK(store_->Put("c", Buf("via connection string")));
  ASSERT_OK_AND_ASSIGN(auto store, OpenStore(store_->RootUrl(), options));
  ASSERT_OK_AND_ASSIGN(auto back, store->Get("c"));
  EXPECT_EQ(back->ToString(), "via connection string");
}

TEST_F(AzureStoreTest, EmulatorFlagNeedsNoKeyOrEndpoint) {
  const std::string endpoint = std::getenv("TIMELAKE_TEST_AZURE_ENDPOINT");
  ASSERT_EQ(setenv("AZURITE_BLOB_STORAGE_URL", endpoint.c_str(), 1), 0);
  ASSERT_OK(store_->Put("e", Buf("emulated")));
  auto store = OpenStore(store_->RootUrl(), {{"azure_storage_use_emulator", "true"}});
  unsetenv("AZURITE_BLOB_STORAGE_URL");
  ASSERT_OK(store.status());
  ASSERT_OK_AND_ASSIGN(auto back, (*store)->Get("e"));
  EXPECT_EQ(back->ToString(), "emulated");
}

TEST_F(AzureStoreTest, CredentialsInTheOptionsOutrankTheEnvironment) {
  // A token or a skip flag left in the environment (or injected by the platform) must not
  // replace the key the caller chose.
  ASSERT_OK(store_->Put("k", Buf("keyed")));
  ASSERT_EQ(setenv("AZURE_STORAGE_TOKEN", "leftover-token", 1), 0);
  ASSERT_EQ(setenv("AZURE_SKIP_SIGNATURE", "true", 1), 0);
  auto store = OpenStore(store_->RootUrl(), *options_);
  unsetenv("AZURE_STORAGE_TOKEN");
  unsetenv("AZURE_SKIP_SIGNATURE");
  ASSERT_OK(store.status());
  ASSERT_OK_AND_ASSIGN(auto back, (*store)->Get("k"));
  EXPECT_EQ(back->ToString(), "keyed");
}

TEST_F(AzureStoreTest, DevelopmentStorageConnectionStringAllowsPlainHttp) {
  const std::string endpoint = std::getenv("TIMELAKE_TEST_AZURE_ENDPOINT");
  ASSERT_OK(store_->Put("d", Buf("dev")));
  ASSERT_EQ(setenv("AZURITE_BLOB_STORAGE_URL", endpoint.c_str(), 1), 0);
  auto store = OpenStore(store_->RootUrl(),
                         {{"azure_storage_connection_string", "UseDevelopmentStorage=true"}});
  unsetenv("AZURITE_BLOB_STORAGE_URL");
  ASSERT_OK(store.status());
  ASSERT_OK_AND_ASSIGN(auto back, (*store)->Get("d"));
  EXPECT_EQ(back->ToString(), "dev");
}

// A token provider that counts: each Get() after an Invalidate() hands out a new token.
class CountingTokens : public AzureCredentialProvider {
 public:
  explicit CountingTokens(bool refreshes) : refreshes_(refreshes) {}
  arrow::Result<AzureCredential> Get() override {
    AzureCredential c;
    c.kind = AzureCredential::Kind::kBearer;
    c.bearer = "token-" + std::to_string(generation_.load());
    ++gets_;
    return c;
  }
  bool Invalidate() override {
    ++invalidations_;
    if (refreshes_) ++generation_;
    return refreshes_;
  }
  std::string Source() const override { return "test tokens"; }
  const bool refreshes_;
  std::atomic<int> gets_{0}, invalidations_{0}, generation_{0};
};

std::shared_ptr<ObjectStore> ScriptedAzureStore(const ScriptedServer& server,
                                                std::shared_ptr<AzureCredentialProvider> tokens) {
  AzureConfig config;
  config.container = "c";
  config.root_url = "az://c";
  config.settings.account = "acct";
  config.settings.endpoint = server.base() + "/acct";
  config.settings.credentials = std::move(tokens);
  config.http.allow_http = true;
  config.retry.max_retries = 3;
  auto store = MakeAzureStore(config);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return *store;
}

TEST(AzureTokenTest, RefusedTokenIsFetchedAnewOnce) {
  ScriptedServer server;
  server.Then(ScriptedServer::Reply(401, "x-ms-error-code: InvalidAuthenticationInfo\r\n", ""));
  server.Then(ScriptedServer::Reply(200, "", "payload"));
  auto tokens = std::make_shared<CountingTokens>(/*refreshes=*/true);
  auto store = ScriptedAzureStore(server, tokens);
  ASSERT_OK_AND_ASSIGN(auto got, store->Get("blob"));
  EXPECT_EQ(got->ToString(), "payload");
  EXPECT_EQ(tokens->invalidations_.load(), 1);
  EXPECT_EQ(tokens->gets_.load(), 2);
  EXPECT_EQ(server.seen().size(), 2u);
  // Refused again after the refresh: final, no loop.
  server.Then(ScriptedServer::Reply(401, "", ""));
  server.Then(ScriptedServer::Reply(401, "", ""));
  auto refused = store->Get("blob");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(server.seen().size(), 4u);
}

TEST(AzureTokenTest, StaticTokenRefusedIsFinalAtOnce) {
  ScriptedServer server;
  server.Then(ScriptedServer::Reply(401, "", ""));
  auto tokens = std::make_shared<CountingTokens>(/*refreshes=*/false);
  auto store = ScriptedAzureStore(server, tokens);
  auto put = store->PutIfAbsent("blob", Buf("x"));
  ASSERT_FALSE(put.ok());
  EXPECT_FALSE(IsOutcomeUnknown(put.status())) << put.status().ToString();  // a 401 applied nothing
  EXPECT_EQ(server.seen().size(), 1u);
}

TEST(AzureListingTest, DirectoriesOfHierarchicalNamespaceAccountsAreNotObjects) {
  // ADLS Gen2 accounts list their directories as blobs with ResourceType "directory"; Azurite
  // has no hierarchical namespace, so a scripted server plays the reply.
  ScriptedServer server;
  const std::string xml =
      "<?xml version=\"1.0\" encoding=\"utf-8\"?><EnumerationResults><Blobs>"
      "<Blob><Name>lake/t/data</Name><Properties><Content-Length>0</Content-Length>"
      "<ResourceType>directory</ResourceType></Properties></Blob>"
      "<Blob><Name>lake/t/data/a.parquet</Name><Properties><Content-Length>7</Content-Length>"
      "<Etag>0x1</Etag><ResourceType>file</ResourceType></Properties></Blob>"
      "</Blobs><NextMarker/></EnumerationResults>";
  server.Then(ScriptedServer::Reply(200, "Content-Type: application/xml\r\n", xml));
  ASSERT_OK_AND_ASSIGN(auto store,
                       OpenStore("az://c/lake", {{"azure_storage_account_name", "acct"},
                                                 {"azure_storage_token", "t"},
                                                 {"azure_storage_endpoint", server.base() + "/acct"},
                                                 {"allow_http", "true"}}));
  ASSERT_OK_AND_ASSIGN(auto listed, store->List("t/"));
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].path, "t/data/a.parquet");
  EXPECT_EQ(listed[0].size, 7);
  EXPECT_EQ(listed[0].etag, "\"0x1\"");
}

TEST_F(AzureStoreTest, AbfssUrlNamesTheAccount) {
  ASSERT_OK(store_->Put("z", Buf("abfss")));
  StorageOptions options = *options_;
  options.erase("azure_storage_account_name");
  const std::string root = store_->RootUrl();  // az://container/uuid
  const std::string rest = root.substr(std::string("az://").size());
  const std::string container = rest.substr(0, rest.find('/'));
  const std::string url = "abfss://" + container + "@" + kAzureEmulatorAccount +
                          ".dfs.core.windows.net" + rest.substr(rest.find('/'));
  ASSERT_OK_AND_ASSIGN(auto store, OpenStore(url, options));
  EXPECT_EQ(store->RootUrl(), url);
  ASSERT_OK_AND_ASSIGN(auto back, store->Get("z"));
  EXPECT_EQ(back->ToString(), "abfss");
}

TEST_F(AzureStoreTest, UnreachableServerFailsAfterBoundedRetries) {
  StorageOptions options = *options_;
  options["azure_storage_endpoint"] = "http://127.0.0.1:9/devstoreaccount1";
  options["max_retries"] = "2";
  options["retry_timeout"] = "60s";  // the retries, not the time, must run out
  ASSERT_OK_AND_ASSIGN(auto store, OpenStore("az://c/x", options));
  auto put = store->PutIfAbsent("a", Buf("x"));
  ASSERT_FALSE(put.ok());
  EXPECT_NE(put.status().message().find("3 attempts"), std::string::npos) << put.status().ToString();
  EXPECT_FALSE(IsOutcomeUnknown(put.status()));
}

TEST_F(AzureStoreTest, PlainHttpNeedsAllowHttp) {
  StorageOptions options = *options_;
  options.erase("allow_http");
  ASSERT_OK_AND_ASSIGN(auto store, OpenStore(store_->RootUrl(), options));
  auto got = store->Get("a");
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("allow_http"), std::string::npos) << got.status().ToString();
}

}  // namespace
}  // namespace timelake::testing
