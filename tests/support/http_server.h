// A small real HTTP/1.1 server on 127.0.0.1 for tests: fake forges, fake APIs.
// It answers each request with `handler` and records every request it got.
// One connection at a time, kept alive until the client closes it (or sends
// `Connection: close`); a client idle for 5 s is dropped.
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace trainq::testing {

struct TestHttpRequest {
  std::string method;
  std::string target;  // path and query
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string Header(const std::string& name) const;  // case-insensitive; "" when absent
};

struct TestHttpResponse {
  int status = 200;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

class TestHttpServer {
 public:
  using Handler = std::function<TestHttpResponse(const TestHttpRequest&)>;
  // Binds 127.0.0.1 on `port` (0: a free one) and starts serving; a given
  // port brings back a server that was down (FreeLoopbackPort).
  explicit TestHttpServer(Handler handler, int port = 0);
  ~TestHttpServer();
  TestHttpServer(const TestHttpServer&) = delete;
  TestHttpServer& operator=(const TestHttpServer&) = delete;

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<TestHttpRequest> requests() const;
  void SetHandler(Handler handler);

 private:
  void Serve();
  void HandleConnection(int fd);

  mutable std::mutex mu_;
  Handler handler_;
  std::vector<TestHttpRequest> requests_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  int port_ = 0;
  std::thread thread_;
};

// A TCP port on 127.0.0.1 that nothing listens on right now.
int FreeLoopbackPort();

// A listening socket that never accepts: connections hang (for client timeouts).
class SilentListener {
 public:
  SilentListener();
  ~SilentListener();
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace trainq::testing
