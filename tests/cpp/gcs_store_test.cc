// GcsStore against a real GCS JSON API server (fake-gcs-server, whose URL the tests take from
// TIMELAKE_TEST_GCS_ENDPOINT): the ObjectStore contract, resumable uploads, and GCS's replies.
// Without the variable these tests fail, saying how to run them; TIMELAKE_TEST_GCS_ENDPOINT=none
// skips them explicitly. Each test gets a bucket of its own.
#include "timelake/store/gcs/gcs_store.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "scripted_server.h"
#include "store_contract.h"
#include "test_util.h"
#include "timelake/util/ids.h"
#include "timelake/util/status.h"
#include "timelake/util/time.h"

namespace timelake::testing {
namespace {

// The test server's options, or nullopt (after failing or skipping the test) without one.
std::optional<StorageOptions> ServerOptions() {
  const char* endpoint = std::getenv("TIMELAKE_TEST_GCS_ENDPOINT");
  if (!endpoint || !*endpoint) {
    ADD_FAILURE() << "TIMELAKE_TEST_GCS_ENDPOINT is not set: start fake-gcs-server (-scheme http "
                     "-backend memory -public-host HOST:PORT) and set it to http://HOST:PORT, or "
                     "set it to none to skip GCS tests";
    return std::nullopt;
  }
  if (std::string(endpoint) == "none") return std::nullopt;
  return StorageOptions{{"google_base_url", endpoint},
                        {"google_skip_signature", "true"},
                        {"allow_http", "true"}};
}

std::string FreshBucketUrl() { return "gs://timelake-" + NewUuid(); }

// A store over the folder "lake" of a fresh bucket.
std::shared_ptr<ObjectStore> FreshStore(const StorageOptions& options) {
  const std::string bucket_url = FreshBucketUrl();
  auto created = CreateGcsBucket(bucket_url, options);
  EXPECT_TRUE(created.ok()) << created.ToString();
  auto store = OpenStore(bucket_url + "/lake", options);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? *store : nullptr;
}

struct GcsStoreFactory {
  std::shared_ptr<ObjectStore> Make() {
    auto options = ServerOptions();
    if (!options) {
      [] { GTEST_SKIP() << "TIMELAKE_TEST_GCS_ENDPOINT=none"; }();
      return nullptr;
    }
    return FreshStore(*options);
  }
};

INSTANTIATE_TYPED_TEST_SUITE_P(Gcs, ObjectStoreContract, GcsStoreFactory);

class GcsStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_ = ServerOptions();
    if (!options_) GTEST_SKIP() << "TIMELAKE_TEST_GCS_ENDPOINT=none";
    store_ = FreshStore(*options_);
    ASSERT_NE(store_, nullptr);
  }
  std::optional<StorageOptions> options_;
  std::shared_ptr<ObjectStore> store_;
};

std::string Pattern(int64_t size) {
  std::string out(static_cast<size_t>(size), '\0');
  for (int64_t i = 0; i < size; ++i) {
    out[static_cast<size_t>(i)] = static_cast<char>('a' + (i * 7) % 26);
  }
  return out;
}

TEST_F(GcsStoreTest, LargeOutputGoesUpInResumableChunksAndReadsBackWhole) {
  OutputOptions options;
  options.part_size = OutputOptions::kMinPartSize;
  const std::string data = Pattern(12 * (int64_t{1} << 20) + 12345);  // three chunks
  ASSERT_OK_AND_ASSIGN(auto out, store_->OpenOutput("big/file.bin", options));
  for (size_t at = 0; at < data.size(); at += 1000003) {
    ASSERT_OK(out->Write(data.data() + at, std::min<size_t>(1000003, data.size() - at)));
  }
  // Two chunks have gone up, but nothing is visible before Close.
  EXPECT_TRUE(IsNotFound(store_->Head("big/file.bin").status()));
  ASSERT_OK(out->Close());
  ASSERT_OK_AND_ASSIGN(auto meta, store_->Head("big/file.bin"));
  EXPECT_EQ(meta.size, static_cast<int64_t>(data.size()));
  ASSERT_OK_AND_ASSIGN(auto back, store_->Get("big/file.bin"));
  EXPECT_TRUE(back->ToString() == data);
  ASSERT_OK_AND_ASSIGN(auto input, store_->OpenInput("big/file.bin"));
  ASSERT_OK_AND_ASSIGN(int64_t size, input->GetSize());
  EXPECT_EQ(size, static_cast<int64_t>(data.size()));
  ASSERT_OK_AND_ASSIGN(auto tail, input->ReadAt(size - 10, 100));
  EXPECT_EQ(tail->ToString(), data.substr(data.size() - 10));
}

