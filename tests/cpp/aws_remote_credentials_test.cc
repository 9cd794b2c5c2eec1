// The AWS credential chain's timed sources (STS web identity, the container endpoint, IMDSv2):
// the requests they make, the replies they read, refreshing before expiry, and errors that
// explain without leaking a secret. The network is a table of canned replies; the clock is fake.
#include "timelake/store/s3/aws_remote_credentials.h"

#include <atomic>
#include <filesystem>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "aws_credential_fakes.h"
#include "test_util.h"

namespace timelake::testing {
namespace {

class AwsCredentialsRemoteTest : public AwsCredentialsTest {};

// ---- web identity -----------------------------------------------------------------------------

TEST_F(AwsCredentialsRemoteTest, WebIdentityAssumesTheRoleAtSts) {
  UseWebIdentity();
  http_.On("POST", kStsUrl, {200, StsReply("ASIASTS"), ""});
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  EXPECT_EQ(provider->Source(), "web identity");
  EXPECT_TRUE(http_.requests().empty());  // nothing is fetched before the first Get

  ASSERT_OK_AND_ASSIGN(AwsCredentials credentials, provider->Get());
  EXPECT_EQ(credentials.access_key_id, "ASIASTS");
  EXPECT_EQ(credentials.secret_access_key, "sts-secret-key");
  EXPECT_EQ(credentials.session_token, "sts-session-token");
  EXPECT_EQ(credentials.expires_ms, MillisAt(kExpiry));

  const auto requests = http_.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].method, "POST");
  EXPECT_EQ(requests[0].url, kStsUrl);
  EXPECT_EQ(HeaderOf(requests[0], "content-type").rfind("application/x-www-form-urlencoded", 0),
            0u);
  const auto form = FormOf(requests[0]);
  EXPECT_EQ(form.at("Action"), "AssumeRoleWithWebIdentity");
  EXPECT_EQ(form.at("Version"), "2011-06-15");
  EXPECT_EQ(form.at("RoleArn"), "arn:aws:iam::123456789012:role/lake-writer");
  EXPECT_EQ(form.at("RoleSessionName"), "timelake-session");
  EXPECT_EQ(form.at("WebIdentityToken"), "eyJhbGciOiJSUzI1NiJ9.web-token");
  EXPECT_EQ(form.size(), 5u);
}

TEST_F(AwsCredentialsRemoteTest, WebIdentitySettingsFromStorageOptions) {
  options_ = {{"aws_web_identity_token_file", WriteHomeFile("k8s/token", "option-token")},
              {"aws_role_arn", "arn:aws:iam::123456789012:role/from-options"},
              {"aws_role_session_name", "nightly-compaction"},
              {"aws_region", "ap-northeast-1"}};
  http_.On("POST", "https://sts.ap-northeast-1.amazonaws.com/", {200, StsReply("ASIAOPT"), ""});
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  ASSERT_OK_AND_ASSIGN(AwsCredentials credentials, provider->Get());
  EXPECT_EQ(credentials.access_key_id, "ASIAOPT");
  const auto form = FormOf(http_.requests().at(0));
  EXPECT_EQ(form.at("RoleArn"), "arn:aws:iam::123456789012:role/from-options");
  EXPECT_EQ(form.at("RoleSessionName"), "nightly-compaction");
  EXPECT_EQ(form.at("WebIdentityToken"), "option-token");
}

TEST_F(AwsCredentialsRemoteTest, StsEndpointCanBeOverridden) {
  UseWebIdentity();
  env_["AWS_ENDPOINT_URL_STS"] = "http://127.0.0.1:4566/";
  http_.On("POST", "http://127.0.0.1:4566/", {200, StsReply("ASIALOCAL"), ""});
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  ASSERT_OK_AND_ASSIGN(AwsCredentials credentials, provider->Get());
  EXPECT_EQ(credentials.access_key_id, "ASIALOCAL");
}

TEST_F(AwsCredentialsRemoteTest, WebIdentityTokenFileWithoutRoleIsInvalid) {
  env_["AWS_WEB_IDENTITY_TOKEN_FILE"] = WriteHomeFile("token", "t");
  const auto made = Make();
  ASSERT_TRUE(made.status().IsInvalid()) << made.status().ToString();
  EXPECT_NE(made.status().message().find("AWS_ROLE_ARN"), std::string::npos);
}

