// Azure SharedKey signing (against the strings Azure's "Authorize with Shared Key" documents) and
// the credential chain: which source wins, token requests to Entra ID and managed identity
// (through a fake fetch: no network), caching and refresh, and messages without secrets.
#include "timelake/store/azure/azure_credentials.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "temp_dir.h"
#include "test_util.h"
#include "timelake/util/encoding.h"

namespace timelake::testing {
namespace {

// ---- SharedKey ---------------------------------------------------------------------------------

TEST(AzureSharedKeyTest, StringToSignOfTheDocumentedExample) {
  // Get Container Metadata as the documentation spells its string to sign.
  AzureSignedRequest request;
  request.method = "GET";
  request.path = "/mycontainer";
  request.query = {{"restype", "container"}, {"comp", "metadata"}, {"timeout", "20"}};
  request.headers = {{"x-ms-version", "2015-02-21"}, {"x-ms-date", "Fri, 26 Jun 2015 23:39:12 GMT"}};
  EXPECT_EQ(AzureStringToSign(request, "myaccount"),
            "GET\n\n\n\n\n\n\n\n\n\n\n\n"
            "x-ms-date:Fri, 26 Jun 2015 23:39:12 GMT\nx-ms-version:2015-02-21\n"
            "/myaccount/mycontainer\ncomp:metadata\nrestype:container\ntimeout:20");
  // The signature, computed independently (Python's hmac) over that string with the emulator key.
  ASSERT_OK_AND_ASSIGN(std::string key, Base64Decode(kAzureEmulatorKey));
  EXPECT_EQ(AzureSharedKeyAuthorization(request, "myaccount", key),
            "SharedKey myaccount:1u9lui2jDxj0+fpbHjQ5m5NnastJRSYM+PSmfi8TXx4=");
}

TEST(AzureSharedKeyTest, CanonicalizedResourcesOfTheDocumentedExamples) {
  auto resource = [](const std::string& path, std::map<std::string, std::string> query) {
    AzureSignedRequest request;
    request.method = "GET";
    request.path = path;
    request.query = std::move(query);
    const std::string sts = AzureStringToSign(request, "myaccount");
    return sts.substr(sts.find("/myaccount"));
  };
  EXPECT_EQ(resource("/mycontainer", {{"restype", "container"}, {"comp", "list"},
                                      {"include", "metadata,snapshots,uncommittedblobs"}}),
            "/myaccount/mycontainer\ncomp:list\ninclude:metadata,snapshots,uncommittedblobs\n"
            "restype:container");
  EXPECT_EQ(resource("/mycontainer/myblob", {}), "/myaccount/mycontainer/myblob");
  // Path-style (the emulator): the account appears twice. Names are lowercased, values kept.
  EXPECT_EQ(resource("/devstoreaccount1/c/b", {{"BlockId", "QUJD"}}),
            "/myaccount/devstoreaccount1/c/b\nblockid:QUJD");
}

TEST(AzureSharedKeyTest, StandardHeadersTakeTheirPlacesAndXmsHeadersAreSorted) {
  AzureSignedRequest request;
  request.method = "PUT";
  request.path = "/c/b";
  request.content_length = 11;
  request.headers = {{"Content-Type", "application/octet-stream"},
                     {"If-None-Match", "*"},
                     {"x-ms-version", "2023-11-03"},
                     {"X-Ms-Blob-Type", "BlockBlob"},
                     {"x-ms-date", "Mon, 30 Nov 2026 12:00:00 GMT"},
                     {"x-ms-range", "bytes=0-9"}};
  EXPECT_EQ(AzureStringToSign(request, "a"),
            "PUT\n\n\n11\n\napplication/octet-stream\n\n\n\n*\n\n\n"
            "x-ms-blob-type:BlockBlob\nx-ms-date:Mon, 30 Nov 2026 12:00:00 GMT\n"
            "x-ms-range:bytes=0-9\nx-ms-version:2023-11-03\n/a/c/b");
  request.content_length = 0;  // an empty body signs an empty Content-Length
  EXPECT_EQ(AzureStringToSign(request, "a").substr(0, 8), "PUT\n\n\n\n\n");
}

// ---- the chain ---------------------------------------------------------------------------------

class AzureChainTest : public ::testing::Test {
 protected:
  arrow::Result<AzureSettings> Resolve() {
    AzureCredentialInputs inputs;
    inputs.options = options_;
    inputs.url_account = url_account_;
    inputs.env = [this](const std::string& name) -> std::optional<std::string> {
      auto it = env_.find(name);
      if (it == env_.end()) return std::nullopt;
      return it->second;
    };
    inputs.fetch = [this](const HttpRequest& request) -> arrow::Result<HttpResponse> {
      requests_.push_back(request);
      if (!reachable_) return arrow::Status::IOError("connection refused");
      HttpResponse reply;
      reply.status = reply_status_;
      reply.body = arrow::Buffer::FromString(reply_body_);
      return reply;
    };
    inputs.now_ms = [this] { return now_ms_; };
    return ResolveAzureSettings(inputs);
  }

