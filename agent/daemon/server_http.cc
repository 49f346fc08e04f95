// The only translation unit that includes Boost.Beast (heavy headers).
#include "agent/daemon/server_http.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

// Beast's string_view as std::string_view (header-only: this TU only).
#define BOOST_BEAST_USE_STD_STRING_VIEW
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "core/log.h"
#include "core/strings.h"

namespace trainq {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

namespace {

constexpr std::size_t kHeaderLimit = 64 * 1024;
constexpr int kIoTimeoutS = 30;  // a connection silent this long mid-request is closed

HttpServerReply Refusal(int status, const std::string& reason) {
  std::string body = R"({"result":"error","reason":")" + reason + "\"}\n";
  return {status, "application/json", body};
}

HttpServerReply SafeCall(const HttpListener::Handler& handler, const HttpServerRequest& r) {
  try {
    return handler(r);
  } catch (const std::exception& e) {
    spdlog::error("HTTP {} {}: {}", LogSafe(r.method), LogSafe(r.path), e.what());
    return Refusal(500, "internal error");
  }
}

bool HasControlCharacter(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) {
    return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
  });
}

// The target's path, without the query, %XX decoded.
std::string DecodePath(std::string_view target) {
  return UrlDecode(target.substr(0, target.find('?')));
}

// The query's name=value pairs in order, %XX decoded; a name may repeat.
std::vector<std::pair<std::string, std::string>> DecodeQuery(std::string_view target) {
  std::vector<std::pair<std::string, std::string>> out;
  auto q = target.find('?');
  if (q == std::string_view::npos) return out;
  for (const auto& part : Split(target.substr(q + 1), '&')) {
    if (part.empty()) continue;
    auto eq = part.find('=');
    out.emplace_back(UrlDecode(part.substr(0, eq)),
                     eq == std::string::npos ? std::string() : UrlDecode(part.substr(eq + 1)));
  }
  return out;
}

}  // namespace

bool ListenAddress::loopback() const {
  return host == "localhost" || host == "::1" || host.starts_with("127.");
}

Result<ListenAddress> ParseListenAddress(const std::string& text) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) {
    return Fail(ErrorKind::kInvalidArgument,
                "--listen: expected HOST:PORT such as 127.0.0.1:8080, got \"" + text + "\"");
  }
  ListenAddress a;
  a.host = text.substr(0, colon);
  if (a.host.size() > 2 && a.host.front() == '[' && a.host.back() == ']') {
    a.host = a.host.substr(1, a.host.size() - 2);
  }
  std::string port = text.substr(colon + 1);
  for (char c : port) {
    if (!std::isdigit(static_cast<unsigned char>(c))) {
      return Fail(ErrorKind::kInvalidArgument,
                  "--listen: port must be a number, got \"" + port + "\"");
    }
  }
  a.port = std::stoi(port.substr(0, 6));
  if (a.port < 1 || a.port > 65535) {
    return Fail(ErrorKind::kInvalidArgument, "--listen: port out of range: " + port);
  }
  return a;
}

namespace {

std::int64_t AtRateMs(std::size_t bytes, std::size_t rate) {
  rate = std::max<std::size_t>(1, rate);
  return static_cast<std::int64_t>(bytes / rate * 1000 + bytes % rate * 1000 / rate);
}

}  // namespace

std::int64_t TransferDeadlineMs(const ListenerLimits& limits, std::size_t bytes) {
  return limits.body_timeout_ms + AtRateMs(bytes, limits.min_rate);
}

std::int64_t AnonymousBodyDueMs(const ListenerLimits& limits, std::size_t bytes) {
  return limits.anonymous_grace_ms + AtRateMs(bytes, limits.min_anonymous_rate);
}

// Shared by the accept thread and every connection's thread, so that a
// connection still finishing after Stop() gave up waiting never touches freed
// memory.
struct HttpListener::Impl {
  int listen_fd = -1;
  std::thread accept_thread;
  Handler handler;
  Admit admit;
  std::size_t max_body_bytes = 0;
  ListenerLimits limits;