TEST_F(GcsStoreTest, OutputReplacesAnExistingObject) {
  ASSERT_OK(store_->Put("replaced.bin", Buf("old")));
  OutputOptions options;
  options.part_size = OutputOptions::kMinPartSize;
  const std::string data = Pattern(options.part_size + 1);
  ASSERT_OK_AND_ASSIGN(auto out, store_->OpenOutput("replaced.bin", options));
  ASSERT_OK(out->Write(data.data(), static_cast<int64_t>(data.size())));
  ASSERT_OK(out->Close());
  ASSERT_OK_AND_ASSIGN(auto back, store_->Get("replaced.bin"));
  EXPECT_TRUE(back->ToString() == data);
}

TEST_F(GcsStoreTest, AbortedResumableUploadLeavesNothing) {
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
  ASSERT_OK_AND_ASSIGN(auto listed, store_->List(""));
  EXPECT_TRUE(listed.empty());
}

TEST_F(GcsStoreTest, DeleteManyRemovesHundredsOfObjects) {
  std::vector<std::string> paths;
  for (int i = 0; i < 300; ++i) paths.push_back("many/" + std::to_string(i));
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
  ASSERT_OK(store_->Put("kept", Buf("x")));
  ASSERT_OK_AND_ASSIGN(auto listed, store_->List("many/"));
  EXPECT_EQ(listed.size(), paths.size());
  paths.push_back("many/never-existed");
  ASSERT_OK(store_->DeleteMany(paths));
  ASSERT_OK_AND_ASSIGN(auto after, store_->List(""));
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].path, "kept");
}

TEST_F(GcsStoreTest, KeysWithSpecialCharactersRoundTrip) {
  for (const std::string path :
       {"a b/c+d=e&f", "x/y%20z", "uni/ünï/çødé", "q/?#[]@!$'()*,;", "h/#frag", "p/100%"}) {
    ASSERT_OK(store_->Put(path, Buf(path)));
    ASSERT_OK_AND_ASSIGN(auto back, store_->Get(path));
    EXPECT_EQ(back->ToString(), path);
    ASSERT_OK_AND_ASSIGN(auto meta, store_->Head(path));
    EXPECT_EQ(meta.size, static_cast<int64_t>(path.size()));
    ASSERT_OK_AND_ASSIGN(auto listed, store_->List(path.substr(0, path.find('/') + 1)));
    ASSERT_EQ(listed.size(), 1u) << path;
    EXPECT_EQ(listed[0].path, path);
    ASSERT_OK(store_->Delete(path));
    EXPECT_TRUE(IsNotFound(store_->Head(path).status())) << path;
  }
}

TEST_F(GcsStoreTest, DotSegmentsNameNoObject) {
  for (const std::string path : {"a/../b", "./a", "a/.", "../escape"}) {
    EXPECT_TRUE(IsInvalid(store_->Put(path, Buf("x")), "'..'")) << path;
    EXPECT_TRUE(IsInvalid(store_->Get(path).status(), "'..'")) << path;
  }
  ASSERT_OK(store_->Put("a/..b/c.", Buf("x")));  // dots inside names are ordinary characters
  ASSERT_OK_AND_ASSIGN(auto back, store_->Get("a/..b/c."));
  EXPECT_EQ(back->ToString(), "x");
}

TEST_F(GcsStoreTest, GenerationChangesOnIdenticalRewrite) {
  ASSERT_OK(store_->Put("g", Buf("same")));
  ASSERT_OK_AND_ASSIGN(auto first, store_->Head("g"));
  ASSERT_OK(store_->Put("g", Buf("same")));
  ASSERT_OK_AND_ASSIGN(auto second, store_->Head("g"));
  EXPECT_NE(first.etag, second.etag);
  // So a compare-and-swap against the first tag loses to the identical rewrite.
  ASSERT_OK_AND_ASSIGN(bool swapped, store_->PutIfMatch("g", Buf("mine"), first.etag));
  EXPECT_FALSE(swapped);
  ASSERT_OK_AND_ASSIGN(swapped, store_->PutIfMatch("g", Buf("mine"), second.etag));
  EXPECT_TRUE(swapped);
}