  std::map<std::string, std::string> options_;
  std::map<std::string, std::string> env_;
  std::string url_account_;
  std::vector<HttpRequest> requests_;
  bool reachable_ = true;
  int reply_status_ = 200;
  std::string reply_body_ = R"({"access_token":"tok-1","expires_in":3600,"token_type":"Bearer"})";
  int64_t now_ms_ = 1'000'000'000'000;
};

TEST_F(AzureChainTest, AccountKeyIsSharedKeyWithTheDefaultEndpoint) {
  options_ = {{"azure_storage_account_name", "acct"},
              {"azure_storage_account_key", Base64Encode("secret-key")}};
  ASSERT_OK_AND_ASSIGN(auto settings, Resolve());
  EXPECT_EQ(settings.account, "acct");
  EXPECT_EQ(settings.endpoint, "https://acct.blob.core.windows.net");
  ASSERT_OK_AND_ASSIGN(auto credential, settings.credentials->Get());
  EXPECT_EQ(credential.kind, AzureCredential::Kind::kSharedKey);
  EXPECT_EQ(credential.account_key, "secret-key");
  EXPECT_TRUE(requests_.empty());
}

TEST_F(AzureChainTest, KeyThatIsNotBase64IsInvalidWithoutRepeatingIt) {
  options_ = {{"azure_storage_account_name", "acct"}, {"azure_storage_account_key", "not*base64!"}};
  auto settings = Resolve();
  ASSERT_TRUE(settings.status().IsInvalid());
  EXPECT_EQ(settings.status().message().find("not*base64!"), std::string::npos);
}

TEST_F(AzureChainTest, NoAccountIsInvalidSayingHowToNameOne) {
  auto settings = Resolve();
  ASSERT_TRUE(settings.status().IsInvalid());
  EXPECT_NE(settings.status().message().find("azure_storage_account_name"), std::string::npos);
  url_account_ = "fromurl";
  options_ = {{"azure_storage_token", "t"}};
  ASSERT_OK_AND_ASSIGN(auto from_url, Resolve());
  EXPECT_EQ(from_url.account, "fromurl");
}

TEST_F(AzureChainTest, EmulatorUsesTheWellKnownAccountKeyAndUrl) {
  options_ = {{"azure_storage_use_emulator", "true"}};
  env_["AZURITE_BLOB_STORAGE_URL"] = "http://127.0.0.1:12345/";
  ASSERT_OK_AND_ASSIGN(auto settings, Resolve());
  EXPECT_EQ(settings.account, "devstoreaccount1");
  EXPECT_EQ(settings.endpoint, "http://127.0.0.1:12345/devstoreaccount1");
  ASSERT_OK_AND_ASSIGN(auto credential, settings.credentials->Get());
  EXPECT_EQ(credential.kind, AzureCredential::Kind::kSharedKey);
  EXPECT_EQ(Base64Encode(credential.account_key), kAzureEmulatorKey);
}

TEST_F(AzureChainTest, BearerTokenBeatsEveryOtherSource) {
  options_ = {{"azure_storage_account_name", "acct"},
              {"azure_storage_token", "given-token"},
              {"azure_storage_account_key", Base64Encode("k")},
              {"azure_client_id", "id"},
              {"azure_client_secret", "s"},
              {"azure_tenant_id", "t"}};
  ASSERT_OK_AND_ASSIGN(auto settings, Resolve());
  ASSERT_OK_AND_ASSIGN(auto credential, settings.credentials->Get());
  EXPECT_EQ(credential.kind, AzureCredential::Kind::kBearer);
  EXPECT_EQ(credential.bearer, "given-token");
  EXPECT_EQ(settings.credentials->Source(), "azure_storage_token");
}

TEST_F(AzureChainTest, ClientSecretIsExchangedAtEntraIdAndCached) {
  options_ = {{"azure_storage_account_name", "acct"},
              {"azure_client_id", "app-id"},
              {"azure_client_secret", "very-secret"},
              {"azure_tenant_id", "tenant-1"}};
  ASSERT_OK_AND_ASSIGN(auto settings, Resolve());
  EXPECT_TRUE(requests_.empty());  // nothing is fetched before the first use
  ASSERT_OK_AND_ASSIGN(auto credential, settings.credentials->Get());
  EXPECT_EQ(credential.kind, AzureCredential::Kind::kBearer);
  EXPECT_EQ(credential.bearer, "tok-1");
  EXPECT_EQ(credential.expires_ms, now_ms_ + 3600 * 1000);
  ASSERT_EQ(requests_.size(), 1u);
  EXPECT_EQ(requests_[0].method, "POST");
  EXPECT_EQ(requests_[0].url, "https://login.microsoftonline.com/tenant-1/oauth2/v2.0/token");
  const std::string body = requests_[0].body->ToString();
  EXPECT_NE(body.find("grant_type=client_credentials"), std::string::npos);
  EXPECT_NE(body.find("client_id=app-id"), std::string::npos);
  EXPECT_NE(body.find("client_secret=very-secret"), std::string::npos);
  EXPECT_NE(body.find("scope=https%3A%2F%2Fstorage.azure.com%2F.default"), std::string::npos);
  // Cached until five minutes before it expires, then fetched again.
  now_ms_ += 50 * 60 * 1000;
  ASSERT_OK(settings.credentials->Get().status());
  EXPECT_EQ(requests_.size(), 1u);
  now_ms_ += 6 * 60 * 1000;
  reply_body_ = R"({"access_token":"tok-2","expires_in":"3600"})";
  ASSERT_OK_AND_ASSIGN(auto refreshed, settings.credentials->Get());
  EXPECT_EQ(refreshed.bearer, "tok-2");
  EXPECT_EQ(requests_.size(), 2u);
}

TEST_F(AzureChainTest, FailedRefreshKeepsAValidTokenAndRejectedSecretIsClear) {
  options_ = {{"azure_storage_account_name", "acct"},
              {"azure_client_id", "app-id"},
              {"azure_client_secret", "very-secret"},
              {"azure_tenant_id", "tenant-1"}};
  ASSERT_OK_AND_ASSIGN(auto settings, Resolve());
  ASSERT_OK(settings.credentials->Get().status());
  now_ms_ += 56 * 60 * 1000;  // inside the refresh window, not yet expired
  reachable_ = false;
  ASSERT_OK_AND_ASSIGN(auto kept, settings.credentials->Get());
  EXPECT_EQ(kept.bearer, "tok-1");
  now_ms_ += 10 * 60 * 1000;  // expired: the failure shows
  reachable_ = true;
  reply_status_ = 401;
  reply_body_ = R"({"error":"invalid_client","error_description":"secret very-secret is wrong"})";
  auto failed = settings.credentials->Get();
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("invalid_client"), std::string::npos);
  EXPECT_EQ(failed.status().message().find("very-secret"), std::string::npos);
}

TEST_F(AzureChainTest, HalfAServicePrincipalIsInvalid) {
  options_ = {{"azure_storage_account_name", "acct"}, {"azure_client_secret", "s"}};
  auto settings = Resolve();
  ASSERT_TRUE(settings.status().IsInvalid());
  EXPECT_NE(settings.status().message().find("azure_tenant_id"), std::string::npos);
}

TEST_F(AzureChainTest, WorkloadIdentityReadsTheTokenFileAtEveryRefresh) {
  TempDir dir;
  const std::string file = dir.path() + "/token";
  std::ofstream(file) << "federated-1\n";
  options_ = {{"azure_storage_account_name", "acct"},
              {"azure_client_id", "app-id"},
              {"azure_tenant_id", "tenant-1"},
              {"azure_federated_token_file", file},
              {"azure_authority_host", "https://login.example/"}};
  ASSERT_OK_AND_ASSIGN(auto settings, Resolve());
  ASSERT_OK(settings.credentials->Get().status());
  ASSERT_EQ(requests_.size(), 1u);
  EXPECT_EQ(requests_[0].url, "https://login.example/tenant-1/oauth2/v2.0/token");
  std::string body = requests_[0].body->ToString();
  EXPECT_NE(body.find("client_assertion=federated-1&"), std::string::npos) << body;
  EXPECT_NE(body.find("client_assertion_type=urn%3Aietf%3Aparams%3Aoauth%3Aclient-assertion-type%3Ajwt-bearer"),
            std::string::npos);
  std::ofstream(file) << "federated-2";  // the platform rotates the file
  now_ms_ += 58 * 60 * 1000;
  ASSERT_OK(settings.credentials->Get().status());
  ASSERT_EQ(requests_.size(), 2u);
  EXPECT_NE(requests_[1].body->ToString().find("client_assertion=federated-2"), std::string::npos);
}

TEST_F(AzureChainTest, ManagedIdentityAsksImdsWithTheMetadataHeader) {
  options_ = {{"azure_storage_account_name", "acct"}, {"azure_client_id", "user-assigned"}};
  reply_body_ = R"({"access_token":"imds-token","expires_on":"2000000000","resource":"x"})";
  ASSERT_OK_AND_ASSIGN(auto settings, Resolve());
  ASSERT_OK_AND_ASSIGN(auto credential, settings.credentials->Get());
  EXPECT_EQ(credential.bearer, "imds-token");
  EXPECT_EQ(credential.expires_ms, int64_t{2000000000} * 1000);
  ASSERT_EQ(requests_.size(), 1u);
  EXPECT_EQ(requests_[0].method, "GET");
  EXPECT_EQ(requests_[0].url,
            "http://169.254.169.254/metadata/identity/oauth2/token?api-version=2019-08-01"
            "&resource=https%3A%2F%2Fstorage.azure.com&client_id=user-assigned");
  ASSERT_FALSE(requests_[0].headers.empty());
  EXPECT_EQ(requests_[0].headers[0], (std::pair<std::string, std::string>{"Metadata", "true"}));
}

TEST_F(AzureChainTest, AppServiceIdentityEndpointSendsItsHeader) {
  options_ = {{"azure_storage_account_name", "acct"}};
  env_["IDENTITY_ENDPOINT"] = "http://localhost:4141/msi/token";
  env_["IDENTITY_HEADER"] = "header-secret";
  ASSERT_OK_AND_ASSIGN(auto settings, Resolve());
  ASSERT_OK(settings.credentials->Get().status());
  ASSERT_EQ(requests_.size(), 1u);
  EXPECT_EQ(requests_[0].url.rfind("http://localhost:4141/msi/token?api-version=", 0), 0u);
  bool has_header = false;
  for (const auto& [name, value] : requests_[0].headers) {
    has_header = has_header || (name == "X-IDENTITY-HEADER" && value == "header-secret");
  }
  EXPECT_TRUE(has_header);
}

TEST_F(AzureChainTest, NothingConfiguredAndNoImdsSaysWhatToConfigure) {
  options_ = {{"azure_storage_account_name", "acct"}};
  reachable_ = false;
  ASSERT_OK_AND_ASSIGN(auto settings, Resolve());
  auto credential = settings.credentials->Get();
  ASSERT_FALSE(credential.ok());
  EXPECT_NE(credential.status().message().find("azure_storage_account_key"), std::string::npos);
  EXPECT_NE(credential.status().message().find("instance metadata"), std::string::npos);
}

TEST_F(AzureChainTest, SasTokenIsAppendedWithoutItsQuestionMark) {
  options_ = {{"azure_storage_account_name", "acct"}, {"azure_storage_sas_token", "?sv=1&sig=abc"}};
  ASSERT_OK_AND_ASSIGN(auto settings, Resolve());
  ASSERT_OK_AND_ASSIGN(auto credential, settings.credentials->Get());
  EXPECT_EQ(credential.kind, AzureCredential::Kind::kSas);
  EXPECT_EQ(credential.sas_query, "sv=1&sig=abc");
  EXPECT_EQ(settings.credentials->Source().find("abc"), std::string::npos);
}

TEST_F(AzureChainTest, ConnectionStringFromTheEnvironment) {
  env_["AZURE_STORAGE_CONNECTION_STRING"] =
      "DefaultEndpointsProtocol=https;AccountName=connacct;AccountKey=" + Base64Encode("ck") +
      ";EndpointSuffix=core.chinacloudapi.cn";
  ASSERT_OK_AND_ASSIGN(auto settings, Resolve());
  EXPECT_EQ(settings.account, "connacct");
  EXPECT_EQ(settings.endpoint, "https://connacct.blob.core.chinacloudapi.cn");
  ASSERT_OK_AND_ASSIGN(auto credential, settings.credentials->Get());
  EXPECT_EQ(credential.account_key, "ck");
  env_["AZURE_STORAGE_CONNECTION_STRING"] = "garbage";
  EXPECT_TRUE(Resolve().status().IsInvalid());
}

TEST_F(AzureChainTest, AzureCliAndBadAccountNamesAreRefused) {
  options_ = {{"azure_storage_account_name", "acct"}, {"azure_use_azure_cli", "true"}};
  auto cli = Resolve();
  ASSERT_TRUE(cli.status().IsInvalid());
  EXPECT_NE(cli.status().message().find("azure_storage_token"), std::string::npos);
  // A key given as the account name by mistake is refused without being repeated.
  const std::string key = Base64Encode("a key with +/= in its base64");
  options_ = {{"azure_storage_account_name", key}, {"azure_storage_token", "t"}};
  auto bad = Resolve();
  ASSERT_TRUE(bad.status().IsInvalid());
  EXPECT_EQ(bad.status().message().find(key), std::string::npos) << bad.status().ToString();
}

TEST_F(AzureChainTest, SkipSignatureSendsRequestsUnsigned) {
  options_ = {{"azure_storage_account_name", "acct"}, {"azure_skip_signature", "true"},
              {"azure_storage_account_key", Base64Encode("k")}};
  ASSERT_OK_AND_ASSIGN(auto settings, Resolve());
  ASSERT_OK_AND_ASSIGN(auto credential, settings.credentials->Get());
  EXPECT_EQ(credential.kind, AzureCredential::Kind::kAnonymous);
}

}  // namespace
}  // namespace timelake::testing
