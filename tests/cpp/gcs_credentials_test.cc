// The Google credential chain without a network: a fake HTTP exchange (aws_credential_fakes.h's
// FakeHttp answers from a table and records what it was asked), a fake environment and home
// folder, and a fake clock. The service-account path is checked end to end: the test makes an RSA
// key, the chain signs a JWT with it, and the test verifies the signature with the public key.
#include "timelake/store/gcs/gcs_credentials.h"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include "aws_credential_fakes.h"
#include "temp_dir.h"
#include "test_util.h"
#include "timelake/util/encoding.h"
#include "timelake/util/json.h"

namespace timelake::testing {
namespace {

const std::string kTokenUri = "https://oauth2.googleapis.com/token";
const std::string kMetadataUrl =
    "http://169.254.169.254/computeMetadata/v1/instance/service-accounts/default/token";
const std::string kEmail = "lake-writer@project.iam.gserviceaccount.com";

struct PkeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;

// One RSA key for the whole suite (making one takes a while), and its PKCS#8 PEM.
struct TestKey {
  Pkey key;
  std::string pem;
};

const TestKey& SharedKey() {
  static const TestKey* made = [] {
    auto* out = new TestKey;
    EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_RSA, nullptr);
    EVP_PKEY* key = nullptr;
    if (ctx == nullptr || EVP_PKEY_keygen_init(ctx) != 1 ||
        EVP_PKEY_CTX_set_rsa_keygen_bits(ctx, 2048) != 1 || EVP_PKEY_keygen(ctx, &key) != 1) {
      std::abort();
    }
    EVP_PKEY_CTX_free(ctx);
    out->key.reset(key);
    BIO* bio = BIO_new(BIO_s_mem());
    PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
    char* data = nullptr;
    const long size = BIO_get_mem_data(bio, &data);
    out->pem.assign(data, static_cast<size_t>(size));
    BIO_free(bio);
    return out;
  }();
  return *made;
}

std::string Json(const std::map<std::string, std::string>& fields) {
  rapidjson::StringBuffer buffer;
  JsonWriter w(buffer);
  w.StartObject();
  for (const auto& [key, value] : fields) {
    w.Key(key);
    w.String(value.c_str());
  }
  w.EndObject();
  return buffer.GetString();
}

std::string ServiceAccountJson(const std::string& pem = SharedKey().pem) {
  return Json({{"type", "service_account"},
               {"project_id", "project"},
               {"private_key_id", "key-id-1234"},
               {"private_key", pem},
               {"client_email", kEmail},
               {"client_id", "1234567890"},
               {"token_uri", kTokenUri}});
}

std::string AuthorizedUserJson() {
  return Json({{"type", "authorized_user"},
               {"client_id", "client-id.apps.googleusercontent.com"},
               {"client_secret", "client-secret-XYZ"},
               {"refresh_token", "1//refresh-token-ABC"}});
}

std::string TokenReply(const std::string& token, int expires_in = 3600) {
  return R"({"access_token": ")" + token + R"(", "expires_in": )" + std::to_string(expires_in) +
         R"(, "token_type": "Bearer"})";
}

// base64url (no padding) → bytes.
std::string Base64UrlDecode(std::string text) {
  for (char& c : text) {
    if (c == '-') c = '+';
    if (c == '_') c = '/';
  }
  while (text.size() % 4 != 0) text += '=';
  auto decoded = Base64Decode(text);
  EXPECT_TRUE(decoded.ok()) << decoded.status().ToString();
  return decoded.ok() ? *decoded : "";
}

std::vector<std::string> Split(const std::string& text, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t at = text.find(sep); at != std::string::npos; at = text.find(sep, start)) {
    out.push_back(text.substr(start, at - start));
    start = at + 1;
  }
  out.push_back(text.substr(start));
  return out;
}

