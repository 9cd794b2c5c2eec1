// The AWS credential chain's static sources (storage_options, the environment, the shared
// files), their order, half-given key pairs, and the region. The environment and the home
// folder are fakes; none of these sources touches the network.
#include "timelake/store/s3/aws_credentials.h"

#include <filesystem>

#include <gtest/gtest.h>

#include "aws_credential_fakes.h"
#include "test_util.h"
#include "timelake/store/s3/aws_shared_files.h"

namespace timelake::testing {
namespace {

// ---- storage_options --------------------------------------------------------------------------

TEST_F(AwsCredentialsTest, SkipSignatureGivesAnonymousCredentials) {
  options_ = {{"aws_skip_signature", "True"}, {"aws_access_key_id", "AKIAOPTIONS"},
              {"aws_secret_access_key", "options-secret"}};
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  ASSERT_OK_AND_ASSIGN(AwsCredentials credentials, provider->Get());
  EXPECT_TRUE(credentials.anonymous);
  EXPECT_EQ(credentials.access_key_id, "");
  EXPECT_EQ(provider->Source(), "aws_skip_signature");
}

TEST_F(AwsCredentialsTest, SkipSignatureFalseLooksForCredentials) {
  options_ = {{"aws_skip_signature", "false"}, {"aws_access_key_id", "AKIAOPTIONS"},
              {"aws_secret_access_key", "options-secret"}};
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  ASSERT_OK_AND_ASSIGN(AwsCredentials credentials, provider->Get());
  EXPECT_FALSE(credentials.anonymous);
  EXPECT_EQ(credentials.access_key_id, "AKIAOPTIONS");
}

TEST_F(AwsCredentialsTest, SkipSignatureRejectsAnythingButABoolean) {
  options_ = {{"aws_skip_signature", "maybe"}};
  const auto made = Make();
  ASSERT_TRUE(made.status().IsInvalid()) << made.status().ToString();
  EXPECT_NE(made.status().message().find("aws_skip_signature"), std::string::npos);
}

TEST_F(AwsCredentialsTest, StorageOptionKeysComeBeforeEverythingElse) {
  options_ = {{"aws_access_key_id", "AKIAOPTIONS"},
              {"aws_secret_access_key", "options-secret"},
              {"aws_session_token", "options-token"}};
  env_["AWS_ACCESS_KEY_ID"] = "AKIAENV";
  env_["AWS_SECRET_ACCESS_KEY"] = "env-secret";
  WriteHomeFile(".aws/credentials", "[default]\naws_access_key_id = AKIAFILE\n"
                                    "aws_secret_access_key = file-secret\n");
  UseWebIdentity();
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  ASSERT_OK_AND_ASSIGN(AwsCredentials credentials, provider->Get());
  EXPECT_EQ(credentials.access_key_id, "AKIAOPTIONS");
  EXPECT_EQ(credentials.secret_access_key, "options-secret");
  EXPECT_EQ(credentials.session_token, "options-token");
  EXPECT_EQ(credentials.expires_ms, 0);
  EXPECT_EQ(provider->Source(), "storage_options");
  EXPECT_TRUE(http_.requests().empty());
}

TEST_F(AwsCredentialsTest, AwsTokenIsTheSessionTokenToo) {
  options_ = {{"aws_access_key_id", "AKIAOPTIONS"},
              {"aws_secret_access_key", "options-secret"},
              {"aws_token", "options-token"}};
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  ASSERT_OK_AND_ASSIGN(AwsCredentials credentials, provider->Get());
  EXPECT_EQ(credentials.session_token, "options-token");
}

TEST_F(AwsCredentialsTest, KeyIdWithoutSecretInOptionsNamesTheSecret) {
  options_ = {{"aws_access_key_id", "AKIAOPTIONS"}};
  env_["AWS_ACCESS_KEY_ID"] = "AKIAENV";
  env_["AWS_SECRET_ACCESS_KEY"] = "env-secret";
  const auto made = Make();
  ASSERT_TRUE(made.status().IsInvalid()) << made.status().ToString();
  EXPECT_NE(made.status().message().find("but not aws_secret_access_key"), std::string::npos)
      << made.status().message();
}

TEST_F(AwsCredentialsTest, SecretWithoutKeyIdInOptionsNamesTheKeyId) {
  options_ = {{"aws_secret_access_key", "options-secret"}};
  const auto made = Make();
  ASSERT_TRUE(made.status().IsInvalid()) << made.status().ToString();
  EXPECT_NE(made.status().message().find("but not aws_access_key_id"), std::string::npos)
      << made.status().message();
}

TEST_F(AwsCredentialsTest, SessionTokenWithoutKeysInOptionsIsInvalid) {
  options_ = {{"aws_session_token", "options-token"}};
  const auto made = Make();
  ASSERT_TRUE(made.status().IsInvalid()) << made.status().ToString();
  EXPECT_NE(made.status().message().find("aws_access_key_id"), std::string::npos);
}

// ---- the environment --------------------------------------------------------------------------

TEST_F(AwsCredentialsTest, EnvironmentComesBeforeSharedFiles) {
  env_["AWS_ACCESS_KEY_ID"] = "AKIAENV";
  env_["AWS_SECRET_ACCESS_KEY"] = "env-secret";
  env_["AWS_SESSION_TOKEN"] = "env-token";
  WriteHomeFile(".aws/credentials", "[default]\naws_access_key_id = AKIAFILE\n"
                                    "aws_secret_access_key = file-secret\n");
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  ASSERT_OK_AND_ASSIGN(AwsCredentials credentials, provider->Get());
  EXPECT_EQ(credentials.access_key_id, "AKIAENV");
  EXPECT_EQ(credentials.secret_access_key, "env-secret");
  EXPECT_EQ(credentials.session_token, "env-token");
  EXPECT_EQ(provider->Source(), "environment");
}

TEST_F(AwsCredentialsTest, EmptyEnvironmentVariablesCountAsUnset) {
  env_["AWS_ACCESS_KEY_ID"] = "";
  env_["AWS_SECRET_ACCESS_KEY"] = "";
  WriteHomeFile(".aws/credentials", "[default]\naws_access_key_id = AKIAFILE\n"
                                    "aws_secret_access_key = file-secret\n");
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  ASSERT_OK_AND_ASSIGN(AwsCredentials credentials, provider->Get());
  EXPECT_EQ(credentials.access_key_id, "AKIAFILE");
}

TEST_F(AwsCredentialsTest, KeyIdWithoutSecretInEnvironmentNamesTheSecret) {
  env_["AWS_ACCESS_KEY_ID"] = "AKIAENV";
  const auto made = Make();
  ASSERT_TRUE(made.status().IsInvalid()) << made.status().ToString();
  EXPECT_NE(made.status().message().find("but not AWS_SECRET_ACCESS_KEY"), std::string::npos)
      << made.status().message();
}

// ---- the shared files -------------------------------------------------------------------------

TEST_F(AwsCredentialsTest, SharedCredentialsFileGivesTheDefaultProfile) {
  const std::string path = WriteHomeFile(
      ".aws/credentials",
      "[other]\naws_access_key_id = AKIAOTHER\naws_secret_access_key = other-secret\n\n"
      "[default]\naws_access_key_id = AKIAFILE\naws_secret_access_key = file-secret\n"
      "aws_session_token = file-token\n");
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  ASSERT_OK_AND_ASSIGN(AwsCredentials credentials, provider->Get());
  EXPECT_EQ(credentials.access_key_id, "AKIAFILE");
  EXPECT_EQ(credentials.secret_access_key, "file-secret");
  EXPECT_EQ(credentials.session_token, "file-token");
  EXPECT_EQ(provider->Source(), "profile 'default' in " + path);
}

TEST_F(AwsCredentialsTest, AwsProfileSelectsAProfileSectionOfTheConfigFile) {
  const std::string path = WriteHomeFile(
      ".aws/config",
      "[default]\nregion = us-west-2\n\n"
      "[dev]\naws_access_key_id = AKIANOTAPROFILE\naws_secret_access_key = wrong\n\n"
      "[profile dev]\naws_access_key_id = AKIADEV\naws_secret_access_key = dev-secret\n");
  env_["AWS_PROFILE"] = "dev";
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  ASSERT_OK_AND_ASSIGN(AwsCredentials credentials, provider->Get());
  EXPECT_EQ(credentials.access_key_id, "AKIADEV");
  EXPECT_EQ(provider->Source(), "profile 'dev' in " + path);
}

TEST_F(AwsCredentialsTest, CredentialsFileWinsOverConfigFileForKeys) {
  const std::string path = WriteHomeFile(
      ".aws/credentials",
      "[dev]\naws_access_key_id = AKIACREDS\naws_secret_access_key = creds-secret\n");
  WriteHomeFile(".aws/config", "[profile dev]\naws_access_key_id = AKIACONFIG\n"
                               "aws_secret_access_key = config-secret\nregion = eu-north-1\n");
  options_["aws_profile"] = "dev";
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  ASSERT_OK_AND_ASSIGN(AwsCredentials credentials, provider->Get());
  EXPECT_EQ(credentials.access_key_id, "AKIACREDS");
  EXPECT_EQ(credentials.secret_access_key, "creds-secret");
  EXPECT_EQ(provider->Source(), "profile 'dev' in " + path);
  EXPECT_EQ(ResolveAwsRegion(Inputs()), "eu-north-1");
}

TEST_F(AwsCredentialsTest, ProfileChosenInStorageOptionsBeatsEnvironmentKeys) {
  WriteHomeFile(".aws/credentials",
                "[prod]\naws_access_key_id = AKIAPROD\naws_secret_access_key = prod-secret\n");
  env_["AWS_ACCESS_KEY_ID"] = "AKIAENV";
  env_["AWS_SECRET_ACCESS_KEY"] = "env-secret";
  options_["aws_profile"] = "prod";
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  ASSERT_OK_AND_ASSIGN(AwsCredentials credentials, provider->Get());
  EXPECT_EQ(credentials.access_key_id, "AKIAPROD");
}

TEST_F(AwsCredentialsTest, ProfileChosenInEnvironmentComesAfterEnvironmentKeys) {
  WriteHomeFile(".aws/credentials",
                "[prod]\naws_access_key_id = AKIAPROD\naws_secret_access_key = prod-secret\n");
  env_["AWS_ACCESS_KEY_ID"] = "AKIAENV";
  env_["AWS_SECRET_ACCESS_KEY"] = "env-secret";
  env_["AWS_PROFILE"] = "prod";
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  ASSERT_OK_AND_ASSIGN(AwsCredentials credentials, provider->Get());
  EXPECT_EQ(credentials.access_key_id, "AKIAENV");
}

TEST_F(AwsCredentialsTest, SharedFilesAreFoundThroughTheirVariables) {
  WriteHomeFile(".aws/credentials",
                "[default]\naws_access_key_id = AKIAHOME\naws_secret_access_key = home-secret\n");
  WriteHomeFile("elsewhere/creds", "[default]\nregion = x\n");
  const std::string config_path = WriteHomeFile(
      "elsewhere/conf",
      "[default]\naws_access_key_id = AKIAMOVED\naws_secret_access_key = moved-secret\n"
      "region = ap-south-1\n");
  env_["AWS_SHARED_CREDENTIALS_FILE"] = "~/elsewhere/creds";
  env_["AWS_CONFIG_FILE"] = config_path;
  ASSERT_OK_AND_ASSIGN(auto provider, Make());
  ASSERT_OK_AND_ASSIGN(AwsCredentials credentials, provider->Get());
  EXPECT_EQ(credentials.access_key_id, "AKIAMOVED");
  EXPECT_EQ(provider->Source(), "profile 'default' in " + config_path);
  EXPECT_EQ(ResolveAwsRegion(Inputs()), "ap-south-1");
}

TEST_F(AwsCredentialsTest, NamedProfileThatDoesNotExistIsInvalid) {
  WriteHomeFile(".aws/credentials",
                "[default]\naws_access_key_id = AKIAFILE\naws_secret_access_key = file-secret\n");
  env_["AWS_PROFILE"] = "prdo";
  const auto made = Make();
  ASSERT_TRUE(made.status().IsInvalid()) << made.status().ToString();
  EXPECT_NE(made.status().message().find("profile 'prdo' (from AWS_PROFILE)"), std::string::npos)
      << made.status().message();
}

TEST_F(AwsCredentialsTest, KeyIdWithoutSecretInProfileNamesFileAndSecret) {
  const std::string path =
      WriteHomeFile(".aws/credentials", "[default]\naws_access_key_id = AKIA\n");
  const auto made = Make();
  ASSERT_TRUE(made.status().IsInvalid()) << made.status().ToString();
  EXPECT_NE(made.status().message().find("profile 'default' in " + path), std::string::npos)
      << made.status().message();
  EXPECT_NE(made.status().message().find("but not aws_secret_access_key"), std::string::npos);
}

TEST_F(AwsCredentialsTest, ProfileUsingCredentialProcessIsInvalid) {
  WriteHomeFile(".aws/config", "[profile sso]\ncredential_process = /usr/bin/get-creds\n");
  env_["AWS_PROFILE"] = "sso";
  const auto made = Make();
  ASSERT_TRUE(made.status().IsInvalid()) << made.status().ToString();
  EXPECT_NE(made.status().message().find("credential_process"), std::string::npos);
}

TEST_F(AwsCredentialsTest, UnreadableSharedFileIsAnIOError) {
  std::filesystem::create_directories(home_.path() + "/.aws/credentials");  // a folder
  const auto made = Make();
  ASSERT_TRUE(made.status().IsIOError()) << made.status().ToString();
  EXPECT_NE(made.status().message().find(".aws/credentials"), std::string::npos);
}

TEST(AwsCredentialsIniTest, CommentsNestedBlocksAndStrayLinesAreSkipped) {
  const AwsIni ini = ParseAwsIni(
      "# a comment\r\n"
      "stray = outside any section\n"
      "[ profile  dev ]\r\n"
      "AWS_Access_Key_Id=AKIADEV   \n"
      "; another comment\n"
      "s3 =\n"
      "  addressing_style = path\n"
      "region = eu-west-3\n"
      "not a setting\n"
      "[profile dev]\n"
      "region = eu-west-1\n");
  ASSERT_EQ(ini.size(), 2u);  // "profile  dev" and "profile dev" are different section names
  const auto& dev = ini.at("profile  dev");
  EXPECT_EQ(dev.at("aws_access_key_id"), "AKIADEV");
  EXPECT_EQ(dev.at("s3"), "");
  EXPECT_EQ(dev.count("addressing_style"), 0u);
  EXPECT_EQ(dev.at("region"), "eu-west-3");
  EXPECT_EQ(ini.at("profile dev").at("region"), "eu-west-1");
}

// ---- region -----------------------------------------------------------------------------------

TEST_F(AwsCredentialsTest, RegionFollowsTheDocumentedOrder) {
  EXPECT_EQ(ResolveAwsRegion(Inputs()), "us-east-1");
  WriteHomeFile(".aws/config", "[default]\nregion = eu-central-1\n");
  EXPECT_EQ(ResolveAwsRegion(Inputs()), "eu-central-1");
  env_["AWS_DEFAULT_REGION"] = "eu-west-2";
  EXPECT_EQ(ResolveAwsRegion(Inputs()), "eu-west-2");
  env_["AWS_REGION"] = "eu-west-3";
  EXPECT_EQ(ResolveAwsRegion(Inputs()), "eu-west-3");
  options_["aws_default_region"] = "sa-east-1";
  EXPECT_EQ(ResolveAwsRegion(Inputs()), "sa-east-1");
  options_["aws_region"] = "ca-central-1";
  EXPECT_EQ(ResolveAwsRegion(Inputs()), "ca-central-1");
}

TEST_F(AwsCredentialsTest, RegionComesFromTheChosenProfile) {
  WriteHomeFile(".aws/config", "[default]\nregion = eu-central-1\n\n"
                               "[profile far]\nregion = ap-southeast-2\n");
  options_["aws_profile"] = "far";
  EXPECT_EQ(ResolveAwsRegion(Inputs()), "ap-southeast-2");
}

}  // namespace
}  // namespace timelake::testing