  struct Conn {
    int fd = -1;
    std::string address;     // the peer's, numeric
    bool evictable = true;   // not inside a trusted request or a handler
    bool evicted = false;    // shut down to make room; its thread is ending
  };

  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  bool stopping = false;
  std::map<std::uint64_t, Conn> conns;  // by accept order: the first is the oldest
  std::uint64_t next_conn = 0;
  int live = 0;                // conns not evicted
  std::uint64_t evictions = 0;
  // Request bodies received and not yet answered (bytes), by budget.
  std::size_t trusted_bytes = 0;
  std::size_t anonymous_bytes = 0;
  std::map<std::string, std::size_t> anonymous_by_address;  // only addresses holding some
  std::uint64_t trusted_refusals = 0;
  std::uint64_t anonymous_refusals = 0;
  std::uint64_t anonymous_cut = 0;
  std::optional<std::chrono::steady_clock::time_point> trusted_refused_at;

  void AcceptLoop(const std::shared_ptr<Impl>& self);
  void Serve(int fd, std::uint64_t id);
  // Takes `n` more bytes of a body from its budget; false (and counted as a
  // refusal) when they do not fit.
  bool Draw(bool trusted, const std::string& address, std::size_t n) {
    std::lock_guard lock(mu);
    if (trusted) {
      if (trusted_bytes + n > limits.max_trusted_body_bytes) {
        ++trusted_refusals;
        trusted_refused_at = std::chrono::steady_clock::now();
        return false;
      }
      trusted_bytes += n;
      return true;
    }
    std::size_t& mine = anonymous_by_address[address];
    if (anonymous_bytes + n > limits.max_anonymous_body_bytes ||
        mine + n > limits.max_anonymous_per_address) {
      if (mine == 0) anonymous_by_address.erase(address);
      ++anonymous_refusals;
      return false;
    }
    mine += n;
    anonymous_bytes += n;
    return true;
  }
  void Return(bool trusted, const std::string& address, std::size_t n) {
    if (n == 0) return;
    std::lock_guard lock(mu);
    if (trusted) {
      trusted_bytes -= n;
      return;
    }
    anonymous_bytes -= n;
    auto it = anonymous_by_address.find(address);
    if (it != anonymous_by_address.end() && (it->second -= n) == 0) {
      anonymous_by_address.erase(it);
    }
  }
  void SetEvictable(std::uint64_t id, bool evictable) {
    std::lock_guard lock(mu);
    if (auto it = conns.find(id); it != conns.end()) it->second.evictable = evictable;
  }
  // The oldest evictable connection (of `address` when given) is shut down;
  // false when there is none. Under mu.
  bool EvictOldest(const std::string* address) {
    for (auto& [id, c] : conns) {
      if (!c.evictable || c.evicted || (address && c.address != *address)) continue;
      c.evicted = true;
      --live;
      ++evictions;
      ::shutdown(c.fd, SHUT_RDWR);
      return true;
    }
    return false;
  }
};

namespace {

// A connected socket as Beast's SyncReadStream and SyncWriteStream, where
// every read and write waits at most kIoTimeoutS (a client that stops
// sending mid-request, or never reads its reply, frees its thread).
class TimedSocket {
 public:
  using Time = std::chrono::steady_clock::time_point;
  explicit TimedSocket(int fd) : fd_(fd) {}
  int fd() const { return fd_; }
  // Every read and write from now on ends by `deadline` (a whole request's,
  // not a per-read limit: a byte every few seconds does not extend it).
  void SetDeadline(Time deadline) { deadline_ = deadline; }
  // Waits until the peer sent something (or closed), by the deadline.
  bool WaitReadable() {
    beast::error_code ec;
    return Wait(POLLIN, ec);
  }

