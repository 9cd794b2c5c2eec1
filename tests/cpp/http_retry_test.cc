// HttpClient and SendWithRetry against a scripted HTTP server on 127.0.0.1: what is retried,
// how often, within what time, and which failures may have reached the server.
#include "timelake/http/retry.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "test_util.h"
#include "timelake/http/xml.h"

namespace timelake::testing {
namespace {

// Answers requests with the next scripted reply ("" = close the connection without answering);
// once the script is used up, answers 200 "ok". A reply without "Connection: close" (KeepAlive)
// keeps the connection open for the client's next request. Counts requests.
class ScriptedServer {
 public:
  explicit ScriptedServer(std::deque<std::string> script) : script_(std::move(script)) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    socklen_t len = sizeof(addr);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    listen(fd_, 16);
    thread_ = std::thread([this] { Serve(); });
  }
  ~ScriptedServer() {
    stop_ = true;
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/obj?secret=x"; }
  int requests() const { return requests_.load(); }
  int connections() const { return connections_.load(); }

  static std::string Reply(int status, const std::string& body = "") {
    return "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
  }
  static std::string KeepAlive(int status, const std::string& body = "") {
    return "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
  }

 private:
  // Reads one request (headers and a Content-Length body); false if the connection ended first.
  static bool ReadRequest(int client, std::string& pending) {
    char buf[4096];
    for (;;) {
      const auto end = pending.find("\r\n\r\n");
      if (end != std::string::npos) {
        std::string head = pending.substr(0, end);
        for (auto& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        size_t body = 0;
        const auto at = head.find("content-length:");
        if (at != std::string::npos) body = std::stoul(head.substr(at + 15));
        if (pending.size() >= end + 4 + body) {
          pending.erase(0, end + 4 + body);
          return true;
        }
      }
      const ssize_t n = recv(client, buf, sizeof(buf), 0);
      if (n <= 0) return false;
      pending.append(buf, static_cast<size_t>(n));
    }
  }

  void Serve() {
    while (!stop_) {
      const int client = accept(fd_, nullptr, nullptr);
      if (client < 0) break;
      ++connections_;
      timeval wait{2, 0};  // a kept connection the client does not use again ends here
      setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
      std::string pending;
      while (!stop_ && ReadRequest(client, pending)) {
        ++requests_;
        std::string reply = Reply(200, "ok");
        {
          std::lock_guard<std::mutex> lock(mutex_);
          if (!script_.empty()) {
            reply = script_.front();
            script_.pop_front();
          }
        }
        if (reply.empty()) break;
        send(client, reply.data(), reply.size(), MSG_NOSIGNAL);
        if (reply.find("Connection: close") != std::string::npos) break;
      }
      close(client);
    }
  }

  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  std::atomic<int> connections_{0};
  std::mutex mutex_;
  std::deque<std::string> script_;
};

std::shared_ptr<HttpClient> Client() {
  HttpClientOptions options;
  options.allow_http = true;
  options.request_timeout_ms = 5000;
  auto client = HttpClient::Make(options);
  EXPECT_TRUE(client.ok());
  return *client;
}

RetryOptions Fast(int retries) {
  RetryOptions r;
  r.max_retries = retries;
  r.base_delay_ms = 1;
  r.max_delay_ms = 5;
  return r;
}

arrow::Result<HttpResponse> Get(HttpClient& client, const RetryOptions& retry, const std::string& url,
                                RetryOutcome* outcome) {
  int builds = 0;
  return SendWithRetry(
      client, retry, "GET test",
      [&]() -> arrow::Result<HttpRequest> {
        ++builds;  // rebuilt (re-signed) for every attempt
        HttpRequest r;
        r.url = url;
        r.headers.emplace_back("x-attempt", std::to_string(builds));
        return r;
      },
      DefaultVerdict, outcome);
}

TEST(HttpRetryTest, TransientRepliesAreRetriedUntilOneIsFinal) {
  ScriptedServer server({ScriptedServer::Reply(503), ScriptedServer::Reply(500),
                         ScriptedServer::Reply(429), ScriptedServer::Reply(200, "done")});
  RetryOutcome outcome;
  ASSERT_OK_AND_ASSIGN(auto reply, Get(*Client(), Fast(5), server.url(), &outcome));
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.BodyText(), "done");
  EXPECT_EQ(outcome.attempts, 4);
  EXPECT_TRUE(outcome.maybe_applied);  // a 5xx may have been applied
  EXPECT_EQ(server.requests(), 4);
}

TEST(HttpRetryTest, FinalRepliesAreNotRetried) {
  ScriptedServer server({ScriptedServer::Reply(404), ScriptedServer::Reply(200)});
  RetryOutcome outcome;
  ASSERT_OK_AND_ASSIGN(auto reply, Get(*Client(), Fast(5), server.url(), &outcome));
  EXPECT_EQ(reply.status, 404);
  EXPECT_EQ(outcome.attempts, 1);
  EXPECT_FALSE(outcome.maybe_applied);
}

TEST(HttpRetryTest, RetriesStopAtTheLimitWithAClearError) {
  ScriptedServer server({ScriptedServer::Reply(503), ScriptedServer::Reply(503),
                         ScriptedServer::Reply(503), ScriptedServer::Reply(503)});
  RetryOutcome outcome;
  auto reply = Get(*Client(), Fast(2), server.url(), &outcome);
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(outcome.attempts, 3);
  EXPECT_NE(reply.status().message().find("3 attempts"), std::string::npos) << reply.status().ToString();
  EXPECT_NE(reply.status().message().find("HTTP 503"), std::string::npos);
}

TEST(HttpRetryTest, TheLastErrorNamesTheServicesErrorCode) {
  const std::string slow = "<?xml version=\"1.0\"?><Error><Code>SlowDown</Code><Message>Reduce your request rate</Message></Error>";
  ScriptedServer server({ScriptedServer::Reply(503, slow), ScriptedServer::Reply(503, slow)});
  auto reply = Get(*Client(), Fast(1), server.url(), nullptr);
  ASSERT_FALSE(reply.ok());
  EXPECT_NE(reply.status().message().find("HTTP 503 SlowDown"), std::string::npos) << reply.status().ToString();
  HttpResponse odd;
  odd.status = 500;
  odd.body = arrow::Buffer::FromString("<Error><Code>x y <script></Code></Error>");
  EXPECT_EQ(ServiceErrorCode(odd), "");  // not an identifier: not shown
  odd.headers["x-ms-error-code"] = "ServerBusy";
  EXPECT_EQ(ServiceErrorCode(odd), "ServerBusy");
}

TEST(HttpClientTest, DefaultPortsAreLeftOutOfTheHostAsCurlSendsIt) {
  EXPECT_EQ(WithoutDefaultPort("https", "s3.example.com:443"), "s3.example.com");
  EXPECT_EQ(WithoutDefaultPort("http", "127.0.0.1:80"), "127.0.0.1");
  EXPECT_EQ(WithoutDefaultPort("http", "127.0.0.1:8080"), "127.0.0.1:8080");
  EXPECT_EQ(WithoutDefaultPort("https", "host:80"), "host:80");
  EXPECT_EQ(WithoutDefaultPort("https", "[::1]:443"), "[::1]");
  EXPECT_EQ(WithoutDefaultPort("https", "example.com"), "example.com");
}

TEST(HttpClientTest, LargeBodiesAndRangesGetLongerTimeouts) {
  HttpClientOptions options;
  options.request_timeout_ms = 30'000;
  HttpRequest small;
  EXPECT_EQ(RequestTimeoutMs(options, small), 30'000);
  HttpRequest part;
  part.body = arrow::AllocateBuffer(16 << 20).ValueOrDie();
  EXPECT_EQ(RequestTimeoutMs(options, part), 30'000 + 64'000);  // 16 MiB at 256 KiB/s
  HttpRequest range;
  range.expected_response_bytes = 8 << 20;
  EXPECT_EQ(RequestTimeoutMs(options, range), 30'000 + 32'000);
}

TEST(HttpRetryTest, RetriesStopWithinTheTotalTime) {
  ScriptedServer server(std::deque<std::string>(100, ScriptedServer::Reply(503)));
  RetryOptions retry;
  retry.max_retries = 100;
  retry.base_delay_ms = 50;
  retry.max_delay_ms = 200;
  retry.max_total_ms = 500;
  const auto start = std::chrono::steady_clock::now();
  auto reply = Get(*Client(), retry, server.url(), nullptr);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(reply.ok());
  EXPECT_LT(ms, 5000);  // bounded: no attempt starts past the total time (500 ms)
  EXPECT_LT(server.requests(), 20);
}

TEST(HttpRetryTest, AClosedConnectionMayHaveReachedTheServerARefusedOneDidNot) {
  {
    ScriptedServer server({"", ""});  // read the request, then close without a reply
    RetryOutcome outcome;
    ASSERT_OK_AND_ASSIGN(auto reply, Get(*Client(), Fast(3), server.url(), &outcome));
    EXPECT_EQ(reply.status, 200);  // the third attempt got the default reply
    EXPECT_EQ(outcome.attempts, 3);
    EXPECT_TRUE(outcome.maybe_applied);
  }
  auto client = Client();
  HttpRequest request;
  request.url = "http://127.0.0.1:9/x";  // nothing listens on the discard port
  auto refused = client->Send(request);
  ASSERT_FALSE(refused.ok());
  EXPECT_FALSE(MayHaveReachedServer(refused.status()));
  RetryOutcome outcome;
  auto retried = Get(*client, Fast(1), "http://127.0.0.1:9/x", &outcome);
  ASSERT_FALSE(retried.ok());
  EXPECT_FALSE(outcome.maybe_applied);
}

TEST(HttpRetryTest, ARequestCurlResendsOnADeadReusedConnectionMayHaveBeenApplied) {
  // The second request goes out on the connection the first one kept open; the server reads it
  // and closes unanswered (as a server does that applied a write and then lost the connection).
  // libcurl resends such a request on a new connection by itself, so one attempt sends twice:
  // the reply (412 here, a conditional write refused by the state the first send made) must
  // not be taken as the whole story.
  ScriptedServer server({ScriptedServer::KeepAlive(200, "warm"), "", ScriptedServer::Reply(412)});
  auto client = Client();
  HttpRequest warm;
  warm.url = server.url();
  ASSERT_OK_AND_ASSIGN(auto first, client->Send(warm));
  EXPECT_EQ(first.status, 200);
  EXPECT_EQ(first.sends, 1);
  RetryOutcome outcome;
  ASSERT_OK_AND_ASSIGN(
      auto reply, SendWithRetry(
                      *client, Fast(3), "PUT test",
                      [&]() -> arrow::Result<HttpRequest> {
                        HttpRequest r;
                        r.method = "PUT";
                        r.url = server.url();
                        r.headers.emplace_back("If-None-Match", "*");
                        r.body = arrow::Buffer::FromString("payload");
                        return r;
                      },
                      DefaultVerdict, &outcome));
  EXPECT_EQ(reply.status, 412);
  EXPECT_EQ(reply.sends, 2);
  EXPECT_EQ(outcome.attempts, 1);
  EXPECT_TRUE(outcome.maybe_applied);
  EXPECT_EQ(server.requests(), 3);
  EXPECT_EQ(server.connections(), 2);
}

TEST(HttpRetryTest, ErrorsNeverShowTheQueryString) {
  ScriptedServer server({"", "", ""});
  auto reply = Get(*Client(), Fast(0), server.url(), nullptr);
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().message().find("secret=x"), std::string::npos) << reply.status().ToString();
}

TEST(HttpRetryTest, PlainHttpIsRefusedUnlessAllowed) {
  HttpClientOptions options;  // allow_http is off by default
  ASSERT_OK_AND_ASSIGN(auto client, HttpClient::Make(options));
  HttpRequest request;
  request.url = "http://127.0.0.1:9/x";
  auto reply = client->Send(request);
  ASSERT_FALSE(reply.ok());
  EXPECT_TRUE(reply.status().IsInvalid());
  EXPECT_NE(reply.status().message().find("allow_http"), std::string::npos);
}

TEST(HttpRetryTest, DurationsAndFlagsParseAsDeltaRsWritesThem) {
  EXPECT_EQ(*ParseDurationMs("timeout", "30s"), 30000);
  EXPECT_EQ(*ParseDurationMs("timeout", "500ms"), 500);
  EXPECT_EQ(*ParseDurationMs("timeout", "2m"), 120000);
  EXPECT_EQ(*ParseDurationMs("timeout", "1.5"), 1500);
  EXPECT_FALSE(ParseDurationMs("timeout", "soon").ok());
  EXPECT_FALSE(ParseDurationMs("timeout", "5 fortnights").ok());
  EXPECT_TRUE(*ParseBoolOption("x", "TRUE"));
  EXPECT_FALSE(*ParseBoolOption("x", "0"));
  EXPECT_FALSE(ParseBoolOption("x", "perhaps").ok());
}

TEST(XmlTest, ParsesNamespacedRepliesIntoATree) {
  ASSERT_OK_AND_ASSIGN(auto root, ParseXml(
      "<?xml version=\"1.0\"?><ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
      "<IsTruncated>true</IsTruncated><Contents><Key>a &amp; b</Key><Size>3</Size></Contents>"
      "<Contents><Key>c</Key></Contents></ListBucketResult>"));
  EXPECT_EQ(root.name, "ListBucketResult");
  EXPECT_EQ(root.ChildText("IsTruncated"), "true");
  ASSERT_EQ(root.Children("Contents").size(), 2u);
  EXPECT_EQ(root.Children("Contents")[0]->ChildText("Key"), "a & b");
  EXPECT_EQ(root.ChildText("Missing"), "");
  EXPECT_FALSE(ParseXml("<a><b></a>").ok());
  EXPECT_FALSE(ParseXml("").ok());
  EXPECT_EQ(XmlEscape("<a&'\">"), "&lt;a&amp;&apos;&quot;&gt;");
}

}  // namespace
}  // namespace timelake::testing