TEST_F(GcsStoreTest, PutIfMatchRefusesATagThatIsNoGeneration) {
  ASSERT_OK(store_->Put("g", Buf("x")));
  EXPECT_TRUE(IsInvalid(store_->PutIfMatch("g", Buf("y"), "\"d41d8cd98f00b204\""), "generation"));
  EXPECT_EQ(store_->Get("g").ValueOrDie()->ToString(), "x");
}

TEST_F(GcsStoreTest, ModificationTimesAreReadFromHeadAndListings) {
  const int64_t before = NowMillis();
  ASSERT_OK(store_->Put("t", Buf("x")));
  const int64_t after = NowMillis();  // (a slow emulator's put may take seconds)
  ASSERT_OK_AND_ASSIGN(auto head, store_->Head("t"));
  ASSERT_OK_AND_ASSIGN(auto listed, store_->List("t"));
  ASSERT_EQ(listed.size(), 1u);
  // (Whole seconds in a HEAD's date: up to a second before the put began.)
  EXPECT_GE(head.modified_ms, before - 1000);
  EXPECT_LE(head.modified_ms, after + 1000);
  EXPECT_EQ(listed[0].modified_ms, head.modified_ms);
  EXPECT_EQ(listed[0].etag, head.etag);
}

TEST_F(GcsStoreTest, AStoreAtTheBucketRootListsEveryObject) {
  const std::string bucket_url = FreshBucketUrl();
  ASSERT_OK(CreateGcsBucket(bucket_url, *options_));
  ASSERT_OK_AND_ASSIGN(auto root, OpenStore(bucket_url, *options_));
  EXPECT_EQ(root->RootUrl(), bucket_url);
  for (const char* p : {"a/1", "a/2", "b/c/3", "d"}) ASSERT_OK(root->Put(p, Buf(p)));
  ASSERT_OK_AND_ASSIGN(auto all, root->List(""));
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[2].path, "b/c/3");
  ASSERT_OK_AND_ASSIGN(auto children, root->ListChildren(""));
  EXPECT_EQ(children, (std::vector<std::string>{"a", "b"}));
  ASSERT_OK_AND_ASSIGN(auto after, root->ListAfter("", "a/2"));
  ASSERT_EQ(after.size(), 2u);
  EXPECT_EQ(after[0].path, "b/c/3");
}

TEST_F(GcsStoreTest, UrlsNameTheBucketAndTheService) {
  EXPECT_EQ(store_->RootUrl().rfind("gs://timelake-", 0), 0u) << store_->RootUrl();
  EXPECT_EQ(store_->ExternalPath("a/b"), store_->RootUrl() + "/a/b");
  EXPECT_NE(store_->Identity().find(options_->at("google_base_url")), std::string::npos)
      << store_->Identity();
}

TEST_F(GcsStoreTest, MissingBucketIsAClearError) {
  ASSERT_OK_AND_ASSIGN(auto store, OpenStore("gs://no-such-bucket-" + NewUuid().substr(0, 8) + "/x",
                                             *options_));
  auto got = store->Get("a");
  ASSERT_FALSE(got.ok());
  EXPECT_FALSE(IsNotFound(got.status()));
  EXPECT_NE(got.status().message().find("does not exist"), std::string::npos)
      << got.status().ToString();
  EXPECT_FALSE(IsNotFound(store->Head("a").status()));
  auto listed = store->List("");
  ASSERT_FALSE(listed.ok());
  EXPECT_NE(listed.status().message().find("does not exist"), std::string::npos);
  auto put = store->PutIfMatch("a", Buf("x"), "123");
  ASSERT_FALSE(put.ok());  // not `false`: the object was not the trouble
  EXPECT_NE(put.status().message().find("does not exist"), std::string::npos);
}

TEST_F(GcsStoreTest, UnreachableServerFailsAfterBoundedRetries) {
  StorageOptions options = *options_;
  options["google_base_url"] = "http://127.0.0.1:9";  // discard port: connection refused
  options["max_retries"] = "2";
  options["retry_timeout"] = "60s";  // the retries, not the time, must run out
  ASSERT_OK_AND_ASSIGN(auto store, OpenStore("gs://b/x", options));
  auto put = store->PutIfAbsent("a", Buf("x"));
  ASSERT_FALSE(put.ok());
  EXPECT_NE(put.status().message().find("3 attempts"), std::string::npos)
      << put.status().ToString();
  // A refused connection never reached a server: the write surely did not happen.
  EXPECT_FALSE(IsOutcomeUnknown(put.status()));
}