TEST_F(AwsCredentialsRemoteTest, StsRefusalNamesTheCodeAndTheRole) {
  UseWebIdentity();
  http_.On("POST", kStsUrl,
           {403,
            "<ErrorResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\"><Error>"
            "<Type>Sender</Type><Code>AccessDenied</Code><Message>Not authorized to perform "
            "sts:AssumeRoleWithWebIdentity</Message></Error></ErrorResponse>",
            ""});
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  const auto got = provider->Get();
  ASSERT_TRUE(got.status().IsIOError()) << got.status().ToString();
  EXPECT_NE(got.status().message().find("HTTP 403 (AccessDenied: Not authorized"),
            std::string::npos)
      << got.status().message();
  EXPECT_NE(got.status().message().find("role/lake-writer"), std::string::npos);
}

TEST_F(AwsCredentialsRemoteTest, StsReplyWithoutCredentialsIsAnIOError) {
  UseWebIdentity();
  http_.On("POST", kStsUrl, {200, "<AssumeRoleWithWebIdentityResponse/>", ""});
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  EXPECT_TRUE(provider->Get().status().IsIOError());
  http_.On("POST", kStsUrl, {200, "<unclosed>", ""});
  EXPECT_TRUE(provider->Get().status().IsIOError());
}

// ---- the container endpoint -------------------------------------------------------------------

TEST_F(AwsCredentialsRemoteTest, ContainerRelativeUriGoesToTheEcsAgent) {
  env_["AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"] = "/v2/credentials/3f5a";
  http_.On("GET", "http://169.254.170.2/v2/credentials/3f5a", {200, JsonReply("ASIAECS"), ""});
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  ASSERT_OK_AND_ASSIGN(AwsCredentials credentials, provider->Get());
  EXPECT_EQ(credentials.access_key_id, "ASIAECS");
  EXPECT_EQ(credentials.secret_access_key, "json-secret-key");
  EXPECT_EQ(credentials.session_token, "json-session-token");
  EXPECT_EQ(credentials.expires_ms, MillisAt(kExpiry));
  EXPECT_EQ(provider->Source(), "container");
  ASSERT_EQ(http_.requests().size(), 1u);
  EXPECT_EQ(HeaderOf(http_.requests()[0], "authorization"), "");
}

