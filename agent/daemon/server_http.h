// The HTTP listener of `trainq serve`: Boost.Beast's HTTP/1.1 parser on our
// own sockets (a thread per connection), behind plain structs, so that
// nothing else includes Beast headers and the routing (agent/daemon/server.h) is
// testable without sockets. Request bodies are bounded while they are read:
// the headers are admitted first (Admit: a per-route limit, or a refusal
// such as a missing token), a Content-Length over the limit is refused
// without reading the body, chunked bodies are refused (411), and the bodies
// being read or handled at once are held within memory budgets counted in
// bytes received, not declared (issue 36): trusted requests (Admission::
// trusted: a worker's, a read or admin token's, a GitLab webhook whose token
// matched) have a budget of their own; anonymous ones share another, of which
// one peer address may hold only a part. An anonymous body must also keep an
// average pace (min_anonymous_rate after a short grace), so a trickle of a
// byte every few seconds is cut within seconds, however large it declared to
// be.
//
// Slow and many clients (issue 25): every request has a whole-request
// deadline (headers within header_timeout of their first byte, the body within
// body_timeout plus its size at min_rate, the reply likewise), a keep-alive
// connection idle for idle_timeout is closed, and connections (each one
// thread) are capped. Capacity is kept for the machines and /healthz by
// eviction rather than by refusal: a connection that is not in the middle of
// an authenticated request (Admission::trusted: a worker's token checked from
// its headers) is evictable while it waits for headers, idles between
// requests or sends an anonymous body; a new connection that finds the cap
// reached, or its address over max_per_address evictable connections, closes
// the oldest evictable one (of its address first). So a flood of slow
// anonymous connections only ever evicts itself, and a worker, whose headers
// arrive at once, is served.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/http_client.h"
#include "core/result.h"

namespace trainq {

struct HttpServerRequest {
  std::string method;  // GET, POST, ...
  std::string path;    // /hooks/github (no query)
  HttpHeaders headers;
  std::string body;
  bool body_too_large = false;  // the body was over the limit and not read
  // Admit's call: the headers only; a route answers with status 0 when the
  // checks that need no body (route, method, token) pass.
  bool headers_only = false;
  // The query string's parameters in order, percent-decoded; a name may
  // repeat (?experiment=a&experiment=b).
  std::vector<std::pair<std::string, std::string>> query = {};
  std::string peer = {};  // the client's address, numeric ("127.0.0.1"; the audit trail's "from")
};

struct HttpServerReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  HttpHeaders headers = {};  // more response headers (Set-Cookie, Location, Cache-Control)
};

// "127.0.0.1:8080" -> host and port. kInvalidArgument names the flag.
struct ListenAddress {
  std::string host;
  int port = 0;
  bool loopback() const;
};
Result<ListenAddress> ParseListenAddress(const std::string& text);

// What the listener asks with a request's headers, before reading any body.
struct Admission {
  std::size_t max_body_bytes = 0;         // this route's limit (capped by Start's)
  std::optional<HttpServerReply> refuse;  // set: the answer, and the body is never read
  // The headers carry a valid credential (a worker's token, the read or
  // admin token, a verified webhook token): the request is never evicted to
  // make room for another connection, and its body draws from the trusted
  // budget.
  bool trusted = false;
};

struct ListenerLimits {
  // Bytes of request bodies received and not yet answered, counted as they
  // arrive. A request whose next bytes would go over its budget is answered
  // 503 and closed. Trusted requests have their own budget, anonymous ones
  // share theirs, and one peer address holds at most max_anonymous_per_address
  // of it (a webhook of 25 MB from one address still fits).
  std::size_t max_trusted_body_bytes = 128u << 20;
  std::size_t max_anonymous_body_bytes = 64u << 20;
  std::size_t max_anonymous_per_address = 32u << 20;
  // Connections (threads) at once; a new one over the cap evicts the oldest
  // evictable connection, or is closed when none is.
  int max_connections = 1024;
  // Evictable connections (waiting for headers, idle, anonymous bodies) of
  // one peer address; a new one over it evicts that address's oldest.
  int max_per_address = 128;
  int header_timeout_ms = 10'000;  // first byte of a request -> its whole header
  int idle_timeout_ms = 30'000;    // a keep-alive connection between requests
  int body_timeout_ms = 30'000;    // plus the body's size at min_rate
  std::size_t min_rate = 64 * 1024;  // bytes per second a body or reply must keep up
  // An anonymous body: byte k is due anonymous_grace_ms + k at
  // min_anonymous_rate after the body started (an average pace, which a
  // trickle cannot stretch), and the whole of it by the same rule (or by
  // the one above, when that is sooner).
  int anonymous_grace_ms = 10'000;
  std::size_t min_anonymous_rate = 256 * 1024;
};

// The whole-request deadline of a body or reply of `bytes` (ms).
std::int64_t TransferDeadlineMs(const ListenerLimits& limits, std::size_t bytes);
// When the first `bytes` of an anonymous body are due, from its start (ms).
std::int64_t AnonymousBodyDueMs(const ListenerLimits& limits, std::size_t bytes);

// What the listener has held and refused, for /healthz and /metrics.
struct ListenerStats {
  std::size_t trusted_body_bytes = 0;    // held now
  std::size_t anonymous_body_bytes = 0;  // held now
  std::uint64_t trusted_refusals = 0;    // trusted requests refused for the budget, since start
  std::uint64_t anonymous_refusals = 0;  // anonymous ones refused for theirs (or their address's)
  std::uint64_t anonymous_cut = 0;       // anonymous bodies cut for falling behind their pace
  // Milliseconds since the last trusted refusal; -1 when there was none.
  std::int64_t ms_since_trusted_refusal = -1;
};

class HttpListener {
 public:
  using Handler = std::function<HttpServerReply(const HttpServerRequest&)>;
  using Admit = std::function<Admission(const HttpServerRequest& head)>;
  // Binds (close-on-exec) and starts serving; `handler` is called from
  // several threads at once, once the whole body has arrived. `admit` (when
  // given) sees the headers first. A Content-Length over the limit is answered
  // by the handler with body_too_large set, without reading the body; a
  // chunked body is refused with 411. A connection silent for 30 s
  // mid-request is closed.
  static Result<std::unique_ptr<HttpListener>> Start(const ListenAddress& address,
                                                     std::size_t max_body_bytes, Handler handler,
                                                     Admit admit = {}, ListenerLimits limits = {});
  ~HttpListener();  // stops
  // Stops accepting, ends idle connections and waits (30 s at most) for the
  // handlers under way: no handler runs after Stop returns.
  void Stop();
  // Thread-safe; may be called from a handler.
  ListenerStats Stats() const;

 private:
  struct Impl;
  explicit HttpListener(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace trainq
