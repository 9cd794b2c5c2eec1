// Fakes for testing the AWS credential chain: an environment, a home folder, a network that
// answers from a table and records what it was asked, and a clock, all owned by one fixture.
#pragma once

#include <strings.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <arrow/buffer.h>
#include <gtest/gtest.h>

#include "temp_dir.h"
#include "timelake/store/s3/aws_credentials.h"
#include "timelake/util/time.h"

namespace timelake::testing {

// One canned exchange: a reply, or a transport failure with `error` as its message.
struct Canned {
  int status = 200;
  std::string body;
  std::string error;
};

// Answers requests from a table keyed by "METHOD url" and records every request.
class FakeHttp {
 public:
  void On(const std::string& method, const std::string& url, Canned reply) {
    std::lock_guard<std::mutex> lock(mutex_);
    replies_[method + " " + url] = std::move(reply);
  }

  HttpFetch Fetch() {
    return [this](const HttpRequest& request) -> arrow::Result<HttpResponse> {
      Canned reply;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        requests_.push_back(request);
        const auto it = replies_.find(request.method + " " + request.url);
        if (it == replies_.end()) {
          return arrow::Status::IOError("connection refused: ", request.url);
        }
        reply = it->second;
      }
      if (before_reply_) before_reply_();
      if (!reply.error.empty()) return arrow::Status::IOError(reply.error);
      HttpResponse response;
      response.status = reply.status;
      response.body = arrow::Buffer::FromString(reply.body);
      return response;
    };
  }

  /// Runs before every reply, outside the lock (to hold a fetch in flight).
  void BeforeReply(std::function<void()> hook) { before_reply_ = std::move(hook); }

  std::vector<HttpRequest> requests() {
    std::lock_guard<std::mutex> lock(mutex_);
    return requests_;
  }

 private:
  std::mutex mutex_;
  std::map<std::string, Canned> replies_;
  std::vector<HttpRequest> requests_;
  std::function<void()> before_reply_;
};

// The value of the request's header `name` (any case), "" when absent.
inline std::string HeaderOf(const HttpRequest& request, const std::string& name) {
  for (const auto& [key, value] : request.headers) {
    if (strcasecmp(key.c_str(), name.c_str()) == 0) return value;
  }
  return "";
}

inline int HexValue(char c) {
  return std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : (c | 32) - 'a' + 10;
}

// The name=value pairs of a form body, decoded.
inline std::map<std::string, std::string> FormOf(const HttpRequest& request) {
  std::map<std::string, std::string> form;
  const std::string body = request.body ? request.body->ToString() : "";
  auto decode = [](const std::string& text) {
    std::string out;
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '%' && i + 2 < text.size()) {
        out += static_cast<char>(HexValue(text[i + 1]) * 16 + HexValue(text[i + 2]));
        i += 2;
      } else {
        out += text[i] == '+' ? ' ' : text[i];
      }
    }
    return out;
  };
  size_t start = 0;
  while (start <= body.size()) {
    const size_t end = std::min(body.find('&', start), body.size());
    const std::string pair = body.substr(start, end - start);
    const size_t eq = pair.find('=');
    if (!pair.empty()) {
      form[decode(pair.substr(0, eq))] =
          eq == std::string::npos ? "" : decode(pair.substr(eq + 1));
    }
    start = end + 1;
  }
  return form;
}

inline int64_t MillisAt(const std::string& iso) { return *ParseIsoMicros(iso) / 1000; }

inline const std::string kStsUrl = "https://sts.eu-west-1.amazonaws.com/";
inline const std::string kImds = "http://169.254.169.254";
inline const std::string kImdsToken = "imds-session-token-AQAEAbc";
inline const std::string kExpiry = "2026-11-30T12:00:00Z";

inline std::string StsReply(const std::string& key_id, const std::string& expiration = kExpiry) {
  return R"(<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <SubjectFromWebIdentityToken>system:serviceaccount:lake:writer</SubjectFromWebIdentityToken>
    <AssumedRoleUser>
      <Arn>arn:aws:sts::123456789012:assumed-role/lake-writer/timelake-session</Arn>
      <AssumedRoleId>AROAEXAMPLE:timelake-session</AssumedRoleId>
    </AssumedRoleUser>
    <Credentials>
      <AccessKeyId>)" + key_id + R"(</AccessKeyId>
      <SecretAccessKey>sts-secret-key</SecretAccessKey>
      <SessionToken>sts-session-token</SessionToken>
      <Expiration>)" + expiration + R"(</Expiration>
    </Credentials>
    <Audience>sts.amazonaws.com</Audience>
  </AssumeRoleWithWebIdentityResult>
  <ResponseMetadata><RequestId>c6104cbe-af31-11e0-8154-cbc7ccf896c7</RequestId></ResponseMetadata>
</AssumeRoleWithWebIdentityResponse>)";
}

inline std::string JsonReply(const std::string& key_id, const std::string& expiration = kExpiry) {
  return R"({"Code": "Success", "LastUpdated": "2026-11-30T10:00:00Z", "Type": "AWS-HMAC",
             "AccessKeyId": ")" + key_id + R"(", "SecretAccessKey": "json-secret-key",
             "Token": "json-session-token", "Expiration": ")" + expiration + R"("})";
}

// Owns the fakes; Inputs() hands them to the chain. Tests set options_ and env_ before Make().
class AwsCredentialsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The real home folder and environment are never read.
    env_["HOME"] = home_.path();
    now_ = MillisAt("2026-11-30T11:00:00Z");
  }

  AwsCredentialInputs Inputs() {
    AwsCredentialInputs inputs;
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

  arrow::Result<std::shared_ptr<AwsCredentialProvider>> Make() {
    return MakeAwsCredentialChain(Inputs());
  }

  // Writes `text` to `relative` under the fake home folder; returns the full path.
  std::string WriteHomeFile(const std::string& relative, const std::string& text) {
    const std::string path = home_.path() + "/" + relative;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  void ServeInstanceMetadata(const std::string& key_id, const std::string& expiration = kExpiry) {
    http_.On("PUT", kImds + "/latest/api/token", {200, kImdsToken, ""});
    http_.On("GET", kImds + "/latest/meta-data/iam/security-credentials/",
             {200, "lake-reader\n", ""});
    http_.On("GET", kImds + "/latest/meta-data/iam/security-credentials/lake-reader",
             {200, JsonReply(key_id, expiration), ""});
  }

  void UseWebIdentity() {
    env_["AWS_WEB_IDENTITY_TOKEN_FILE"] =
        WriteHomeFile("token", "eyJhbGciOiJSUzI1NiJ9.web-token\n");
    env_["AWS_ROLE_ARN"] = "arn:aws:iam::123456789012:role/lake-writer";
    env_["AWS_REGION"] = "eu-west-1";
  }

  TempDir home_;
  std::map<std::string, std::string> options_;
  std::map<std::string, std::string> env_;
  FakeHttp http_;
  std::atomic<int64_t> now_{0};
};

}  // namespace timelake::testing