bool VerifyRs256(EVP_PKEY* key, const std::string& data, const std::string& signature) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  const bool ok =
      EVP_DigestVerifyInit(ctx, nullptr, EVP_sha256(), nullptr, key) == 1 &&
      EVP_DigestVerify(ctx, reinterpret_cast<const unsigned char*>(signature.data()),
                       signature.size(), reinterpret_cast<const unsigned char*>(data.data()),
                       data.size()) == 1;
  EVP_MD_CTX_free(ctx);
  return ok;
}

class GcsCredentialsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    env_["HOME"] = home_.path();  // the real home folder and environment are never read
    now_ = MillisAt("2026-11-30T11:00:00Z");
  }

  GoogleCredentialInputs Inputs() {
    GoogleCredentialInputs inputs;
    inputs.options = options_;
    inputs.env = [env = env_](const std::string& name) -> std::optional<std::string> {
      const auto it = env.find(name);
      if (it == env.end()) return std::nullopt;
      return it->second;
    };
    inputs.fetch = http_.Fetch();
    inputs.now_ms = [this] { return now_.load(); };
    return inputs;
  }

  arrow::Result<std::shared_ptr<GoogleCredentialProvider>> Make() {
    return MakeGoogleCredentialChain(Inputs());
  }

  std::string WriteHomeFile(const std::string& relative, const std::string& text) {
    const std::string path = home_.path() + "/" + relative;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  TempDir home_;
  std::map<std::string, std::string> options_;
  std::map<std::string, std::string> env_;
  FakeHttp http_;
  std::atomic<int64_t> now_{0};
};

TEST_F(GcsCredentialsTest, ServiceAccountSignsAJwtTheTokenEndpointCanVerify) {
  options_["google_service_account_key"] = ServiceAccountJson();
  http_.On("POST", kTokenUri, {200, TokenReply("ya29.from-jwt"), ""});
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  ASSERT_OK_AND_ASSIGN(auto token, provider->Get());
  EXPECT_EQ(token.access_token, "ya29.from-jwt");
  EXPECT_FALSE(token.anonymous);

  const auto requests = http_.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(HeaderOf(requests[0], "Content-Type"), "application/x-www-form-urlencoded");
  const auto form = FormOf(requests[0]);
  EXPECT_EQ(form.at("grant_type"), "urn:ietf:params:oauth:grant-type:jwt-bearer");
  const auto parts = Split(form.at("assertion"), '.');
  ASSERT_EQ(parts.size(), 3u);

  rapidjson::Document header;
  header.Parse(Base64UrlDecode(parts[0]).c_str());
  ASSERT_TRUE(header.IsObject());
  EXPECT_STREQ(header["alg"].GetString(), "RS256");
  EXPECT_STREQ(header["typ"].GetString(), "JWT");
  EXPECT_STREQ(header["kid"].GetString(), "key-id-1234");

  rapidjson::Document claims;
  claims.Parse(Base64UrlDecode(parts[1]).c_str());
  ASSERT_TRUE(claims.IsObject());
  EXPECT_EQ(claims["iss"].GetString(), kEmail);
  EXPECT_STREQ(claims["scope"].GetString(), kGoogleStorageScope);
  EXPECT_EQ(claims["aud"].GetString(), kTokenUri);
  EXPECT_EQ(claims["iat"].GetInt64(), now_ / 1000);
  EXPECT_EQ(claims["exp"].GetInt64(), now_ / 1000 + 3600);

  const std::string signature = Base64UrlDecode(parts[2]);
  EXPECT_EQ(signature.size(), 256u);  // RSA-2048
  EXPECT_TRUE(VerifyRs256(SharedKey().key.get(), parts[0] + "." + parts[1], signature));
  // A signature over anything else does not verify: the check above can fail.
  EXPECT_FALSE(VerifyRs256(SharedKey().key.get(), parts[0] + "." + parts[0], signature));
}