TEST_F(GcsStoreTest, PlainHttpNeedsAllowHttp) {
  StorageOptions options = *options_;
  options.erase("allow_http");
  ASSERT_OK_AND_ASSIGN(auto store, OpenStore(store_->RootUrl(), options));
  auto got = store->Get("a");
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("allow_http"), std::string::npos)
      << got.status().ToString();
}

TEST_F(GcsStoreTest, ABearerTokenIsAcceptedByTheEmulator) {
  StorageOptions options = *options_;
  options.erase("google_skip_signature");
  options["google_bearer_token"] = "ya29.test-token";
  ASSERT_OK_AND_ASSIGN(auto store, OpenStore(store_->RootUrl(), options));
  ASSERT_OK(store->Put("with-token", Buf("x")));
  ASSERT_OK_AND_ASSIGN(auto back, store_->Get("with-token"));
  EXPECT_EQ(back->ToString(), "x");
}

// ---- resumable uploads whose replies are lost (a scripted server) ------------------------------
//
// fake-gcs-server cannot play these: it finalizes a session on any status query. This server
// answers each request with the next scripted reply ("" = close the connection unanswered, a
// reply lost after the request arrived) and records each request's line and Content-Range.


class GcsResumableRecoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = OpenStore("gs://bucket/lake", {{"google_base_url", server_.base()},
                                                 {"google_skip_signature", "true"},
                                                 {"allow_http", "true"},
                                                 {"max_retries", "2"}});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = *store;
    // The session starts.
    server_.Then(ScriptedServer::Reply(200, "Location: " + server_.session() + "\r\n"));
  }

  // The first chunk (5 MiB) is taken whole.
  void AcceptFirstChunk() { server_.Then(ScriptedServer::Reply(308, "Range: bytes=0-5242879\r\n")); }

  // Writes 5 MiB + 10 bytes (two chunks) and closes the stream.
  arrow::Status WriteTwoChunks() {
    OutputOptions options;
    options.part_size = OutputOptions::kMinPartSize;
    const std::string data = Pattern(options.part_size + 10);
    ARROW_ASSIGN_OR_RAISE(auto out, store_->OpenOutput("obj", options));
    ARROW_RETURN_NOT_OK(out->Write(data.data(), static_cast<int64_t>(data.size())));
    return out->Close();
  }

  ScriptedServer server_;
  std::shared_ptr<ObjectStore> store_;
};

TEST_F(GcsResumableRecoveryTest, LostReplyToTheFinalChunkIsRecoveredByAStatusQuery) {
  AcceptFirstChunk();
  server_.Then("");                      // the final chunk lands, its reply is lost
  server_.Then(ScriptedServer::Reply(200));  // the status query: the object is finalized
  server_.Then(ScriptedServer::Reply(200));  // asked again as the attempt itself
  ASSERT_OK(WriteTwoChunks());
  EXPECT_EQ(server_.seen(), (std::vector<std::string>{
                                "POST  (2 bytes)", "PUT bytes 0-5242879/* (5242880 bytes)",
                                "PUT bytes 5242880-5242889/5242890 (10 bytes)",
                                "PUT bytes */5242890 (0 bytes)", "PUT bytes */5242890 (0 bytes)"}));
}

TEST_F(GcsResumableRecoveryTest, AChunkTheServiceKeptPartlyIsResentFromWhereItStopped) {
  AcceptFirstChunk();
  server_.Then("");                                                      // reply lost
  server_.Then(ScriptedServer::Reply(308, "Range: bytes=0-5242884\r\n"));  // 5 of 10 bytes kept
  server_.Then(ScriptedServer::Reply(201));
  ASSERT_OK(WriteTwoChunks());
  const auto seen = server_.seen();
  ASSERT_EQ(seen.size(), 5u);
  EXPECT_EQ(seen[3], "PUT bytes */5242890 (0 bytes)");
  EXPECT_EQ(seen[4], "PUT bytes 5242885-5242889/5242890 (5 bytes)");
}

TEST_F(GcsResumableRecoveryTest, FinalChunkWithoutAnyReplyIsAnUnknownOutcome) {
  AcceptFirstChunk();
  for (int i = 0; i < 9; ++i) server_.Then("");  // nothing answers: chunk, status queries
  const arrow::Status closed = WriteTwoChunks();
  ASSERT_FALSE(closed.ok());
  EXPECT_TRUE(IsOutcomeUnknown(closed)) << closed.ToString();
  // The session was cancelled after the failure (the script's end answers it).
  const auto seen = server_.seen();
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back().rfind("DELETE", 0), 0u) << seen.back();
}