  template <class Buffers>
  std::size_t read_some(const Buffers& buffers, beast::error_code& ec) {
    for (auto it = asio::buffer_sequence_begin(buffers); it != asio::buffer_sequence_end(buffers);
         ++it) {
      asio::mutable_buffer b = *it;
      if (b.size() == 0) continue;
      if (!Wait(POLLIN, ec)) return 0;
      ssize_t n;
      do {
        n = ::recv(fd_, b.data(), b.size(), 0);
      } while (n < 0 && errno == EINTR);
      if (n == 0) {
        ec = asio::error::eof;
        return 0;
      }
      if (n < 0) {
        ec = beast::error_code(errno, boost::system::system_category());
        return 0;
      }
      ec = {};
      return static_cast<std::size_t>(n);
    }
    ec = {};
    return 0;
  }
  template <class Buffers>
  std::size_t read_some(const Buffers& buffers) {
    beast::error_code ec;
    auto n = read_some(buffers, ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }
  template <class Buffers>
  std::size_t write_some(const Buffers& buffers, beast::error_code& ec) {
    iovec iov[16];
    int count = 0;
    for (auto it = asio::buffer_sequence_begin(buffers);
         it != asio::buffer_sequence_end(buffers) && count < 16; ++it) {
      asio::const_buffer b = *it;
      if (b.size() == 0) continue;
      iov[count].iov_base = const_cast<void*>(b.data());
      iov[count].iov_len = b.size();
      ++count;
    }
    if (count == 0) {
      ec = {};
      return 0;
    }
    if (!Wait(POLLOUT, ec)) return 0;
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = static_cast<std::size_t>(count);
    ssize_t n;
    do {
      n = ::sendmsg(fd_, &m, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
      ec = beast::error_code(errno, boost::system::system_category());
      return 0;
    }
    ec = {};
    return static_cast<std::size_t>(n);
  }
  template <class Buffers>
  std::size_t write_some(const Buffers& buffers) {
    beast::error_code ec;
    auto n = write_some(buffers, ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }

 private:
  bool Wait(short events, beast::error_code& ec) {
    pollfd p{fd_, events, 0};
    int r;
    do {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                      deadline_ - std::chrono::steady_clock::now())
                      .count();
      if (left <= 0) {
        r = 0;
        break;
      }
      r = ::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(left, kIoTimeoutS * 1000)));
    } while (r < 0 && errno == EINTR);
    if (r == 0) {
      ec = asio::error::timed_out;
      return false;
    }
    if (r < 0) {
      ec = beast::error_code(errno, boost::system::system_category());
      return false;
    }
    return true;
  }
  int fd_;
  Time deadline_ = std::chrono::steady_clock::now() + std::chrono::seconds(kIoTimeoutS);
};

void Write(TimedSocket& socket, const HttpServerReply& reply, unsigned version, bool keep_alive,
           beast::error_code& ec) {
  bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(reply.status), version};
  res.set(bhttp::field::content_type, reply.content_type);
  for (const auto& [name, value] : reply.headers) res.insert(name, value);
  res.body() = reply.body;
  res.keep_alive(keep_alive);
  res.prepare_payload();
  bhttp::write(socket, res, ec);
}

// After a reply that refused a body we did not read: stop sending, then
// swallow what the client still sends for a moment (at most 1 s, 4 MB), so
// that closing with unread bytes (a TCP reset) does not destroy the reply.
void Linger(int fd) {
  ::shutdown(fd, SHUT_WR);
  char buf[16384];
  std::size_t total = 0;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (total < (4u << 20)) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    until - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) break;
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    total += static_cast<std::size_t>(n);
  }
}

}  // namespace

namespace {

std::string PeerAddress(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = {0};
  if (a.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, host, sizeof host);
  } else if (a.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(a).sin6_addr, host, sizeof host);
  }
  return host;
}

}  // namespace