TEST_F(GcsCredentialsTest, ServiceAccountFileIsReadFromThePathOption) {
  options_["google_service_account"] = WriteHomeFile("keys/sa.json", ServiceAccountJson());
  http_.On("POST", kTokenUri, {200, TokenReply("ya29.file"), ""});
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  ASSERT_OK_AND_ASSIGN(auto token, provider->Get());
  EXPECT_EQ(token.access_token, "ya29.file");
  EXPECT_NE(provider->Source().find(kEmail), std::string::npos) << provider->Source();
  EXPECT_NE(provider->Source().find("keys/sa.json"), std::string::npos) << provider->Source();
}

TEST_F(GcsCredentialsTest, CredentialsInTheOptionsOutrankTheEnvironment) {
  // A key left in the environment must not replace the one the caller chose.
  options_["google_service_account"] = WriteHomeFile("keys/sa.json", ServiceAccountJson());
  env_["GOOGLE_SERVICE_ACCOUNT_KEY"] = "{not the key you chose";
  env_["GOOGLE_APPLICATION_CREDENTIALS"] = "/nowhere.json";
  http_.On("POST", kTokenUri, {200, TokenReply("ya29.chosen"), ""});
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  ASSERT_OK_AND_ASSIGN(auto token, provider->Get());
  EXPECT_EQ(token.access_token, "ya29.chosen");
  EXPECT_NE(provider->Source().find("keys/sa.json"), std::string::npos) << provider->Source();
}

TEST_F(GcsCredentialsTest, KeyGivenWherePathBelongsIsInvalidWithoutEchoingIt) {
  options_["google_service_account"] = ServiceAccountJson();
  auto made = Make();
  ASSERT_TRUE(made.status().IsInvalid()) << made.status().ToString();
  EXPECT_NE(made.status().message().find("google_service_account_key"), std::string::npos);
  EXPECT_EQ(made.status().message().find("PRIVATE KEY"), std::string::npos);
  EXPECT_EQ(made.status().message().find(kEmail), std::string::npos);
}

TEST_F(GcsCredentialsTest, ServiceAccountKeyIsReadFromTheEnvironment) {
  env_["GOOGLE_SERVICE_ACCOUNT_KEY"] = ServiceAccountJson();
  http_.On("POST", kTokenUri, {200, TokenReply("ya29.env"), ""});
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  ASSERT_OK_AND_ASSIGN(auto token, provider->Get());
  EXPECT_EQ(token.access_token, "ya29.env");
}

TEST_F(GcsCredentialsTest, TokenIsCachedUntilFiveMinutesBeforeItExpires) {
  options_["google_service_account_key"] = ServiceAccountJson();
  http_.On("POST", kTokenUri, {200, TokenReply("ya29.first", 3600), ""});
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  ASSERT_OK(provider->Get());
  now_ += 54 * 60 * 1000;  // six minutes left
  ASSERT_OK_AND_ASSIGN(auto cached, provider->Get());
  EXPECT_EQ(cached.access_token, "ya29.first");
  EXPECT_EQ(http_.requests().size(), 1u);

  http_.On("POST", kTokenUri, {200, TokenReply("ya29.second", 3600), ""});
  now_ += 2 * 60 * 1000;  // four minutes left: inside the refresh window
  ASSERT_OK_AND_ASSIGN(auto refreshed, provider->Get());
  EXPECT_EQ(refreshed.access_token, "ya29.second");
  EXPECT_EQ(http_.requests().size(), 2u);
}

TEST_F(GcsCredentialsTest, AFailedRefreshKeepsATokenThatIsStillValid) {
  options_["google_service_account_key"] = ServiceAccountJson();
  http_.On("POST", kTokenUri, {200, TokenReply("ya29.first", 3600), ""});
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  ASSERT_OK(provider->Get());
  http_.On("POST", kTokenUri, {503, "unavailable", ""});
  now_ += 57 * 60 * 1000;
  ASSERT_OK_AND_ASSIGN(auto kept, provider->Get());
  EXPECT_EQ(kept.access_token, "ya29.first");
  now_ += 4 * 60 * 1000;  // expired now
  EXPECT_FALSE(provider->Get().ok());
}

