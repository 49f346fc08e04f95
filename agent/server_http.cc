// The only translation unit that includes cpprest (heavy headers).
#include "agent/server_http.h"

#include <cpprest/http_listener.h>
#include <pplx/threadpool.h>
#include <spdlog/spdlog.h>

#include <cctype>
#include <chrono>
#include <condition_variable>
#include <mutex>

namespace trainq {

namespace http = web::http;
using web::http::experimental::listener::http_listener;
using web::http::experimental::listener::http_listener_config;

namespace {

// cpprest's pool (crossplat::threadpool, 40 threads unless initialised
// first) runs both the socket reads and the handlers. A worker's lease long
// poll holds a thread for up to 20 s, so the pool is 48 threads and the Server
// lets at most 32 polls wait at once (ServerOptions::max_long_polls): 16
// threads always remain for sockets, webhooks and the other routes.
void SizeThreadPool() {
  static std::once_flag once;
  std::call_once(once, [] {
    try {
      crossplat::threadpool::initialize_with_threads(48);
    } catch (const std::exception&) {
      // Already initialised by an earlier use: keep it.
    }
  });
}

// Method, path and headers; the body comes later (ReadBody).
HttpServerRequest Head(const http::http_request& req) {
  HttpServerRequest r;
  r.method = req.method();
  r.path = web::uri::decode(req.relative_uri().path());
  for (const auto& [k, v] : req.headers()) r.headers.emplace_back(k, v);
  return r;
}

void Respond(http::http_request req, HttpServerReply reply) {
  http::http_response resp(static_cast<http::status_code>(reply.status));
  resp.set_body(std::move(reply.body), reply.content_type);
  req.reply(resp).then([](pplx::task<void> t) {
    try {
      t.get();
    } catch (const std::exception&) {
      // The client went away before the answer: nothing to do.
    }
  });
}

HttpServerReply SafeCall(const HttpListener::Handler& handler, const HttpServerRequest& r) {
  try {
    return handler(r);
  } catch (const std::exception& e) {
    spdlog::error("HTTP {} {}: {}", r.method, r.path, e.what());
    return {500, "application/json", R"({"result":"error","reason":"internal error"})"};
  }
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
      return Fail(ErrorKind::kInvalidArgument, "--listen: port must be a number, got \"" + port +
                                                   "\"");
    }
  }
  a.port = std::stoi(port.substr(0, 6));
  if (a.port < 1 || a.port > 65535) {
    return Fail(ErrorKind::kInvalidArgument, "--listen: port out of range: " + port);
  }
  return a;
}

// Requests between arrival and their reply: Stop() waits for them, so that no
// handler runs (and touches the objects it was given) after Stop returns.
struct InFlight {
  std::mutex mu;
  std::condition_variable cv;
  int count = 0;
  void Enter() {
    std::lock_guard lock(mu);
    ++count;
  }
  void Leave() {
    std::lock_guard lock(mu);
    if (--count == 0) cv.notify_all();
  }
  bool WaitIdle(std::chrono::milliseconds deadline) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, deadline, [&] { return count == 0; });
  }
};

struct HttpListener::Impl {
  std::unique_ptr<http_listener> listener;
  bool open = false;
  std::shared_ptr<InFlight> inflight = std::make_shared<InFlight>();
};

HttpListener::HttpListener(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpListener::~HttpListener() { Stop(); }

Result<std::unique_ptr<HttpListener>> HttpListener::Start(const ListenAddress& address,
                                                          std::size_t max_body_bytes,
                                                          Handler handler) {
  SizeThreadPool();
  std::string host = address.host.find(':') != std::string::npos ? "[" + address.host + "]"
                                                                  : address.host;
  std::string url = "http://" + host + ":" + std::to_string(address.port) + "/";
  auto impl = std::make_unique<Impl>();
  try {
    http_listener_config cfg;
    cfg.set_timeout(std::chrono::seconds(30));
    impl->listener = std::make_unique<http_listener>(web::uri(url), cfg);
    // Handlers never block on the body: the pool's threads also do the
    // socket reads, so a handler waiting for its body could starve them all.
    impl->listener->support([handler, max_body_bytes,
                             inflight = impl->inflight](http::http_request req) {
      inflight->Enter();
      struct Leave {
        std::shared_ptr<InFlight> f;
        ~Leave() { f->Leave(); }
      };
      std::shared_ptr<Leave> leave(new Leave{inflight});
      HttpServerRequest head = Head(req);
      const auto& h = req.headers();
      if (h.has(http::header_names::content_length) && h.content_length() > max_body_bytes) {
        head.body_too_large = true;  // refused from the header; the body is never read
        Respond(req, SafeCall(handler, head));
        return;
      }
      if (!h.has(http::header_names::content_length) &&
          h.has(http::header_names::transfer_encoding)) {
        // Unbounded bodies are refused: forges send Content-Length.
        Respond(req, {411, "application/json",
                      R"({"result":"error","reason":"Content-Length required"})"});
        return;
      }
      req.extract_vector().then([req, handler, head = std::move(head), leave](
                                    pplx::task<std::vector<unsigned char>> body) mutable {
        try {
          auto bytes = body.get();
          head.body.assign(bytes.begin(), bytes.end());
        } catch (const std::exception& e) {
          spdlog::warn("HTTP {} {}: reading the body: {}", head.method, head.path, e.what());
          Respond(req, {400, "application/json",
                        R"({"result":"error","reason":"could not read the body"})"});
          return;
        }
        Respond(req, SafeCall(handler, head));
      });
    });
    impl->listener->open().wait();
    impl->open = true;
  } catch (const std::exception& e) {
    return Fail(ErrorKind::kUnavailable, "--listen " + address.host + ":" +
                                             std::to_string(address.port) + ": " + e.what());
  }
  return std::unique_ptr<HttpListener>(new HttpListener(std::move(impl)));
}

void HttpListener::Stop() {
  if (!impl_ || !impl_->open) return;
  impl_->open = false;
  try {
    impl_->listener->close().wait();
  } catch (const std::exception& e) {
    spdlog::warn("closing the HTTP listener: {}", e.what());
  }
  if (!impl_->inflight->WaitIdle(std::chrono::seconds(30))) {
    spdlog::warn("closing the HTTP listener: requests still being handled after 30 s");
  }
}

}  // namespace trainq
