#include "tests/support/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <stdexcept>

namespace trainq::testing {

namespace {

int BindLoopback(int port, int backlog) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("socket failed");
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(fd, backlog) != 0) {
    ::close(fd);
    throw std::runtime_error(std::string("bind/listen failed: ") + std::strerror(errno));
  }
  return fd;
}

int PortOf(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return ntohs(addr.sin_port);
}

std::string Lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

const char* Reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Status";
  }
}

}  // namespace

std::string TestHttpRequest::Header(const std::string& name) const {
  for (const auto& [k, v] : headers) {
    if (Lower(k) == Lower(name)) return v;
  }
  return "";
}

TestHttpServer::TestHttpServer(Handler handler, int port) : handler_(std::move(handler)) {
  listen_fd_ = BindLoopback(port, 64);
  port_ = PortOf(listen_fd_);
  if (::pipe2(wake_, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  thread_ = std::thread([this] { Serve(); });
}

TestHttpServer::~TestHttpServer() {
  char c = 'x';
  (void)!::write(wake_[1], &c, 1);
  thread_.join();
  ::close(listen_fd_);
  ::close(wake_[0]);
  ::close(wake_[1]);
}

std::vector<TestHttpRequest> TestHttpServer::requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requests_;
}

void TestHttpServer::SetHandler(Handler handler) {
  std::lock_guard<std::mutex> lock(mu_);
  handler_ = std::move(handler);
}

void TestHttpServer::Serve() {
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents) return;
    if (fds[0].revents & POLLIN) {
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) {
        HandleConnection(fd);
        ::close(fd);
      }
    }
  }
}

void TestHttpServer::HandleConnection(int fd) {
  std::string data;
  char buf[8192];
  auto read_more = [&]() {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 5000) <= 0) return false;
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return false;
    data.append(buf, static_cast<size_t>(n));
    return true;
  };
  // Requests on one connection, one after the other (keep-alive), until the
  // client closes it or asks to.
  while (true) {
    size_t header_end;
    while ((header_end = data.find("\r\n\r\n")) == std::string::npos) {
      if (!read_more()) return;
    }
    TestHttpRequest req;
    std::string head = data.substr(0, header_end);
    size_t line_end = head.find("\r\n");
    std::string request_line = head.substr(0, line_end);
    auto sp1 = request_line.find(' ');
    auto sp2 = request_line.find(' ', sp1 + 1);
    req.method = request_line.substr(0, sp1);
    req.target = request_line.substr(sp1 + 1, sp2 - sp1 - 1);
    size_t pos = line_end == std::string::npos ? head.size() : line_end + 2;
    size_t content_length = 0;
    while (pos < head.size()) {
      size_t e = head.find("\r\n", pos);
      if (e == std::string::npos) e = head.size();
      std::string line = head.substr(pos, e - pos);
      auto colon = line.find(':');
      if (colon != std::string::npos) {
        std::string k = line.substr(0, colon);
        std::string v = line.substr(colon + 1);
        while (!v.empty() && v.front() == ' ') v.erase(0, 1);
        if (Lower(k) == "content-length") content_length = std::stoul(v);
        req.headers.emplace_back(k, v);
      }
      pos = e + 2;
    }
    while (data.size() < header_end + 4 + content_length) {
      if (!read_more()) return;
    }
    req.body = data.substr(header_end + 4, content_length);
    data.erase(0, header_end + 4 + content_length);
    bool close = Lower(req.Header("Connection")) == "close";

    Handler handler;
    {
      std::lock_guard<std::mutex> lock(mu_);
      requests_.push_back(req);
      handler = handler_;
    }
    TestHttpResponse resp = handler ? handler(req) : TestHttpResponse{};
    std::string out = "HTTP/1.1 " + std::to_string(resp.status) + " " + Reason(resp.status) +
                      "\r\nContent-Length: " + std::to_string(resp.body.size()) + "\r\n" +
                      (close ? "Connection: close\r\n" : "");
    for (const auto& [k, v] : resp.headers) out += k + ": " + v + "\r\n";
    out += "\r\n" + resp.body;
    size_t sent = 0;
    while (sent < out.size()) {
      ssize_t n = ::write(fd, out.data() + sent, out.size() - sent);
      if (n <= 0) return;
      sent += static_cast<size_t>(n);
    }
    if (close) {
      // Close gracefully: closing with unread input would reset the
      // connection, and the client could lose the response.
      ::shutdown(fd, SHUT_WR);
      pollfd p{fd, POLLIN, 0};
      while (::poll(&p, 1, 1000) > 0 && ::read(fd, buf, sizeof buf) > 0) {
      }
      return;
    }
  }
}

int FreeLoopbackPort() {
  int fd = BindLoopback(0, 1);
  int port = PortOf(fd);
  ::close(fd);
  return port;
}

SilentListener::SilentListener() {
  fd_ = BindLoopback(0, 16);
  port_ = PortOf(fd_);
}

SilentListener::~SilentListener() { ::close(fd_); }

}  // namespace trainq::testing