TEST_F(GcsCredentialsTest, ConcurrentCallersShareOneFetch) {
  options_["google_service_account_key"] = ServiceAccountJson();
  http_.On("POST", kTokenUri, {200, TokenReply("ya29.shared"), ""});
  http_.BeforeReply([] { std::this_thread::sleep_for(std::chrono::milliseconds(50)); });
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      auto token = provider->Get();
      if (token.ok() && token->access_token == "ya29.shared") ok.fetch_add(1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 8);
  EXPECT_EQ(http_.requests().size(), 1u);
}

TEST_F(GcsCredentialsTest, AuthorizedUserTradesItsRefreshToken) {
  env_["GOOGLE_APPLICATION_CREDENTIALS"] = WriteHomeFile("adc.json", AuthorizedUserJson());
  http_.On("POST", kTokenUri, {200, TokenReply("ya29.user"), ""});
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  ASSERT_OK_AND_ASSIGN(auto token, provider->Get());
  EXPECT_EQ(token.access_token, "ya29.user");
  const auto requests = http_.requests();
  ASSERT_EQ(requests.size(), 1u);
  const auto form = FormOf(requests[0]);
  EXPECT_EQ(form.at("grant_type"), "refresh_token");
  EXPECT_EQ(form.at("client_id"), "client-id.apps.googleusercontent.com");
  EXPECT_EQ(form.at("client_secret"), "client-secret-XYZ");
  EXPECT_EQ(form.at("refresh_token"), "1//refresh-token-ABC");
  EXPECT_EQ(provider->Source().find("refresh-token"), std::string::npos);
}

TEST_F(GcsCredentialsTest, GcloudDefaultCredentialsFileIsFound) {
  WriteHomeFile(".config/gcloud/application_default_credentials.json", AuthorizedUserJson());
  http_.On("POST", kTokenUri, {200, TokenReply("ya29.gcloud"), ""});
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  ASSERT_OK_AND_ASSIGN(auto token, provider->Get());
  EXPECT_EQ(token.access_token, "ya29.gcloud");
  EXPECT_NE(provider->Source().find("application_default_credentials.json"), std::string::npos);
}

TEST_F(GcsCredentialsTest, TokenEndpointRefusalIsReportedWithoutSecrets) {
  env_["GOOGLE_APPLICATION_CREDENTIALS"] = WriteHomeFile("adc.json", AuthorizedUserJson());
  http_.On("POST", kTokenUri,
           {400, R"({"error": "invalid_grant", "error_description": "Bad Request"})", ""});
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  auto token = provider->Get();
  ASSERT_FALSE(token.ok());
  EXPECT_NE(token.status().message().find("invalid_grant"), std::string::npos)
      << token.status().ToString();
  EXPECT_EQ(token.status().message().find("refresh-token-ABC"), std::string::npos);
  EXPECT_EQ(token.status().message().find("client-secret-XYZ"), std::string::npos);
}

TEST_F(GcsCredentialsTest, MetadataServerIsAskedWithItsHeader) {
  http_.On("GET", kMetadataUrl, {200, TokenReply("ya29.metadata", 1800), ""});
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  ASSERT_OK_AND_ASSIGN(auto token, provider->Get());
  EXPECT_EQ(token.access_token, "ya29.metadata");
  EXPECT_EQ(token.expires_ms, now_ + 1800 * 1000);
  const auto requests = http_.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(HeaderOf(requests[0], "Metadata-Flavor"), "Google");
  EXPECT_EQ(provider->Source(), "metadata server 169.254.169.254");
}

TEST_F(GcsCredentialsTest, MetadataHostComesFromGceMetadataHost) {
  env_["GCE_METADATA_HOST"] = "127.0.0.1:8080";
  http_.On("GET",
           "http://127.0.0.1:8080/computeMetadata/v1/instance/service-accounts/default/token",
           {200, TokenReply("ya29.local"), ""});
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  ASSERT_OK_AND_ASSIGN(auto token, provider->Get());
  EXPECT_EQ(token.access_token, "ya29.local");
}