void HttpListener::Impl::AcceptLoop(const std::shared_ptr<Impl>& self) {
  std::uint64_t told_evictions = 0, told_trusted = 0, told_anonymous = 0, told_cut = 0;
  auto told_at = std::chrono::steady_clock::now();
  for (;;) {
    pollfd p{listen_fd, POLLIN, 0};
    int r = ::poll(&p, 1, 200);
    {
      std::lock_guard lock(mu);
      if (stopping) return;
      // One line a minute at most about connections closed to make room.
      auto now = std::chrono::steady_clock::now();
      if (now - told_at > std::chrono::seconds(60)) {
        if (evictions > told_evictions) {
          spdlog::warn("HTTP listener: {} slow or idle connection(s) closed to make room for new "
                       "ones ({} open; limits: {} in all, {} evictable per address)",
                       evictions - told_evictions, live, limits.max_connections,
                       limits.max_per_address);
        }
        if (trusted_refusals > told_trusted || anonymous_refusals > told_anonymous ||
            anonymous_cut > told_cut) {
          spdlog::warn("HTTP listener: request bodies refused for lack of memory budget: {} of "
                       "workers or token holders (budget {} MB), {} anonymous (budget {} MB, {} "
                       "MB per address); {} anonymous bodies cut for falling behind {} kB/s",
                       trusted_refusals - told_trusted, limits.max_trusted_body_bytes >> 20,
                       anonymous_refusals - told_anonymous, limits.max_anonymous_body_bytes >> 20,
                       limits.max_anonymous_per_address >> 20, anonymous_cut - told_cut,
                       limits.min_anonymous_rate >> 10);
        }
        told_evictions = evictions;
        told_trusted = trusted_refusals;
        told_anonymous = anonymous_refusals;
        told_cut = anonymous_cut;
        told_at = now;
      }
    }
    if (r <= 0) continue;
    sockaddr_storage peer{};
    socklen_t peer_len = sizeof peer;
    int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&peer), &peer_len, SOCK_CLOEXEC);
    if (fd < 0) {
      // EMFILE and friends: the next accept may work once a connection ends.
      if (errno != EINTR && errno != EAGAIN) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      continue;
    }
    std::uint64_t id = 0;
    {
      std::lock_guard lock(mu);
      std::string address = PeerAddress(peer);
      int same = 0;
      for (const auto& [cid, c] : conns) {
        if (c.evictable && !c.evicted && c.address == address) ++same;
      }
      if (same >= limits.max_per_address) EvictOldest(&address);
      if (live >= limits.max_connections && !EvictOldest(nullptr)) {
        ::close(fd);  // every connection is inside a trusted request or a handler
        continue;
      }
      id = next_conn++;
      conns[id] = Conn{fd, std::move(address)};
      ++live;
    }
    auto done = [self, fd, id] {
      {
        std::lock_guard lock(self->mu);
        auto it = self->conns.find(id);
        if (it != self->conns.end()) {
          if (!it->second.evicted) --self->live;
          self->conns.erase(it);  // before close: Stop() never shuts down a reused number
        }
      }
      ::close(fd);
      std::lock_guard lock(self->mu);
      if (self->conns.empty()) self->cv.notify_all();
    };
    try {
      std::thread([self, fd, id, done] {
        self->Serve(fd, id);
        done();
      }).detach();
    } catch (const std::system_error& e) {
      spdlog::warn("HTTP listener: cannot start a thread for a connection: {}", e.what());
      done();
    }
  }
}

