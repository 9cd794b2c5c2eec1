// ScriptedServer: an HTTP server on 127.0.0.1 for replies no emulator gives (a lost reply, a
// service's rarer answers): it answers each request with the next scripted reply ("" = close the
// connection unanswered, a reply lost after the request arrived; an empty script answers 200 {})
// and records each request's method and Content-Range.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace timelake::testing {

class ScriptedServer {
 public:
  ScriptedServer() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
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
  std::string base() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::string session() const { return base() + "/upload/session?upload_id=u1"; }

  void Then(std::string reply) {
    std::lock_guard<std::mutex> lock(mutex_);
    script_.push_back(std::move(reply));
  }
  static std::string Reply(int status, const std::string& headers = "",
                           const std::string& body = "{}") {
    return "HTTP/1.1 " + std::to_string(status) + " X\r\n" + headers +
           "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" +
           body;
  }
  // "PUT bytes 0-9/*  (10 bytes)" for each request so far.
  std::vector<std::string> seen() {
    std::lock_guard<std::mutex> lock(mutex_);
    return seen_;
  }

 private:
  void Serve() {
    while (!stop_) {
      const int client = accept(fd_, nullptr, nullptr);
      if (client < 0) break;
      std::string request;
      char buf[65536];
      size_t header_end = std::string::npos;
      int64_t body_size = 0;
      for (;;) {
        if (header_end == std::string::npos) {
          header_end = request.find("\r\n\r\n");
          if (header_end != std::string::npos) {
            body_size = std::atoll(Header(request, "content-length").c_str());
          }
        }
        if (header_end != std::string::npos &&
            static_cast<int64_t>(request.size() - header_end - 4) >= body_size) {
          break;
        }
        const ssize_t n = recv(client, buf, sizeof(buf), 0);
        if (n <= 0) break;
        request.append(buf, static_cast<size_t>(n));
      }
      std::string reply = Reply(200);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        seen_.push_back(request.substr(0, request.find(' ')) + " " +
                        Header(request, "content-range") + " (" + std::to_string(body_size) +
                        " bytes)");
        if (!script_.empty()) {
          reply = script_.front();
          script_.pop_front();
        }
      }
      if (!reply.empty()) send(client, reply.data(), reply.size(), MSG_NOSIGNAL);
      close(client);
    }
  }

  static std::string Header(const std::string& request, const std::string& name) {
    std::string lower = request.substr(0, request.find("\r\n\r\n"));
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    const size_t at = lower.find("\r\n" + name + ":");
    if (at == std::string::npos) return "";
    const size_t start = request.find_first_not_of(' ', at + name.size() + 3);
    return request.substr(start, request.find("\r\n", start) - start);
  }

  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::deque<std::string> script_;
  std::vector<std::string> seen_;
};

}  // namespace timelake::testing