TEST_F(GcsResumableRecoveryTest, LostReplyToAnEarlierChunkIsNotAnUnknownOutcome) {
  // Bytes before the final chunk make no object: their failure is a plain error.
  for (int i = 0; i < 9; ++i) server_.Then("");
  const arrow::Status closed = WriteTwoChunks();
  ASSERT_FALSE(closed.ok());
  EXPECT_FALSE(IsOutcomeUnknown(closed)) << closed.ToString();
  EXPECT_EQ(server_.seen()[1], "PUT bytes 0-5242879/* (5242880 bytes)");
}

TEST_F(GcsResumableRecoveryTest, ASessionFinalizedByAStatusQueryIsAnUnknownOutcome) {
  // What fake-gcs-server does (GCS never finalizes a session whose size it was not told): the
  // object may now hold the first bytes, so the failure says the outcome is unknown.
  server_.Then("");                      // the first chunk's reply is lost
  server_.Then(ScriptedServer::Reply(200));  // the status query finalizes the session
  const arrow::Status closed = WriteTwoChunks();
  ASSERT_FALSE(closed.ok());
  EXPECT_TRUE(IsOutcomeUnknown(closed)) << closed.ToString();
  EXPECT_NE(closed.message().find("finalized the upload early"), std::string::npos)
      << closed.ToString();
  EXPECT_EQ(server_.seen()[2], "PUT bytes */* (0 bytes)");
}

// ---- tokens refused before their expiry ---------------------------------------------------------

class CountingGoogleTokens : public GoogleCredentialProvider {
 public:
  arrow::Result<GoogleToken> Get() override {
    GoogleToken token;
    token.access_token = "ya29." + std::to_string(generation_.load());
    ++gets_;
    return token;
  }
  bool Invalidate() override {
    ++generation_;
    return true;
  }
  std::string Source() const override { return "test tokens"; }
  std::atomic<int> gets_{0}, generation_{0};
};

TEST(GcsTokenTest, RefusedTokenIsFetchedAnewOnce) {
  ScriptedServer server;
  server.Then(ScriptedServer::Reply(401, "", R"({"error":{"code":401,"message":"Invalid Credentials"}})"));
  server.Then(ScriptedServer::Reply(200, "", "payload"));
  GcsConfig config;
  config.bucket = "b";
  config.base_url = server.base();
  config.http.allow_http = true;
  config.retry.max_retries = 3;
  auto tokens = std::make_shared<CountingGoogleTokens>();
  ASSERT_OK_AND_ASSIGN(auto store, MakeGcsStore(config, tokens));
  ASSERT_OK_AND_ASSIGN(auto got, store->Get("obj"));
  EXPECT_EQ(got->ToString(), "payload");
  EXPECT_EQ(tokens->generation_.load(), 1);
  EXPECT_EQ(tokens->gets_.load(), 2);
  EXPECT_EQ(server.seen().size(), 2u);
}

// ---- options (no server needed) ----------------------------------------------------------------

TEST(GcsStoreOptionsTest, OptionsOfOtherCloudsAreRefused) {
  EXPECT_TRUE(IsInvalid(OpenStore("gs://b/x", {{"aws_region", "us-east-1"}}), "aws_region"));
  EXPECT_TRUE(IsInvalid(OpenStore("gs://b/x", {{"azure_storage_account_name", "a"}}),
                        "azure_storage_account_name"));
}

TEST(GcsStoreOptionsTest, BaseUrlMustBeAUrl) {
  EXPECT_TRUE(IsInvalid(OpenStore("gs://b/x", {{"google_base_url", "127.0.0.1:4443"},
                                               {"google_skip_signature", "true"}}),
                        "google_base_url"));
}

TEST(GcsStoreOptionsTest, LocationNeedsABucket) {
  EXPECT_TRUE(IsInvalid(OpenStore("gs:///x", {{"google_skip_signature", "true"}}), "bucket"));
  EXPECT_TRUE(IsInvalid(OpenStore("gs://b//x", {{"google_skip_signature", "true"}}),
                        "empty path segment"));
}

TEST(GcsStoreOptionsTest, BadSkipSignatureValueIsInvalidNamingTheKey) {
  EXPECT_TRUE(IsInvalid(OpenStore("gs://b/x", {{"google_skip_signature", "maybe"}}),
                        "google_skip_signature"));
}

}  // namespace
}  // namespace timelake::testing