// One connection, request after request (keep-alive). Bodies are read only
// after the headers were admitted, and never past the route's limit.
void HttpListener::Impl::Serve(int fd, std::uint64_t id) {
  using Clock = std::chrono::steady_clock;
  using Ms = std::chrono::milliseconds;
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  TimedSocket socket(fd);
  beast::flat_buffer buffer;
  std::string address;
  {
    std::lock_guard lock(mu);
    if (auto it = conns.find(id); it != conns.end()) address = it->second.address;
  }
  // The first request's header is due header_timeout after the accept.
  socket.SetDeadline(Clock::now() + Ms(limits.header_timeout_ms));
  for (bool first = true;; first = false) {
    beast::error_code ec;
    SetEvictable(id, true);
    if (!first) {
      // Keep-alive: the next request starts within idle_timeout, and its
      // header is due header_timeout after it started.
      if (buffer.size() == 0) {
        socket.SetDeadline(Clock::now() + Ms(limits.idle_timeout_ms));
        if (!socket.WaitReadable()) return;
      }
      socket.SetDeadline(Clock::now() + Ms(limits.header_timeout_ms));
    }
    bhttp::request_parser<bhttp::empty_body> head_parser;
    head_parser.header_limit(kHeaderLimit);
    head_parser.body_limit(std::numeric_limits<std::uint64_t>::max());  // ours, below
    bhttp::read_header(socket, buffer, head_parser, ec);
    if (ec) {
      if (ec != bhttp::error::end_of_stream && ec != asio::error::eof &&
          ec != asio::error::connection_reset && ec != asio::error::would_block &&
          ec != asio::error::try_again && ec != asio::error::timed_out &&
          ec != asio::error::bad_descriptor && ec != asio::error::not_connected &&
          ec != asio::error::shut_down && ec != asio::error::broken_pipe) {
        beast::error_code ignored;
        socket.SetDeadline(Clock::now() + Ms(limits.body_timeout_ms));
        Write(socket, Refusal(ec == bhttp::error::header_limit ? 431 : 400, "malformed request"),
              11, false, ignored);
        Linger(fd);
      }
      return;
    }
    const auto& msg = head_parser.get();
    HttpServerRequest req;
    req.method = std::string(msg.method_string());
    req.path = DecodePath(msg.target());
    if (HasControlCharacter(req.path)) {
      // Before anything else: no route, log line or header ever sees a CR,
      // LF or other control character of a path (issue 36, F7/F8).
      socket.SetDeadline(Clock::now() + Ms(limits.body_timeout_ms));
      Write(socket, Refusal(400, "control characters in the request path"), msg.version(), false,
            ec);
      Linger(fd);
      return;
    }
    req.query = DecodeQuery(msg.target());
    req.peer = address;
    for (const auto& f : msg) req.headers.emplace_back(f.name_string(), f.value());
    unsigned version = msg.version();
    bool keep_alive = msg.keep_alive();
    bool expect_continue = beast::iequals(msg[bhttp::field::expect], "100-continue");

    Admission admission;
    admission.max_body_bytes = max_body_bytes;
    if (admit) {
      try {
        admission = admit(req);
      } catch (const std::exception& e) {
        admission.refuse = Refusal(500, "internal error");
        spdlog::error("HTTP {} {}: {}", LogSafe(req.method), LogSafe(req.path), e.what());
      }
      admission.max_body_bytes = std::min(admission.max_body_bytes, max_body_bytes);
    }
    if (admission.trusted) SetEvictable(id, false);
    auto reply_deadline = [&](const HttpServerReply& r) {
      socket.SetDeadline(Clock::now() + Ms(TransferDeadlineMs(limits, r.body.size())));
    };
    auto length = head_parser.content_length();
    bool has_body = head_parser.chunked() || (length && *length > 0);
    HttpServerReply reply;
    bool read_body = false;
    if (admission.refuse) {
      reply = *admission.refuse;  // refused from the headers (no or a wrong token)
    } else if (head_parser.chunked()) {
      // Unbounded bodies are refused: forges and workers send Content-Length.
      reply = Refusal(411, "Content-Length required");
    } else if (length && *length > admission.max_body_bytes) {
      req.body_too_large = true;  // refused from the header; the body is never read
      reply = SafeCall(handler, req);
    } else {
      read_body = true;
    }
    if (!read_body) {
      reply_deadline(reply);
      Write(socket, reply, version, false, ec);
      if (has_body) Linger(fd);
      return;
    }

    std::size_t n = length.value_or(0);
    if (n == 0) {
      SetEvictable(id, false);  // inside the handler
      reply = SafeCall(handler, req);
      // An anonymous client that does not read its reply makes room too.
      if (!admission.trusted) SetEvictable(id, true);
      reply_deadline(reply);
      Write(socket, reply, version, keep_alive, ec);
      if (ec || !keep_alive) return;
      std::lock_guard lock(mu);
      if (stopping) return;
      continue;
    }
    // The whole body is due by its deadline, however it trickles in; an
    // anonymous one also byte by byte at an average pace (AnonymousBodyDueMs).
    const bool trusted = admission.trusted;
    const auto body_start = Clock::now();
    const auto whole =
        body_start + Ms(trusted ? TransferDeadlineMs(limits, n)
                                : std::min(TransferDeadlineMs(limits, n),
                                           AnonymousBodyDueMs(limits, n)));
    socket.SetDeadline(whole);
    // What this body drew from its budget, returned once it is answered.
    struct Held {
      Impl* impl;
      bool trusted;
      const std::string& address;
      std::size_t n = 0;
      ~Held() { impl->Return(trusted, address, n); }
    } held{this, trusted, address};
    if (expect_continue) {
      static const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
      asio::write(socket, asio::buffer(kContinue, sizeof kContinue - 1), ec);
      if (ec) return;
    }
    bhttp::request_parser<bhttp::buffer_body> parser(std::move(head_parser));
    parser.body_limit(admission.max_body_bytes);
    std::string body;
    body.reserve(std::min<std::size_t>(n, 64u << 10));
    std::array<char, 64 * 1024> chunk;
    bool over_budget = false;
    while (!parser.is_done()) {
      if (!trusted) {
        socket.SetDeadline(
            std::min(whole, body_start + Ms(AnonymousBodyDueMs(limits, body.size() + 1))));
      }
      parser.get().body().data = chunk.data();
      parser.get().body().size = chunk.size();
      bhttp::read_some(socket, buffer, parser, ec);
      if (ec == bhttp::error::need_buffer) ec = {};
      std::size_t got = chunk.size() - parser.get().body().size;
      if (got > 0) {
        if (!Draw(trusted, address, got)) {
          over_budget = true;
          break;
        }
        held.n += got;
        if (body.capacity() < body.size() + got) {  // grow, but never past the declared size
          body.reserve(std::min(n, std::max(body.size() + got, body.capacity() * 2)));
        }
        body.append(chunk.data(), got);
      }
      if (ec) break;
    }
    if (over_budget) {
      // Counted as received: what this request already holds is returned
      // when it ends, and the client is told to come back.
      auto busy = Refusal(503, "too many request bodies at once; retry");
      reply_deadline(busy);
      Write(socket, busy, version, false, ec);
      Linger(fd);
      return;
    }
    if (ec) {
      if (ec == bhttp::error::body_limit) {
        req.body_too_large = true;
        auto too_large = SafeCall(handler, req);
        reply_deadline(too_large);
        Write(socket, too_large, version, false, ec);
        Linger(fd);
      } else if (ec == asio::error::timed_out && !trusted) {
        std::lock_guard lock(mu);
        ++anonymous_cut;
      }
      return;  // the client went away or stalled mid-body
    }
    req.body = std::move(body);
    SetEvictable(id, false);  // inside the handler
    reply = SafeCall(handler, req);
    if (!admission.trusted) SetEvictable(id, true);
    req.body.clear();
    req.body.shrink_to_fit();
    reply_deadline(reply);
    Write(socket, reply, version, keep_alive, ec);
    if (ec || !keep_alive) return;
    std::lock_guard lock(mu);
    if (stopping) return;
  }
}

