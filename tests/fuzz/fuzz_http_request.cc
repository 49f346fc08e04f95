// The HTTP listener of `trainq serve` (agent/daemon/server_http.h) over a real
// loopback connection: each input is the bytes a client sends before it stops
// sending. Anyone who can reach serve's port sends these bytes, before any
// token is checked. Whatever they are, the listener answers with an HTTP
// status line or closes, within its whole-request deadlines (a hang past them
// aborts), and never reads a body past the route's limit.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "agent/daemon/server_http.h"

namespace {

int StartListener() {
  using namespace trainq;
  ListenerLimits limits;
  limits.max_trusted_body_bytes = 64 * 1024;
  limits.max_anonymous_body_bytes = 64 * 1024;
  limits.max_anonymous_per_address = 48 * 1024;
  limits.anonymous_grace_ms = 300;
  limits.max_connections = 16;
  limits.max_per_address = 8;
  limits.header_timeout_ms = 300;
  limits.idle_timeout_ms = 300;
  limits.body_timeout_ms = 300;
  for (int port = 39000 + getpid() % 1000; port < 65000; port += 997) {
    auto l = HttpListener::Start(
        {"127.0.0.1", port}, 32 * 1024,
        [](const HttpServerRequest& r) {
          if (r.body_too_large) return HttpServerReply{413, "text/plain", "too large\n"};
          return HttpServerReply{200, "text/plain", std::to_string(r.body.size()) + "\n"};
        },
        [](const HttpServerRequest& h) {
          Admission a;
          a.max_body_bytes = h.path.starts_with("/hooks/") ? 16 * 1024 : 1024;
          for (const auto& [k, v] : h.headers) {
            if (k == "Authorization" && v == "Bearer good") a.trusted = true;
            if (k == "Authorization" && v == "Bearer bad") {
              a.refuse = HttpServerReply{401, "application/json", "{}\n"};
            }
          }
          return a;
        },
        limits);
    if (l) {
      static std::unique_ptr<HttpListener> keep = std::move(*l);
      return port;
    }
  }
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const int port = StartListener();
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // Thousands of connections a second can briefly leave the kernel without a
  // free local port or backlog slot (EADDRNOTAVAIL, ECONNREFUSED): that is
  // the loopback's limit, not the listener's, so connecting is retried for up
  // to 2 s. A listener that stays unreachable still aborts.
  int fd = -1;
  auto connect_until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (;;) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) break;
    if (fd >= 0) ::close(fd);
    if (std::chrono::steady_clock::now() >= connect_until) std::abort();
    ::usleep(10'000);
  }
  std::size_t sent = 0;
  while (sent < size) {
    ssize_t n = ::send(fd, data + sent, size - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server answered and closed early: fine
    sent += static_cast<std::size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  std::string reply;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    until - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) std::abort();  // past every deadline of the listener: a hang
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    char buf[4096];
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    if (reply.size() < 64 * 1024) reply.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  // Whatever came back is HTTP (an interim 100 Continue included).
  if (!reply.empty() && !reply.starts_with("HTTP/1.1 ") && !reply.starts_with("HTTP/1.0 ")) {
    std::abort();
  }
  return 0;
}