TEST_F(AwsCredentialsRemoteTest, ContainerFullUriSendsTheAuthorizationToken) {
  env_["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = "http://127.0.0.1:8080/creds";
  env_["AWS_CONTAINER_AUTHORIZATION_TOKEN"] = "Basic abcd";
  http_.On("GET", "http://127.0.0.1:8080/creds", {200, JsonReply("ASIAFULL"), ""});
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  ASSERT_OK_AND_ASSIGN(AwsCredentials credentials, provider->Get());
  EXPECT_EQ(credentials.access_key_id, "ASIAFULL");
  EXPECT_EQ(HeaderOf(http_.requests().at(0), "authorization"), "Basic abcd");
}

TEST_F(AwsCredentialsRemoteTest, ContainerAuthorizationTokenFileWinsAndIsReadAtEveryRefresh) {
  const std::string token_file = WriteHomeFile("eks/token", "pod-identity-token-1\n");
  env_["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = "http://169.254.170.23/v1/credentials";
  env_["AWS_CONTAINER_AUTHORIZATION_TOKEN"] = "ignored";
  env_["AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"] = token_file;
  http_.On("GET", "http://169.254.170.23/v1/credentials", {200, JsonReply("ASIAPOD"), ""});
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  ASSERT_OK(provider->Get());
  WriteHomeFile("eks/token", "pod-identity-token-2");
  now_ = MillisAt(kExpiry) - kAwsCredentialRefreshWindowMs + 1;
  ASSERT_OK(provider->Get());
  const auto requests = http_.requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(HeaderOf(requests[0], "authorization"), "pod-identity-token-1");
  EXPECT_EQ(HeaderOf(requests[1], "authorization"), "pod-identity-token-2");
}

TEST_F(AwsCredentialsRemoteTest, ContainerFullUriOverPlainHttpMustStayOnTheHost) {
  env_["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = "http://credentials.example.com/creds";
  const auto made = Make();
  ASSERT_TRUE(made.status().IsInvalid()) << made.status().ToString();
  EXPECT_NE(made.status().message().find("credentials.example.com"), std::string::npos);

  env_["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = "https://credentials.example.com/creds";
  EXPECT_OK(Make());
}

TEST_F(AwsCredentialsRemoteTest, UnreadableExpirationIsAnIOError) {
  env_["AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"] = "/v2/credentials/3f5a";
  http_.On("GET", "http://169.254.170.2/v2/credentials/3f5a",
           {200, JsonReply("ASIAECS", "tomorrow"), ""});
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  const auto got = provider->Get();
  ASSERT_TRUE(got.status().IsIOError()) << got.status().ToString();
  EXPECT_NE(got.status().message().find("'tomorrow'"), std::string::npos);
}

// ---- instance metadata ------------------------------------------------------------------------

TEST_F(AwsCredentialsRemoteTest, InstanceMetadataUsesImdsV2) {
  ServeInstanceMetadata("ASIAIMDS");
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  EXPECT_EQ(provider->Source(), "instance metadata");
  ASSERT_OK_AND_ASSIGN(AwsCredentials credentials, provider->Get());
  EXPECT_EQ(credentials.access_key_id, "ASIAIMDS");
  EXPECT_EQ(credentials.secret_access_key, "json-secret-key");
  EXPECT_EQ(credentials.session_token, "json-session-token");
  EXPECT_EQ(credentials.expires_ms, MillisAt(kExpiry));

  const auto requests = http_.requests();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[0].method, "PUT");
  EXPECT_EQ(requests[0].url, kImds + "/latest/api/token");
  EXPECT_EQ(HeaderOf(requests[0], "x-aws-ec2-metadata-token-ttl-seconds"), "21600");
  EXPECT_EQ(requests[1].method, "GET");
  EXPECT_EQ(requests[1].url, kImds + "/latest/meta-data/iam/security-credentials/");
  EXPECT_EQ(HeaderOf(requests[1], "x-aws-ec2-metadata-token"), kImdsToken);
  EXPECT_EQ(requests[2].url, kImds + "/latest/meta-data/iam/security-credentials/lake-reader");
  EXPECT_EQ(HeaderOf(requests[2], "x-aws-ec2-metadata-token"), kImdsToken);
}

TEST_F(AwsCredentialsRemoteTest, InstanceMetadataEndpointCanBeMoved) {
  env_["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = "http://[fd00:ec2::254]/";
  http_.On("PUT", "http://[fd00:ec2::254]/latest/api/token", {200, "t", ""});
  http_.On("GET", "http://[fd00:ec2::254]/latest/meta-data/iam/security-credentials/",
           {200, "r", ""});
  http_.On("GET", "http://[fd00:ec2::254]/latest/meta-data/iam/security-credentials/r",
           {200, JsonReply("ASIAV6"), ""});
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  ASSERT_OK_AND_ASSIGN(AwsCredentials credentials, provider->Get());
  EXPECT_EQ(credentials.access_key_id, "ASIAV6");

  // The storage option beats the variable.
  options_["aws_metadata_endpoint"] = "http://127.0.0.1:1338";
  http_.On("PUT", "http://127.0.0.1:1338/latest/api/token", {200, "t", ""});
  http_.On("GET", "http://127.0.0.1:1338/latest/meta-data/iam/security-credentials/",
           {200, "r", ""});
  http_.On("GET", "http://127.0.0.1:1338/latest/meta-data/iam/security-credentials/r",
           {200, JsonReply("ASIAMOCK"), ""});
  ASSERT_OK_AND_ASSIGN(provider, Make());
  ASSERT_OK_AND_ASSIGN(credentials, provider->Get());
  EXPECT_EQ(credentials.access_key_id, "ASIAMOCK");
}

TEST_F(AwsCredentialsRemoteTest, NothingConfiguredAndImdsDisabledExplainsWhatWasTried) {
  env_["AWS_EC2_METADATA_DISABLED"] = "TRUE";
  const auto made = Make();
  ASSERT_TRUE(made.status().IsInvalid()) << made.status().ToString();
  const std::string message = made.status().message();
  for (const char* part : {"storage_options", "environment", "profile 'default'",
                           "web identity", "container", "AWS_EC2_METADATA_DISABLED",
                           "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", "aws_skip_signature"}) {
    EXPECT_NE(message.find(part), std::string::npos) << part << " missing from: " << message;
  }
  EXPECT_TRUE(http_.requests().empty());
}

TEST_F(AwsCredentialsRemoteTest, UnreachableInstanceMetadataExplainsWhatWasTried) {
  http_.On("PUT", kImds + "/latest/api/token", {0, "", "Timeout was reached after 1000 ms"});
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  const auto got = provider->Get();
  ASSERT_TRUE(got.status().IsIOError()) << got.status().ToString();
  const std::string message = got.status().message();
  for (const char* part : {"instance metadata at http://169.254.169.254", "Timeout was reached",
                           "storage_options", "environment", "profile 'default'", "web identity",
                           "container", "aws_profile or AWS_PROFILE"}) {
    EXPECT_NE(message.find(part), std::string::npos) << part << " missing from: " << message;
  }
}

TEST_F(AwsCredentialsRemoteTest, InstanceWithoutRoleSaysSo) {
  http_.On("PUT", kImds + "/latest/api/token", {200, kImdsToken, ""});
  http_.On("GET", kImds + "/latest/meta-data/iam/security-credentials/", {404, "", ""});
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  const auto got = provider->Get();
  ASSERT_TRUE(got.status().IsIOError()) << got.status().ToString();
  EXPECT_NE(got.status().message().find("lists no IAM role"), std::string::npos);
}

TEST_F(AwsCredentialsRemoteTest, ImdsRefusingATokenIsNotRetriedWithImdsV1) {
  http_.On("PUT", kImds + "/latest/api/token", {403, "", ""});
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  EXPECT_TRUE(provider->Get().status().IsIOError());
  EXPECT_EQ(http_.requests().size(), 1u);
}

// ---- refreshing -------------------------------------------------------------------------------

TEST_F(AwsCredentialsRemoteTest, TimedCredentialsAreKeptUntilFiveMinutesBeforeExpiry) {
  ServeInstanceMetadata("ASIAFIRST");
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  ASSERT_OK_AND_ASSIGN(AwsCredentials credentials, provider->Get());
  EXPECT_EQ(credentials.access_key_id, "ASIAFIRST");

  ServeInstanceMetadata("ASIASECOND", "2026-11-30T13:00:00Z");
  now_ = MillisAt(kExpiry) - kAwsCredentialRefreshWindowMs - 1;
  ASSERT_OK_AND_ASSIGN(credentials, provider->Get());
  EXPECT_EQ(credentials.access_key_id, "ASIAFIRST");
  EXPECT_EQ(http_.requests().size(), 3u);

  now_ = MillisAt(kExpiry) - kAwsCredentialRefreshWindowMs;
  ASSERT_OK_AND_ASSIGN(credentials, provider->Get());
  EXPECT_EQ(credentials.access_key_id, "ASIASECOND");
  EXPECT_EQ(credentials.expires_ms, MillisAt("2026-11-30T13:00:00Z"));
  EXPECT_EQ(http_.requests().size(), 6u);
}

TEST_F(AwsCredentialsRemoteTest, FailedRefreshKeepsValidCredentialsAndRetriesLater) {
  ServeInstanceMetadata("ASIAFIRST");
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  ASSERT_OK(provider->Get());

  http_.On("PUT", kImds + "/latest/api/token", {503, "", ""});
  now_ = MillisAt(kExpiry) - 60'000;  // one minute left
  ASSERT_OK_AND_ASSIGN(AwsCredentials credentials, provider->Get());
  EXPECT_EQ(credentials.access_key_id, "ASIAFIRST");
  const size_t after_failure = http_.requests().size();
  ASSERT_OK(provider->Get());  // within the retry interval: no new attempt
  EXPECT_EQ(http_.requests().size(), after_failure);

  ServeInstanceMetadata("ASIASECOND", "2026-11-30T13:00:00Z");
  now_ = now_ + kAwsCredentialRetryIntervalMs;
  ASSERT_OK_AND_ASSIGN(credentials, provider->Get());
  EXPECT_EQ(credentials.access_key_id, "ASIASECOND");
}

TEST_F(AwsCredentialsRemoteTest, ExpiredCredentialsAreNotHandedOutWhenRefreshFails) {
  ServeInstanceMetadata("ASIAFIRST");
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  ASSERT_OK(provider->Get());
  http_.On("PUT", kImds + "/latest/api/token", {503, "", ""});
  now_ = MillisAt(kExpiry);
  EXPECT_TRUE(provider->Get().status().IsIOError());
}

TEST_F(AwsCredentialsRemoteTest, ConcurrentCallersShareOneRefresh) {
  constexpr int kThreads = 8;
  env_["AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"] = "/creds";
  http_.On("GET", "http://169.254.170.2/creds", {200, JsonReply("ASIASHARED"), ""});
  std::atomic<int> started{0};
  // The first fetch stays in flight until every caller has started, so callers that do not wait
  // for it would fetch too.
  http_.BeforeReply([&] {
    while (started.load() < kThreads) std::this_thread::yield();
  });
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      ++started;
      if (provider->Get().ok()) ++ok;
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(ok.load(), kThreads);
  EXPECT_EQ(http_.requests().size(), 1u);
}

// ---- secrets ----------------------------------------------------------------------------------

// Every failure below happens while some secret is known to the chain; no message may hold one.
TEST_F(AwsCredentialsRemoteTest, NoSecretAppearsInAnyErrorMessage) {
  const std::vector<std::string> secrets = {"options-secret", "env-secret",  "file-secret",
                                            "web-token-xyz",  "pod-token-xyz", kImdsToken,
                                            "json-secret-key", "json-session-token"};
  std::vector<arrow::Status> failures;
  auto collect = [&](const arrow::Status& status) {
    EXPECT_FALSE(status.ok());
    failures.push_back(status);
  };
  auto reset = [&] {
    options_.clear();
    env_ = {{"HOME", home_.path()}};
  };

  options_ = {{"aws_secret_access_key", "options-secret"}, {"aws_session_token", "options-token"}};
  collect(Make().status());

  reset();
  env_["AWS_SECRET_ACCESS_KEY"] = "env-secret";
  collect(Make().status());

  reset();
  WriteHomeFile(".aws/credentials", "[default]\naws_secret_access_key = file-secret\n");
  collect(Make().status());
  std::filesystem::remove(home_.path() + "/.aws/credentials");

  // STS echoing the token in its error message, and a transport error quoting it.
  reset();
  UseWebIdentity();
  WriteHomeFile("token", "web-token-xyz");
  http_.On("POST", kStsUrl,
           {400, "<ErrorResponse><Error><Code>InvalidIdentityToken</Code><Message>Bad token "
                 "web-token-xyz</Message></Error></ErrorResponse>", ""});
  collect(Make().ValueOrDie()->Get().status());
  http_.On("POST", kStsUrl, {0, "", "reset while sending WebIdentityToken=web-token-xyz"});
  collect(Make().ValueOrDie()->Get().status());

  // A container endpoint echoing the authorization token; a 200 reply that is not JSON.
  reset();
  env_["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = "http://127.0.0.1:9/creds";
  env_["AWS_CONTAINER_AUTHORIZATION_TOKEN"] = "pod-token-xyz";
  http_.On("GET", "http://127.0.0.1:9/creds", {401, "bad Authorization: pod-token-xyz", ""});
  collect(Make().ValueOrDie()->Get().status());
  http_.On("GET", "http://127.0.0.1:9/creds",
           {200, R"({"SecretAccessKey": "json-secret-key", "Token": "json-session-token")", ""});
  collect(Make().ValueOrDie()->Get().status());

  // IMDS failing after handing out its token.
  reset();
  http_.On("PUT", kImds + "/latest/api/token", {200, kImdsToken, ""});
  http_.On("GET", kImds + "/latest/meta-data/iam/security-credentials/",
           {0, "", "timeout; request had X-aws-ec2-metadata-token: " + kImdsToken});
  collect(Make().ValueOrDie()->Get().status());
  http_.On("GET", kImds + "/latest/meta-data/iam/security-credentials/", {200, "role", ""});
  http_.On("GET", kImds + "/latest/meta-data/iam/security-credentials/role",
           {200, R"({"Code": "Success", "SecretAccessKey": "json-secret-key"})", ""});
  collect(Make().ValueOrDie()->Get().status());

  ASSERT_EQ(failures.size(), 9u);
  for (const auto& status : failures) {
    for (const auto& secret : secrets) {
      EXPECT_EQ(status.ToString().find(secret), std::string::npos)
          << "'" << secret << "' leaked into: " << status.ToString();
    }
  }
}

}  // namespace
}  // namespace timelake::testing