TEST_F(GcsCredentialsTest, NothingConfiguredIsAClearErrorListingWhatWasTried) {
  // No option, no variable, no gcloud file, and the metadata server does not answer.
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  auto token = provider->Get();
  ASSERT_FALSE(token.ok());
  const std::string message = token.status().message();
  for (const char* needle :
       {"no Google credentials", "metadata server", "GOOGLE_APPLICATION_CREDENTIALS",
        "application_default_credentials.json", "google_service_account",
        "google_skip_signature"}) {
    EXPECT_NE(message.find(needle), std::string::npos) << needle << " in " << message;
  }
}

TEST_F(GcsCredentialsTest, SkipSignatureIsAnonymousAndAsksNobody) {
  options_["google_skip_signature"] = "true";
  options_["google_service_account_key"] = ServiceAccountJson();
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  ASSERT_OK_AND_ASSIGN(auto token, provider->Get());
  EXPECT_TRUE(token.anonymous);
  EXPECT_TRUE(http_.requests().empty());
  options_["google_skip_signature"] = "perhaps";
  EXPECT_TRUE(IsInvalid(Make(), "google_skip_signature"));
}

TEST_F(GcsCredentialsTest, BearerTokenIsUsedAsItIs) {
  options_["google_bearer_token"] = "ya29.fixed";
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  ASSERT_OK_AND_ASSIGN(auto token, provider->Get());
  EXPECT_EQ(token.access_token, "ya29.fixed");
  EXPECT_EQ(token.expires_ms, 0);
  EXPECT_EQ(provider->Source(), "google_bearer_token");
  EXPECT_TRUE(http_.requests().empty());
}

TEST_F(GcsCredentialsTest, KeyThatIsNotJsonIsInvalidWithoutEchoingIt) {
  options_["google_service_account_key"] = "{\"private_key\": \"SECRET-MATERIAL\"";
  auto made = Make();
  EXPECT_TRUE(IsInvalid(made, "not a JSON object"));
  EXPECT_EQ(made.status().message().find("SECRET-MATERIAL"), std::string::npos);
}

TEST_F(GcsCredentialsTest, KeyWithoutARsaPrivateKeyIsInvalidWithoutEchoingIt) {
  options_["google_service_account_key"] = ServiceAccountJson(
      "-----BEGIN PRIVATE KEY-----\nSECRETSECRETSECRET\n-----END PRIVATE KEY-----\n");
  auto made = Make();
  EXPECT_TRUE(IsInvalid(made, "not a PEM RSA private key"));
  EXPECT_EQ(made.status().message().find("SECRETSECRET"), std::string::npos);
}

TEST_F(GcsCredentialsTest, KeyMissingAFieldIsInvalidNamingIt) {
  options_["google_service_account_key"] =
      Json({{"type", "service_account"}, {"private_key", SharedKey().pem}});
  EXPECT_TRUE(IsInvalid(Make(), "client_email"));
}

TEST_F(GcsCredentialsTest, UnreadableKeyFileIsAnIoErrorNamingIt) {
  options_["google_service_account"] = home_.path() + "/missing.json";
  auto made = Make();
  ASSERT_FALSE(made.ok());
  EXPECT_TRUE(made.status().IsIOError());
  EXPECT_NE(made.status().message().find("missing.json"), std::string::npos);
}

TEST_F(GcsCredentialsTest, UnsupportedAdcTypeIsInvalid) {
  env_["GOOGLE_APPLICATION_CREDENTIALS"] =
      WriteHomeFile("adc.json", Json({{"type", "external_account"}}));
  EXPECT_TRUE(IsInvalid(Make(), "external_account"));
}

}  // namespace
}  // namespace timelake::testing