HttpListener::HttpListener(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

ListenerStats HttpListener::Stats() const {
  std::lock_guard lock(impl_->mu);
  ListenerStats s;
  s.trusted_body_bytes = impl_->trusted_bytes;
  s.anonymous_body_bytes = impl_->anonymous_bytes;
  s.trusted_refusals = impl_->trusted_refusals;
  s.anonymous_refusals = impl_->anonymous_refusals;
  s.anonymous_cut = impl_->anonymous_cut;
  if (impl_->trusted_refused_at) {
    s.ms_since_trusted_refusal = std::chrono::duration_cast<std::chrono::milliseconds>(
                                     std::chrono::steady_clock::now() - *impl_->trusted_refused_at)
                                     .count();
  }
  return s;
}

HttpListener::~HttpListener() { Stop(); }

Result<std::unique_ptr<HttpListener>> HttpListener::Start(const ListenAddress& address,
                                                          std::size_t max_body_bytes,
                                                          Handler handler, Admit admit,
                                                          ListenerLimits limits) {
  auto impl = std::make_shared<Impl>();
  impl->handler = std::move(handler);
  impl->admit = std::move(admit);
  impl->max_body_bytes = max_body_bytes;
  impl->limits = limits;
  auto fail = [&](const std::string& what) {
    return Fail(ErrorKind::kUnavailable,
                "--listen " + address.host + ":" + std::to_string(address.port) + ": " + what);
  };
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  int gai =
      ::getaddrinfo(address.host.c_str(), std::to_string(address.port).c_str(), &hints, &found);
  if (gai != 0 || !found) return fail("cannot resolve " + address.host + ": " + gai_strerror(gai));
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> guard(found, ::freeaddrinfo);
  // Close-on-exec from the start: a child never holds our port.
  int fd = ::socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, found->ai_protocol);
  if (fd < 0) return fail(std::string("socket: ") + std::strerror(errno));
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd, found->ai_addr, found->ai_addrlen) != 0) {
    int e = errno;
    ::close(fd);
    return fail(std::string("bind: ") + std::strerror(e));
  }
  if (::listen(fd, 1024) != 0) {
    int e = errno;
    ::close(fd);
    return fail(std::string("listen: ") + std::strerror(e));
  }
  impl->listen_fd = fd;
  impl->open = true;
  impl->accept_thread = std::thread([impl] { impl->AcceptLoop(impl); });
  return std::unique_ptr<HttpListener>(new HttpListener(impl));
}

void HttpListener::Stop() {
  if (!impl_) return;
  {
    std::lock_guard lock(impl_->mu);
    if (!impl_->open) return;
    impl_->open = false;
    impl_->stopping = true;
  }
  if (impl_->accept_thread.joinable()) impl_->accept_thread.join();  // within 200 ms
  ::close(impl_->listen_fd);
  impl_->listen_fd = -1;
  std::unique_lock lock(impl_->mu);
  // Connections waiting for a next request end now; a handler under way
  // finishes (its reply may not reach the client).
  for (const auto& [id, c] : impl_->conns) ::shutdown(c.fd, SHUT_RD);
  if (!impl_->cv.wait_for(lock, std::chrono::seconds(30),
                          [&] { return impl_->conns.empty(); })) {
    spdlog::warn("closing the HTTP listener: requests still being handled after 30 s");
  }
}

}  // namespace trainq
